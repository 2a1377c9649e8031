"""The state contract: the JSON that flows between pipeline stages.

Every stage is a function ``PipelineState -> PipelineState``. On AWS the state crosses Step Functions between Lambda
functions, so everything here must round-trip through JSON unchanged (``tests/test_models.py`` checks each model).
Bump :data:`SCHEMA_VERSION` on any change that an older stage could not read.
"""

from __future__ import annotations

import unicodedata
import uuid
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

SCHEMA_VERSION: Literal["1"] = "1"
MAX_QUERY_CHARS = 4000


class MatchType(StrEnum):
    VECTOR = "vector"
    KEYWORD = "keyword"
    HYBRID = "hybrid"
    HISTORY = "history"
    PARENT = "parent"
    NEARBY = "nearby"
    GRAPH = "graph"
    WEB = "web"
    DATA_ANALYSIS = "data_analysis"
    FAQ = "faq"


class ChunkType(StrEnum):
    TEXT = "text"
    FAQ = "faq"
    TABLE_SUMMARY = "table_summary"
    TABLE_COLUMN = "table_column"
    IMAGE_CAPTION = "image_caption"
    IMAGE_OCR = "image_ocr"
    SUMMARY = "summary"
    WEB_SEARCH = "web_search"


class KnowledgeBaseType(StrEnum):
    DOCUMENT = "document"
    FAQ = "faq"


class _Model(BaseModel):
    # Unknown keys are an error: a typo in a request must not silently fall back to a default.
    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class ImageInfo(_Model):
    url: str
    caption: str = ""
    ocr_text: str = ""


class Chunk(_Model):
    """A unit of indexed text, as ingestion produces it and the search index stores it."""

    id: str
    knowledge_id: str
    knowledge_base_id: str
    content: str
    chunk_index: int = 0
    start_at: int = 0
    end_at: int = 0
    chunk_type: ChunkType = ChunkType.TEXT
    tag_id: str = ""
    enabled: bool = True
    knowledge_title: str = ""
    knowledge_filename: str = ""
    # Text BM25 indexes instead of ``content`` (FAQ entries match on their questions, not their answers).
    index_text: str | None = None
    # Text the embedder sees instead of ``content`` (e.g. heading breadcrumbs + content); not stored for display.
    embed_text: str | None = None
    parent_id: str | None = None
    sub_chunk_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    image_info: list[ImageInfo] = Field(default_factory=list)


class SearchResult(_Model):
    id: str
    content: str
    knowledge_id: str
    knowledge_base_id: str
    knowledge_title: str = ""
    knowledge_filename: str = ""
    chunk_index: int = 0
    start_at: int = 0
    end_at: int = 0
    score: float = 0.0
    match_type: MatchType = MatchType.HYBRID
    chunk_type: ChunkType = ChunkType.TEXT
    tag_id: str = ""
    sub_chunk_ids: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    image_info: list[ImageInfo] = Field(default_factory=list)

    @classmethod
    def from_chunk(cls, chunk: Chunk, **fields: Any) -> SearchResult:
        """The stored ``chunk`` as a result: its identity, text, place and metadata, then ``fields`` on top
        (``score`` and ``match_type`` at least, which a chunk does not have)."""
        values: dict[str, Any] = {
            "id": chunk.id,
            "content": chunk.content,
            "knowledge_id": chunk.knowledge_id,
            "knowledge_base_id": chunk.knowledge_base_id,
            "knowledge_title": chunk.knowledge_title,
            "knowledge_filename": chunk.knowledge_filename,
            "chunk_index": chunk.chunk_index,
            "start_at": chunk.start_at,
            "end_at": chunk.end_at,
            "chunk_type": chunk.chunk_type,
            "tag_id": chunk.tag_id,
            "sub_chunk_ids": list(chunk.sub_chunk_ids),
            "metadata": dict(chunk.metadata),
            "image_info": list(chunk.image_info),
        }
        return cls(**(values | fields))


Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Fusion = Literal["rrf", "minmax"]


