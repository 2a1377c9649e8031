"""One embedding space's float32 vectors as a snapshot build streams them out of SQLite.

With a build folder the rows are appended to the space's ``.npy`` file there (written with ordinary buffered writes,
never through a mapping) and read back in blocks with ``readinto``: at a million 384-dim rows the 1.5 GB matrix
never sits in the process's memory, only in the page cache, and the finished snapshot maps it for the few rows a
query rescores. Without a writable folder (``persist_snapshots=False``, a read-only data dir) the rows go to a
``bytearray`` as before.

:func:`first_pass` is the query side's int8 pass over every row the filter allows: a scan of every code, or from
:data:`ragstep.retrieval.signs.MIN_ROWS` rows the sign-bit pass and the int8 scores of its candidates only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ragstep.adapters.index._snapshot import Space, top
from ragstep.retrieval import signs
from ragstep.retrieval.quantize import approx_scores

#: ``scan(rows, score)``: ``score(lo, hi, out)`` run over ``0..rows`` (split across threads when large), the scores.
Scan = Callable[[int, Callable[[int, int, np.ndarray], object]], np.ndarray]

#: Rows read back at a time (384 dims: 24 MiB).
BLOCK_ROWS = 16_384


class VectorSink:
    def __init__(self, path: Path | None, rows: int, width_bytes: int) -> None:
        self.path, self.rows, self.dim = path, rows, width_bytes // 4
        self._buf = bytearray()
        self._fh: BinaryIO | None = None
        self._data_offset = 0
        self._written = 0
        if path is not None:
            self._fh = path.open("wb", buffering=1 << 20)
            header = {"descr": "<f4", "fortran_order": False, "shape": (rows, self.dim)}
            np.lib.format.write_array_header_1_0(self._fh, header)
            self._data_offset = self._fh.tell()

    def add(self, blob: bytes) -> None:
        if self._fh is not None:
            self._fh.write(blob)
        else:
            self._buf += blob
        self._written += 1

    def abort(self) -> None:
        """Closes the file of a build that failed (its folder is removed by the caller)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._written != self.rows:
            raise ValueError(f"expected {self.rows} vectors, got {self._written}")

    def matrix(self) -> np.ndarray:
        """The whole matrix: mapped from the file (read-only), or over the bytearray."""
        if self.path is not None:
            return np.load(self.path, mmap_mode="r")
        return np.frombuffer(self._buf, dtype="<f4").reshape(self.rows, self.dim)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """A copy of the given rows (a sample), read row by row so untouched pages are never mapped in."""
        if self.path is None:
            return self.matrix()[rows].astype(np.float32)
        out = np.empty((rows.shape[0], self.dim), dtype=np.float32)
        width = self.dim * 4
        fd = os.open(self.path, os.O_RDONLY)
        try:
            for i, r in enumerate(rows.tolist()):
                out[i] = np.frombuffer(os.pread(fd, width, self._data_offset + r * width), dtype="<f4")
        finally:
            os.close(fd)
        return out

    def blocks(self, block_rows: int = BLOCK_ROWS) -> Iterator[np.ndarray]:
        """Consecutive row blocks (the same buffer reused: consume each before taking the next)."""
        if self.path is None:
            m = self.matrix()
            for lo in range(0, self.rows, block_rows):
                yield m[lo : lo + block_rows]
            return
        buf = np.empty((min(block_rows, max(self.rows, 1)), self.dim), dtype=np.float32)
        with self.path.open("rb") as fh:
            fh.seek(self._data_offset)
            for lo in range(0, self.rows, block_rows):
                view = buf[: min(block_rows, self.rows - lo)]
                if fh.readinto(view.data.cast("B")) != view.nbytes:
                    raise OSError(f"{self.path} is shorter than its header says")
                yield view


def first_pass(
    sp: Space, q: np.ndarray, allowed: np.ndarray, want: int, w: np.ndarray, bias: float, scan: Scan
) -> np.ndarray:
    """Matrix rows of the ``want`` best int8 scores (``codes @ w + bias``) among the ``allowed`` rows (a mask in
    matrix order, letting through at least half of them). Between ``signs.MIN_ROWS`` rows and the IVF threshold
    only the sign-bit pass's candidates are scored (~2 % of the rows at 100k: ~5x less work than every code, and the
    same Recall@10 on ``bench vectors``), unless its calibration found this data needs too many of them."""
    codes = sp.codes
    assert codes is not None
    n = codes.shape[0]
    # A snapshot of an older version has no sign codes: every code is scanned, as that version did. Making them
    # here would cost each new process (every CLI command) 0.3-0.6 s at 100k rows until the next write rebuilds it.
    if sp.signs is not None and sp.partition is None and sp.signs.share <= signs.MAX_SHARE:
        codes_signs, qw, dist = sp.signs, sp.signs.query_words(q), np.empty(n, dtype=np.uint16)
        scan(n, lambda lo, hi, _out: codes_signs.distances(qw, lo, hi, dist[lo:hi]))  # threads, as a scan's blocks
        cand = signs.nearest(dist, allowed, signs.candidate_count(n, want, sp.signs.share))
        if cand.size < n // 2:  # else (near-identical bits) scanning every code costs no more
            # gathered in ascending order, so the reads stay sequential
            approx = np.empty(cand.size, dtype=np.float32)
            approx_scores(codes[cand], w, bias, approx)
            return cand[top(approx, want)]
    approx = scan(n, lambda lo, hi, out: approx_scores(codes[lo:hi], w, bias, out))
    if sp.partition is not None:  # codes in list order: back to matrix order
        by_row = np.empty_like(approx)
        by_row[sp.partition.order] = approx
        approx = by_row
    approx[~allowed] = -np.inf
    return top(approx, want)
