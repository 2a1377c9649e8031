"""``filter_top_k``: the final cut to ``rerank_top_k`` results.

Takes the most refined list available (merge results, else rerank results, else search results: WeKnora's fallback
chain) and orders it by score with a full tie-break, so equal scores always come out in the same order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.models import PipelineState, ResultField, SearchResult, TraceEvent

if TYPE_CHECKING:
    from ragstep.context import Context


def sort_key(r: SearchResult) -> tuple[float, str, str, int, str]:
    return (-r.score, r.knowledge_id, str(r.chunk_type), r.chunk_index, r.id)


def run(state: PipelineState, ctx: Context) -> PipelineState:
    sources: tuple[ResultField, ...] = ("merge_results", "rerank_results", "search_results")
    source, candidates = next(((s, state.results(s)) for s in sources if state.results(s)), ("none", []))
    top = sorted(candidates, key=sort_key)[: state.retrieval.rerank_top_k]
    event = TraceEvent(
        stage="filter_top_k",
        counts={"input": len(candidates), "kept": len(top)},
        detail={"source": source, "top_k": state.retrieval.rerank_top_k},
    )
    return state.with_results("final_results", top, event)
