"""``stream_results``: the search pipeline's streaming end -- each final result as an event, then a ``done`` event.

It adds nothing to the state, so a drained run (Step Functions, ``--json``) returns exactly what ``filter_top_k``
left; a streamed run lets a client render results as they arrive.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

from ragstep.models import PipelineState, StreamEvent, TraceEvent

if TYPE_CHECKING:
    from ragstep.context import Context


def run(state: PipelineState, ctx: Context) -> Generator[StreamEvent, None, PipelineState]:
    for rank, result in enumerate(state.final_results, start=1):
        yield StreamEvent(event="result", data={"rank": rank, **result.model_dump(mode="json")})
    yield StreamEvent(event="done", data={"request_id": state.request_id, "results": len(state.final_results)})
    return state.with_trace(TraceEvent(stage="stream_results", counts={"events": len(state.final_results) + 1}))
