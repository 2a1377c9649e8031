"""What fusion reads of the S3-snapshot index (:func:`ragstep.retrieval.fusion.fuse_evidence`), computed in one place:
the vector background of the searched chunks (a query's cosine is read from its mean cosine over them, ``q . m`` with
``m`` their centroid) and the BM25 statistics its keyword search scores with (for the query's ceiling).

A knowledge base is one local index per generation, so both are assembled from the parts a search covers, exactly
as one local index holding them all would give them:

* **BM25**: the parts' statistics summed (:func:`ragstep.retrieval.bm25.joint`), the same sum the keyword search
  scores with.
* **Centroid**: each generation carries ``fusion-stats.json``, written when the generation is built (the writer has
  every vector at hand then): per embedding space, how many enabled chunks have a vector and their mean. A search
  over the whole knowledge bases (no tag, item or type filter: the common case) reads the mean from there, the
  joint centroid being the parts' means weighted by their rows; a narrower filter takes each part's own sample of
  the rows it lets through (:class:`~ragstep.retrieval.background.Backgrounds`), as the local index does. A
  generation written before the file existed, or with another ``format``, gets the same statistics computed when
  it is first read (once per loaded generation), so old snapshots keep loading and rank as new ones.
* **Spread** (only for a model that declares no score span): the parts' sampled variances pooled with the spread of
  their means, made the first time such a model asks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.ports import SearchFilter
from ragstep.retrieval.background import MIN_FUSION_ROWS, Background
from ragstep.retrieval.bm25 import Bm25Stats, joint

FUSION_STATS_FILE = "fusion-stats.json"
#: Written into the file; a file of another format is ignored and the statistics are computed from the generation.
FUSION_STATS_FORMAT = 1
#: Rows summed at a time when a centroid is computed (bounds the float32 copy: 8 MiB at 1,024 dimensions).
_BLOCK = 2048


@dataclass(frozen=True, slots=True)
class Centroid:
    """The enabled chunks of one knowledge base that have a vector in a space: how many, and their mean vector."""

    rows: int
    mean: np.ndarray


@dataclass(frozen=True, slots=True)
class GenerationStats:
    """What one generation tells fusion before any query: a :class:`Centroid` per embedding space."""

    centroids: Mapping[str, Centroid]

    def body(self) -> bytes:
        spaces = {name: {"rows": c.rows, "mean": c.mean.tolist()} for name, c in sorted(self.centroids.items())}
        return json.dumps({"format": FUSION_STATS_FORMAT, "spaces": spaces}).encode("utf-8")

    @classmethod
    def parse(cls, data: bytes) -> GenerationStats | None:
        """The statistics a file holds; None when it is of another format or unreadable (then computed instead)."""
        try:
            doc = json.loads(data)
            if doc.get("format") != FUSION_STATS_FORMAT:
                return None
            centroids = {
                name: Centroid(int(s["rows"]), np.asarray(s["mean"], dtype=np.float64))
                for name, s in doc["spaces"].items()
            }
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        # A damaged mean (not a finite vector) is recomputed rather than trusted.
        if not all(c.mean.ndim == 1 and np.isfinite(c.mean).all() for c in centroids.values()):
            return None
        return cls(centroids)


def _centroid(index: LocalSearchIndex, space: str, flt: SearchFilter) -> Centroid | None:
    snap = index.snapshot()
    sp = snap.spaces.get(space)
    if sp is None:
        return None
    rows = sp.allowed(snap, flt)[1]
    if rows.size == 0:
        return None
    total = np.zeros(sp.matrix.shape[1], dtype=np.float64)
    for start in range(0, rows.size, _BLOCK):
        total += sp.take(rows[start : start + _BLOCK]).sum(axis=0, dtype=np.float64)
    return Centroid(int(rows.size), total / rows.size)


def compute_stats(index: LocalSearchIndex) -> GenerationStats:
    """The statistics of a generation's local index (which holds one knowledge base): its enabled chunks' centroid
    in every space."""
    flt = SearchFilter()
    found = {name: _centroid(index, name, flt) for name in index.snapshot().spaces}
    return GenerationStats({name: c for name, c in found.items() if c is not None})


def write_stats(index: LocalSearchIndex) -> None:
    """Store the generation's statistics in its folder, to ship with it (called once the snapshot is built)."""
    (index.root / FUSION_STATS_FILE).write_bytes(compute_stats(index).body())


def read_stats(index: LocalSearchIndex) -> GenerationStats:
    """The statistics the generation was shipped with, or (none, or another format) computed from it now."""
    path: Path = index.root / FUSION_STATS_FILE
    try:
        stored = GenerationStats.parse(path.read_bytes())
    except OSError:
        stored = None
    return stored if stored is not None else compute_stats(index)


def whole_knowledge_bases(flt: SearchFilter) -> bool:
    """Whether ``flt`` lets through every enabled chunk of the knowledge bases it names (what the stored centroid
    describes)."""
    return flt.enabled_only and not (flt.knowledge_ids or flt.tag_ids or flt.chunk_types)


