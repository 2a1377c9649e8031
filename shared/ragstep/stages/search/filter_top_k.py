"""``filter_top_k``: the final cut to ``rerank_top_k`` results.

Takes the list of the latest stage that ran (merge results, else rerank results, else search results: WeKnora's
chain for stages a pipeline or profile leaves out) and orders it by score with a full tie-break, so equal scores
always come out in the same order. A stage that ran and kept nothing is the answer: its empty list is not passed
over for an earlier one (the rerank's rejection stands, see :mod:`ragstep.stages.search.chunk_rerank`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.models import PipelineState, SearchResult, TraceEvent

if TYPE_CHECKING:
    from ragstep.context import Context


def sort_key(r: SearchResult) -> tuple[float, str, str, int, str]:
    return (-r.score, r.knowledge_id, str(r.chunk_type), r.chunk_index, r.id)


def run(state: PipelineState, ctx: Context) -> PipelineState:
    source, candidates = state.latest("merge_results", "rerank_results", "search_results")
    top = sorted(candidates, key=sort_key)[: state.retrieval.rerank_top_k]
    event = TraceEvent(
        stage="filter_top_k",
        counts={"input": len(candidates), "kept": len(top)},
        detail={"source": source or "none", "top_k": state.retrieval.rerank_top_k},
    )
    return state.with_results("final_results", top, event)
