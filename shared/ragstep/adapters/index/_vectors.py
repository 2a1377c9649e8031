"""One embedding space's float32 vectors as a snapshot build streams them out of SQLite.

With a build folder the rows are appended to the space's ``.npy`` file there (written with ordinary buffered writes,
never through a mapping) and read back in blocks with ``readinto``: at a million 384-dim rows the 1.5 GB matrix
never sits in the process's memory, only in the page cache, and the finished snapshot maps it for the few rows a
query rescores. Without a writable folder (``persist_snapshots=False``, a read-only data dir) the rows go to a
``bytearray`` as before.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

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
