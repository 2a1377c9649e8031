"""The local index's immutable in-memory snapshot: dictionary-coded columns, BM25 postings (CSC) and norms, one
vector matrix per space; built by :class:`ragstep.adapters.index.local.LocalSearchIndex`, saved to and mapped from
``snapshots/gen-N`` here."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragstep.adapters.index._ids import StringColumn
from ragstep.ports import SearchFilter
from ragstep.retrieval.bm25 import length_norms
from ragstep.retrieval.ivf import Partition
from ragstep.retrieval.quantize import ScalarQuantizer
from ragstep.retrieval.signs import SignCodes
from ragstep.retrieval.text import TOKENIZER_VERSION

_MAX_MASKS = 64
#: top() takes its sampled-cut path from this many scores on (below, a full argpartition costs microseconds).
_CUT_MIN_ROWS = 32_768
_CUT_SAMPLE = 4096
#: Rows Space.take gathers from a mapped matrix between two releases of its pages (x ~230 KiB of fault-around each).
_RELEASE_ROWS = 1024
#: A mapped matrix no larger than the ~230 MiB those releases bound it to is never released: all of it mapped stays
#: within the bound, and re-faulting released pages costs CPU on every query (``ragstep bench latency``).
_KEEP_MAPPED_BYTES = 230 * 1024 * 1024
#: Length norms cached per set of knowledge bases searched together (one float32 per chunk each).
_MAX_SCOPES = 8
#: Written into saved snapshots; a snapshot of another format (e.g. whole-index BM25 norms) is rebuilt, not used.
#: Format 2 adds optional int8 codes per space (``storage`` in meta.json); format 1 snapshots (float32 only) are the
#: same files without them and still open as they are. Format 3 adds an optional IVF partition per space (``ivf`` in
#: meta.json; its codes are then stored in list order), which a reader of format 2 would misread, hence the bump.
#: Format 4 keeps the chunk ids in ``ids_*.npy`` (:class:`StringColumn`) instead of meta.json's ``ids`` list; the
#: formats before it still open (their ids are read from meta.json).
SNAPSHOT_FORMAT = "bm25-per-kb-4"
READABLE_FORMATS = frozenset({"bm25-per-kb-1", "bm25-per-kb-2", "bm25-per-kb-3", SNAPSHOT_FORMAT})
#: Elements per block when building postings keys (bounds the int64 temporaries).
_KEY_BLOCK = 1 << 22


class Codes:
    """Dictionary-encodes a string column so filters become integer comparisons on numpy arrays."""

    def __init__(self, values: Sequence[str]) -> None:
        self.names = sorted(set(values))
        self.index = {name: i for i, name in enumerate(self.names)}
        self.codes = np.fromiter((self.index[v] for v in values), dtype=np.int32, count=len(values))

    @classmethod
    def from_first_seen(cls, names: Sequence[str], codes: np.ndarray) -> Codes:
        """Codes numbered in first-seen order (``names[code]``) renumbered to the sorted order of :meth:`__init__`:
        a build then keeps one int per row instead of one string object per row."""
        obj = cls.__new__(cls)
        obj.names = sorted(names)
        obj.index = {name: i for i, name in enumerate(obj.names)}
        remap = np.fromiter((obj.index[n] for n in names), dtype=np.int32, count=len(names))
        obj.codes = remap[codes] if len(names) else np.zeros(0, dtype=np.int32)
        return obj

    @classmethod
    def restore(cls, names: list[str], codes: np.ndarray) -> Codes:
        obj = cls.__new__(cls)
        obj.names, obj.index, obj.codes = names, {n: i for i, n in enumerate(names)}, codes
        return obj

    def isin(self, wanted: Sequence[str]) -> np.ndarray:
        found = [self.index[w] for w in wanted if w in self.index]
        if not found:
            return np.zeros(len(self.codes), dtype=bool)
        if len(found) == 1:
            return self.codes == found[0]
        return np.isin(self.codes, found)


@dataclass
class Space:
    rows: np.ndarray  # positions (into the snapshot) of the chunks embedded in this space
    matrix: np.ndarray  # float32 (len(rows), dim), L2-normalised; memory-mapped when loaded from disk
    # int8 codes of ``matrix`` (vector_storage = int8): scanned first, then the top candidates rescored on ``matrix``
    codes: np.ndarray | None = None
    quantizer: ScalarQuantizer | None = None
    _taken: int = 0  # rows take() gathered since it last released the mapping's pages
    # Above ivf.MIN_ROWS rows: the codes are in list order (``partition.order`` maps a code row to its matrix row)
    partition: Partition | None = None
    _inverse: np.ndarray | None = None
    # From signs.MIN_ROWS rows: the codes' sign bits, the first pass a full scan is replaced by (made at first use)
    signs: SignCodes | None = None
    # filter -> (allowed matrix rows as a mask, their indices): ``mask[rows]`` is a pass over every row, per query
    allowed_cache: dict[SearchFilter, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def storage(self) -> str:
        return "int8" if self.codes is not None else "float32"

    def allowed(self, snap: Snapshot, flt: SearchFilter) -> tuple[np.ndarray, np.ndarray]:
        cached = self.allowed_cache.get(flt)
        if cached is None:
            mask = snap.mask(flt)
            # rows are ascending unique positions: as many as the snapshot has means every one, in order
            allowed = mask if self.rows.shape[0] == mask.shape[0] else mask[self.rows]
            if len(self.allowed_cache) >= _MAX_MASKS:
                self.allowed_cache.clear()
            cached = self.allowed_cache[flt] = (allowed, np.flatnonzero(allowed))
        return cached

    def code_rows(self, matrix_rows: np.ndarray) -> np.ndarray:
        """Code rows holding ``matrix_rows`` (the identity unless the codes are in IVF list order)."""
        if self.partition is None:
            return matrix_rows
        if self._inverse is None:
            inverse = np.empty_like(self.partition.order)
            inverse[self.partition.order] = np.arange(inverse.shape[0], dtype=inverse.dtype)
            self._inverse = inverse
        return self._inverse[matrix_rows]

    def take(self, matrix_rows: np.ndarray) -> np.ndarray:
        """float32 copies of a few matrix rows (rescoring candidates, the rerank stage's vectors).

        A page fault on the mapped matrix maps the pages around the faulting row too (the kernel's fault-around:
        ~230 KiB a row measured, 138 MiB for one query's 600 candidates), so random rows would pull the whole matrix
        (1.5 GB at a million rows) into the process's resident set within a few queries. Every ``_RELEASE_ROWS``
        rows gathered, the mapping's pages are released (``MADV_DONTNEED``: they stay in the page cache, a later
        access maps them again), which bounds that to ~250 MiB; a matrix smaller than the bound is never released
        (``_KEEP_MAPPED_BYTES``). Reading each row with ``pread`` bounds it too, but costs about twice as long as the
        gather (5 against 2.5 us a row)."""
        out = np.asarray(self.matrix[matrix_rows], dtype=np.float32)
        mapping = getattr(self.matrix, "_mmap", None)  # np.memmap's mmap object
        if mapping is not None and self.matrix.nbytes > _KEEP_MAPPED_BYTES:
            self._taken += matrix_rows.shape[0]
            if self._taken >= _RELEASE_ROWS:
                self._taken = 0
                mapping.madvise(mmap.MADV_DONTNEED)
        return out

    def matrix_rows(self, code_rows: np.ndarray) -> np.ndarray:
        return code_rows if self.partition is None else self.partition.order[code_rows]


@dataclass(frozen=True, slots=True)
class Bm25Scope:
    """The BM25 statistics of the knowledge bases one search covers, taken together (:mod:`ragstep.retrieval.bm25`):
    their chunk count, each chunk's length norm against their joint average length (rows of other knowledge bases
    are masked out of the search anyway), and which knowledge base codes count for document frequencies (None: every
    knowledge base of the snapshot, so a term's df is the length of its postings)."""

    codes: tuple[int, ...]
    docs: int
    norm: np.ndarray
    member: np.ndarray | None

    def df(self, rows: np.ndarray, kb_codes: np.ndarray) -> int:
        """How many of ``rows`` (one term's postings) belong to the scope's knowledge bases."""
        return int(rows.size) if self.member is None else int(np.count_nonzero(self.member[kb_codes[rows]]))


@dataclass
class Snapshot:
    generation: int
    ids: list[str] | StringColumn  # a list when built in this process, a column when loaded
    kb: Codes
    knowledge: Codes
    tag: Codes
    ctype: Codes
    enabled: np.ndarray
    vocab: dict[str, int]
    indptr: np.ndarray  # int64 (V + 1,)
    post_rows: np.ndarray  # int32: rows containing each term, grouped by term
    post_tf: np.ndarray  # float32: term frequency for each posting
    norm: np.ndarray  # float32 per row: k1 * (1 - b + b * len / avgdl of the row's knowledge base)
    spaces: dict[str, Space]
    kb_docs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # chunks per knowledge base code
    masks: dict[SearchFilter, np.ndarray] = field(default_factory=dict)
    #: Tokens per row, the sum of its postings' tf, derived on first need (only a search over several knowledge
    #: bases needs it), so the saved format carries no new array.
    lengths: np.ndarray | None = None
    _positions: dict[str, int] | None = None
    _scope_codes: dict[SearchFilter, tuple[int, ...]] = field(default_factory=dict)
    _scopes: dict[tuple[int, ...], Bm25Scope] = field(default_factory=dict)

    def position(self, chunk_id: str) -> int | None:
        if isinstance(self.ids, StringColumn):
            return self.ids.find(chunk_id)
        if self._positions is None:  # built on first use: only the rerank stage needs it
            self._positions = {cid: i for i, cid in enumerate(self.ids)}
        return self._positions.get(chunk_id)

    @property
    def size(self) -> int:
        return len(self.ids)

    def mask(self, flt: SearchFilter) -> np.ndarray:
        cached = self.masks.get(flt)
        if cached is not None:
            return cached
        m = self.enabled.copy() if flt.enabled_only else np.ones(self.size, dtype=bool)
        if flt.knowledge_base_ids:
            m &= self.kb.isin(flt.knowledge_base_ids)
        if flt.knowledge_ids:
            m &= self.knowledge.isin(flt.knowledge_ids)
        if flt.tag_ids:
            m &= self.tag.isin(flt.tag_ids)
        if flt.chunk_types:
            m &= self.ctype.isin([str(t) for t in flt.chunk_types])
        if len(self.masks) >= _MAX_MASKS:
            self.masks.clear()
        self.masks[flt] = m
        return m

    def row_lengths(self) -> np.ndarray:
        """Tokens per row (float64), summed from the postings: one pass over them, once per snapshot."""
        if self.lengths is None:
            self.lengths = np.bincount(
                np.asarray(self.post_rows), weights=np.asarray(self.post_tf, dtype=np.float64), minlength=self.size
            )
        return self.lengths

    def kb_tokens(self, codes: tuple[int, ...]) -> int:
        """Total tokens of the chunks of these knowledge base codes."""
        if not codes:
            return 0
        per_kb = np.bincount(self.kb.codes, weights=self.row_lengths(), minlength=len(self.kb.names))
        return round(float(per_kb[list(codes)].sum()))

    def scope_codes(self, flt: SearchFilter) -> tuple[int, ...]:
        """The knowledge bases a search covers: those the filter names, or else those of the rows it lets through
        (a search by knowledge ids covers the items' knowledge bases)."""
        if flt.knowledge_base_ids:
            return tuple(sorted({self.kb.index[k] for k in flt.knowledge_base_ids if k in self.kb.index}))
        if len(self.kb.names) <= 1:
            return tuple(range(len(self.kb.names)))
        cached = self._scope_codes.get(flt)
        if cached is None:
            present = np.bincount(self.kb.codes[self.mask(flt)], minlength=len(self.kb.names))
            cached = tuple(int(c) for c in np.flatnonzero(present))
            if len(self._scope_codes) >= _MAX_MASKS:
                self._scope_codes.clear()
            self._scope_codes[flt] = cached
        return cached

    def bm25_scope(self, flt: SearchFilter) -> Bm25Scope:
        """The joint BM25 statistics of the knowledge bases ``flt`` covers (cached per set of knowledge bases)."""
        codes = self.scope_codes(flt)
        cached = self._scopes.get(codes)
        if cached is not None:
            return cached
        every = len(codes) == len(self.kb.names)
        member = None
        if not every:
            member = np.zeros(len(self.kb.names), dtype=bool)
            member[list(codes)] = True
        docs = int(self.kb_docs[list(codes)].sum()) if codes else 0
        if len(codes) <= 1:
            # One knowledge base: the norms precomputed against its own average length are its joint ones.
            scope = Bm25Scope(codes, docs, self.norm, member)
        else:
            avgdl = self.kb_tokens(codes) / docs if docs else 1.0
            scope = Bm25Scope(codes, docs, length_norms(self.row_lengths(), avgdl or 1.0), member)
        if len(self._scopes) >= _MAX_SCOPES:
            self._scopes.clear()
        self._scopes[codes] = scope
        return scope


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest finite scores, best first (ties broken by position for determinism)."""
    if scores.shape[0] >= _CUT_MIN_ROWS:
        cand = _above_cut(scores, k)
        if cand is not None:
            cand = cand[np.isfinite(scores[cand])]
            return cand[np.lexsort((cand, -scores[cand]))[:k]]
    finite = np.flatnonzero(np.isfinite(scores))
    if finite.size == 0:
        return finite
    if finite.size > k:
        part = np.argpartition(-scores[finite], k - 1)[:k]
        finite = finite[part]
    order = np.lexsort((finite, -scores[finite]))
    return finite[order]


def _above_cut(scores: np.ndarray, k: int) -> np.ndarray | None:
    """Indices of every score at or above a cut taken from a strided sample, when at least ``k`` are (then they hold
    the exact top ``k``: the k-th largest score is >= the cut); None when the sample gives no useful cut.

    Two cheap passes over the scores instead of ``isfinite`` + a copy + ``argpartition`` of all of them, which at a
    million rows dominated the query."""
    n = scores.shape[0]
    stride = max(1, n // _CUT_SAMPLE)
    sample = scores[::stride]
    # the j-th best sample stands for ~j x stride rows: ask for twice k, and a margin for uneven spreads
    j = 2 * k // stride + 8
    if j >= sample.shape[0] // 2:
        return None
    cut = np.partition(sample, sample.shape[0] - j)[sample.shape[0] - j]
    if not np.isfinite(cut):
        return None
    cand = np.flatnonzero(scores >= cut)
    return cand if cand.shape[0] >= k else None


def new_build_dir(snap_root: Path) -> Path | None:
    """A fresh folder for a snapshot being built (None when the data dir is not writable: the build stays in RAM)."""
    try:
        snap_root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=snap_root, prefix=".build-"))
    except OSError:
        return None


def save_snapshot(snap: Snapshot, snap_root: Path, build_dir: Path | None = None) -> None:
    """Best effort: a read-only data dir or a full disk only costs the next process a rebuild.

    ``build_dir`` (from :func:`new_build_dir`) may already hold some arrays, written while building (the float32
    matrices, streamed there so they never sit in RAM); those files are kept as they are."""
    final = snap_root / f"gen-{snap.generation}"
    tmp: Path | None = build_dir
    if final.exists():
        if tmp is not None:  # another process saved this generation first; mapped files stay readable once unlinked
            shutil.rmtree(tmp, ignore_errors=True)
        return
    try:
        if tmp is None:
            snap_root.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=snap_root, prefix=".build-"))
        arrays = {
            "indptr": snap.indptr,
            "post_rows": snap.post_rows,
            "post_tf": snap.post_tf,
            "norm": snap.norm,
            "enabled": snap.enabled,
            "kb": snap.kb.codes,
            "knowledge": snap.knowledge.codes,
            "tag": snap.tag.codes,
            "ctype": snap.ctype.codes,
        }
        space_names = sorted(snap.spaces)
        for i, name in enumerate(space_names):
            arrays[f"space{i}_rows"] = snap.spaces[name].rows
            arrays[f"space{i}_matrix"] = snap.spaces[name].matrix
            sp = snap.spaces[name]
            if sp.codes is not None and sp.quantizer is not None:
                arrays[f"space{i}_codes"] = sp.codes
                arrays[f"space{i}_qoffset"] = sp.quantizer.offset
                arrays[f"space{i}_qstep"] = sp.quantizer.step
            if sp.partition is not None:
                arrays[f"space{i}_centroids"] = sp.partition.centroids
                arrays[f"space{i}_offsets"] = sp.partition.offsets
                arrays[f"space{i}_order"] = sp.partition.order
            if sp.signs is not None:  # optional: a reader without them makes them at first use
                arrays[f"space{i}_signs"], arrays[f"space{i}_signcentre"] = sp.signs.words, sp.signs.centre
        arrays |= {f"ids_{part}": arr for part, arr in StringColumn.arrays(snap.ids).items()}
        for key, arr in arrays.items():
            path = tmp / f"{key}.npy"
            if not (build_dir is not None and path.exists()):
                np.save(path, arr)
        terms = [""] * len(snap.vocab)
        for term, tid in snap.vocab.items():
            terms[tid] = term
        meta = {
            "format": SNAPSHOT_FORMAT,
            "generation": snap.generation,
            "spaces": space_names,
            "storage": {name: snap.spaces[name].storage for name in space_names},
            "ivf": [name for name in space_names if snap.spaces[name].partition is not None],
            "signs": {name: sp.signs.share for name, sp in snap.spaces.items() if sp.signs is not None},
            "codes": {k: getattr(snap, k).names for k in ("kb", "knowledge", "tag", "ctype")},
            "terms": terms,
            "tokenizer": TOKENIZER_VERSION,  # the tokens of ``terms`` (_tokens.py)
        }
        (tmp / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, final)
    except OSError:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    for old in snap_root.glob("gen-*"):
        # Only older generations: another process may already have written a newer one.
        suffix = old.name.removeprefix("gen-")
        if suffix.isdigit() and int(suffix) < snap.generation:
            shutil.rmtree(old, ignore_errors=True)


def load_snapshot(snap_root: Path, gen: int, folded_only: bool = False) -> Snapshot | None:
    """The snapshot saved for generation ``gen``, None when there is none this version can use. ``folded_only``: the
    stored tokens are unfolded (:mod:`._tokens`), so a snapshot saved before folding, of the same generation, is not
    (a snapshot is otherwise a function of its generation's rows: upgrading the tokens bumps the generation)."""
    folder = snap_root / f"gen-{gen}"
    if not folder.is_dir():
        return None
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format") not in READABLE_FORMATS:
            return None  # written by an older version (other BM25 norms): rebuild from SQLite
        if folded_only and meta.get("tokenizer", 1) < TOKENIZER_VERSION:
            return None

        def arr(name: str) -> np.ndarray:
            return np.load(folder / f"{name}.npy", mmap_mode="r")

        codes = meta["codes"]
        kb = Codes.restore(codes["kb"], np.asarray(arr("kb")))
        storage = meta.get("storage", {})  # absent in format 1: every space float32
        spaces = {}
        for i, name in enumerate(meta["spaces"]):
            sp = Space(np.asarray(arr(f"space{i}_rows")), arr(f"space{i}_matrix"))
            if storage.get(name) == "int8":
                sp.codes = arr(f"space{i}_codes")
                sp.quantizer = ScalarQuantizer(np.asarray(arr(f"space{i}_qoffset")), np.asarray(arr(f"space{i}_qstep")))
            if name in meta.get("ivf", ()):
                sp.partition = Partition(
                    np.asarray(arr(f"space{i}_centroids")),
                    np.asarray(arr(f"space{i}_offsets")),
                    arr(f"space{i}_order"),
                )
            if name in meta.get("signs", {}):
                words, centre = arr(f"space{i}_signs"), np.asarray(arr(f"space{i}_signcentre"))
                sp.signs = SignCodes(words, centre, float(meta["signs"][name]))
            spaces[name] = sp
        # Formats 1-3 list the ids in meta.json.
        ids = meta["ids"] if "ids" in meta else StringColumn(arr("ids_blob"), arr("ids_offsets"), arr("ids_order"))
        return Snapshot(
            generation=gen,
            ids=ids,
            kb=kb,
            knowledge=Codes.restore(codes["knowledge"], np.asarray(arr("knowledge"))),
            tag=Codes.restore(codes["tag"], np.asarray(arr("tag"))),
            ctype=Codes.restore(codes["ctype"], np.asarray(arr("ctype"))),
            enabled=np.asarray(arr("enabled")),
            vocab={t: i for i, t in enumerate(meta["terms"])},
            indptr=np.asarray(arr("indptr")),
            post_rows=arr("post_rows"),
            post_tf=arr("post_tf"),
            norm=np.asarray(arr("norm")),
            spaces=spaces,
            kb_docs=np.bincount(kb.codes, minlength=len(kb.names)).astype(np.int64),
        )
    except (OSError, ValueError, KeyError):
        return None  # damaged or half-deleted cache: rebuild from SQLite


def csc_postings(term_ids: np.ndarray, lengths: np.ndarray, vocab_size: int) -> tuple[np.ndarray, ...]:
    """Postings grouped by term: ``indptr`` offsets, the rows holding each term and the term's frequency there."""
    n = len(lengths)
    if term_ids.size == 0:
        return np.zeros(vocab_size + 1, dtype=np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32)
    # key = term * n + row, built in place and sorted in place (the np.unique of before held ~4 int64 copies of every
    # token: 1.4 GB at a million chunks); equal keys are one term's repeats in one row
    keys = np.repeat(np.arange(n, dtype=np.int64), lengths)
    for lo in range(0, keys.shape[0], _KEY_BLOCK):
        keys[lo : lo + _KEY_BLOCK] += term_ids[lo : lo + _KEY_BLOCK].astype(np.int64) * n
    keys.sort()
    first = np.empty(keys.shape[0], dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    del first
    counts = np.diff(starts, append=keys.shape[0]).astype(np.float32)
    keys = keys[starts]
    del starts
    indptr = np.zeros(vocab_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // n, minlength=vocab_size), out=indptr[1:])
    return indptr, (keys % n).astype(np.int32), counts


def bm25_norms(kb_codes: np.ndarray, kb_count: int, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Chunks per knowledge base, and each row's BM25 length norm ``k1 * (1 - b + b * len / avgdl)`` against the
    average length of its own knowledge base (1.0 stands in for the average of a knowledge base of empty chunks)."""
    kb_docs = np.bincount(kb_codes, minlength=kb_count).astype(np.int64)
    if lengths.size == 0:
        return kb_docs, np.zeros(0, dtype=np.float32)
    totals = np.bincount(kb_codes, weights=lengths.astype(np.float64), minlength=kb_count)
    avgdl = np.divide(totals, kb_docs, out=np.ones(kb_count), where=totals > 0)
    return kb_docs, length_norms(lengths / avgdl[kb_codes], 1.0)
