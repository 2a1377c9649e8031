"""The one tokenizer used for indexing and for queries (BM25, keyword extraction, token-overlap measures).

Runs of Han characters go through jieba's ``cut_for_search`` (it emits whole words plus their dictionary sub-words,
which is what makes Chinese BM25 work); everything else is split into letter/digit words by a regular expression.
jieba would also handle Latin text, but it walks it one character at a time in Python, about 40x slower than the
regex, and gives the same words. Text is NFKC-normalised (full-width letters and digits fold to ASCII) and lower-cased;
stopwords from the curated lists in ``data/`` are dropped.

The jieba dictionary is loaded lazily, once per process, from a pickled prefix-frequency table (see
:func:`jieba_tokenizer`): jieba's own marshal cache takes ~3x longer to load, which Lambda cold starts feel.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import re
import tempfile
import threading
import unicodedata
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

# CJK Unified Ideographs, Extension A and Compatibility Ideographs: the runs jieba segments.
_HAN_RUN = re.compile(r"([\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+)")
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


def _default_cache_path() -> Path:
    import jieba

    packaged = resources.files("ragstep").joinpath("data", f"jieba-{jieba.__version__}.pfdict.pkl")
    if packaged.is_file():
        return Path(str(packaged))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ragstep" / f"jieba-{jieba.__version__}.pfdict.pkl"


def build_jieba_cache(path: Path) -> Path:
    """Write jieba's prefix-frequency table as a protocol-5 pickle (atomically). Used by the layer build too."""
    import jieba

    tk = jieba.Tokenizer()
    with open(tk.get_dict_file().name, "rb") as fh:
        freq, total = tk.gen_pfdict(fh)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".jieba-", suffix=".tmp")
    with os.fdopen(fd, "wb") as out:
        pickle.dump((freq, total), out, protocol=5)
    os.replace(tmp, path)
    return path


@functools.cache
def jieba_tokenizer() -> Any:
    """A ready jieba ``Tokenizer``; the first call loads the dictionary (from our pickle cache when there is one)."""
    with _init_lock:
        import jieba

        jieba.setLogLevel(logging.WARNING)
        tk = jieba.Tokenizer()
        cache = Path(os.environ[_CACHE_ENV]) if os.environ.get(_CACHE_ENV) else _default_cache_path()
        try:
            if not cache.is_file():
                build_jieba_cache(cache)
            with open(cache, "rb") as fh:
                freq, total = pickle.load(fh)
            if not isinstance(freq, dict) or not isinstance(total, int):
                raise ValueError(f"unexpected jieba cache layout in {cache}")
            tk.FREQ, tk.total = freq, total
            tk.initialized = True
        except Exception:
            # A read-only home, a damaged cache or one written by another ragstep version only costs speed:
            # let jieba build the table itself. Tokenization never depends on the cache.
            tk.initialize()
        return tk


def _han_tokens(run: str) -> Iterable[str]:
    return jieba_tokenizer().cut_for_search(run)


def tokenize(text: str, *, keep_stopwords: bool = False) -> list[str]:
    """Index/query tokens of ``text`` in order (duplicates kept: BM25 counts term frequency)."""
    text = unicodedata.normalize("NFKC", text).lower()
    stop = () if keep_stopwords else stopwords()
    out: list[str] = []
    for i, part in enumerate(_HAN_RUN.split(text)):
        if not part:
            continue
        if i % 2:  # odd pieces of re.split with one group are the Han runs
            out.extend(t for t in _han_tokens(part) if t not in stop)
        else:
            out.extend(t for t in _WORD.findall(part) if t not in stop)
    return out


def query_terms(text: str) -> list[str]:
    """Distinct tokens of a query in first-seen order (BM25 scores each query term once)."""
    return list(dict.fromkeys(tokenize(text)))


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
