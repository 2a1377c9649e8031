"""Sign-bit codes of int8 vectors: a first pass over every row that reads an eighth of the int8 codes' bytes.

A row's code is one bit per dimension, set when its int8 code lies above the dimension's mean code (the data's
centre: embeddings share a common direction, and bits taken around zero would be the same in most rows). A query's
bits are taken around the same centre, and the Hamming distance between the two estimates the angle between the
centred query and row: the rows with the smallest distances (:func:`candidate_count` of them, 2 % at 100k rows) are
then scored on their int8 codes, and the best of those rescored exactly on float32, as after a full int8 scan.

Unlike the IVF lists (:mod:`ragstep.retrieval.ivf`), no region of the space is skipped: a query far from every
row, whose nearest rows lie in lists whose centroids rank anywhere, still has them among its candidates (exact
where the IVF probe is not: ``ragstep bench vectors``). Popcounts are numpy's ``bitwise_count``, one
64-bit word column at a time (each stored contiguously), so a 100k-row pass is ~20 vector operations. Pure
functions over arrays, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ragstep.retrieval.quantize import ScalarQuantizer

#: Rows from which a full int8 scan is replaced by this pass (below, the scan is cheap and exact).
MIN_ROWS = 20_000
#: Candidates scored on their int8 codes: at least this many, and at least ``CANDIDATE_SHARE`` of the rows (more
#: when :func:`calibrate` finds this data needs more); above ``MAX_SHARE`` every code is scanned instead.
CANDIDATES = 2_000
CANDIDATE_SHARE = 0.02
MAX_SHARE = 0.2
#: Rows of the index used as queries by :func:`calibrate`, and the neighbours each must keep.
PROBES = 16
_NEIGHBOURS = 10
#: Rows whose centre is estimated (a strided sample), and rows encoded at a time.
_SAMPLE_ROWS = 20_000
_BLOCK = 65_536
_SCAN_BLOCK = 4_096


@dataclass(frozen=True)
class SignCodes:
    """``words[j, i]``: bits ``64j..64j+63`` of row ``i`` (word-major, so each word column is one contiguous scan);
    ``centre`` the float value of each dimension's threshold, against which a query's bits are taken."""

    words: np.ndarray  # uint64 (ceil(dim / 64), rows)
    centre: np.ndarray  # float32 (dim,)
    #: Share of the rows kept as candidates (:func:`calibrate`); above ``MAX_SHARE`` the pass is not used.
    share: float = CANDIDATE_SHARE

    @property
    def rows(self) -> int:
        return int(self.words.shape[1])

    def query_words(self, q: np.ndarray) -> np.ndarray:
        return _pack(np.asarray(q, dtype=np.float32).reshape(1, -1) > self.centre, self.words.shape[0])[:, 0]

    def distances(self, qw: np.ndarray, lo: int, hi: int, out: np.ndarray) -> None:
        """Writes the Hamming distances between the query words ``qw`` and rows ``lo..hi`` into ``out`` (uint16)."""
        xor = np.empty(hi - lo, dtype=np.uint64)
        count = np.empty(hi - lo, dtype=np.uint8)
        out[...] = 0
        for j in range(self.words.shape[0]):
            np.bitwise_xor(self.words[j, lo:hi], qw[j], out=xor)
            np.bitwise_count(xor, out=count)
            out += count

    def candidates(self, q: np.ndarray, allowed: np.ndarray | None, count: int) -> np.ndarray:
        """Rows with the ``count`` smallest distances to ``q`` among the ``allowed`` ones (:func:`nearest`)."""
        dist = np.empty(self.rows, dtype=np.uint16)
        self.distances(self.query_words(q), 0, self.rows, dist)
        return nearest(dist, allowed, count)


def nearest(dist: np.ndarray, allowed: np.ndarray | None, count: int) -> np.ndarray:
    """Rows (ascending) with the ``count`` smallest distances ``dist`` (uint16) among the ``allowed`` ones (a mask;
    None: all); rows tied with the last one are included, so a few more than ``count`` may come back."""
    worst = np.iinfo(np.uint16).max  # beyond any real distance (at most 64 x words): a row never a candidate
    if allowed is not None:
        dist[~allowed] = worst
    per_distance = np.bincount(dist)[:worst]
    cut = min(int(np.searchsorted(np.cumsum(per_distance), count)), worst - 1)
    return np.flatnonzero(dist <= cut)


def candidate_count(rows: int, want: int, share: float) -> int:
    return max(CANDIDATES, want, int(rows * share))


def _pack(bits: np.ndarray, words: int) -> np.ndarray:
    """``bits`` (rows, dim) bool as (words, rows) uint64, the last word padded with zero bits."""
    packed = np.packbits(bits, axis=1)
    padded = np.zeros((bits.shape[0], words * 8), dtype=np.uint8)
    padded[:, : packed.shape[1]] = packed
    return np.ascontiguousarray(padded.view("<u8").T)


def encode(codes: np.ndarray, quantizer: ScalarQuantizer) -> SignCodes:
    """The sign codes of int8 ``codes`` (rows x dim, at least one row) made by ``quantizer``."""
    n, dim = codes.shape
    stride = max(1, -(-n // _SAMPLE_ROWS))
    threshold = np.rint(codes[::stride].mean(axis=0, dtype=np.float64)).astype(np.int8)
    words = np.empty((-(-dim // 64), n), dtype=np.uint64)
    for lo in range(0, n, _BLOCK):
        words[:, lo : lo + _BLOCK] = _pack(codes[lo : lo + _BLOCK] > threshold, words.shape[0])
    # A query value above the threshold code's value has the bit a row's code above the threshold has.
    signs = SignCodes(words, quantizer.decode(threshold))
    return replace(signs, share=calibrate(signs, codes, quantizer))


def calibrate(signs: SignCodes, codes: np.ndarray, quantizer: ScalarQuantizer) -> float:
    """The share of the rows the pass must keep on this data, since how close sign bits rank true neighbours
    depends on the embedding model: :data:`PROBES` rows spread over the index are used as queries; for each, the
    share of rows whose distance is within that of the farthest of its exact (int8) 10 nearest rows; the second
    largest of those shares (a 90th percentile) is kept, never less than :data:`CANDIDATE_SHARE`. On msmarco-5k:
    4.5 % for its MiniLM vectors, 13 % for its e5 ones; 24 % for e5 on cmrc2018-zh (flat scores) and 26 % for
    random vectors, where the pass is not used. One pass over the codes for the exact neighbours."""
    n = codes.shape[0]
    picks = np.unique(np.linspace(0, n - 1, min(PROBES, n)).astype(np.int64))
    if n <= _NEIGHBOURS + 1 or picks.size < 2:
        return 1.0
    queries = quantizer.decode(codes[picks])
    queries /= np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), np.float32(1e-12))
    # The int8 scores of every row against all the queries at once (quantize's module docstring): one conversion
    # of each block of codes, one matrix product.
    weights = (quantizer.step[:, None] * queries.T).astype(np.float32)
    scores = np.empty((picks.size, n), dtype=np.float32)
    for lo in range(0, n, _SCAN_BLOCK):
        scores[:, lo : lo + _SCAN_BLOCK] = (codes[lo : lo + _SCAN_BLOCK].astype(np.float32) @ weights).T
    scores += (queries @ quantizer.offset + 128.0 * weights.sum(axis=0))[:, None]
    scores[np.arange(picks.size), picks] = -np.inf  # a row is not its own neighbour
    dist = np.empty(n, dtype=np.uint16)
    shares = []
    for j in range(picks.size):
        near = np.argpartition(-scores[j], _NEIGHBOURS - 1)[:_NEIGHBOURS]
        signs.distances(signs.query_words(queries[j]), 0, n, dist)
        shares.append(np.count_nonzero(dist <= dist[near].max()) / n)
    return max(CANDIDATE_SHARE, sorted(shares)[-2])


__all__ = [
    "CANDIDATES",
    "CANDIDATE_SHARE",
    "MAX_SHARE",
    "MIN_ROWS",
    "SignCodes",
    "calibrate",
    "candidate_count",
    "encode",
    "nearest",
]
