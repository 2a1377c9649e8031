"""``intent_analysis``: the request -> a :class:`QueryPlan` of 0-5 typed queries.

``find`` skips it (one query as given). ``search`` asks the chat model with OpenViking's inputs (the session's
compressed summary -- :func:`~ragstep.retrieval.intent.session_summary` of the turns before the recent ones --, its
last 5 messages, the query). Without a generative model, or when the model fails or answers something
unreadable, the plan is the question as one resource query, and the trace says why.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ragstep.errors import RagstepError
from ragstep.models import TraceEvent
from ragstep.models.viking import QueryPlan, TypedQuery, VikingState
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.retrieval.intent import intent_messages, parse_plan, session_summary, single_query_plan

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "intent_analysis"
#: OpenViking reads the last five messages of the session.
RECENT_MESSAGES = 5


#: How many turns the summary is made from (older ones are left out of it).
SUMMARY_TURNS = 50


def _session(state: VikingState, ctx: Context) -> tuple[list[tuple[str, str]], str]:
    """The session's last :data:`RECENT_MESSAGES` messages and the compressed summary of the turns before them."""
    if not state.session_id:
        return [], ""
    turns = [t for t in ctx.history.recent(state.session_id, SUMMARY_TURNS) if t.query or t.answer]
    messages: list[tuple[str, str]] = []
    for turn in turns:
        messages += [("user", turn.query), ("assistant", turn.answer)]
    recent = messages[-RECENT_MESSAGES:]
    # Turns not wholly in the recent messages make the summary (one cut in half by the window is in both: its
    # question would otherwise be in neither).
    older = turns[: max(len(turns) - RECENT_MESSAGES // 2, 0)]
    return recent, session_summary([(t.query, t.answer) for t in older])


def run(state: VikingState, ctx: Context) -> VikingState:
    started = time.perf_counter()
    cap = ctx.settings.viking_max_typed_queries
    if not state.analyse:
        plan = QueryPlan(queries=[TypedQuery(query=state.query[:2000], intent="find", priority=1)], source="extractive")
        event = TraceEvent(stage=STAGE, action="skip", reason="find: the query runs as given")
        return state.model_copy(update={"plan": plan, "trace": [*state.trace, event]})
    model = ctx.chat_model
    if not model.generative:
        plan = single_query_plan(state.query, "no chat model: the question as one resource query")
        return _done(state, plan, "fallback", plan.reasoning, started)
    recent, summary = _session(state, ctx)
    messages = [ChatMessage(role, text) for role, text in intent_messages(state.query, recent, summary)]
    try:
        answer = model.complete(messages, ChatOptions(temperature=0.0, max_tokens=600, json_object=True)).content
    except RagstepError as exc:
        plan = single_query_plan(
            state.query, f"intent analysis failed ({exc.message}): the question as asked", "fallback"
        )
        return _done(state, plan, "degrade", plan.reasoning, started)
    parsed = parse_plan(answer)
    if parsed is None:
        plan = single_query_plan(
            state.query, "the intent analysis was not readable JSON: the question as asked", "fallback"
        )
        return _done(state, plan, "fallback", plan.reasoning, started)
    plan = parsed.model_copy(update={"queries": parsed.queries[:cap]})
    reason = "no retrieval needed" if not plan.queries else None
    return _done(state, plan, "run", reason, started)


def _done(state: VikingState, plan: QueryPlan, action: str, reason: str | None, started: float) -> VikingState:
    event = TraceEvent(
        stage=STAGE,
        action=action,
        duration_ms=(time.perf_counter() - started) * 1000,
        counts={"queries": len(plan.queries)},
        reason=reason,
        detail={"source": plan.source, "queries": [q.model_dump() for q in plan.queries]},
    )
    return state.model_copy(update={"plan": plan, "trace": [*state.trace, event]})
