"""``viking_merge``: the typed queries' outcomes (the Map's items, in the plan's order) as one ranking.

Each node once at the best score any query gave it, grouped afterwards by its context type (memories, resources,
skills: :func:`ragstep.app.viking.result_of`); the queries' trace rows in the plan's order. The same merge
:mod:`~ragstep.stages.viking.hierarchical_search` does in-process, so both give the same matches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError
from ragstep.models import PipelineState, TraceEvent
from ragstep.stages.viking.hierarchical_search import NO_QUERIES, merge

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "viking_merge"


def run(state: PipelineState, ctx: Context) -> PipelineState:
    part = state.viking
    if part is None or part.plan is None:
        raise InputError("viking_merge needs the plan viking_intent writes (viking.plan) and the Map's outcomes")
    planned = len(part.plan.queries)
    if len(part.outcomes) != planned:
        raise InputError(f"viking_merge got {len(part.outcomes)} outcomes for a plan of {planned} typed queries")
    events: list[TraceEvent] = [e for o in part.outcomes for e in o.trace] if planned else [NO_QUERIES]
    matches, passages = merge(part.outcomes)
    # The outcomes are merged: dropped, so the rest of the pipeline does not carry them twice.
    merged = part.model_copy(update={"matches": matches, "passages": passages, "outcomes": []})
    return state.model_copy(update={"viking": merged, "trace": [*state.trace, *events]})
