"""``intent_analysis``: the request -> a :class:`QueryPlan` of 0-5 typed queries.

``find`` skips it (one query as given). ``search`` asks the chat model with OpenViking's inputs (the session's
summary, its last 5 messages, the query). Without a generative model, or when the model fails or answers something
unreadable, the plan is the question as one resource query, and the trace says why.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ragstep.errors import RagstepError
from ragstep.models import TraceEvent
from ragstep.models.viking import QueryPlan, TypedQuery, VikingState
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.retrieval.intent import intent_messages, parse_plan, single_query_plan

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "intent_analysis"
#: OpenViking reads the last five messages of the session.
RECENT_MESSAGES = 5


def _recent(state: VikingState, ctx: Context) -> list[tuple[str, str]]:
    if not state.session_id:
        return []
    messages: list[tuple[str, str]] = []
    for turn in ctx.history.recent(state.session_id, RECENT_MESSAGES):
        messages += [("user", turn.query), ("assistant", turn.answer)]
    return messages[-RECENT_MESSAGES:]


def _summary(recent: list[tuple[str, str]]) -> str:
    # Sessions keep no compressed summary yet: the earliest question read here stands in for the topic.
    return next((text for role, text in recent if role == "user"), "")


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
    recent = _recent(state, ctx)
    messages = [ChatMessage(role, text) for role, text in intent_messages(state.query, recent, _summary(recent))]
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
