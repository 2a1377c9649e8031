"""OpenViking-style retrieval's contract: the document hierarchy, typed queries, matched contexts, layered context.

A knowledge base ingested with layers on is also a tree of nodes: every folder and every document has a URI
(``ragstep://<kb>/guide/install.md``), a parent and children, and two generated layers: L0 (``abstract``, one or two
sentences) and L1 (``overview``, a few hundred tokens). L2 is the document's own text (its chunks).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from ragstep.models.base import DEFAULT_TENANT, TraceEvent, _DeferredModel, check_tenant, empty_list

URI_SCHEME = "ragstep://"
ContextType = Literal["resource", "memory", "skill"]
CONTEXT_TYPES: tuple[ContextType, ...] = ("resource", "memory", "skill")
NodeKind = Literal["directory", "document"]
Layer = Literal["L0", "L1", "L2"]


class HierarchyNode(_DeferredModel):
    """One folder or document of a knowledge base's tree."""

    uri: str
    #: The folder's URI; None for the knowledge base's root.
    parent: str | None = None
    kind: NodeKind
    #: Path relative to the folder that was ingested ("guide/install.md"; "" for the root).
    path: str = ""
    title: str = ""
    #: Document nodes: the catalog's knowledge id (its chunks are the node's L2).
    knowledge_id: str = ""
    children: list[str] = Field(default_factory=empty_list)
    abstract: str = ""
    overview: str = ""
    #: What the layers were generated from (a document's content hash; a folder's children's abstracts, hashed):
    #: a re-ingest regenerates exactly the nodes whose signature changed, bottom-up.
    signature: str = ""
    #: Who wrote the layers: ``extractive`` or the chat model's name.
    layers_by: str = ""

    @property
    def is_leaf(self) -> bool:
        return self.kind == "document"


class Hierarchy(_DeferredModel):
    """A knowledge base's tree, kept as one JSON document in the tenant's blob store."""

    knowledge_base_id: str
    root: str
    nodes: dict[str, HierarchyNode] = Field(default_factory=dict)

    def node(self, uri: str) -> HierarchyNode | None:
        return self.nodes.get(uri)

    def by_knowledge(self) -> dict[str, HierarchyNode]:
        return {n.knowledge_id: n for n in self.nodes.values() if n.knowledge_id}


class TypedQuery(_DeferredModel):
    """One query of a search plan (OpenViking's ``TypedQuery``)."""

    query: Annotated[str, Field(min_length=1, max_length=2000)]
    context_type: ContextType = "resource"
    intent: str = ""
    priority: Annotated[int, Field(ge=1, le=5)] = 3


class QueryPlan(_DeferredModel):
    """What the intent analyser made of a request: 0-5 typed queries (0 = nothing to retrieve), and why."""

    queries: list[TypedQuery] = Field(default_factory=empty_list)
    reasoning: str = ""
    #: ``llm`` (the chat model analysed the intent), ``extractive`` (no model: the question as one resource query)
    #: or ``fallback`` (the model's answer could not be read: the question as one resource query).
    source: Literal["llm", "extractive", "fallback"] = "extractive"


class RelatedContext(_DeferredModel):
    uri: str
    abstract: str = ""


class MatchedContext(_DeferredModel):
    """One node a retrieval found (OpenViking's ``MatchedContext``)."""

    uri: str
    context_type: ContextType = "resource"
    is_leaf: bool
    #: L0 of the node.
    abstract: str = ""
    score: float
    title: str = ""
    knowledge_id: str = ""
    knowledge_base_id: str = ""
    #: The typed query that found it (the best-scoring one when several did).
    query: str = ""
    relations: list[RelatedContext] = Field(default_factory=empty_list)


class LayeredItem(_DeferredModel):
    """One match as the chat model receives it: at the layer the budget allowed."""

    uri: str
    layer: Layer
    text: str
    tokens: int
    score: float


