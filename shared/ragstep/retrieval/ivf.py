"""An inverted-file (IVF) partition of an embedding matrix: the local index's vector first pass at scale.

Scanning every int8 code grows linearly with the rows and, at a million, no longer fits a search's budget, so above
:data:`MIN_ROWS` rows the vectors are partitioned into ~sqrt(n) lists by spherical k-means, each list's codes stored
contiguously, and a query scans only the lists whose centroids are nearest to it (:func:`probe_count` of them,
~5-8 % of the rows), then rescores the best candidates exactly on float32 as before.
That first pass is approximate: a true neighbour in an unprobed list is missed (``ragstep bench vectors`` reports
the recall against exact search); below :data:`MIN_ROWS` every code is scanned, as exact as before.

Training and assignment are two-level so a build stays linear in the rows at a cost a 2-core machine pays in
seconds: ``COARSE`` x ``FINE`` lists, a row is assigned to its nearest coarse centroid, then to the nearest fine
centroid inside it (two small matrix products per block instead of one against every list). Seeded: the same
vectors give the same partition. Pure functions over arrays, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

#: Below this many rows the int8 pass covers every row (every code, or the sign-bit pass of
#: :mod:`ragstep.retrieval.signs`): exact, as float32 is (``ragstep bench vectors``). The IVF probe is several
#: times faster than every code but approximate, so it starts where the full scan would cost more than the hybrid
#: search's budget on one core. Probing more lists does not make it exact because of queries with no near passage
#: (the msmarco-5k queries with no judged passage are such): their exact 10 lie in lists whose centroids rank
#: anywhere.
MIN_ROWS = 250_000
#: Rows the centroids are trained on (a strided sample, so every part of the matrix is seen).
TRAIN_ROWS = 65_536
#: Coarse cells searched for a row's nearest list when assigning it.
ASSIGN_CELLS = 3
#: Spherical k-means iterations at each level.
ITERATIONS = 8
#: Share of the lists a query scans, and the floor on that count.
PROBE_FRACTION = 0.06
MIN_PROBES = 24
_SEED = 0


@dataclass(frozen=True)
class Partition:
    """Lists of a matrix's rows: list ``l`` holds code rows ``offsets[l]:offsets[l + 1]``; ``order[i]`` is the
    matrix row stored at code row ``i`` (codes are kept in list order so each list is one contiguous slice)."""

    centroids: np.ndarray  # float32 (lists, dim), unit rows
    offsets: np.ndarray  # int64 (lists + 1,)
    order: np.ndarray  # int32 (rows,)

    @property
    def lists(self) -> int:
        return int(self.centroids.shape[0])

    def probe(self, q: np.ndarray, count: int) -> np.ndarray:
        """The ``count`` lists whose centroids score highest against ``q``, in ascending list order."""
        scores = self.centroids @ q
        if count >= scores.shape[0]:
            return np.arange(scores.shape[0])
        return np.sort(np.argpartition(-scores, count - 1)[:count])


def probe_count(lists: int) -> int:
    return min(lists, max(MIN_PROBES, math.ceil(lists * PROBE_FRACTION)))


def _unit(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return (m / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def kmeans(sample: np.ndarray, k: int, rng: np.random.Generator, iterations: int = ITERATIONS) -> np.ndarray:
    """``k`` unit centroids of ``sample`` (unit rows) by spherical k-means; an emptied cluster keeps its centroid."""
    k = max(1, min(k, sample.shape[0]))
    centroids = sample[rng.choice(sample.shape[0], k, replace=False)].copy()
    for _ in range(iterations):
        labels = np.argmax(sample @ centroids.T, axis=1)
        # per-cluster sums as one product with the one-hot labels, in the operand order OpenBLAS runs fast
        # (np.add.at and reduceat loop per element: 10-100x slower)
        onehot = np.zeros((sample.shape[0], k), dtype=np.float32)
        onehot[np.arange(sample.shape[0]), labels] = 1.0
        filled = np.bincount(labels, minlength=k) > 0
        centroids[filled] = _unit((sample.T @ onehot).T[filled])
    return centroids


@dataclass(frozen=True)
class Trained:
    """Two-level centroids: ``coarse`` (C, dim) and, per coarse cell ``c``, fine centroids
    ``fine[base[c]:base[c + 1]]``; fine centroid ``j`` is list ``j``."""

    coarse: np.ndarray
    fine: np.ndarray
    base: np.ndarray

    def assign(self, block: np.ndarray) -> np.ndarray:
        """List of each row of ``block`` (unit rows): its nearest fine centroid within its ``ASSIGN_CELLS`` nearest
        coarse cells. Searching only the nearest cell put rows in a list far from their true nearest centroid,
        where no query probes for them (recall stopped rising with the probe count: ``ragstep bench vectors``)."""
        scores = block @ self.coarse.T
        near = min(ASSIGN_CELLS, self.coarse.shape[0])
        cells = np.argpartition(-scores, near - 1, axis=1)[:, :near] if near < scores.shape[1] else None
        best = np.full(block.shape[0], -np.inf, dtype=np.float32)
        out = np.zeros(block.shape[0], dtype=np.int32)
        for c in range(self.coarse.shape[0]):
            members = np.flatnonzero((cells == c).any(axis=1)) if cells is not None else np.arange(block.shape[0])
            if members.size == 0:
                continue
            s = block[members] @ self.fine[self.base[c] : self.base[c + 1]].T
            j = np.argmax(s, axis=1)
            v = s[np.arange(members.size), j]
            better = v > best[members]
            best[members[better]] = v[better]
            out[members[better]] = self.base[c] + j[better]
        return out


def train(sample: np.ndarray, rows: int) -> Trained:
    """Centroids for a matrix of ``rows`` rows (~sqrt(rows) lists) from ``sample`` (unit rows)."""
    rng = np.random.default_rng(_SEED)
    sample = np.ascontiguousarray(sample, dtype=np.float32)  # a strided view would miss BLAS
    per_level = max(2, math.ceil(math.sqrt(math.sqrt(rows))))
    coarse = kmeans(sample, per_level, rng)
    cells = np.argmax(sample @ coarse.T, axis=1)
    fine, base = [], [0]
    for c in range(coarse.shape[0]):
        members = sample[cells == c]
        cell = kmeans(members, per_level, rng) if members.shape[0] else coarse[c : c + 1].copy()
        fine.append(cell)
        base.append(base[-1] + cell.shape[0])
    return Trained(coarse, np.concatenate(fine).astype(np.float32), np.asarray(base, dtype=np.int64))


def build(trained: Trained, blocks: Iterable[np.ndarray], rows: int) -> Partition:
    """The partition of a matrix given as consecutive row ``blocks`` (unit rows; ``rows`` in all)."""
    labels = np.empty(rows, dtype=np.int32)
    lo = 0
    for block in blocks:
        labels[lo : lo + block.shape[0]] = trained.assign(block)
        lo += block.shape[0]
    if lo != rows:
        raise ValueError(f"expected {rows} rows, got {lo}")
    order = np.argsort(labels, kind="stable").astype(np.int32)
    offsets = np.zeros(trained.fine.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=trained.fine.shape[0]), out=offsets[1:])
    return Partition(trained.fine, offsets, order)


def scan_lists(
    partition: Partition, lists: np.ndarray, score: Callable[[int, int, np.ndarray], object]
) -> tuple[np.ndarray, np.ndarray]:
    """Code rows of ``lists`` and their scores, ``score(lo, hi, out)`` filling the scores of code rows lo..hi."""
    starts, ends = partition.offsets[lists], partition.offsets[lists + 1]
    sizes = ends - starts
    total = int(sizes.sum())
    idx = np.empty(total, dtype=np.int64)
    out = np.empty(total, dtype=np.float32)
    at = 0
    for lo, hi, size in zip(starts.tolist(), ends.tolist(), sizes.tolist(), strict=True):
        if size:
            idx[at : at + size] = np.arange(lo, hi)
            score(lo, hi, out[at : at + size])
            at += size
    return idx, out


__all__ = ["MIN_ROWS", "Partition", "Trained", "build", "kmeans", "probe_count", "scan_lists", "train"]