class RetrievalSettings(_Model):
    """Every retrieval knob, with WeKnora's defaults (v0.7 source). Each can be overridden per request."""

    # Search stage
    embedding_top_k: Annotated[int, Field(ge=1, le=500)] = 30
    vector_threshold: Probability = 0.2
    keyword_threshold: Probability = 0.3
    # Candidate pool per retriever = min(max(multiplier x embedding_top_k, min) x number of knowledge bases, max).
    candidate_pool_multiplier: Annotated[int, Field(ge=1, le=50)] = 5
    candidate_pool_min: Annotated[int, Field(ge=1, le=5000)] = 50
    candidate_pool_max: Annotated[int, Field(ge=1, le=5000)] = 500
    # Fusion. min-max scored 0.701 nDCG@10 on msmarco-5k against 0.700 for RRF (BENCHMARKS.md): it is the default.
    fusion: Fusion = "minmax"
    rrf_k: Annotated[int, Field(ge=1, le=1000)] = 60
    rrf_vector_weight: Annotated[float, Field(ge=0.0, le=10.0)] = 0.7
    rrf_keyword_weight: Annotated[float, Field(ge=0.0, le=10.0)] = 0.3
    # Retrievers run concurrently; one slower than this degrades the result instead of failing it.
    search_concurrency: Annotated[int, Field(ge=1, le=64)] = 16
    retriever_timeout_s: Annotated[float, Field(gt=0.0, le=300.0)] = 10.0
    # Query expansion without an LLM, when the first pass returns fewer than embedding_top_k results.
    enable_query_expansion: bool = True
    expansion_max_variants: Annotated[int, Field(ge=0, le=20)] = 5
    expansion_keyword_threshold_factor: Annotated[float, Field(ge=0.0, le=1.0)] = 0.8
    # Zero-result fallback (RAGFlow): one retry with relaxed thresholds.
    fallback_vector_threshold: Probability = 0.17
    fallback_keyword_threshold: Probability = 0.1
    # FAQ knowledge bases
    faq_max_rounds: Annotated[int, Field(ge=1, le=20)] = 5
    faq_priority_enabled: bool = False
    faq_direct_answer_threshold: Probability = 0.9
    faq_score_boost: Annotated[float, Field(ge=1.0, le=10.0)] = 1.2
    # Rerank / top-k
    rerank_top_k: Annotated[int, Field(ge=1, le=200)] = 10
    rerank_threshold: Probability = 0.3
    # If nothing passes the threshold, keep the best candidate when its score reaches this.
    rerank_keep_best_min: Probability = 0.15
    mmr_lambda: Probability = 0.7
    # Merge
    history_min_jaccard: Probability = 0.15
    history_score_factor: Probability = 0.6
    history_max_references: Annotated[int, Field(ge=0, le=20)] = 3
    short_context_min_chars: Annotated[int, Field(ge=0, le=20_000)] = 350
    short_context_max_chars: Annotated[int, Field(ge=0, le=20_000)] = 850
    duplicate_overlap_threshold: Probability = 0.85


class _OverridesBase(_Model):
    def apply(self, base: RetrievalSettings) -> RetrievalSettings:
        """The effective settings: ``base`` with every set override applied (validated again)."""
        update = self.model_dump(exclude_none=True)
        return RetrievalSettings.model_validate({**base.model_dump(), **update}) if update else base


def _optional(info: Any) -> Any:
    # Same type and constraints as the setting, but None ("use the configured value") is allowed and the default.
    annotated = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    return (annotated | None, None)


# Per-request overrides: every field of RetrievalSettings, optional. Derived rather than written out twice, so a new
# knob is overridable the moment it exists.
RetrievalOverrides = create_model(
    "RetrievalOverrides",
    __base__=_OverridesBase,
    __doc__="Per-request overrides of RetrievalSettings: None means use the configured value.",
    **{name: _optional(info) for name, info in RetrievalSettings.model_fields.items()},
)


def check_query(text: str) -> str:
    """Validate a user query; returns it stripped. Raises ``ValueError`` with a message that says what to fix."""
    if not isinstance(text, str):
        raise ValueError("query must be a string")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
        raise ValueError("query is not valid UTF-8; re-encode it as UTF-8")
    stripped = text.strip()
    if not stripped:
        raise ValueError("query is empty; pass the question to search for")
    if len(stripped) > MAX_QUERY_CHARS:
        raise ValueError(f"query has {len(stripped)} characters; the limit is {MAX_QUERY_CHARS}")
    for ch in stripped:
        # Tabs and newlines are ordinary in pasted questions; other control characters are not text.
        if ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\u200d\u200c":
            raise ValueError(f"query contains the control character U+{ord(ch):04X}; remove it")
    return stripped


def check_identifier(value: str) -> str:
    """Ids and names travel to SQLite, DynamoDB and OpenSearch: they must be non-empty, printable UTF-8."""
    if not value or not value.strip():
        raise ValueError("ids must not be empty")
    if len(value) > 256:
        raise ValueError(f"id {value[:32]!r}... is longer than 256 characters")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
        raise ValueError(f"id {value!r} is not valid UTF-8; re-encode it as UTF-8")
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise ValueError(f"id {value!r} contains a control character; remove it")
    return value


