"""Progressive indexing in the S3-snapshot index (:class:`ragstep.index_capabilities.VectorBackfill`): each
knowledge base's generation is a local index, which stores chunks without vectors already
(:class:`~ragstep.adapters.index._backfill.RowVectorBackfill`); these methods find the chunks of a document still
without one and publish vectors as the next generation.

Part of :class:`~ragstep.adapters.index.s3snapshot.S3SnapshotIndex`. Every answer reads the knowledge base's current
pointer (not a copy up to ``refresh_s`` old): the ingest machine's embedding batches and its final step decide from
it what to write and whether the document is complete.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragstep.adapters.index._replace import checked_replacement
from ragstep.adapters.index._s3writes import GenerationWriter

if TYPE_CHECKING:
    import numpy as np

    from ragstep.models import Chunk
    from ragstep.ports import SearchFilter


class S3VectorBackfill(GenerationWriter):
    def missing_vectors(self, knowledge_id: str) -> list[str]:
        """From the current generation of each knowledge base in scope (a :meth:`scoped` view: the caller names the
        document's), else of the loaded ones, then the tenant's others; the first that has any."""
        kbs = self._scope if self._scope is not None else list(dict.fromkeys([*self._loaded, *self._all_kbs()]))
        for kb in kbs:
            index = self._current(kb, fresh=True).index
            missing = index.missing_vectors(knowledge_id) if index is not None else []
            if missing:
                return missing
        return []

    def add_vectors(self, chunks: Sequence[Chunk], vectors: np.ndarray, space: str) -> int:
        """The local index's guarded write (only rows without a vector still stored as given) on a copy of the
        knowledge base's current generation, published as the next one only when it gave any row a vector; a writer
        that loses the race for the pointer applies it again on the new generation, where the guard holds again."""
        if not chunks:
            return 0
        checked_replacement(chunks[0].knowledge_id, chunks, vectors, space)  # bad input fails before any S3 request
        return self.apply_change(
            chunks[0].knowledge_base_id, lambda index: index.add_vectors(chunks, vectors, space), publish=bool
        )

    def keyword_only(self, flt: SearchFilter, space: str) -> int:
        kbs = flt.knowledge_base_ids or self._all_kbs()
        return sum(index.keyword_only(flt, space) for index in self._indexes(kbs))
