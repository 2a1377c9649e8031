"""``chat_completion``: the whole answer in one call (the ``rag`` and ``chat`` pipelines, and Step Functions).

System prompt + history rounds + the user message, then :mod:`stream_filter`'s rules on the whole text: reasoning
removed, the no-match prefix recognised, the fallback answered when nothing usable came out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.models import PipelineState, TraceEvent, Usage
from ragstep.ports import ChatResponse
from ragstep.stages.chat import stream_filter
from ragstep.stages.chat.chat_completion_stream import system_prompt
from ragstep.stages.chat.common import grounding, messages, options

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "chat_completion"


def _usage(response: ChatResponse) -> Usage:
    u = response.usage
    return (
        Usage()
        if u is None
        else Usage(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, total_tokens=u.total_tokens)
    )


def _filtered(text: str, prefix: str) -> stream_filter.AnswerFilter:
    flt = stream_filter.AnswerFilter(prefix)
    flt.feed(text)
    flt.flush()
    return flt


def run(state: PipelineState, ctx: Context) -> PipelineState:
    model = ctx.chat_model
    settings = state.chat.settings
    response = model.complete(messages(state, system_prompt(state)), options(settings), grounding(state))
    flt = _filtered(response.content, settings.no_match_prefix)
    reasoning = "\n".join(t for t in (response.reasoning, flt.reasoning) if t)
    usage = _usage(response)
    fallback = None
    reason = None
    if not flt.usable:
        fallback = stream_filter.strategy(state, model)
        reason = stream_filter.no_answer_reason(flt)
        if fallback == "fixed":
            flt = _filtered(stream_filter.fixed_response(state), "")
        else:
            again = model.complete(stream_filter.fallback_messages(state), options(settings))
            flt = _filtered(again.content, "")
            usage = _usage(again)
            if not flt.usable:  # the fallback model said nothing either: the fixed response, never an empty answer
                flt = _filtered(stream_filter.fixed_response(state), "")
    chat = state.chat.model_copy(
        update={"answer": flt.answer, "reasoning": reasoning, "model": model.name, "usage": usage, "fallback": fallback}
    )
    event = TraceEvent(stage=STAGE, counts={"answer_chars": len(flt.answer)}, detail={"model": model.name})
    return state.model_copy(update={"chat": chat}).with_trace(stream_filter.trace(flt, fallback, reason), event)
