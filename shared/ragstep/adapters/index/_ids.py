"""The chunk ids of a saved snapshot as memory-mapped arrays (:class:`StringColumn`; snapshot format 4)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class StringColumn:
    """A saved snapshot's chunk ids, read from three memory-mapped arrays instead of parsed from JSON: ``blob`` their
    UTF-8 bytes back to back, ``offsets`` where each starts (and where the last ends), ``order`` their positions
    sorted by those bytes, for a binary search. At 100k chunks the ``ids`` list was most of meta.json (and of the
    snapshot's load), and the id -> position dict the rerank stage built of all of them was paid again in every
    process's first query (``ragstep bench cli``); here both are lookups of the rows a query touches."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray, order: np.ndarray) -> None:
        self.blob, self.offsets, self.order = blob, offsets, order
        # Plain views of the mapped arrays: slicing an np.memmap runs its Python __array_finalize__ (~10 us), and a
        # binary search slices ~17 times per id.
        self._bytes_of, self._offsets, self._order = (
            np.asarray(blob).data,
            np.asarray(offsets),
            np.asarray(order),
        )

    @staticmethod
    def arrays(values: Sequence[str] | StringColumn) -> dict[str, np.ndarray]:
        """``blob``, ``offsets`` and ``order`` of ``values`` (ids with lone surrogates round-trip too)."""
        if isinstance(values, StringColumn):
            return {"blob": values.blob, "offsets": values.offsets, "order": values.order}
        encoded = [v.encode("utf-8", "surrogatepass") for v in values]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
        order = np.asarray(sorted(range(len(encoded)), key=encoded.__getitem__), dtype=np.int64)
        return {"blob": np.frombuffer(b"".join(encoded), dtype=np.uint8), "offsets": offsets, "order": order}

    def __len__(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def _bytes(self, i: int) -> bytes:
        return self._bytes_of[int(self._offsets[i]) : int(self._offsets[i + 1])].tobytes()

    def __getitem__(self, i: int | np.integer) -> str:
        if not 0 <= i < len(self):
            raise IndexError(f"position {i} is outside the snapshot's {len(self)} rows")
        return self._bytes(int(i)).decode("utf-8", "surrogatepass")

    def take(self, positions: np.ndarray) -> list[str]:
        """The ids at ``positions`` (a search's hits): both offsets of all of them in two gathers, not four numpy
        scalars an id as indexing one at a time costs."""
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= len(self)):
            raise IndexError(f"a position is outside the snapshot's {len(self)} rows")
        blob = self._bytes_of
        starts, ends = self._offsets[pos].tolist(), self._offsets[pos + 1].tolist()
        return [str(blob[lo:hi], "utf-8", "surrogatepass") for lo, hi in zip(starts, ends, strict=True)]

    def find(self, value: str) -> int | None:
        """The position holding ``value`` (None when none does)."""
        key = value.encode("utf-8", "surrogatepass")
        order = self._order
        lo, hi = 0, int(order.shape[0])
        while lo < hi:
            mid = (lo + hi) // 2
            if self._bytes(int(order[mid])) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo < order.shape[0] and self._bytes(int(order[lo])) == key:
            return int(order[lo])
        return None


def ids_at(ids: Sequence[str] | StringColumn, positions: np.ndarray) -> list[str]:
    """The ids at ``positions`` of a snapshot's ids, a column (loaded) or a list (built in this process)."""
    if isinstance(ids, StringColumn):
        return ids.take(positions)
    return [ids[p] for p in positions.tolist()]
