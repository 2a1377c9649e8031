"""Int8 scalar quantisation of embedding vectors, per dimension, for the embedded index's approximate first pass.

Each dimension ``d`` gets its own range ``[offset_d, offset_d + 255 * step_d]``, fitted when a snapshot is built from
the dimension's 0.1st and 99.9th percentiles (on a strided sample of at most ``SAMPLE_ROWS`` rows, so fitting stays a
few milliseconds at any size). A value is stored as the nearest of 256 levels, shifted to int8; values outside the
range are clipped. A percentile clip instead of min/max keeps one outlier from widening a dimension's step for every
other vector; the clipped few lose a little precision, which the exact float rescoring of the top candidates repairs.

The approximate score of a query ``q`` against a row ``c`` of codes is linear in the codes::

    q . x  ~=  q . offset + 128 * sum(step * q) + c . (step * q)

so a scan is one int8 -> float32 conversion and one matrix-vector product per block of rows (blocks small enough to
stay in cache: the conversion never materialises a float32 copy of the matrix). Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Rows the per-dimension ranges are fitted on (a strided sample: deterministic, and every part of the index is seen).
SAMPLE_ROWS = 20_000
#: Fraction of values clipped at each end of a dimension's range.
CLIP = 0.001
#: Rows converted to float32 at a time while scanning (384 dims: 1.5 MiB, stays in L2).
SCAN_BLOCK = 1024
_LEVELS = 255
_ENCODE_BLOCK = 16_384


@dataclass(frozen=True)
class ScalarQuantizer:
    """Per-dimension affine map between float32 values and int8 codes: ``value = offset + step * (code + 128)``."""

    offset: np.ndarray  # float32 (dim,): the value of code -128
    step: np.ndarray  # float32 (dim,): > 0

    @property
    def dim(self) -> int:
        return int(self.offset.shape[0])

    def encode(self, matrix: np.ndarray) -> np.ndarray:
        """int8 codes of ``matrix`` (rows x dim), converted a block at a time to bound the float64 temporaries."""
        matrix = np.asarray(matrix)
        if matrix.ndim != 2 or matrix.shape[1] != self.dim:
            raise ValueError(f"expected a (rows, {self.dim}) matrix, got shape {matrix.shape}")
        out = np.empty(matrix.shape, dtype=np.int8)
        for lo in range(0, matrix.shape[0], _ENCODE_BLOCK):
            block = (matrix[lo : lo + _ENCODE_BLOCK].astype(np.float32) - self.offset) / self.step
            np.clip(np.rint(block), 0, _LEVELS, out=block)
            out[lo : lo + _ENCODE_BLOCK] = (block - 128.0).astype(np.int8)
        return out

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """float32 values of ``codes``: within ``step / 2`` of the encoded values that were inside the range."""
        return (self.offset + self.step * (np.asarray(codes, dtype=np.float32) + 128.0)).astype(np.float32)

    def query_weights(self, q: np.ndarray) -> tuple[np.ndarray, float]:
        """``(w, bias)`` such that ``codes @ w + bias`` approximates ``matrix @ q`` (module docstring)."""
        q = np.asarray(q, dtype=np.float32).reshape(-1)
        w = (self.step * q).astype(np.float32)
        bias = float(np.dot(self.offset.astype(np.float64), q) + 128.0 * float(w.sum(dtype=np.float64)))
        return w, bias


def fit(matrix: np.ndarray, *, clip: float = CLIP, sample_rows: int = SAMPLE_ROWS) -> ScalarQuantizer:
    """Per-dimension ranges of ``matrix`` (rows x dim, at least one row), clipped at the ``clip`` quantiles."""
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise ValueError(f"cannot fit a quantiser on a matrix of shape {matrix.shape}")
    stride = max(1, -(-matrix.shape[0] // sample_rows))
    sample = np.asarray(matrix[::stride], dtype=np.float32)
    lo, hi = np.quantile(sample, [clip, 1.0 - clip], axis=0)
    # A constant dimension still needs a positive step (its code is then always the same level).
    span = np.maximum(hi - lo, np.finfo(np.float32).eps * np.maximum(1.0, np.abs(lo)))
    return ScalarQuantizer(lo.astype(np.float32), (span / _LEVELS).astype(np.float32))


def approx_scores(codes: np.ndarray, w: np.ndarray, bias: float, out: np.ndarray, block: int = SCAN_BLOCK) -> None:
    """Writes ``codes @ w + bias`` into ``out`` (float32, len(codes)), converting ``block`` rows at a time."""
    n = codes.shape[0]
    buf = np.empty((min(block, n), codes.shape[1]), dtype=np.float32)
    for lo in range(0, n, block):
        part = codes[lo : lo + block]
        view = buf[: part.shape[0]]
        view[...] = part
        np.matmul(view, w, out=out[lo : lo + part.shape[0]])
    out += np.float32(bias)


def candidates_wanted(top_k: int, factor: int) -> int:
    """How many approximate candidates are rescored exactly for ``top_k`` hits (``factor`` x, at least 20)."""
    return max(top_k * max(1, factor), 20)


__all__ = ["CLIP", "SAMPLE_ROWS", "SCAN_BLOCK", "ScalarQuantizer", "approx_scores", "candidates_wanted", "fit"]