class PooledBackground(Background):
    """The background of several parts taken together: the joint mean given, the spread pooled from the parts'
    own backgrounds, fetched the first time :meth:`variance` is asked and kept (the index keeps this object per
    generations, space and filter)."""

    __slots__ = ("_own", "_parts")

    def __init__(self, mean: np.ndarray, parts: Sequence[tuple[int, np.ndarray, Callable[[], Background | None]]]):
        super().__init__(mean, np.zeros((0, mean.shape[0]), dtype=np.float32))
        self._parts = parts
        self._own: list[Background | None] | None = None

    def size(self) -> int:
        """Every part's chunks (the pooled background holds no sample rows of its own)."""
        return sum(n for n, _, _ in self._parts)

    def variance(self, q: np.ndarray) -> float:
        """``q' C q`` of the parts' rows together: each part's own variance (0 for one of a single row) plus the
        spread of their means about the joint one, ``sum((n - 1) v + n (q . (m_i - m))^2) / (N - 1)``."""
        if self._own is None:
            self._own = [sample() for _, _, sample in self._parts]
        rows = sum(n for n, _, _ in self._parts)
        total = 0.0
        for (n, mean, _), own in zip(self._parts, self._own, strict=True):
            within = own.variance(q) if own is not None else 0.0
            total += (n - 1) * within + n * float(np.asarray(q, dtype=np.float64) @ (mean - self.mean)) ** 2
        return max(total / max(rows - 1, 1), 0.0)


def vector_background(
    parts: Iterable[tuple[LocalSearchIndex, GenerationStats]], space: str, flt: SearchFilter
) -> Background | None:
    """The background of ``space``'s vectors that ``flt`` lets through in every part (module docstring); None for
    fewer than :data:`~ragstep.retrieval.background.MIN_FUSION_ROWS` rows, as the local index."""
    whole = whole_knowledge_bases(flt)
    found: list[tuple[int, np.ndarray, Callable[[], Background | None]]] = []
    for index, stats in parts:
        centroid = stats.centroids.get(space) if whole else _centroid(index, space, flt)
        if centroid is not None:
            found.append((centroid.rows, centroid.mean, _sample(index, space, flt)))
    rows = sum(n for n, _, _ in found)
    if rows < MIN_FUSION_ROWS:
        return None
    mean = sum((n * m for n, m, _ in found), start=np.zeros_like(found[0][1])) / rows
    return PooledBackground(mean, found)


def _sample(index: LocalSearchIndex, space: str, flt: SearchFilter) -> Callable[[], Background | None]:
    """The part's own background: its sample (the local index's, cached per snapshot), or for a part too small to
    have one on its own, all of its rows (fewer than ``MIN_FUSION_ROWS``: what one index holding every part would
    sample)."""

    def sample() -> Background | None:
        own = index.vector_background(space, flt)
        if own is not None:
            return own
        snap = index.snapshot()
        sp = snap.spaces.get(space)
        rows = sp.allowed(snap, flt)[1] if sp is not None else None
        if sp is None or rows is None or rows.size < 2:
            return None
        x = sp.take(rows)
        mean = x.mean(axis=0, dtype=np.float64)
        return Background(mean, x - mean.astype(np.float32))

    return sample


def bm25_stats(parts: Iterable[LocalSearchIndex], tokens: Sequence[str], flt: SearchFilter) -> Bm25Stats:
    """The statistics the keyword search over ``parts`` scores with: theirs summed."""
    return joint(index.bm25_stats(tokens, flt) for index in parts)


def bm25_scores(
    parts: Sequence[LocalSearchIndex], tokens: Sequence[str], flt: SearchFilter, chunk_ids: Sequence[str]
) -> dict[str, float]:
    """The raw BM25 of named chunks as the keyword search over ``parts`` scores them: one part scores with its own
    statistics (the local index's exact candidate scores), several with their joint statistics (each part's keyword
    search over every chunk a term touches, the named ones kept)."""
    if len(parts) == 1:
        return parts[0].bm25_scores(tokens, flt, chunk_ids)
    wanted = set(chunk_ids)
    if not wanted:
        return {}
    stats = bm25_stats(parts, tokens, flt)
    out: dict[str, float] = {}
    for index in parts:
        for hit in index.keyword_search(tokens, flt, index.snapshot().size, 0.0, stats=stats):
            if hit.chunk_id in wanted:
                out[hit.chunk_id] = hit.raw_score
    return out


__all__ = [
    "FUSION_STATS_FILE",
    "FUSION_STATS_FORMAT",
    "Centroid",
    "GenerationStats",
    "PooledBackground",
    "bm25_scores",
    "bm25_stats",
    "compute_stats",
    "read_stats",
    "vector_background",
    "whole_knowledge_bases",
    "write_stats",
]
