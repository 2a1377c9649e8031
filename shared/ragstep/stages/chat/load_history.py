"""``load_history``: the session's recent rounds, as the model will see them (WeKnora's LoadHistory).

The newest ``history_messages`` messages (a stored turn is two: the question and its answer) are grouped into rounds
by request id (a retried request stored twice counts once, the later copy winning), ``<think>`` blocks are removed
from answers, rounds with an empty question or answer (an answer interrupted before its first word) are dropped, and
the newest ``max_rounds`` are kept, oldest first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.models import HistoryRound, PipelineState, TraceEvent
from ragstep.stages.chat.common import strip_think

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "load_history"


def run(state: PipelineState, ctx: Context) -> PipelineState:
    settings = state.chat.settings
    session_id = state.request.session_id
    if not session_id:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="no_session"))
    if settings.max_rounds == 0 or settings.history_messages < 2:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="history_disabled"))
    turns = ctx.history.recent(session_id, limit=settings.history_messages // 2)
    by_request: dict[str, HistoryRound] = {}
    for turn in turns:  # oldest first: a later copy of the same request replaces the earlier one
        key = turn.request_id or turn.turn_id
        by_request.pop(key, None)
        by_request[key] = HistoryRound(query=turn.query.strip(), answer=strip_think(turn.answer), request_id=key)
    rounds = [r for r in by_request.values() if r.query and r.answer][-settings.max_rounds :]
    chat = state.chat.model_copy()
    chat.history = rounds
    event = TraceEvent(
        stage=STAGE,
        counts={"messages": 2 * len(turns), "rounds": len(rounds)},
        detail={"session_id": session_id, "max_rounds": settings.max_rounds},
    )
    return state.with_chat(chat, event)
