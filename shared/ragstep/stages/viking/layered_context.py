"""``layered_context``: the matches as a chat model should read them within a token budget.

L0 (abstract) for every match, L2 (the matched passages) for the very best documents, L1 (overview) for the next
best, never past the budget (:func:`ragstep.retrieval.hierarchy.select_layers`); the trace lists each match's layer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ragstep.models import TraceEvent
from ragstep.models.viking import VikingState
from ragstep.retrieval.hierarchy import LayerCandidate, select_layers
from ragstep.stages.viking.tree import hierarchy_of

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "layered_context"


def run(state: VikingState, ctx: Context) -> VikingState:
    if state.budget is None:
        return state
    started = time.perf_counter()
    s = ctx.settings
    overviews: dict[str, str] = {}
    for kb_id in {m.knowledge_base_id for m in state.matches}:
        kb = ctx.catalog.get_kb(kb_id)
        if kb is not None:
            overviews |= {u: n.overview for u, n in hierarchy_of(kb, ctx).nodes.items()}
    candidates = [
        LayerCandidate(
            uri=m.uri,
            score=m.score,
            # A node without generated layers still has a name to show at L0.
            abstract=m.abstract or m.title or m.uri,
            overview=overviews.get(m.uri, ""),
            passages=tuple(state.passages.get(m.uri, ())),
        )
        for m in state.matches
    ]
    layered = select_layers(candidates, state.budget, l1_top=s.viking_l1_top, l2_top=s.viking_l2_top)
    event = TraceEvent(
        stage=STAGE,
        duration_ms=(time.perf_counter() - started) * 1000,
        counts={"budget": layered.budget, "used": layered.used, "items": len(layered.items)},
        detail={"layers": {item.uri: item.layer for item in layered.items}},
    )
    return state.model_copy(update={"layered": layered, "trace": [*state.trace, event]})
