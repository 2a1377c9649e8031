"""Pipelines, declared once.

The in-process executor runs these declarations directly, and the Step Functions definitions in ``statemachine/`` are
generated from them (``ragstep.pipeline.asl``), so the laptop and AWS always run the same stages in the same order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

# Stage name -> "module:function". Imported on first use so that a Lambda function loads only its own stage.
STAGES: dict[str, str] = {
    "chunk_search": "ragstep.stages.search.chunk_search:run",
    "chunk_rerank": "ragstep.stages.search.chunk_rerank:run",
    "chunk_merge": "ragstep.stages.search.chunk_merge:run",
    "filter_top_k": "ragstep.stages.search.filter_top_k:run",
    "ingest_parse": "ragstep.stages.ingest.parse:run",
    "ingest_chunk": "ragstep.stages.ingest.chunk:run",
    "ingest_embed": "ragstep.stages.ingest.embed:run",
    "ingest_index": "ragstep.stages.ingest.index:run",
    "ingest_embed_batch": "ragstep.stages.ingest.embed_batch:run",
    "ingest_embed_merge": "ragstep.stages.ingest.embed_merge:run",
    "ingest_graph": "ragstep.stages.ingest.graph:run",
    "load_history": "ragstep.stages.chat.load_history:run",
    "rewrite_query": "ragstep.stages.chat.rewrite_query:run",
    "extract_entities": "ragstep.stages.chat.extract_entities:run",
    "entity_search": "ragstep.stages.search.entity_search:run",
    "into_chat_message": "ragstep.stages.chat.into_chat_message:run",
    "chat_completion": "ragstep.stages.chat.chat_completion:run",
    "chat_completion_stream": "ragstep.stages.chat.chat_completion_stream:run",
    "data_analysis": "ragstep.stages.analysis.data_analysis:run",
    "viking_intent": "ragstep.stages.viking.viking_intent:run",
    "viking_query": "ragstep.stages.viking.viking_query:run",
    "viking_merge": "ragstep.stages.viking.viking_merge:run",
    "viking_layered": "ragstep.stages.viking.viking_layered:run",
}
#: Registered stages no pipeline declaration runs, each with why it is registered (none today: a stage is either run
#: by a pipeline or removed; tests/test_pipeline.py checks both directions).
STANDALONE_STAGES: dict[str, str] = {}
#: Stages that stream: generators of :class:`~ragstep.models.StreamEvent` that return the final state. Declared, so
#: a Lambda handler knows to drain one without looking at the function.
STREAM_STAGES: frozenset[str] = frozenset({"chat_completion_stream"})


@dataclass(frozen=True, slots=True)
class Stage:
    name: str


@dataclass(frozen=True, slots=True)
class Parallel:
    """Branches that run concurrently on the same input state; their additions are joined afterwards."""

    name: str
    branches: tuple[tuple[Step, ...], ...]


@dataclass(frozen=True, slots=True)
class Map:
    """The same steps once per item of a list in the state, concurrently, then a ``merge`` stage.

    Paths are dotted attribute names in the state. Each item runs ``steps`` on the state with the item at ``item``;
    the Map keeps only the value at ``result`` of each item's final state, and puts them, in the items' order, at
    ``results`` of the state it started from, which ``merge`` then reads (on Step Functions: a ``Map`` state whose
    iterations return ``result`` alone, then the merge's task; see ``ragstep.pipeline.asl``). ``max_items``: the
    most items the list may hold (what the payload quota is shared by).

    ``result`` and ``results`` empty: the Map keeps nothing of its items (on Step Functions ``ResultPath: null``):
    their steps write elsewhere (the index), the merge reads that, and the quota is not shared. ``concurrency_path``:
    the items that run at once are read from the state there (``MaxConcurrencyPath``), not ``max_concurrency``.
    """

    name: str
    items: str
    item: str
    steps: tuple[Stage, ...]
    merge: str
    result: str = ""
    results: str = ""
    max_items: int = 5
    max_concurrency: int = 5
    concurrency_path: str = ""

    def __post_init__(self) -> None:
        if not self.steps or not all(type(s) is Stage for s in self.steps):
            raise ValueError(f"map {self.name!r}: its steps are one or more stages")
        if bool(self.result) != bool(self.results):
            raise ValueError(f"map {self.name!r}: result and results are both set or both empty")


@dataclass(frozen=True, slots=True)
class Stream:
    """The last step of a pipeline that answers as it goes (SSE): its stage yields events, then returns the state.

    Executors that can stream (the in-process one behind the HTTP API and the CLI) relay the events as they come;
    those that cannot (Step Functions, ``--json``) drain them and keep only the final state, which holds everything
    the events said.
    """

    name: str

    def __post_init__(self) -> None:
        if self.name not in STREAM_STAGES:
            raise ValueError(f"{self.name!r} is not a streaming stage; those are {sorted(STREAM_STAGES)}")


Step = Stage | Parallel | Map | Stream


@dataclass(frozen=True, slots=True)
class Pipeline:
    name: str
    steps: tuple[Step, ...]
    # EXPRESS for request/response (synchronous, short), STANDARD for long-running ingestion.
    kind: Literal["EXPRESS", "STANDARD"] = "EXPRESS"
    # The state model its stages read and return: a class name in ragstep.models (see :func:`state_model`).
    state: Literal["PipelineState", "IngestState"] = "PipelineState"
    # False: runs in-process only (no state machine, template resource or stage functions are generated for it).
    deployed: bool = True

    def __post_init__(self) -> None:
        streams = [i for i, step in enumerate(self.steps) if isinstance(step, Stream)]
        if streams and streams != [len(self.steps) - 1]:
            raise ValueError(f"pipeline {self.name!r}: a Stream step can only be the last step")

    def stage_names(self) -> list[str]:
        names: list[str] = []

        def walk(steps: tuple[Step, ...]) -> None:
            for step in steps:
                if isinstance(step, Parallel):
                    for branch in step.branches:
                        walk(branch)
                elif isinstance(step, Map):
                    walk(step.steps)
                    names.append(step.merge)
                else:
                    names.append(step.name)

        walk(self.steps)
        return names


KNOWLEDGE_SEARCH = Pipeline(
    "knowledge_search",
    (Stage("chunk_search"), Stage("chunk_rerank"), Stage("chunk_merge"), Stage("filter_top_k")),
)

#: The embedding phase of progressive indexing on the ingest state machine (ragstep.stages.ingest.embed_batch): the
#: chunks ``ingest_index`` indexed without vectors, in the batches it listed, then the document marked complete. At
#: most 1,000 iterations (about 7,000 of a STANDARD execution's 25,000 history events); nothing is kept of them: each
#: writes its vectors to the index, which the merge then asks.
EMBED_BATCHES = Map(
    "embed_batches",
    items="embed_batches",
    item="embed_batch",
    steps=(Stage("ingest_embed_batch"),),
    merge="ingest_embed_merge",
    max_items=1000,
    concurrency_path="embed_concurrency",
)
# One file: S3 upload (or the CLI) -> parse -> chunk -> embed -> index. Products pass through the blob store. A state
# with ``vectors_later`` (the upload's on AWS) embeds after the index instead: ingest_embed passes it on, ingest_index
# makes it keyword-searchable and lists the batches, embed_batches adds the vectors. Otherwise that Map has no items.
INGEST = Pipeline(
    "ingest",
    (
        Stage("ingest_parse"),
        Stage("ingest_chunk"),
        Stage("ingest_embed"),
        Stage("ingest_index"),
        Stage("ingest_graph"),
        EMBED_BATCHES,
    ),
    kind="STANDARD",
    state="IngestState",
)
# Progressive indexing (ragstep.app.ingest_vectors): the file keyword-searchable as soon as it is chunked; its vectors
# are added by a second phase (the CLI's and the server's). In-process only: the ingest state machine has its own.
INGEST_KEYWORDS = Pipeline(
    "ingest_keywords",
    (Stage("ingest_parse"), Stage("ingest_chunk"), Stage("ingest_index"), Stage("ingest_graph")),
    kind="STANDARD",
    state="IngestState",
    deployed=False,
)

# The answer half (WeKnora's chat pipelines). The answer filter (stream_filter) runs inside the completion stages:
# a pipeline streams through one final Stream step (see ragstep.stages.chat.stream_filter). The non-streaming ones
# (rag, chat) also run on Step Functions as EXPRESS state machines; a state machine cannot relay a token stream, so
# the streaming ones run in-process only (in the API function on AWS).
CHAT = Pipeline("chat", (Stage("chat_completion"),))
CHAT_STREAM = Pipeline("chat_stream", (Stream("chat_completion_stream"),), deployed=False)
CHAT_HISTORY_STREAM = Pipeline(
    "chat_history_stream", (Stage("load_history"), Stream("chat_completion_stream")), deployed=False
)
RAG = Pipeline(
    "rag",
    (
        # rag_stream's two parallel steps (Parallel states on Step Functions). Without a session to load, the rewrite
        # resolves the rounds the state carries (a stateless caller's); with none it skips.
        Parallel("understand_query", ((Stage("rewrite_query"),), (Stage("extract_entities"),))),
        Parallel("search", ((Stage("chunk_search"),), (Stage("entity_search"),))),
        Stage("chunk_rerank"),
        Stage("chunk_merge"),
        Stage("data_analysis"),
        Stage("into_chat_message"),
        Stage("chat_completion"),
    ),
)
RAG_STREAM = Pipeline(
    "rag_stream",
    (
        Stage("load_history"),
        # WeKnora's rag_stream: the question's entities are extracted while it is rewritten, and the knowledge graph
        # is searched while the knowledge bases (and the web) are.
        Parallel("understand_query", ((Stage("rewrite_query"),), (Stage("extract_entities"),))),
        Parallel("search", ((Stage("chunk_search"),), (Stage("entity_search"),))),
        Stage("chunk_rerank"),
        Stage("chunk_merge"),
        Stage("filter_top_k"),
        Stage("data_analysis"),
        Stage("into_chat_message"),
        Stream("chat_completion_stream"),
    ),
    deployed=False,
)
#: OpenViking's retrieval before the answer (ragstep.stages.viking): the question as 0-5 typed queries, each searched
#: through the folder tree concurrently (a Map state on Step Functions, the branch threads in-process), the matches
#: merged, then laid out as layered context within the budget.
VIKING_RETRIEVAL: tuple[Step, ...] = (
    Stage("viking_intent"),
    Map(
        "typed_queries",
        items="viking.plan.queries",
        item="viking.query",
        result="viking.outcome",
        results="viking.outcomes",
        steps=(Stage("viking_query"),),
        merge="viking_merge",
    ),
    Stage("viking_layered"),
)
#: The answer on it, not streamed: an EXPRESS state machine like rag's.
VIKING = Pipeline("viking", (*VIKING_RETRIEVAL, Stage("into_chat_message"), Stage("chat_completion")))
#: Streamed: in-process only (in the chat function on AWS), as rag_stream.
VIKING_STREAM = Pipeline(
    "viking_stream",
    (Stage("load_history"), *VIKING_RETRIEVAL, Stage("into_chat_message"), Stream("chat_completion_stream")),
    deployed=False,
)
#: The pipelines a chat request may name.
CHAT_PIPELINES: tuple[str, ...] = (
    "rag_stream",
    "rag",
    "chat_stream",
    "chat_history_stream",
    "chat",
    "viking_stream",
    "viking",
)

PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        KNOWLEDGE_SEARCH,
        INGEST,
        INGEST_KEYWORDS,
        CHAT,
        CHAT_STREAM,
        CHAT_HISTORY_STREAM,
        RAG,
        RAG_STREAM,
        VIKING_STREAM,
        VIKING,
    )
}
#: What Step Functions runs: the state machines, template resources and stage functions are generated for these.
DEPLOYED_PIPELINES: dict[str, Pipeline] = {name: p for name, p in PIPELINES.items() if p.deployed}


def payload_limit(pipeline: str, limit: int) -> int:
    """The bytes one state of ``pipeline`` may take as a Step Functions payload of at most ``limit``.

    A Parallel state's output is one array: its input (the first branch passes it on to the join) and every branch's
    state, together under the one quota. So in a pipeline with Parallel steps every state travels in an equal share
    of it, for the widest step (the brackets and commas of the array set aside); states entering and leaving a
    branch then always fit, and the claim check offloads the rest (``ragstep.pipeline.transport``). A Map state's
    output is its input with each item's result in it: up to ``max_items`` results, each cut from a state of one
    share, so it counts as that many branches; one that keeps nothing of its items counts as none. Other pipelines,
    and names that are no pipeline, keep the whole ``limit``.
    """
    declared = PIPELINES.get(pipeline)
    if declared is None:
        return limit
    widths = [
        len(step.branches) if isinstance(step, Parallel) else step.max_items
        for step in declared.steps
        if isinstance(step, Parallel) or (isinstance(step, Map) and step.results)
    ]
    items = 1 + max(widths, default=0)
    return limit if items == 1 else (limit - 2 * items) // items


def get_pipeline(name: str) -> Pipeline:
    try:
        return PIPELINES[name]
    except KeyError:
        from ragstep.errors import InputError

        raise InputError(f"unknown pipeline {name!r}; known: {', '.join(sorted(PIPELINES))}") from None


def state_model(name: str) -> type[Any]:
    """The state class of a pipeline, or of the pipeline a stage belongs to (what a stage's handler decodes)."""
    from ragstep import models

    for pipeline in PIPELINES.values():
        if name == pipeline.name or name in pipeline.stage_names():
            return getattr(models, pipeline.state)
    from ragstep.errors import InputError

    raise InputError(f"unknown pipeline or stage {name!r}; known: {', '.join(sorted([*PIPELINES, *STAGES]))}")


def load_stage(name: str) -> Callable[..., Any]:
    """The stage function registered under ``name`` (imported lazily)."""
    target = STAGES.get(name)
    if target is None:
        from ragstep.errors import InputError

        raise InputError(f"unknown stage {name!r}; known: {', '.join(sorted(STAGES))}")
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)
