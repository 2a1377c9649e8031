"""The pipeline state: the one JSON document every query stage reads and returns."""

# No ``from __future__ import annotations``: see ragstep.models.base (pydantic reads the fields' types as objects).

import uuid
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from ragstep.models.base import (
    DEFAULT_TENANT,
    SCHEMA_VERSION,
    BuiltOnFirstUse,
    ErrorInfo,
    TraceEvent,
    _Model,
    check_tenant,
    empty_list,
)
from ragstep.models.catalog import KnowledgeBase
from ragstep.models.chat import ChatState
from ragstep.models.search import RetrievalSettings, SearchRequest, SearchResult

if TYPE_CHECKING:
    from typing import TypeAlias

    from ragstep.models.viking import VikingPart

    _Viking: TypeAlias = VikingPart
else:
    # The viking part's model named, not imported: ragstep.models.viking is imported when a value first arrives or a
    # JSON schema is asked for (BuiltOnFirstUse), so the processes of other pipelines never load it.
    _Viking = Annotated[Any, BuiltOnFirstUse("ragstep.models.viking", "VikingPart")]

ResultField = Literal["search_results", "rerank_results", "merge_results", "final_results"]
#: The state's result lists, in pipeline order: the one place their names are spelled (transport offloads them, the
#: join merges them, metrics count them).
RESULT_FIELDS: tuple[ResultField, ...] = ("search_results", "rerank_results", "merge_results", "final_results")


class PipelineState(_Model):
    """The one JSON document every stage reads and returns."""

    # "1": a state the previous version wrote (a deploy with executions in flight); read, and upgraded to "2".
    schema_version: Literal["1", "2"] = SCHEMA_VERSION
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    pipeline: str = "knowledge_search"
    # Whose data this request reads and writes: set by the entry point, never by the request body.
    tenant_id: str = DEFAULT_TENANT
    request: SearchRequest
    # The knowledge bases of ``request.knowledge_base_ids``, read once when the state is created: no stage (and no
    # stage Lambda) reads the catalog again for them.
    knowledge_bases: list[KnowledgeBase] = Field(default_factory=empty_list)
    # Knowledge id -> its knowledge base id, for the ``knowledge_ids`` the request narrows the search to.
    knowledge_scope: dict[str, str] = Field(default_factory=dict)
    # Effective settings (configured defaults + request overrides), resolved once when the state is created so every
    # stage, in any Lambda, sees the same numbers.
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    rewritten_query: str | None = None
    # The question's entities (extract_entities), for the knowledge-graph search beside chunk_search.
    entities: list[str] = Field(default_factory=empty_list)
    # Query embeddings by embedding model id: computed once per request, reused by later stages.
    query_embeddings: dict[str, list[float]] = Field(default_factory=dict)
    search_results: list[SearchResult] = Field(default_factory=empty_list)
    rerank_results: list[SearchResult] = Field(default_factory=empty_list)
    merge_results: list[SearchResult] = Field(default_factory=empty_list)
    final_results: list[SearchResult] = Field(default_factory=empty_list)
    trace: list[TraceEvent] = Field(default_factory=empty_list)
    # The profile that ran (ragstep.models.profiles), the stages it does not run, and the request's latency budget.
    profile: str = "standard"
    skip_stages: list[str] = Field(default_factory=empty_list)
    budget_ms: int | None = None
    # Claim check: result fields moved to the blob store because the state outgrew the transport limit.
    offloaded: dict[str, str] = Field(default_factory=dict)
    error: ErrorInfo | None = None
    # The answer half (chat pipelines); search pipelines leave it at its defaults, made without building ChatState
    # (see its comment).
    chat: Annotated[ChatState, BuiltOnFirstUse()] = Field(default_factory=ChatState.model_construct)
    # OpenViking's retrieval (the viking pipelines' stages, ragstep.stages.viking): None in every other pipeline,
    # whose processes never import its models (BuiltOnFirstUse).
    viking: _Viking | None = None

    @field_validator("schema_version")
    @classmethod
    def _upgrade(cls, value: str) -> str:
        return SCHEMA_VERSION  # every field version 2 added has a default

    @field_validator("tenant_id")
    @classmethod
    def _valid_tenant(cls, value: str) -> str:
        return check_tenant(value)

    @property
    def search_query(self) -> str:
        """The text retrieval uses: the rewritten query when a rewrite stage produced one."""
        return self.rewritten_query or self.request.query

    def with_trace(self, *events: TraceEvent) -> "PipelineState":
        return self.model_copy(update={"trace": [*self.trace, *events]})

    def with_results(
        self,
        field: ResultField,
        results: list[SearchResult],
        *events: TraceEvent,
        query_embeddings: dict[str, list[float]] | None = None,
    ) -> "PipelineState":
        """The state with one result list replaced (checked: it must be a list of results) and ``events`` traced;
        the search stage also records the query embeddings it computed."""
        if field not in RESULT_FIELDS:
            raise ValueError(f"{field!r} is not a result field; one of {', '.join(RESULT_FIELDS)}")
        checked = [r if isinstance(r, SearchResult) else SearchResult.model_validate(r) for r in results]
        update: dict[str, Any] = {field: checked, "trace": [*self.trace, *events]}
        if query_embeddings is not None:
            update["query_embeddings"] = query_embeddings
        return self.model_copy(update=update)

    def with_scope(
        self, knowledge_base_ids: list[str], knowledge_bases: list[KnowledgeBase], knowledge_scope: dict[str, str]
    ) -> "PipelineState":
        """The state with its request's knowledge bases resolved (see :mod:`ragstep.stages.search.scope`)."""
        request = self.request.model_copy(update={"knowledge_base_ids": knowledge_base_ids})
        update = {"request": request, "knowledge_bases": knowledge_bases, "knowledge_scope": knowledge_scope}
        return self.model_copy(update=update)

    def with_chat(self, chat: ChatState, *events: TraceEvent) -> "PipelineState":
        """The state with the chat stages' part replaced (a stage edits a copy of ``state.chat``, attribute by
        attribute, so every field it sets is type-checked) and ``events`` traced."""
        return self.model_copy(update={"chat": chat, "trace": [*self.trace, *events]})

    def with_entities(self, entities: list[str], *events: TraceEvent) -> "PipelineState":
        return self.model_copy(update={"entities": list(entities), "trace": [*self.trace, *events]})

    def with_rewritten_query(self, query: str, *events: TraceEvent) -> "PipelineState":
        return self.model_copy(update={"rewritten_query": query, "trace": [*self.trace, *events]})

    def results(self, field: ResultField) -> list[SearchResult]:
        return list(getattr(self, field))

    def kb(self, knowledge_base_id: str) -> KnowledgeBase | None:
        """The resolved knowledge base of this request with this id (None when the request did not name it)."""
        return next((kb for kb in self.knowledge_bases if kb.id == knowledge_base_id), None)
