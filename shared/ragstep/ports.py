"""The small interfaces every adapter implements (local embedded defaults and AWS services alike).

Stages depend on these Protocols only; :mod:`ragstep.context` decides which implementation backs each one.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, TypeAlias, runtime_checkable

from ragstep.models.scale import COMMON_SCALE, ScoreScale

if TYPE_CHECKING:  # annotations only: stages that never touch vectors (ingest_parse) load no numpy
    import numpy as np
    from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer

    # Annotations only too: a search function or `ragstep search` builds no tenancy, graph or analysis models.
    from ragstep.models import Chunk, ChunkType, Knowledge, KnowledgeBase, SessionSummary, Turn
    from ragstep.models.analysis import DataTable, QueryResult
    from ragstep.models.catalog import IngestionJob
    from ragstep.models.graph import GraphExtraction, GraphNode

    # The chat models' value types live with the contract; imported from here as before (explicit re-exports,
    # loaded on first use by __getattr__ below).
    from ragstep.models.llm import ChatDelta as ChatDelta
    from ragstep.models.llm import ChatGrounding as ChatGrounding
    from ragstep.models.llm import ChatMessage as ChatMessage
    from ragstep.models.llm import ChatOptions as ChatOptions
    from ragstep.models.llm import ChatResponse as ChatResponse
    from ragstep.models.llm import ChatUsage as ChatUsage
    from ragstep.models.retrieval_events import ReplyTarget
    from ragstep.models.tenancy import ApiKey, Tenant, UsagePeriod, UsageRecord, UsageRow
    from ragstep.models.web import WebPage

_LLM_TYPES = frozenset({"ChatDelta", "ChatGrounding", "ChatMessage", "ChatOptions", "ChatResponse", "ChatUsage"})


def __getattr__(name: str) -> Any:
    # Six frozen dataclasses are slow to create: a search (whose pipeline modules import this one) never uses them.
    if name in _LLM_TYPES:
        from ragstep.models import llm

        return getattr(llm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    #: Whether this index fuses keyword and vector hits itself (:class:`HybridSearch`) and the search stage should
    #: send it one hybrid query per target instead of the keyword + vector pair. Every index declares it; only an
    #: index that also implements :class:`HybridSearch` may set it True. (A read-only property of the port: an
    #: adapter may declare it as a class attribute or compute it from its settings.)
    @property
    def supports_server_hybrid(self) -> bool: ...

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

    def sessions(self, limit: int = 100) -> list[SessionSummary]:
        """The sessions with live turns, most recently active first."""


@runtime_checkable
class BlobStore(Protocol):
    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Store ``data`` under ``key`` atomically; returns a URI for the blob."""

    def get(self, key: str) -> bytes: ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None: ...

    def list(self, prefix: str = "") -> list[str]: ...

    def put_file(self, key: str, source: BinaryIO, content_type: str = "application/octet-stream") -> str:
        """Store what ``source`` holds from its current position, read in pieces (never whole into memory), as
        atomically as :meth:`put`; returns a URI for the blob."""


