"""The one tokenizer used for indexing and for queries (BM25, keyword extraction, token-overlap measures).

Runs of Han characters go through jieba's ``cut_for_search`` (it emits whole words plus their dictionary sub-words,
which is what makes Chinese BM25 work); everything else is split into letter/digit words by a regular expression.
jieba would also handle Latin text, but it walks it one character at a time in Python, far slower than the
regex, and gives the same words. Text is NFKC-normalised (full-width letters and digits fold to ASCII), lower-cased
and its Latin letters folded to ASCII (é -> e, ß -> ss: :mod:`ragstep.retrieval.latin_fold`; other scripts untouched);
stopwords from the curated lists in ``data/`` are dropped.

Folding arrived with :data:`TOKENIZER_VERSION` 2. Tokens written by version 1 (unfolded) are upgraded where they are
kept: the local index folds its stored tokens once when it opens (:mod:`ragstep.adapters.index._tokens`), and
:func:`keyword_terms` asks an index for the unfolded form of a query term too, which OpenSearch documents indexed
before still hold (until ``ragstep kb upgrade-tokens`` folds them: :mod:`ragstep.adapters.index.opensearch.tokens`).

The jieba dictionary is loaded lazily, once per process, from a pickled prefix-frequency table (see
:func:`jieba_tokenizer`). The pickle holds a :class:`PrefixFreq`: the table as four flat byte arrays (keys, offsets,
frequencies, an open-addressing hash index) that unpickle in a few milliseconds and answer lookups in place. Loading
the same table as a 500k-entry dict takes far longer (jieba's own marshal cache longer still), which a Lambda cold
start feels on its first Chinese query. Tokens are identical either way.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import pickle
import re
import sys
import tempfile
import threading
import unicodedata
import zlib
from array import array
from collections.abc import Iterable, Iterator, MutableMapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from ragstep.retrieval.latin_fold import fold_word, has_latin_extended, spelled_umlauts, umlaut_forms

#: What the tokens of a text are: 1, NFKC + lower case; 2, the same with Latin letters folded to ASCII. Stored tokens
#: carry it (the local index's ``meta`` table), so those of an earlier version are upgraded rather than mismatched.
TOKENIZER_VERSION = 2
# CJK Unified Ideographs, Extension A and Compatibility Ideographs: the runs jieba segments. The first of them.
_HAN_FIRST = "\u3400"


@functools.cache
def _han_runs() -> re.Pattern[str]:
    # Compiled on first use: text without a character from U+3400 on, most of an English corpus, has no run.
    return re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)")


_WORD = re.compile(r"[^\W_]+")
_CACHE_ENV = "RAGSTEP_JIEBA_CACHE"
_init_lock = threading.Lock()


@functools.cache
def stopwords() -> frozenset[str]:
    """English and Chinese stopwords shipped with the package."""
    words: set[str] = set()
    for name in ("stopwords_en.txt", "stopwords_zh.txt"):
        text = resources.files("ragstep").joinpath("data", name).read_text(encoding="utf-8")
        words.update(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))
    # Apostrophe forms never survive tokenization (the regex splits on "'"), so keep only the pieces that can.
    return frozenset(w for w in words if "'" not in w)


def _import_jieba() -> Any:
    """``import jieba``, without the ``pkg_resources`` import its ``_compat`` module tries first.

    jieba uses ``pkg_resources`` only to open its own data files and falls back to ``open`` on the same paths when the
    import fails; where setuptools is installed, that import alone is a large share of every cold start. (The Lambda
    runtime has no setuptools, so there jieba takes the fallback anyway.)
    """
    module = sys.modules.get("jieba")
    if module is not None:
        return module
    block = "pkg_resources" not in sys.modules
    if block:
        sys.modules["pkg_resources"] = None  # type: ignore[assignment]  # `import pkg_resources` -> ImportError
    try:
        import jieba
    finally:
        if block and "pkg_resources" in sys.modules and sys.modules["pkg_resources"] is None:
            del sys.modules["pkg_resources"]
    return jieba


def _jieba_version() -> str:
    return str(_import_jieba().__version__)


def packaged_cache_path(package_dir: Path, version: str | None = None) -> Path:
    """Where a build puts the prebuilt table inside a copy of the ``ragstep`` package (the shared Lambda layer)."""
    return Path(package_dir) / "data" / f"jieba-{version or _jieba_version()}.pfdict.pkl"


def _user_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ragstep" / f"jieba-{_jieba_version()}.pfdict.pkl"


def _packaged_table() -> Path | None:
    """The table a layer build put inside this package (``ragstep/data/jieba-<version>.pfdict.pkl``), if any."""
    packaged = resources.files("ragstep").joinpath("data", f"jieba-{_jieba_version()}.pfdict.pkl")
    return Path(str(packaged)) if packaged.is_file() else None


def _default_cache_path() -> Path:
    """The packaged table (shipped by the layer build) when there is one, else the per-user cache."""
    return _packaged_table() or _user_cache_path()


# memoryview.cast takes a literal format; the one whose items are 4 bytes on this platform ("I" nearly always).
_U32: Literal["I", "L", "H"] = next(code for code in ("I", "L", "H") if array(code).itemsize == 4)
_EMPTY = 0  # hash-index slot value of "no key"; slots hold key number + 1
# A PrefixFreq lookup costs ~1 us against ~0.05 us for a dict: after this many lookups (a long document rather than
# a query) the table turns into a plain dict, which pays for itself from then on.
PROMOTE_AFTER = 100_000


class PrefixFreq(MutableMapping[str, int]):
    """jieba's prefix-frequency table (word or word prefix -> frequency, 0 for a prefix only) over flat arrays.

    Built once from a dict (:meth:`from_dict`); pickles as four ``bytes`` objects, so unpickling is a memory copy
    instead of 500k string and dict-entry allocations. ``in``, ``[]`` and ``get`` -- all jieba's segmentation asks --
    read the arrays: a CRC-32 of the key's UTF-8 picks the slot of a linear-probing hash index. After
    :data:`PROMOTE_AFTER` lookups, or on any write (``Tokenizer.add_word``), it builds the equivalent dict, hands it
    to the tokenizer it is bound to (``tk.FREQ``) and delegates to it.
    """

    __slots__ = ("_dict", "_index", "_keys", "_lock", "_lookups", "_offsets", "_owner", "_values")

    def __init__(self, keys: bytes, offsets: bytes, values: bytes, index: bytes) -> None:
        self._keys = keys  # UTF-8 keys joined by "\n"
        self._offsets = memoryview(offsets).cast(_U32)  # start of key i; one more entry: len(keys) + 1
        self._values = memoryview(values).cast(_U32)
        self._index = memoryview(index).cast(_U32)  # power-of-two slots
        if len(self._offsets) != len(self._values) + 1 or len(self._index) & (len(self._index) - 1):
            raise ValueError("damaged jieba table")
        self._lookups = 0
        self._dict: dict[str, int] | None = None
        self._owner: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_dict(cls, freq: dict[str, int]) -> PrefixFreq:
        encoded = [k.encode("utf-8") for k in freq]
        if any(b"\n" in k for k in encoded):
            raise ValueError("jieba table keys may not contain a newline")
        offsets = array(_U32)
        pos = 0
        for key in encoded:
            offsets.append(pos)
            pos += len(key) + 1
        offsets.append(pos)
        values = array(_U32, freq.values())
        size = 1 << max(4, (2 * len(encoded)).bit_length())  # load factor <= 0.5
        index = array(_U32, bytes(4 * size))
        mask = size - 1
        for i, key in enumerate(encoded):
            slot = zlib.crc32(key) & mask
            while index[slot] != _EMPTY:
                slot = (slot + 1) & mask
            index[slot] = i + 1
        return cls(b"\n".join(encoded), offsets.tobytes(), values.tobytes(), index.tobytes())

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _restore_prefix_freq,
            (sys.byteorder, self._keys, self._offsets.tobytes(), self._values.tobytes(), self._index.tobytes()),
        )

    def bind(self, tokenizer: Any) -> PrefixFreq:
        """The jieba ``Tokenizer`` whose ``FREQ`` this is: promotion replaces ``tokenizer.FREQ`` with the dict."""
        self._owner = tokenizer
        return self

    def _find(self, key: object) -> int:
        try:
            raw = key.encode("utf-8", "surrogatepass")  # type: ignore[attr-defined]
        except AttributeError:
            return -1
        index, offsets, keys = self._index, self._offsets, self._keys
        mask = len(index) - 1
        slot = zlib.crc32(raw) & mask
        while True:
            entry = index[slot]
            if entry == _EMPTY:
                return -1
            start = offsets[entry - 1]
            if keys[start : offsets[entry] - 1] == raw:
                return entry - 1
            slot = (slot + 1) & mask

    def _count(self) -> dict[str, int] | None:
        """The promoted dict, promoting first when the lookup budget is spent."""
        if self._dict is None:
            self._lookups += 1
            if self._lookups > PROMOTE_AFTER:
                self.promote()
        return self._dict

    def __contains__(self, key: object) -> bool:
        d = self._count()
        if d is not None:
            return key in d
        return self._find(key) >= 0

    def __getitem__(self, key: str) -> int:
        d = self._count()
        if d is not None:
            return d[key]
        i = self._find(key)
        if i < 0:
            raise KeyError(key)
        return self._values[i]

    def get(self, key: str, default: Any = None) -> Any:
        d = self._count()
        if d is not None:
            return d.get(key, default)
        i = self._find(key)
        return default if i < 0 else self._values[i]

    def __len__(self) -> int:
        return len(self._values) if self._dict is None else len(self._dict)

    def __iter__(self) -> Iterator[str]:
        return iter(self.promote())

    def __setitem__(self, key: str, value: int) -> None:
        self.promote()[key] = value

    def __delitem__(self, key: str) -> None:
        del self.promote()[key]

    def promote(self) -> dict[str, int]:
        """The table as a plain dict (built once); the bound tokenizer uses it from now on."""
        with self._lock:
            if self._dict is None:
                keys = self._keys.decode("utf-8").split("\n") if len(self._values) else []
                self._dict = dict(zip(keys, self._values.tolist(), strict=True))
            owner = self._owner
            if owner is not None and owner.FREQ is self:
                owner.FREQ = self._dict
            return self._dict


def _restore_prefix_freq(byteorder: str, keys: bytes, offsets: bytes, values: bytes, index: bytes) -> PrefixFreq:
    if byteorder != sys.byteorder:
        raise ValueError(f"jieba table written on a {byteorder}-endian machine")
    return PrefixFreq(keys, offsets, values, index)


def build_jieba_cache(path: Path) -> Path:
    """Write jieba's prefix-frequency table, ``(PrefixFreq, total)`` as a protocol-5 pickle, atomically.

    The layer build ships one (``ragstep/data/jieba-<version>.pfdict.pkl``); elsewhere the first Chinese text builds
    one in the user cache (~3 s).
    """
    jieba = _import_jieba()
    tk = jieba.Tokenizer()
    with open(tk.get_dict_file().name, "rb") as fh:
        freq, total = tk.gen_pfdict(fh)
    table = PrefixFreq.from_dict(freq)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".jieba-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            pickle.dump((table, total), out, protocol=5)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; a Lambda layer's files must be readable by the function user
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def _load_table(cache: Path, *, rebuild_old: bool) -> tuple[Any, int]:
    if not cache.is_file():
        build_jieba_cache(cache)
    try:
        with open(cache, "rb") as fh:
            freq, total = pickle.load(fh)
    except Exception:
        if not rebuild_old:
            raise
        # A per-user cache this version cannot read (written by an earlier ragstep whose table class lived in
        # another module, or damaged): rewrite it once rather than let jieba rebuild its table (~1.5 s) every start.
        build_jieba_cache(cache)
        return _load_table(cache, rebuild_old=False)
    if isinstance(freq, dict) and rebuild_old:
        # A per-user cache in the earlier format (a plain dict, slow to load): rewrite it once.
        build_jieba_cache(cache)
        return _load_table(cache, rebuild_old=False)
    if not isinstance(freq, (dict, PrefixFreq)) or not isinstance(total, int):
        raise ValueError(f"{cache} is not a jieba table")
    return freq, total


@functools.cache
def jieba_tokenizer() -> Any:
    """A ready jieba ``Tokenizer``; the first call loads the dictionary (from our pickle cache when there is one)."""
    with _init_lock:
        jieba = _import_jieba()
        jieba.setLogLevel(logging.WARNING)
        tk = jieba.Tokenizer()
        explicit = os.environ.get(_CACHE_ENV)
        cache = Path(explicit) if explicit else _default_cache_path()
        if explicit and not cache.is_file():
            # RAGSTEP_JIEBA_CACHE names a file that is not there (a layer built without it): the package's own
            # table, when it ships one, beats building the table on a read-only file system.
            cache = _packaged_table() or cache
        try:
            freq, tk.total = _load_table(cache, rebuild_old=not explicit and cache == _user_cache_path())
            tk.FREQ = freq.bind(tk) if isinstance(freq, PrefixFreq) else freq
            tk.initialized = True
        except Exception:
            # A read-only home, a damaged cache or one written by another ragstep version only costs speed:
            # let jieba build the table itself. Tokenization never depends on the cache (but on Lambda, where the
            # DependencyLayer leaves jieba's dict.txt out, on the SharedLayer's prebuilt table: layers/README.md).
            tk.initialize()
        return tk


def _han_tokens(run: str) -> Iterable[str]:
    return jieba_tokenizer().cut_for_search(run)


def tokenize(text: str, *, keep_stopwords: bool = False, fold: bool = True) -> list[str]:
    """Index/query tokens of ``text`` in order (duplicates kept: BM25 counts term frequency).

    ``fold=False`` keeps the Latin letters' accents: the tokens of :data:`TOKENIZER_VERSION` 1, for the readers
    whose word lists tell accented words apart (Spanish "él" is a pronoun, "el" an article)."""
    text = unicodedata.normalize("NFKC", text).lower()
    stop = () if keep_stopwords else stopwords()
    # Only text with a letter of the folded blocks takes the slow path (ASCII text is not even scanned).
    folding = fold and has_latin_extended(text)
    out: list[str] = []
    # max() is one pass in C: without a character from U+3400 on there is no Han run, so no split (and no class).
    parts = _han_runs().split(text) if text and max(text) >= _HAN_FIRST else [text]
    for i, part in enumerate(parts):
        if not part:
            continue
        if i % 2:  # odd pieces of re.split with one group are the Han runs (no Latin letter in them)
            out.extend(t for t in _han_tokens(part) if t not in stop)
        elif folding:  # folded before the stopword check: "à" folds to the stopword "a"
            fold_one = fold_word
            out.extend(t for w in _WORD.findall(part) if (t := w if w.isascii() else fold_one(w)) not in stop)
        else:
            out.extend(t for t in _WORD.findall(part) if t not in stop)
    return out


def query_terms(text: str) -> list[str]:
    """Distinct tokens of a query in first-seen order (BM25 scores each query term once)."""
    return list(dict.fromkeys(tokenize(text)))


def keyword_terms(text: str) -> list[str]:
    """What a query asks an index's keyword search for: :func:`query_terms`, then the unfolded form of each term
    that folding changed ("répertoires" after "repertoires").

    A document indexed before folding (:data:`TOKENIZER_VERSION` 1; on OpenSearch, until ``ragstep kb
    upgrade-tokens`` or a new ingest folds it) holds the unfolded form, so a query typed with its accents still finds
    it as it did. A form no document holds adds nothing to BM25, so an index of folded tokens ranks exactly as with
    :func:`query_terms`.

    German umlauts spelled out are asked for both ways, "Mueller" as "muller" too and "Müller" as "mueller" too
    (:func:`ragstep.retrieval.latin_fold.umlaut_forms`): documents write either, and the stored tokens keep both.

    A search asks :func:`ragstep.retrieval.keyword_language.question_keyword_terms`: these, and for a Spanish
    question the forms documents write of its first-person verb ("busco": "buscar", "busca")."""
    terms = query_terms(text)
    more = umlaut_forms(terms)  # "Mueller" asks for "muller" too: the token of "Müller"
    if has_latin_extended(text):
        more += tokenize(text, fold=False)
        spelled = spelled_umlauts(text)  # and "Müller" for "mueller": the token of "Mueller"
        if spelled is not None:
            more += tokenize(spelled)
    return list(dict.fromkeys([*terms, *more])) if more else terms


@functools.lru_cache(maxsize=4096)
def token_set(text: str) -> frozenset[str]:
    """Distinct tokens of ``text``: what Jaccard and overlap measures compare.

    Memoised (a pure function of the text): rerank's MMR and merge's duplicate check look at the same chunks, and
    popular chunks recur across requests.
    """
    return frozenset(tokenize(text))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    common = len(a & b)  # |A ∪ B| = |A| + |B| - |A ∩ B|: no union set to build
    return common / (len(a) + len(b) - common)


def overlap_coefficient(a: frozenset[str], b: frozenset[str]) -> float:
    """|A ∩ B| / min(|A|, |B|): 1.0 when the smaller set is inside the larger one."""
    if not a or not b:
        return 0.0
    return len(a & b) / min(len(a), len(b))
