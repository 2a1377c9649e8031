"""The pipeline state: the one JSON document every query stage reads and returns."""

# No ``from __future__ import annotations``: see ragstep.models.base (pydantic reads the fields' types as objects).

import uuid
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

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
from ragstep.models.wire import TABLE, compact, expand, is_wire

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
    """The one JSON document every stage reads and returns.

    Each result list is None until its stage runs, and a list (empty when it kept nothing) once it has: "the rerank
    did not run" (a profile skipped it) and "the rerank kept nothing" are different states, and the stages after it
    read the first list whose stage ran (:meth:`latest`), never the first non-empty one, so a rejection is not undone.

    Sent between stages in its wire form (``model_dump(mode="json", context=WIRE)``, :mod:`ragstep.models.wire`):
    each result once, ids and scores per list, query embeddings as base64. Both forms validate.
    """

    # "1", "2": a state a previous version wrote (a deploy with executions in flight); read, and upgraded to "3".
    schema_version: Literal["1", "2", "3"] = SCHEMA_VERSION
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
    # None: the stage that fills the list has not run (see the class's docstring).
    search_results: list[SearchResult] | None = None
    rerank_results: list[SearchResult] | None = None
    merge_results: list[SearchResult] | None = None
    final_results: list[SearchResult] | None = None
    trace: list[TraceEvent] = Field(default_factory=empty_list)
    # The profile that ran (ragstep.models.profiles), the stages it does not run, and the request's latency and
    # cost budgets.
    profile: str = "standard"
    skip_stages: list[str] = Field(default_factory=empty_list)
    budget_ms: int | None = None
    cost_budget_usd: float | None = None
    # Claim check: parts of the wire form (its results table, its lists of ids) moved to the blob store because the
    # state outgrew the transport limit (ragstep.pipeline.transport).
    offloaded: dict[str, str] = Field(default_factory=dict)
    error: ErrorInfo | None = None
    # The answer half (chat pipelines); search pipelines leave it at its defaults, made without building ChatState
    # (see its comment).
    chat: Annotated[ChatState, BuiltOnFirstUse()] = Field(default_factory=ChatState.model_construct)
    # OpenViking's retrieval (the viking pipelines' stages, ragstep.stages.viking): None in every other pipeline,
    # whose processes never import its models (BuiltOnFirstUse).
    viking: _Viking | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_wire(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        offloaded = data.get("offloaded")
        if isinstance(offloaded, dict) and TABLE in offloaded and TABLE not in data:
            raise ValueError(
                "the state's results table is offloaded to the blob store: decode the state with "
                "ragstep.pipeline.transport, which reads it back"
            )
        if data.get("schema_version") in ("1", "2"):
            # Those versions wrote [] for a stage that had not run as for one that kept nothing, and read [] as "not
            # run": an execution started by them goes on as they would have run it.
            data = {**data, **{f: None for f in RESULT_FIELDS if data.get(f) == []}}
        return expand(data)

    # Not annotated: pydantic would describe the state's serialised form by the return type instead of by its fields
    # (the wire form is described in ragstep.models.wire).
    @model_serializer(mode="wrap")
    def _to_wire(self, handler, info):
        data: dict[str, Any] = handler(self)
        return compact(data) if info.mode_is_json() and is_wire(info.context) else data

    @field_validator("schema_version")
    @classmethod
    def _upgrade(cls, value: str) -> str:
        return SCHEMA_VERSION  # every field versions 2 and 3 added has a default (and see _from_wire)

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
        """The list ``field`` holds (empty when its stage kept nothing or has not run)."""
        return list(getattr(self, field) or ())

    def ran(self, field: ResultField) -> bool:
        """Whether the stage that fills ``field`` has run (its list may still be empty: it kept nothing)."""
        return getattr(self, field) is not None

    def latest(self, *fields: ResultField) -> tuple[ResultField | None, list[SearchResult]]:
        """The first of ``fields`` whose stage ran, and its list (``(None, [])`` when none ran): what a later stage
        reads. A stage that ran and kept nothing is the answer, not a reason to look further."""
        for field in fields:
            if self.ran(field):
                return field, self.results(field)
        return None, []

    def kb(self, knowledge_base_id: str) -> KnowledgeBase | None:
        """The resolved knowledge base of this request with this id (None when the request did not name it)."""
        return next((kb for kb in self.knowledge_bases if kb.id == knowledge_base_id), None)
