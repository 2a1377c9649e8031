"""``ingest_graph``: the knowledge graph of a newly indexed document (knowledge bases created with ``--graph``).

Runs after ``ingest_index`` and reads the chunks it made searchable from the index (the run's chunk products are
cleaned up by then). The chat model extracts nodes and relations from each chunk (:func:`extract_graph`), and the
document's part of the graph is replaced in one write: the graph always describes the chunks the index holds for
it, and entity search drops any chunk id the index no longer has (a delete between the two writes). A duplicate
removes the item's earlier graph with its chunks; an unchanged file keeps its graph.

Extraction never fails the ingest: a chunk whose call fails or whose answer is unreadable adds nothing (counted and
reported in a ``degrade`` row); a model that cannot generate (the extractive answerer) skips the graph with the
reason in the trace.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragstep.deadline import ContextThreadPool
from ragstep.errors import InputError, RagstepError
from ragstep.models import Chunk, IngestState, TraceEvent
from ragstep.models.graph import GraphExtraction, GraphNode
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.retrieval.graph_extraction import messages, parse_extraction
from ragstep.stages.chat.common import complete_cached
from ragstep.stages.ingest.common import require_kb

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.ports import ChatModel

STAGE = "ingest_graph"
MAX_TOKENS = 1024
#: A document's chunks are read from the index in one call; more than this is not a document but a corpus.
MAX_CHUNKS = 100_000


@dataclass(slots=True)
class ExtractionStats:
    chunks: int = 0
    failed: int = 0
    cache_hits: int = 0
    errors: tuple[str, ...] = ()


def _extract_one(ctx: Context, model: ChatModel, chunk: Chunk, max_chars: int) -> tuple[GraphExtraction, bool]:
    prompt = [ChatMessage(role, content) for role, content in messages(chunk.content[:max_chars])]
    options = ChatOptions(temperature=0.0, max_tokens=MAX_TOKENS, json_object=True)
    response, hit = complete_cached(ctx, model, "graph", prompt, options)
    found = parse_extraction(response.content)
    nodes = [GraphNode(name=n.name, attributes=n.attributes, chunk_ids=[chunk.id]) for n in found.nodes]
    return GraphExtraction(nodes=nodes, relations=found.relations), hit


def extract_graph(chunks: list[Chunk], ctx: Context, model: ChatModel) -> tuple[GraphExtraction, ExtractionStats]:
    """Every chunk's nodes and relations, merged (a node named in several chunks lists each chunk id once).

    Chunks go in batches of ``graph_extraction_batch_size``, each batch with at most
    ``graph_extraction_concurrency`` calls in flight; answers come from the response cache when a chunk's text was
    extracted before (re-ingesting an edited document pays only for the chunks that changed)."""
    settings = ctx.settings
    size, workers, max_chars = (settings.graph_extraction_batch_size, settings.graph_extraction_concurrency,
                                settings.graph_extraction_max_chars)  # fmt: skip
    stats = ExtractionStats(chunks=len(chunks))
    nodes: dict[str, GraphNode] = {}
    relations: dict[tuple[str, str, str], None] = {}
    errors: list[str] = []

    def one(chunk: Chunk) -> tuple[GraphExtraction, bool] | RagstepError:
        try:
            return _extract_one(ctx, model, chunk, max_chars)
        except RagstepError as exc:
            return exc

    with ContextThreadPool(max_workers=min(workers, max(1, len(chunks))), thread_name_prefix="ragstep-graph") as pool:
        for start in range(0, len(chunks), size):
            for outcome in pool.map(one, chunks[start : start + size]):
                if isinstance(outcome, RagstepError):
                    stats.failed += 1
                    if len(errors) < 3:
                        errors.append(outcome.message)
                    continue
                found, hit = outcome
                stats.cache_hits += hit
                for node in found.nodes:
                    known = nodes.get(node.name)
                    if known is None:
                        nodes[node.name] = node
                    else:
                        nodes[node.name] = GraphNode(
                            name=node.name,
                            attributes=list(dict.fromkeys([*known.attributes, *node.attributes])),
                            chunk_ids=list(dict.fromkeys([*known.chunk_ids, *node.chunk_ids])),
                        )
                relations.update(((r.source, r.target, r.type), None) for r in found.relations)
    stats.errors = tuple(errors)
    graph = GraphExtraction.model_validate(
        {"nodes": list(nodes.values()), "relations": [{"source": s, "target": t, "type": k} for s, t, k in relations]}
    )
    return graph, stats


def run(state: IngestState, ctx: Context) -> IngestState:
    src = state.source
    if state.status == "unchanged":
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="unchanged"))
    kb = require_kb(ctx, src.knowledge_base_id)
    if not kb.graph:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="graph_off"))
    if state.status == "duplicate":  # ingest_index removed the item's earlier chunks: its graph goes with them
        removed = ctx.graph.delete_knowledge([src.knowledge_id])
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="duplicate", counts={"removed": removed}))
    if state.status != "indexed":
        raise InputError(f"{STAGE} needs an indexed state (status 'indexed'), got status {state.status!r}")
    model = ctx.chat_model
    if not model.generative:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="model_not_generative"))
    started = time.perf_counter()
    chunks = ctx.index.knowledge_chunks(src.knowledge_id, MAX_CHUNKS)
    graph, stats = extract_graph(chunks, ctx, model)
    ctx.graph.replace_knowledge(kb.id, src.knowledge_id, graph)
    elapsed = time.perf_counter() - started
    counts = {"chunks": stats.chunks, "nodes": len(graph.nodes), "relations": len(graph.relations),
              "failed": stats.failed, "cache_hits": stats.cache_hits}  # fmt: skip
    events = [TraceEvent(stage=STAGE, counts=counts, detail={"model": model.name, "seconds": round(elapsed, 3)})]
    if stats.failed:
        reason = f"{stats.failed} of {stats.chunks} chunks added nothing to the graph: {'; '.join(stats.errors)}"
        events.append(TraceEvent(stage=STAGE, action="degrade", reason=reason))
    return state.advanced("indexed", *events, counts={"graph_nodes": len(graph.nodes)})