class SearchRequest(_Model):
    query: str
    session_id: str | None = None
    knowledge_base_ids: list[str] = Field(default_factory=list)
    knowledge_ids: list[str] = Field(default_factory=list)
    tag_ids: list[str] = Field(default_factory=list)
    overrides: RetrievalOverrides = Field(default_factory=RetrievalOverrides)

    @field_validator("query")
    @classmethod
    def _valid_query(cls, value: str) -> str:
        return check_query(value)

    @field_validator("knowledge_base_ids", "knowledge_ids", "tag_ids")
    @classmethod
    def _valid_ids(cls, values: list[str]) -> list[str]:
        for value in values:
            check_identifier(value)
        return values

    @field_validator("session_id")
    @classmethod
    def _valid_session(cls, value: str | None) -> str | None:
        return None if value is None else check_identifier(value)

    @model_validator(mode="after")
    def _has_target(self) -> SearchRequest:
        if not (self.knowledge_base_ids or self.knowledge_ids):
            raise ValueError("name at least one knowledge base (knowledge_base_ids) or knowledge item (knowledge_ids)")
        return self

    @property
    def scoped(self) -> bool:
        """Scoped to chosen knowledge items or tags: WeKnora forces thresholds to 0 there."""
        return bool(self.knowledge_ids or self.tag_ids)


TraceAction = Literal["run", "skip", "degrade", "fallback", "expand", "error", "offload"]


class TraceEvent(_Model):
    """One line of the pipeline log (WeKnora's pipelineInfo): what a stage did and why."""

    stage: str
    action: TraceAction = "run"
    duration_ms: float = 0.0
    counts: dict[str, int] = Field(default_factory=dict)
    reason: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class ErrorInfo(_Model):
    stage: str
    error: str
    message: str


class PipelineState(_Model):
    """The one JSON document every stage reads and returns."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    pipeline: str = "knowledge_search"
    request: SearchRequest
    # Effective settings (configured defaults + request overrides), resolved once when the state is created so every
    # stage, in any Lambda, sees the same numbers.
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    rewritten_query: str | None = None
    # Query embeddings by embedding model id: computed once per request, reused by later stages.
    query_embeddings: dict[str, list[float]] = Field(default_factory=dict)
    search_results: list[SearchResult] = Field(default_factory=list)
    rerank_results: list[SearchResult] = Field(default_factory=list)
    merge_results: list[SearchResult] = Field(default_factory=list)
    final_results: list[SearchResult] = Field(default_factory=list)
    trace: list[TraceEvent] = Field(default_factory=list)
    # Claim check: result fields moved to the blob store because the state outgrew the transport limit.
    offloaded: dict[str, str] = Field(default_factory=dict)
    error: ErrorInfo | None = None

    @property
    def search_query(self) -> str:
        """The text retrieval uses: the rewritten query when a rewrite stage produced one."""
        return self.rewritten_query or self.request.query

    def with_trace(self, event: TraceEvent) -> PipelineState:
        return self.model_copy(update={"trace": [*self.trace, event]})


class Turn(_Model):
    """One question/answer exchange of a chat session, with the references the answer used."""

    session_id: str
    turn_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    created_at: float
    query: str
    answer: str = ""
    references: list[SearchResult] = Field(default_factory=list)


class KnowledgeBase(_Model):
    id: str
    name: str
    type: KnowledgeBaseType = KnowledgeBaseType.DOCUMENT
    # Embedding model id ("none" for BM25 only). Knowledge bases are searched in groups by this id.
    embedding_model: str = "none"
    created_at: float = 0.0


class Knowledge(_Model):
    """One ingested source (a file, a FAQ set) of a knowledge base."""

    id: str
    knowledge_base_id: str
    title: str = ""
    filename: str = ""
    source_uri: str = ""
    content_hash: str = ""
    status: Literal["processing", "completed", "failed"] = "processing"
    chunk_count: int = 0
    tag_id: str = ""
    error: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    # Blob key of the original file (``sources/...`` from the CLI, the upload's key on AWS); "" when there is none.
    source_key: str = ""
    # The :class:`IngestOptions` it was chunked with ({} = the defaults, as for items ingested before they existed).
    options: dict[str, Any] = Field(default_factory=dict)


# -- ingestion -----------------------------------------------------------------------------------------------------

INGEST_SCHEMA_VERSION: Literal["1"] = "1"
DEFAULT_PARENT_SIZE = 4096
#: Parent-child mode's own defaults (WeKnora's): children of 384 characters overlapping by a fifth of that.
DEFAULT_CHILD_SIZE = 384
CHILD_OVERLAP_DIVISOR = 5

IngestStatus = Literal["pending", "parsed", "chunked", "embedded", "indexed", "unchanged", "duplicate"]
#: Statuses after which the remaining ingest stages have nothing to do.
INGEST_SKIPPED: tuple[str, ...] = ("unchanged", "duplicate")


class IngestOptions(_Model):
    """How a document is chunked. In parent-child mode ``chunk_size`` / ``chunk_overlap`` are the children's (what
    is indexed and searched; when not given, 384 and a fifth of ``chunk_size``) and ``parent_size`` (default: the
    larger of 4096 and ``chunk_size``) the parents'."""

    chunk_size: Annotated[int, Field(strict=True)] = 512
    chunk_overlap: Annotated[int, Field(strict=True)] = 80
    parent_child: bool = False
    parent_size: Annotated[int, Field(strict=True)] | None = None

    @model_validator(mode="after")
    def _valid(self) -> IngestOptions:
        # The chunker's own rules (ChunkerConfig), checked size first, with a plainer word for overlap >= size.
        from .chunking import ChunkerConfig
        from .errors import InputError

        if self.parent_child:
            # Sizes not given take parent-child mode's defaults (a dumped state gives both, so this is stable).
            given = self.model_fields_set
            if "chunk_size" not in given:
                self.chunk_size = DEFAULT_CHILD_SIZE
            if "chunk_overlap" not in given and isinstance(self.chunk_size, int):
                self.chunk_overlap = self.chunk_size // CHILD_OVERLAP_DIVISOR
        try:
            ChunkerConfig(self.chunk_size, 0)
            if self.chunk_overlap >= self.chunk_size:
                raise InputError(
                    f"chunk_overlap {self.chunk_overlap} must be smaller than chunk_size {self.chunk_size}"
                )
            ChunkerConfig(self.chunk_size, self.chunk_overlap)
        except InputError as exc:
            raise ValueError(exc.message) from None
        if self.parent_size is not None and not self.chunk_size <= self.parent_size <= 7500:
            raise ValueError(
                f"parent_size must be between chunk_size ({self.chunk_size}) and 7500, got {self.parent_size}"
            )
        return self

    @property
    def effective_parent_size(self) -> int:
        return self.parent_size if self.parent_size is not None else max(DEFAULT_PARENT_SIZE, self.chunk_size)


