"""What the viking stages share: the viking stages' own state rebuilt from the pipeline state, and the laid-out
matches as results.

Each laid-out match becomes one result of ``final_results`` (its layer in ``metadata.layer``, the chunk type
``abstract`` / ``overview`` / ``text`` for L0 / L1 / L2), which ``into_chat_message`` then cites as it cites any
passage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.models import ChunkType, MatchType, PipelineState, SearchResult
from ragstep.models.viking import LayeredItem, MatchedContext, VikingPart, VikingState
from ragstep.stages.viking.tree import check_user, layer_knowledge_id

if TYPE_CHECKING:
    from ragstep.context import Context

_CHUNK_TYPES = {"L0": ChunkType.ABSTRACT, "L1": ChunkType.OVERVIEW, "L2": ChunkType.TEXT}


def as_result(item: LayeredItem, match: MatchedContext) -> SearchResult:
    # A folder has no document: its layer chunks' own knowledge id stands in, so citations still have an id.
    knowledge_id = match.knowledge_id or layer_knowledge_id(match.knowledge_base_id, match.uri)
    return SearchResult(
        id=f"{knowledge_id}-{item.layer}",
        content=item.text,
        knowledge_id=knowledge_id,
        knowledge_base_id=match.knowledge_base_id,
        knowledge_title=match.title,
        knowledge_filename=match.uri,
        score=item.score,
        match_type=MatchType.HYBRID,
        chunk_type=_CHUNK_TYPES[item.layer],
        metadata={"viking_uri": match.uri, "layer": item.layer, "is_leaf": match.is_leaf},
    )


def viking_state(state: PipelineState, ctx: Context, part: VikingPart | None = None) -> VikingState:
    """The viking stages' own state for the pipeline state's request, carrying what ``part`` holds so far (the split
    stages rebuild it in each of them: everything else in it follows from the request and the settings)."""
    part = part or VikingPart()
    return VikingState(
        tenant_id=state.tenant_id,
        query=state.search_query,
        knowledge_base_ids=[kb.id for kb in state.knowledge_bases],
        session_id=state.request.session_id,
        user=check_user(state.request.user),
        analyse=True,
        limit=state.retrieval.rerank_top_k,
        budget=ctx.settings.viking_context_budget,
        plan=part.plan,
        matches=part.matches,
        passages=part.passages,
        layered=part.layered,
    )


def laid_out(viking: VikingState) -> list[SearchResult]:
    """Each laid-out match as one result, in the layered context's order."""
    matches = {m.uri: m for m in viking.matches}
    items = viking.layered.items if viking.layered is not None else []
    return [as_result(item, matches[item.uri]) for item in items if item.uri in matches]
