"""The optional capabilities of a :class:`~ragstep.ports.SearchIndex`, each declared as a Protocol an index
implements or not, and the one function that says whether a given index has it (code asks that function, never the
index's type): server-side hybrid fusion (OpenSearch), reads scoped to named knowledge bases (the S3-snapshot index),
vectors added after the chunks (progressive indexing, the local index), and a per-knowledge-base size warning.

Kept apart from :mod:`ragstep.ports` (the ports themselves) so each module stays one screenful of concepts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from ragstep.models import Chunk
    from ragstep.ports import Hit, SearchFilter, SearchIndex


@runtime_checkable
class HybridSearch(Protocol):
    """The optional server-side fusion of a :class:`SearchIndex` (OpenSearch's ``hybrid`` query)."""

    @property
    def supports_server_hybrid(self) -> bool: ...

    def hybrid_search(
        self,
        tokens: Sequence[str],
        vector: np.ndarray,
        space: str,
        flt: SearchFilter,
        top_k: int,
        *,
        w_keyword: float = 0.3,
        w_vector: float = 0.7,
    ) -> list[Hit]:
        """Keyword and vector hits fused by the index (best first), the combined score in ``score`` and
        ``raw_score``; no thresholds apply (the combined score is relative to each result set)."""

    def pipeline_name(self, w_keyword: float = 0.3, w_vector: float = 0.7) -> str:
        """What fuses these weights on the server (OpenSearch: the search pipeline's name), for traces."""


def server_hybrid(index: SearchIndex) -> HybridSearch | None:
    """``index`` as a :class:`HybridSearch` when it declares server-side fusion on, else None."""
    if index.supports_server_hybrid and isinstance(index, HybridSearch):
        return index
    return None


@runtime_checkable
class ScopedReads(Protocol):
    """An index that loads knowledge bases on demand (the S3-snapshot index) and can look chunks up by id in named
    knowledge bases only: a cold rerank or merge container then loads the request's, not all of the tenant's."""

    def scoped(self, knowledge_base_ids: Sequence[str]) -> SearchIndex: ...


def scoped_reads(index: SearchIndex, knowledge_base_ids: Iterable[str]) -> SearchIndex:
    """``index`` with its by-id reads (fetch, vectors, chunks_at) limited to ``knowledge_base_ids`` where it can be
    (:class:`ScopedReads`) and every id is known; otherwise ``index`` itself, unchanged."""
    ids = tuple(dict.fromkeys(knowledge_base_ids))
    return index.scoped(ids) if ids and all(ids) and isinstance(index, ScopedReads) else index


@runtime_checkable
class VectorBackfill(Protocol):
    """An index that takes a document's chunks first and their vectors later (progressive indexing,
    :mod:`ragstep.app.ingest_vectors`); meanwhile a chunk without its vector is found by keyword search only."""

    def missing_vectors(self, knowledge_id: str) -> list[str]:
        """The ids of the document's chunks without a vector yet, in document order."""

    def add_vectors(self, chunks: Sequence[Chunk], vectors: np.ndarray, space: str) -> int:
        """Give ``chunks[i]`` the vector ``vectors[i]`` in one write, only where it has none and is still stored as
        given (never twice, never onto content ingested since); returns how many got one."""

    def keyword_only(self, flt: SearchFilter, space: str) -> int:
        """How many chunks ``flt`` lets through have no vector in ``space``."""


def vector_backfill(index: SearchIndex) -> VectorBackfill | None:
    return index if isinstance(index, VectorBackfill) else None


@runtime_checkable
class CapacityWarning(Protocol):
    """An index with a size limit per knowledge base (S3 snapshots): why one should move to a larger index, or None."""

    def capacity_warning(self, knowledge_base_id: str) -> str | None: ...


def capacity_warning(index: SearchIndex, knowledge_base_id: str) -> str | None:
    return index.capacity_warning(knowledge_base_id) if isinstance(index, CapacityWarning) else None
