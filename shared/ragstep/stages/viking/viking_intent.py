"""``viking_intent``: the first of the viking pipelines' stages -- the request's question as 0-5 typed queries.

:mod:`~ragstep.stages.viking.intent_analysis` over the pipeline state's request (the rewritten question when a
rewrite ran, the session for the analyser); the plan goes to ``state.viking.plan``, where the typed queries' Map
reads its items (``viking.plan.queries``). Zero queries is a plan too: nothing is retrieved, the Map has no items.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.models import PipelineState
from ragstep.models.viking import VikingPart
from ragstep.stages.viking import intent_analysis
from ragstep.stages.viking.common import viking_state

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "viking_intent"


def run(state: PipelineState, ctx: Context) -> PipelineState:
    analysed = intent_analysis.run(viking_state(state, ctx), ctx)
    # A fresh part: a state that went through the viking stages before (a retried request) starts over.
    part = VikingPart(plan=analysed.plan)
    return state.model_copy(update={"viking": part, "trace": [*state.trace, *analysed.trace]})
