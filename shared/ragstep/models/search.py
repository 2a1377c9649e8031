"""The search half of the contract: chunks, results, retrieval settings, the request and the pipeline state."""

# No ``from __future__ import annotations``: see ragstep.models.base (pydantic reads the fields' types as objects).

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    create_model,
    field_validator,
    model_serializer,
    model_validator,
)

from ragstep.models.base import (
    _Model,
    check_identifier,
    check_query,
    empty_list,
)


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
    #: A hierarchy node's generated layers (kb create --layers): L0 and L1 of a document or a folder.
    ABSTRACT = "abstract"
    OVERVIEW = "overview"


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
    sub_chunk_ids: list[str] = Field(default_factory=empty_list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    image_info: list[ImageInfo] = Field(default_factory=empty_list)


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
    sub_chunk_ids: list[str] = Field(default_factory=empty_list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    image_info: list[ImageInfo] = Field(default_factory=empty_list)

    @classmethod
    def from_chunk(cls, chunk: Chunk, **fields: Any) -> "SearchResult":
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

    # Typed edits for the stages: each names what changes, so a misspelt field is a type error, not a silent no-op.

    def rescored(
        self,
        score: float,
        *,
        match_type: MatchType | None = None,
        metadata: dict[str, Any] | None = None,
        id: str | None = None,
    ) -> "SearchResult":
        """The result with a new score (and, optionally, how it matched, its metadata or the id it answers for)."""
        update: dict[str, Any] = {"score": score}
        if match_type is not None:
            update["match_type"] = match_type
        if metadata is not None:
            update["metadata"] = metadata
        if id is not None:
            update["id"] = id
        return self.model_copy(update=update)

    def with_content(self, content: str) -> "SearchResult":
        return self.model_copy(update={"content": content})

    def with_metadata(self, metadata: dict[str, Any]) -> "SearchResult":
        return self.model_copy(update={"metadata": metadata})

    def spanning(
        self,
        *,
        content: str,
        start_at: int,
        end_at: int,
        chunk_index: int,
        sub_chunk_ids: list[str],
        metadata: dict[str, Any],
        image_info: list[ImageInfo],
    ) -> "SearchResult":
        """The result grown over neighbouring text of its document (the merge stage's stitching)."""
        update = {
            "content": content,
            "start_at": start_at,
            "end_at": end_at,
            "chunk_index": chunk_index,
            "sub_chunk_ids": sub_chunk_ids,
            "metadata": metadata,
            "image_info": image_info,
        }
        return self.model_copy(update=update)


Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Fusion = Literal["absolute", "adaptive", "minmax", "dbsf", "rrf"]


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
    # Fusion: absolute (each hit's cosine and BM25 read as how unlikely they would be for a chunk unrelated to the
    # query, in nats, under this corpus's statistics -- the query's cosine mean and spread over the searched chunks,
    # each term's idf -- and added with no weights; issue 32, BENCHMARKS.md "Retrieval quality on every set");
    # adaptive (min-max, weights scaled by how much of each list's head the other confirms); minmax, dbsf, rrf: fixed.
    fusion: Fusion = "absolute"
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
    # MMR's weight on relevance against redundancy with what is already picked (1: relevance alone). 1 by default
    # (issue 32): the merge stage folds duplicate passages already, and at 0.7 (WeKnora's) MMR swapped relevant
    # passages that answer alike for less relevant ones: msmarco-5k e5, `ragstep search --top-k 10` 0.682 against
    # the search stage's 0.703 nDCG@10 (BENCHMARKS.md, "Retrieval quality on every set"). Lower it for variety.
    mmr_lambda: Probability = 1.0
    # Merge
    history_min_jaccard: Probability = 0.15
    history_score_factor: Probability = 0.6
    history_max_references: Annotated[int, Field(ge=0, le=20)] = 3
    short_context_min_chars: Annotated[int, Field(ge=0, le=20_000)] = 350
    short_context_max_chars: Annotated[int, Field(ge=0, le=20_000)] = 850
    duplicate_overlap_threshold: Probability = 0.85
    # Web search beside the knowledge bases (inside chunk_search): off unless a request (or RAGSTEP_WEB_SEARCH)
    # turns it on; how many web references it may add; its compression thresholds (WeKnora: 0.5 and 0.5).
    web_search: bool = False
    web_search_max_results: Annotated[int, Field(ge=1, le=50)] = 5
    web_search_vector_threshold: Probability = 0.5
    web_search_keyword_threshold: Probability = 0.5


class _OverridesBase(_Model):
    # Never used itself, so never built (RetrievalOverrides, built when defined, turns this off again).
    model_config = ConfigDict(defer_build=True)

    # Only the overrides a request set go on the wire: ~50 nulls would cost every state ~1 KiB between stages.
    @model_serializer(mode="wrap")
    def _set_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}

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
    __cls_kwargs__={"defer_build": False},
    __doc__="Per-request overrides of RetrievalSettings: None means use the configured value.",
    **{name: _optional(info) for name, info in RetrievalSettings.model_fields.items()},
)


class SearchRequest(_Model):
    query: str
    session_id: str | None = None
    knowledge_base_ids: list[str] = Field(default_factory=empty_list)
    knowledge_ids: list[str] = Field(default_factory=empty_list)
    tag_ids: list[str] = Field(default_factory=empty_list)
    overrides: RetrievalOverrides = Field(default_factory=RetrievalOverrides)
    #: viking_stream: whose memories memory queries search (ragstep.app.memories); None = "default".
    user: str | None = None
    #: A profile (quick, standard, deep, or one of RAGSTEP_PROFILES), a latency budget and a cost budget in USD
    #: (ragstep.models.profiles).
    profile: str | None = None
    budget_ms: Annotated[int, Field(ge=10, le=600_000)] | None = None
    cost_budget_usd: Annotated[float, Field(gt=0, le=1000)] | None = None

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
    def _has_target(self) -> "SearchRequest":
        # RetrievalOverrides is derived at runtime, so its fields are read by name.
        if not (self.knowledge_base_ids or self.knowledge_ids or getattr(self.overrides, "web_search", None)):
            raise ValueError(
                "name at least one knowledge base (knowledge_base_ids) or knowledge item (knowledge_ids), "
                "or turn web search on (overrides.web_search)"
            )
        return self

    @property
    def scoped(self) -> bool:
        """Scoped to chosen knowledge items or tags: WeKnora forces thresholds to 0 there."""
        return bool(self.knowledge_ids or self.tag_ids)