@runtime_checkable
class CatalogStore(Protocol):
    """Knowledge bases and knowledge items (WeKnora's metadata tables; DynamoDB on AWS)."""

    def create_kb(self, kb: KnowledgeBase) -> KnowledgeBase: ...

    def get_kb(self, id_or_name: str) -> KnowledgeBase | None: ...

    def list_kbs(self) -> list[KnowledgeBase]: ...

    def delete_kb(self, kb_id: str) -> None: ...

    def put_knowledge(self, item: Knowledge) -> None: ...

    def replace_knowledge(self, expected: Knowledge, item: Knowledge) -> bool:
        """Compare-and-set: store ``item`` only while the stored record of its id still equals ``expected``; False
        when another writer changed or removed it first (a record deleted meanwhile is not written back)."""

    def get_knowledge(self, knowledge_id: str) -> Knowledge | None: ...

    def list_knowledge(self, kb_id: str) -> list[Knowledge]: ...

    def delete_knowledge(self, knowledge_id: str) -> None: ...

    def update_kb(self, kb: KnowledgeBase) -> KnowledgeBase:
        """Store a changed knowledge base (same id; a new name must be free). :class:`NotFoundError` if it is gone."""

    # Ingestion jobs (HTTP uploads). They go with their knowledge base in ``delete_kb``.

    def put_job(self, job: IngestionJob) -> None:
        """Insert or replace. :class:`NotFoundError` if its knowledge base does not exist."""

    def replace_job(self, expected: IngestionJob, job: IngestionJob) -> bool:
        """Compare-and-set: store ``job`` only while the stored job of its id still equals ``expected``; False when
        another writer changed or removed it first (then read it again and decide anew)."""

    def get_job(self, job_id: str) -> IngestionJob | None: ...

    def list_jobs(self, kb_id: str | None = None) -> list[IngestionJob]:
        """The jobs of one knowledge base (every knowledge base's when None), oldest first (ties by id)."""

    def delete_jobs(self, kb_id: str, knowledge_id: str, *, keep: Collection[str] = ()) -> int:
        """Remove the jobs of one document, but those whose status is in ``keep``; returns how many went."""

    def prune_jobs(self, finished_before: float, kb_id: str | None = None) -> int:
        """Remove jobs finished (not queued/running) before this instant, of ``kb_id`` or all; returns how many."""


@runtime_checkable
class Embedder(Protocol):
    #: Identifies the vector space; knowledge bases embedded by the same model are searched together.
    model_id: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed documents: a float32 array of shape (len(texts), dim), rows L2-normalised."""

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query (some models use a different prompt for queries): shape (dim,)."""


@runtime_checkable
class InProcessEmbedder(Embedder, Protocol):
    """An embedder that computes on this machine's cores, one call at a time (concurrent calls only queue).

    Callers send it ``engine_batch_size`` texts per call, one call after another, rather than large batches in
    parallel: each call is then short, so progress can be shown between calls and an interrupt is never stuck
    behind minutes of queued work."""

    engine_batch_size: int


@runtime_checkable
class ScaledEmbedder(Embedder, Protocol):
    """An embedder whose cosines are off the common scale declares where they sit (e5's crowd into ~0.75-1)."""

    score_scale: ScoreScale


def score_scale(embedder: Embedder | None) -> ScoreScale:
    """The declared scale of ``embedder``'s cosines (the common scale when it declares none)."""
    return embedder.score_scale if isinstance(embedder, ScaledEmbedder) else COMMON_SCALE


def declared_scale(embedder: Embedder | None) -> ScoreScale | None:
    """The scale ``embedder`` declares, or None (a provider's model): ranking then reads its cosines relative only."""
    return embedder.score_scale if isinstance(embedder, ScaledEmbedder) else None


@runtime_checkable
class Reranker(Protocol):
    #: Names the reranker in traces and benchmark reports (``none``, ``cohere:<model>``, ``bedrock:<model>``...).
    name: str

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """Relevance in [0, 1] for each document, in input order."""


@dataclass(frozen=True, slots=True)
class RerankCandidate:
    """What a :class:`CandidateReranker` looks at for one chunk.

    ``title`` and ``important_keywords`` are scored as extra fields (RAGFlow weighs them 2 and 5); ``vector`` is the
    chunk's embedding, when it has one in the query's vector space.
    """

    content: str
    title: str = ""
    important_keywords: Sequence[str] = ()
    vector: np.ndarray | Sequence[float] | None = None

    @classmethod
    def from_chunk(cls, chunk: Chunk, vector: np.ndarray | Sequence[float] | None = None) -> RerankCandidate:
        """Content, the knowledge item's title, and ``metadata["important_keywords"]`` (a list, or one string)."""
        keywords = chunk.metadata.get("important_keywords") or ()
        if isinstance(keywords, str):
            keywords = (keywords,)
        return cls(
            content=chunk.content,
            title=chunk.knowledge_title,
            important_keywords=tuple(str(k) for k in keywords),
            vector=vector,
        )