class IngestSource(_Model):
    """What to ingest, and as what. The bytes are in the blob store under ``blob_key``; never in the state."""

    knowledge_base_id: str
    knowledge_id: str
    blob_key: str
    filename: str
    # Where the file came from, for display (file:// URI of a local path, s3:// URI of an upload).
    uri: str = ""
    title: str = ""
    # sha256 of the bytes; computed by ``ingest_parse`` when the starter did not know it.
    content_hash: str = ""
    # Size in bytes when known up front (refused before reading when over the limit).
    size: int | None = None
    tag_id: str = ""

    @field_validator("knowledge_base_id", "knowledge_id")
    @classmethod
    def _valid_ids(cls, value: str) -> str:
        return check_identifier(value)

    @field_validator("blob_key", "filename")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class IngestProducts(_Model):
    """Blob keys of what the stages produced (all under ``ingest/<knowledge id>/<content hash>/``)."""

    # Parsed text (``parsed.md``) of a document, or the FAQ entries (``faq.json``) of a FAQ file.
    parsed: str | None = None
    # Data files: the DuckDB summaries (``tables.json``).
    tables: str | None = None
    # One Chunk JSON per line (``chunks.jsonl``).
    chunks: str | None = None
    # float32 matrix, one row per chunk, ``numpy.save`` format (``vectors.npy``); None when the KB is BM25-only.
    vectors: str | None = None
    # The vector space of ``vectors`` (the knowledge base's embedding model id).
    space: str | None = None
    format: str = ""


class IngestState(_Model):
    """The JSON the ingest stages pass along (``ingest_parse -> ingest_chunk -> ingest_embed -> ingest_index``).

    It stays a few kilobytes whatever the file: products travel through the blob store (:class:`IngestProducts`).
    """

    schema_version: Literal["1"] = INGEST_SCHEMA_VERSION
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    pipeline: str = "ingest"
    source: IngestSource
    options: IngestOptions = Field(default_factory=IngestOptions)
    status: IngestStatus = "pending"
    # Why the file was skipped ("duplicate of a.md"); empty otherwise.
    note: str = ""
    # Knowledge id holding the same content, when ``status == "duplicate"``.
    duplicate_of: str | None = None
    # characters, pages, entries, chunks, vectors, batches ... whatever the stages measured.
    counts: dict[str, int] = Field(default_factory=dict)
    products: IngestProducts = Field(default_factory=IngestProducts)
    trace: list[TraceEvent] = Field(default_factory=list)
    error: ErrorInfo | None = None

    @property
    def skipped(self) -> bool:
        return self.status in INGEST_SKIPPED

    def with_trace(self, event: TraceEvent) -> IngestState:
        return self.model_copy(update={"trace": [*self.trace, event]})
