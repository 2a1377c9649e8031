"""``viking_layered``: the merged matches as layered context within ``RAGSTEP_VIKING_CONTEXT_BUDGET`` tokens.

:mod:`~ragstep.stages.viking.layered_context`, then each laid-out match becomes one result of ``final_results``
(its layer in ``metadata.layer``), which ``into_chat_message`` cites as it cites any passage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError
from ragstep.models import PipelineState
from ragstep.stages.viking import layered_context
from ragstep.stages.viking.common import laid_out, viking_state

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "viking_layered"


def run(state: PipelineState, ctx: Context) -> PipelineState:
    part = state.viking
    if part is None or part.plan is None:
        raise InputError("viking_layered needs the merged matches of viking_merge (viking.matches)")
    layered = layered_context.run(viking_state(state, ctx, part), ctx)
    # The passages are in final_results now (the L2 items): dropped so the state does not carry them twice.
    done = part.model_copy(update={"layered": layered.layered, "passages": {}})
    return state.model_copy(update={"viking": done}).with_results("final_results", laid_out(layered), *layered.trace)
