"""Progressive indexing in the local index (:class:`ragstep.index_capabilities.VectorBackfill`): chunks stored
without a vector (``vector IS NULL``) are found by keyword search only until :meth:`RowVectorBackfill.add_vectors`
gives them one.

A mixin of :class:`~ragstep.adapters.index.local.LocalSearchIndex`, over its SQLite rows and snapshots.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from ragstep.adapters.index._replace import checked_replacement

if TYPE_CHECKING:
    import sqlite3

    from ragstep.adapters.index._snapshot import Snapshot
    from ragstep.models import Chunk
    from ragstep.ports import SearchFilter


class _Rows(Protocol):
    """What the mixin uses of the index it is part of."""

    def _conn(self) -> sqlite3.Connection: ...

    def _write(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def _check_dimension(self, space: str, dim: int) -> None: ...

    def snapshot(self) -> Snapshot: ...


class RowVectorBackfill:
    def missing_vectors(self, knowledge_id: str) -> list[str]:
        sql = "SELECT id FROM chunks WHERE knowledge_id = ? AND vector IS NULL ORDER BY chunk_index, row"
        cur = cast(_Rows, self)._conn().execute(sql, (knowledge_id,))
        return [cid for (cid,) in cur]

    def add_vectors(self, chunks: Sequence[Chunk], vectors: np.ndarray, space: str) -> int:
        """A row gets its vector only while it has none and its stored document is the chunk given, in one write
        transaction (which bumps the generation: searches see the vectors from their next snapshot). So a re-ingest
        in between, which reuses chunk ids, is never given the previous content's vectors."""
        if not chunks:
            return 0
        rows_of = cast(_Rows, self)
        vecs = checked_replacement(chunks[0].knowledge_id, chunks, vectors, space)  # one document's, unit rows
        assert vecs is not None
        rows_of._check_dimension(space, vecs.shape[1])
        rows = [
            (space, row.astype("<f4").tobytes(), c.id, c.model_dump_json(exclude={"embed_text"}))
            for c, row in zip(chunks, vecs, strict=True)
        ]
        with rows_of._write() as conn:
            before = conn.total_changes
            sql = "UPDATE chunks SET space = ?, vector = ? WHERE id = ? AND vector IS NULL AND doc = ?"
            conn.executemany(sql, rows)
            return conn.total_changes - before

    def keyword_only(self, flt: SearchFilter, space: str) -> int:
        """Rows ``flt`` lets through less those of them with a vector in ``space`` (masks cached on the snapshot)."""
        snap = cast(_Rows, self).snapshot()
        if snap.size == 0:
            return 0
        sp = snap.spaces.get(space)
        embedded = sp.allowed(snap, flt)[1].size if sp is not None and sp.rows.shape[0] else 0
        return int(np.count_nonzero(snap.mask(flt))) - int(embedded)
