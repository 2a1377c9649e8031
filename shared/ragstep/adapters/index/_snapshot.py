"""The local index's immutable in-memory snapshot: dictionary-coded columns, BM25 postings (CSC) and norms, one
vector matrix per space; built by :class:`ragstep.adapters.index.local.LocalSearchIndex`, saved to and mapped from
``snapshots/gen-N`` here."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragstep.ports import SearchFilter
from ragstep.retrieval.quantize import ScalarQuantizer

BM25_K1 = 1.5
BM25_B = 0.75
_MAX_MASKS = 64
#: Written into saved snapshots; a snapshot of another format (e.g. whole-index BM25 norms) is rebuilt, not used.
#: Format 2 adds optional int8 codes per space (``storage`` in meta.json); format 1 snapshots (float32 only) are the
#: same files without them and still open as they are.
SNAPSHOT_FORMAT = "bm25-per-kb-2"
READABLE_FORMATS = frozenset({"bm25-per-kb-1", SNAPSHOT_FORMAT})


class Codes:
    """Dictionary-encodes a string column so filters become integer comparisons on numpy arrays."""

    def __init__(self, values: Sequence[str]) -> None:
        self.names = sorted(set(values))
        self.index = {name: i for i, name in enumerate(self.names)}
        self.codes = np.fromiter((self.index[v] for v in values), dtype=np.int32, count=len(values))

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
    row_of: dict[int, int] | None = None  # position -> matrix row, built on first use
    # int8 codes of ``matrix`` (vector_storage = int8): scanned first, then the top candidates rescored on ``matrix``
    codes: np.ndarray | None = None
    quantizer: ScalarQuantizer | None = None

    @property
    def storage(self) -> str:
        return "int8" if self.codes is not None else "float32"


@dataclass
class Snapshot:
    generation: int
    ids: list[str]
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
    _positions: dict[str, int] | None = None

    def position(self, chunk_id: str) -> int | None:
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


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest finite scores, best first (ties broken by position for determinism)."""
    finite = np.flatnonzero(np.isfinite(scores))
    if finite.size == 0:
        return finite
    if finite.size > k:
        part = np.argpartition(-scores[finite], k - 1)[:k]
        finite = finite[part]
    order = np.lexsort((finite, -scores[finite]))
    return finite[order]


def save_snapshot(snap: Snapshot, snap_root: Path) -> None:
    """Best effort: a read-only data dir or a full disk only costs the next process a rebuild."""
    final = snap_root / f"gen-{snap.generation}"
    if final.exists():
        return
    tmp: Path | None = None
    try:
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
        for key, arr in arrays.items():
            np.save(tmp / f"{key}.npy", arr)
        terms = [""] * len(snap.vocab)
        for term, tid in snap.vocab.items():
            terms[tid] = term
        meta = {
            "format": SNAPSHOT_FORMAT,
            "generation": snap.generation,
            "spaces": space_names,
            "storage": {name: snap.spaces[name].storage for name in space_names},
            "codes": {k: getattr(snap, k).names for k in ("kb", "knowledge", "tag", "ctype")},
            "ids": snap.ids,
            "terms": terms,
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


def load_snapshot(snap_root: Path, gen: int) -> Snapshot | None:
    folder = snap_root / f"gen-{gen}"
    if not folder.is_dir():
        return None
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format") not in READABLE_FORMATS:
            return None  # written by an older version (other BM25 norms): rebuild from SQLite

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
            spaces[name] = sp
        return Snapshot(
            generation=gen,
            ids=meta["ids"],
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
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    keys, counts = np.unique(term_ids * n + rows, return_counts=True)  # sorted by term, then row
    post_terms = keys // n
    indptr = np.zeros(vocab_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(post_terms, minlength=vocab_size), out=indptr[1:])
    return indptr, (keys % n).astype(np.int32), counts.astype(np.float32)


def bm25_norms(kb_codes: np.ndarray, kb_count: int, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Chunks per knowledge base, and each row's BM25 length norm ``k1 * (1 - b + b * len / avgdl)`` against the
    average length of its own knowledge base (1.0 stands in for the average of a knowledge base of empty chunks)."""
    kb_docs = np.bincount(kb_codes, minlength=kb_count).astype(np.int64)
    if lengths.size == 0:
        return kb_docs, np.zeros(0, dtype=np.float32)
    totals = np.bincount(kb_codes, weights=lengths.astype(np.float64), minlength=kb_count)
    avgdl = np.divide(totals, kb_docs, out=np.ones(kb_count), where=totals > 0)
    norm = (BM25_K1 * (1.0 - BM25_B + BM25_B * lengths / avgdl[kb_codes])).astype(np.float32)
    return kb_docs, norm
