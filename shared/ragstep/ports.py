"""The small interfaces every adapter implements (local embedded defaults and AWS services alike).

Stages depend on these Protocols only; :mod:`ragstep.context` decides which implementation backs each one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ragstep.models import Chunk, ChunkType, Knowledge, KnowledgeBase, Turn

if TYPE_CHECKING:  # annotations only: stages that never touch vectors (ingest_parse) load no numpy
    import numpy as np


@dataclass(frozen=True, slots=True)
class SearchFilter:
    """Which chunks a search may return. Empty tuples mean "no restriction" on that field."""

    knowledge_base_ids: tuple[str, ...] = ()
    knowledge_ids: tuple[str, ...] = ()
    tag_ids: tuple[str, ...] = ()
    chunk_types: tuple[ChunkType, ...] = ()
    enabled_only: bool = True


@dataclass(frozen=True, slots=True)
class Hit:
    """A retriever's answer: a chunk id and its score (cosine for vectors, normalised BM25 for keywords)."""

    chunk_id: str
    score: float
    raw_score: float = 0.0


@dataclass(frozen=True, slots=True)
class IndexStats:
    chunks: int
    knowledge_items: int
    vector_spaces: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class SearchIndex(Protocol):
    def replace_knowledge(
        self, knowledge_id: str, chunks: Sequence[Chunk], vectors: np.ndarray | None, space: str | None
    ) -> None:
        """Atomically replace every chunk of ``knowledge_id`` with ``chunks`` (row i of ``vectors`` is chunk i)."""

    def delete_knowledge(self, knowledge_ids: Sequence[str]) -> int:
        """Remove every chunk of these knowledge items; returns how many chunks went."""

    def delete_knowledge_base(self, knowledge_base_id: str) -> int: ...

    def set_enabled(self, chunk_ids: Sequence[str], enabled: bool) -> int: ...

    def keyword_search(self, tokens: Sequence[str], flt: SearchFilter, top_k: int, threshold: float) -> list[Hit]:
        """BM25 over pre-tokenized query terms; scores normalised to the best hit (1.0) before ``threshold``."""

    def vector_search(
        self, vector: np.ndarray, space: str, flt: SearchFilter, top_k: int, threshold: float
    ) -> list[Hit]:
        """Exact (local) or approximate (OpenSearch) cosine kNN among chunks embedded in ``space``."""

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, Chunk]: ...

    def knowledge_chunks(self, knowledge_id: str, limit: int) -> list[Chunk]:
        """The chunks of one knowledge item in document order (used by the scoped zero-result fallback)."""

    def chunks_at(self, wanted: Mapping[str, Sequence[int]]) -> dict[str, dict[int, Chunk]]:
        """Enabled chunks by knowledge id and chunk_index, for many documents in one read (merge expands with them)."""

    def vectors(self, chunk_ids: Sequence[str], space: str) -> dict[str, np.ndarray]:
        """Stored (unit) vectors of these chunks in ``space``; chunks without one are left out."""

    def stats(self) -> IndexStats: ...


@runtime_checkable
class HistoryStore(Protocol):
    def append(self, turn: Turn) -> None: ...

    def recent(self, session_id: str, limit: int = 10) -> list[Turn]:
        """The newest ``limit`` turns, oldest first."""

    def delete_session(self, session_id: str) -> int: ...


@runtime_checkable
class BlobStore(Protocol):
    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Store ``data`` under ``key`` atomically; returns a URI for the blob."""

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def list(self, prefix: str = "") -> list[str]: ...


@runtime_checkable
class CatalogStore(Protocol):
    """Knowledge bases and knowledge items (WeKnora's metadata tables; DynamoDB on AWS)."""

    def create_kb(self, kb: KnowledgeBase) -> KnowledgeBase: ...

    def get_kb(self, id_or_name: str) -> KnowledgeBase | None: ...

    def list_kbs(self) -> list[KnowledgeBase]: ...

    def delete_kb(self, kb_id: str) -> None: ...

    def put_knowledge(self, item: Knowledge) -> None: ...

    def get_knowledge(self, knowledge_id: str) -> Knowledge | None: ...

    def list_knowledge(self, kb_id: str) -> list[Knowledge]: ...

    def delete_knowledge(self, knowledge_id: str) -> None: ...


@runtime_checkable
class Embedder(Protocol):
    #: Identifies the vector space; knowledge bases embedded by the same model are searched together.
    model_id: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents: a float32 array of shape (len(texts), dim), rows L2-normalised."""

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (some models use a different prompt for queries): shape (dim,)."""


@runtime_checkable
class Reranker(Protocol):
    name: str

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """Relevance in [0, 1] for each document, in input order."""


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


@runtime_checkable
class ChatModel(Protocol):
    """Answer generation (implemented by a later issue; the port is fixed now so stages can depend on it)."""

    name: str

    def complete(self, messages: Sequence[ChatMessage], *, temperature: float = 0.0, max_tokens: int = 1024) -> str: ...

    def stream(
        self, messages: Sequence[ChatMessage], *, temperature: float = 0.0, max_tokens: int = 1024
    ) -> Iterator[str]: ...