@runtime_checkable
class CandidateReranker(Reranker, Protocol):
    """A reranker that reads more than the text: titles, keywords and the chunk and query vectors (the local
    token/vector reranker). The rerank stage hands such a reranker :class:`RerankCandidate` s."""

    def rerank_candidates(
        self,
        query: str,
        items: Sequence[RerankCandidate],
        query_vector: np.ndarray | Sequence[float] | None = None,
        *,
        cosine_scale: ScoreScale | None = COMMON_SCALE,
    ) -> list[float]:
        """Relevance in [0, 1] of each candidate, in input order; cosines are read on ``cosine_scale`` (or relative)."""


@runtime_checkable
class ChatModel(Protocol):
    """Answer generation: an OpenAI-compatible endpoint, Bedrock, or the model-free extractive answerer."""

    #: ``provider:model`` (``extractive`` for the model-free answerer): names the model in traces and history.
    name: str
    #: False for an answerer that can only quote its grounding (no rewriting, no free-form fallback answer).
    generative: bool

    def complete(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> ChatResponse: ...

    def stream(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> Iterator[ChatDelta]:
        """Deltas as they arrive. Closing the iterator early (``close()``) stops the provider's stream: no answer
        keeps being generated for a reader that has gone. Failures before the first delta are retried; after it,
        never (a half-streamed answer must not be replayed)."""


@runtime_checkable
class VisionModel(Protocol):
    """A chat model that reads pictures (RAGSTEP_VISION_*): writes the captions of a document's figures."""

    #: ``provider:model``: names the model in traces.
    name: str

    def describe(self, image: bytes, media_type: str, prompt: str, *, max_tokens: int) -> str:
        """The model's answer to ``prompt`` about the picture (``media_type`` one of image/png, image/jpeg,
        image/gif, image/webp), within the deadline in force (:mod:`ragstep.deadline`);
        :class:`~ragstep.errors.ProviderError` when it fails."""


@runtime_checkable
class AnalysisSession(Protocol):
    """One request's sandbox: data files loaded, then locked, then read-only queries over those tables only."""

    def load(self, knowledge_id: str, path: str, fmt: str) -> list[DataTable]:
        """Load a ``csv`` or ``xlsx`` file (every sheet) as tables; :class:`AnalysisError` if it cannot be read.
        Only before :meth:`lock`."""

    def lock(self) -> None:
        """No file, network, extension or setting can be reached or changed from here on."""

    def check(self, sql: str) -> str:
        """``sql`` if it is exactly one SELECT over the loaded tables only, judged by the database's own parser;
        else :class:`AnalysisError` (``refused``) saying why."""

    def query(self, sql: str) -> QueryResult:
        """Run a checked query under the session's time, memory and row limits (``timeout`` / ``failed``)."""

    def close(self) -> None: ...


@runtime_checkable
class DataAnalysis(Protocol):
    """Opens sandboxes (DuckDB in memory); holds the limits they run under."""

    def session(self) -> AnalysisSession: ...


@runtime_checkable
class KeyStore(Protocol):
    """Tenants and their API keys: the server's own table (a key resolves *to* a tenant), one per deployment."""

    def put_tenant(self, tenant: Tenant) -> Tenant:
        """Store a new tenant; :class:`~ragstep.errors.ConflictError` if its id is taken."""

    def get_tenant(self, tenant_id: str) -> Tenant | None: ...

    def list_tenants(self) -> list[Tenant]: ...

    def put_key(self, key: ApiKey) -> None:
        """Store a new key; :class:`~ragstep.errors.ConflictError` if its prefix is taken."""

    def get_key(self, prefix: str) -> ApiKey | None: ...

    def list_keys(self, tenant_id: str | None = None) -> list[ApiKey]:
        """Every key (of one tenant when given), revoked and expired ones included, oldest first."""

    def revoke_key(self, prefix: str, when: float) -> ApiKey | None:
        """Mark the key revoked at ``when`` (kept for the usage records that name it); None if unknown."""

    def has_keys(self) -> bool:
        """Whether any key was ever made (a server with keys requires one on every request)."""


@runtime_checkable
class UsageStore(Protocol):
    """One record per API request, read back per tenant and time range."""

    def add(self, records: Sequence[UsageRecord]) -> None: ...

    def between(self, tenant_id: str, start: float, end: float) -> list[UsageRecord]:
        """The tenant's records with ``start <= started_at < end``, oldest first."""

    def totals(self, tenant_id: str, period: UsagePeriod, first: str, last: str) -> list[UsageRow]:
        """Counters ``add`` keeps (outliving the records) per UTC day ``2026-11-23`` or month ``2026-11``, ``first``
        to ``last`` inclusive, oldest first (``group``: the period); periods without requests left out."""


@runtime_checkable
class GraphStore(Protocol):
    """A tenant's knowledge graphs, kept per document so a re-ingest or delete replaces exactly its part."""

    def replace_knowledge(self, kb_id: str, knowledge_id: str, graph: GraphExtraction) -> None:
        """The document's nodes (with their chunk ids) and relations, replacing its previous ones in one write."""

    def delete_knowledge(self, knowledge_ids: Sequence[str]) -> int: ...

    def delete_knowledge_base(self, kb_id: str) -> int: ...

    def names(self, kb_ids: Sequence[str]) -> list[str]:
        """The normalised names of every node of these knowledge bases (what fuzzy matching compares with)."""

    def lookup(self, kb_ids: Sequence[str], names: Sequence[str]) -> list[GraphNode]:
        """The nodes with these normalised names, each with the chunk ids of every document that mentions it."""

    def neighbours(self, kb_ids: Sequence[str], names: Sequence[str]) -> list[str]:
        """Normalised names one relation away (either direction) from these, not including them."""


@runtime_checkable
class WebSearchProvider(Protocol):
    name: str  # the engine, as trace rows and results' metadata show it

    def search(self, query: str, max_results: int) -> list[WebPage]:
        """Up to ``max_results`` pages, best first ([] when none); ProviderError when the engine fails."""


@runtime_checkable
class ResponseCache(Protocol):
    """Model outputs kept for a while, per tenant: LLM responses (rewrites, answers) and query embeddings.

    Keys are hashes the caller builds from everything that determines the output (model, messages, settings);
    values are text (JSON for structured outputs). An expired entry is never returned, however late the backend
    deletes it."""

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, value: str, ttl_s: int) -> None: ...


#: "Done once" records (Slack event ids, retrieval request ids, webhook message ids): Powertools idempotency's
#: persistence layer contract, which its ``idempotent_function`` drives (conditional put, then the saved response).
#: DynamoDB (Powertools' own layer) on AWS, SQLite locally (ragstep.adapters.idempotency).
IdempotencyStore: TypeAlias = "BasePersistenceLayer"


@runtime_checkable
class MessageChannel(Protocol):
    """A chat platform the bot answers on (Slack's Web API): post into a thread, edit what it posted."""

    def post(self, channel: str, text: str, *, thread_ts: str | None = None) -> str:
        """Post ``text`` (in the thread ``thread_ts`` when given); returns the new message's ts."""

    def update(self, channel: str, ts: str, text: str) -> None:
        """Replace the text of the bot's message ``ts``."""


@runtime_checkable
class ResultDelivery(Protocol):
    """Where event-driven retrieval sends a result event: an EventBridge bus, an SQS queue, an HTTPS callback."""

    def deliver(self, target: ReplyTarget, event: Mapping[str, Any]) -> str:
        """Send ``event`` (``{source, detail-type, detail}``) to ``target``, retried as the target allows; returns
        where it went. :class:`~ragstep.errors.ProviderError` when it could not be delivered."""

    def post_signed(self, url: str, payload: Mapping[str, Any], secret: str) -> str:
        """POST ``payload`` as JSON to ``url``, signed with ``secret`` (``X-Ragstep-Signature``), retried."""
