"""The optional capabilities of a :class:`~ragstep.ports.SearchIndex`, each declared as a Protocol an index
implements or not, and the one function that says whether a given index has it (code asks that function, never the
index's type): server-side hybrid fusion (OpenSearch), reads scoped to named knowledge bases (the S3-snapshot index),
vectors added after the chunks (progressive indexing, the local index), a per-knowledge-base size warning, and stored
keyword tokens brought up to the current tokenizer on request (OpenSearch domains).

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
        given (never twice, never onto content ingested since; a chunk deleted meanwhile gets none and is not
        re-created); returns how many got one."""

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


@runtime_checkable
class KeywordGain(Protocol):
    """An index whose raw BM25 is not on ragstep's scale (OpenSearch: Lucene's ``BM25Similarity`` from 3.0 drops
    Okapi's ``k1 + 1`` factor): the points a saturated term scores per nat of idf there."""

    def keyword_gain(self) -> float: ...


def keyword_gain(index: SearchIndex) -> float:
    """BM25 points per nat of idf in ``index``'s raw keyword scores: its own where it declares one, else ragstep's
    ``k1 + 1`` (the local and S3-snapshot indexes score with :mod:`ragstep.retrieval.bm25`)."""
    from ragstep.retrieval.bm25 import BM25_K1

    return index.keyword_gain() if isinstance(index, KeywordGain) else BM25_K1 + 1.0


@runtime_checkable
class CandidateScores(Protocol):
    """An index that scores named chunks exactly for a query: their cosine to the query vector and their BM25 for
    the query terms, on the statistics its own keyword search uses. Fusion reads the cosine of every chunk only the
    keyword list holds (one the similarity threshold or the pool cut from the vector list) instead of reading it as
    0 (:func:`ragstep.stages.search.retrievers.keyword_only_cosines`, which says why the BM25 of a vector-only chunk
    is not read); an index without it keeps the vector floor of
    :func:`~ragstep.retrieval.fusion.fuse_evidence`."""

    def cosines(self, vector: np.ndarray, space: str, chunk_ids: Sequence[str]) -> dict[str, float]:
        """The cosine of the unit ``vector`` to each of ``chunk_ids`` that has a vector in ``space``."""

    def bm25_scores(self, tokens: Sequence[str], flt: SearchFilter, chunk_ids: Sequence[str]) -> dict[str, float]:
        """The raw BM25 of each of ``chunk_ids`` for ``tokens``, with the statistics :meth:`keyword_search` uses for
        ``flt`` (a chunk that holds none of them is left out: 0)."""


def candidate_scores(index: SearchIndex) -> CandidateScores | None:
    return index if isinstance(index, CandidateScores) else None


@runtime_checkable
class TokenUpgrade(Protocol):
    """An index whose documents keep the keyword tokens they were indexed with (an OpenSearch domain) and can bring
    them up to the current tokenizer in place (:data:`ragstep.retrieval.text.TOKENIZER_VERSION`: Latin accents
    folded since version 2). The local index does it itself when it opens (:mod:`ragstep.adapters.index._tokens`),
    as the S3-snapshot index does for each knowledge base it loads."""

    def upgrade_tokens(self, knowledge_base_id: str) -> tuple[int, int]:
        """Fold the tokens of the knowledge base's documents indexed before: (documents read, documents changed)."""


def token_upgrade(index: SearchIndex) -> TokenUpgrade | None:
    return index if isinstance(index, TokenUpgrade) else None