class LayeredContext(_DeferredModel):
    budget: int
    used: int = 0
    items: list[LayeredItem] = Field(default_factory=empty_list)


class FindResult(_DeferredModel):
    """The answer of ``find`` and ``search``: matches grouped by context type, the plan (``search`` only), the trace."""

    query: str
    memories: list[MatchedContext] = Field(default_factory=empty_list)
    resources: list[MatchedContext] = Field(default_factory=empty_list)
    skills: list[MatchedContext] = Field(default_factory=empty_list)
    query_plan: QueryPlan | None = None
    layered: LayeredContext | None = None
    trace: list[TraceEvent] = Field(default_factory=empty_list)

    @property
    def total(self) -> int:
        return len(self.memories) + len(self.resources) + len(self.skills)


class VikingState(_DeferredModel):
    """What the viking stages (intent_analysis -> hierarchical_search -> layered_context) pass along."""

    tenant_id: str = DEFAULT_TENANT
    query: Annotated[str, Field(min_length=1, max_length=8000)]
    #: Knowledge base ids (resolved by the use case).
    knowledge_base_ids: list[str] = Field(default_factory=empty_list)
    session_id: str | None = None
    #: Whose memories memory queries search (``ragstep.app.memories``).
    user: Annotated[str, Field(min_length=1, max_length=64)] = "default"
    #: Analyse the intent (``search``) or run the query as it is (``find``).
    analyse: bool = False
    plan: QueryPlan | None = None
    matches: list[MatchedContext] = Field(default_factory=empty_list)
    #: Per matched document URI: its best passages (L2), best first, as the search found them.
    passages: dict[str, list[str]] = Field(default_factory=dict)
    limit: Annotated[int, Field(ge=1, le=200)] = 10
    budget: Annotated[int, Field(ge=0, le=200_000)] | None = None
    layered: LayeredContext | None = None
    trace: list[TraceEvent] = Field(default_factory=empty_list)

    @field_validator("tenant_id")
    @classmethod
    def _valid_tenant(cls, value: str) -> str:
        return check_tenant(value)

    def with_trace(self, *events: TraceEvent) -> VikingState:
        return self.model_copy(update={"trace": [*self.trace, *events]})


class TypedQueryOutcome(_DeferredModel):
    """What one typed query found (the ``viking_query`` stage, one item of the typed queries' Map): its matches, the
    passages of the documents among them, and its ``hierarchical_search`` trace row."""

    matches: list[MatchedContext] = Field(default_factory=empty_list)
    passages: dict[str, list[str]] = Field(default_factory=dict)
    trace: list[TraceEvent] = Field(default_factory=empty_list)
    #: Claim check: fields moved to the blob store because the state outgrew the transport limit. Kept in the outcome,
    #: not the state, since a Map iteration returns its outcome alone (``ragstep.pipeline.transport``).
    offloaded: dict[str, str] = Field(default_factory=dict)


class VikingPart(_DeferredModel):
    """The viking stages' part of a pipeline state (``viking`` and ``viking_stream``): the plan, what each typed query
    found, the merged matches and their layered context. It travels in the one JSON state between the Lambda
    functions, so every field is plain data."""

    plan: QueryPlan | None = None
    #: Inside the typed queries' Map only: the one query this item runs (``viking_query``) and what it found.
    query: TypedQuery | None = None
    outcome: TypedQueryOutcome | None = None
    #: After the Map, before ``viking_merge``: each item's outcome, in the plan's order.
    outcomes: list[TypedQueryOutcome] = Field(default_factory=empty_list)
    matches: list[MatchedContext] = Field(default_factory=empty_list)
    passages: dict[str, list[str]] = Field(default_factory=dict)
    layered: LayeredContext | None = None
    #: Claim check: fields of the part moved to the blob store because the state outgrew the transport limit.
    offloaded: dict[str, str] = Field(default_factory=dict)
