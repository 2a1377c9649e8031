"""``entity_search``: the knowledge-graph branch beside ``chunk_search``.

The question's entities (``extract_entities``) are looked up in the graphs of the request's knowledge bases that
have one: by normalised name first, then fuzzily for those not found (:mod:`ragstep.retrieval.graph_names`). The
chunks of the matched nodes come first, then those of their 1-hop neighbours (either direction); each chunk once,
kept only when it is still indexed, enabled and inside the request's scope (knowledge bases, chosen documents,
tags), and content duplicates folded. Results have ``match_type`` graph and say in ``metadata.graph`` which entity
led to them and how.

Scores: a direct match 1.0 (a fuzzy one its similarity), a neighbour's chunk half of that: the rerank stage ranks
them with everything else. Skips (trace ``skip`` rows): ``graph_off`` (no knowledge base with a graph),
``no_entities``; a failing store degrades (``degrade`` row) instead of failing the request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import RagstepError
from ragstep.models import Chunk, MatchType, PipelineState, SearchResult, TraceEvent
from ragstep.stages.search.chunk_search import content_key

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.ports import GraphStore

STAGE = "entity_search"
NEIGHBOUR_FACTOR = 0.5


def _matches(store: GraphStore, kb_ids: list[str], entities: list[str]) -> dict[str, tuple[str, str, float]]:
    """Node key -> (the entity that found it, how: exact | fuzzy, score)."""
    import difflib

    from ragstep.retrieval.graph_names import fuzzy_matches, normalise_name

    found: dict[str, tuple[str, str, float]] = {}
    keys = {normalise_name(e): e for e in entities if normalise_name(e)}
    for node in store.lookup(kb_ids, list(keys)):
        key = normalise_name(node.name)
        found[key] = (keys.get(key, node.name), "exact", 1.0)
    missing = [k for k in keys if k not in found]
    if missing:
        names = store.names(kb_ids)
        for key in missing:
            for candidate in fuzzy_matches(key, names)[:3]:
                ratio = difflib.SequenceMatcher(None, key, candidate, autojunk=False).ratio()
                found.setdefault(candidate, (keys[key], "fuzzy", round(max(ratio, 0.5), 4)))
    return found


def _in_scope(chunk: Chunk, state: PipelineState, kb_ids: set[str]) -> bool:
    if not chunk.enabled or chunk.knowledge_base_id not in kb_ids:
        return False
    if state.knowledge_scope and chunk.knowledge_id not in state.knowledge_scope:
        return False
    return not state.request.tag_ids or chunk.tag_id in state.request.tag_ids


def run(state: PipelineState, ctx: Context) -> PipelineState:
    kb_ids = [kb.id for kb in state.knowledge_bases if kb.graph]
    if not kb_ids:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="graph_off"))
    if not state.entities:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="no_entities"))
    # Only now: requests without a graph skip above (a chat function preloads this stage at start).
    from ragstep.retrieval.graph_names import normalise_name

    limit = ctx.settings.graph_max_chunks
    try:
        store = ctx.graph
        matched = _matches(store, kb_ids, state.entities)
        direct = store.lookup(kb_ids, list(matched))
        # A hub entity can have hundreds of neighbours: a few more than the results can hold are enough.
        neighbour_keys = store.neighbours(kb_ids, list(matched))[: 2 * limit] if matched else []
        neighbours = store.lookup(kb_ids, neighbour_keys)
    except RagstepError as exc:
        event = TraceEvent(stage=STAGE, action="degrade", reason="graph_unavailable", detail={"error": exc.message})
        return state.with_trace(event)

    # Chunk id -> (score, what led to it), direct matches before neighbours, each chunk at its first (best) way.
    wanted: dict[str, tuple[float, dict[str, object]]] = {}
    for node in direct:
        entity, how, score = matched[normalise_name(node.name)]
        for cid in node.chunk_ids:
            direct_info: dict[str, object] = {"entity": entity, "node": node.name, "via": how}
            wanted.setdefault(cid, (score, direct_info))
    best_direct = max((score for _, _, score in matched.values()), default=1.0)
    for node in neighbours:
        for cid in node.chunk_ids:
            wanted.setdefault(cid, (best_direct * NEIGHBOUR_FACTOR, {"node": node.name, "via": "neighbour"}))

    # Over-fetch a little (out-of-scope, disabled and duplicate chunks are dropped below), never a hub's every chunk.
    chunks = ctx.index.fetch(list(wanted)[: 3 * limit]) if wanted else {}
    allowed = set(kb_ids)
    seen: set[str] = set()
    results: list[SearchResult] = []
    for cid, (score, info) in wanted.items():
        chunk = chunks.get(cid)
        if chunk is None or not _in_scope(chunk, state, allowed):  # deleted since, or outside the request's scope
            continue
        key = content_key(chunk.content)
        if key in seen:
            continue
        seen.add(key)
        metadata = {**chunk.metadata, "graph": info}
        results.append(SearchResult.from_chunk(chunk, score=score, match_type=MatchType.GRAPH, metadata=metadata))
        if len(results) >= limit:
            break
    results.sort(key=lambda r: -r.score)
    event = TraceEvent(
        stage=STAGE,
        counts={
            "entities": len(state.entities),
            "matched_nodes": len(direct),
            "neighbours": len(neighbours),
            "results": len(results),
        },
        reason=None if matched else "no_matching_nodes",
        detail={"matched": {key: how for key, (_, how, _) in matched.items()}},
    )
    return state.with_results("search_results", [*state.results("search_results"), *results], event)
