"""``chat_completion_stream``: the answer, streamed as it is generated (the ``Stream`` step of the chat pipelines).

Events, in order: ``references`` (the passages the answer may cite, ``[n]`` = ``results[n-1]``), any number of
``reasoning`` and ``answer`` deltas (after :mod:`stream_filter`), and ``done`` (model, usage, fallback). The final
state holds the whole answer, so a drained run returns what the events said.

When the reader goes away, this generator gets ``GeneratorExit`` at its ``yield``: it closes the model's stream
(the HTTP response, so the provider stops generating) and lets the exit propagate; whoever consumed the events
saves what had been shown, marked interrupted (:mod:`ragstep.app.chat`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

from ragstep.models import PipelineState, StreamEvent, TraceEvent, Usage
from ragstep.ports import ChatDelta
from ragstep.stages.chat import prompts, stream_filter
from ragstep.stages.chat.common import context_results, grounding, messages, options

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "chat_completion_stream"


def system_prompt(state: PipelineState) -> str:
    return state.chat.settings.system_prompt or prompts.SYSTEM_PROMPT[state.chat.language]


def _usage(total: Usage, delta: ChatDelta) -> Usage:
    if delta.usage is None:
        return total
    # Providers send usage once, on the last chunk; a later report supersedes an earlier one.
    return Usage(
        prompt_tokens=delta.usage.prompt_tokens,
        completion_tokens=delta.usage.completion_tokens,
        total_tokens=delta.usage.total_tokens,
    )


def _relay(
    deltas: Iterator[ChatDelta], flt: stream_filter.AnswerFilter, usage: list[Usage]
) -> Generator[StreamEvent, None, None]:
    """Filtered events of one model stream; the stream is closed however this ends (GeneratorExit included)."""
    try:
        for delta in deltas:
            usage[0] = _usage(usage[0], delta)
            if delta.reasoning:
                yield StreamEvent(event="reasoning", data={"delta": delta.reasoning})
            if delta.content:
                text, thought = flt.feed(delta.content)
                if thought:
                    yield StreamEvent(event="reasoning", data={"delta": thought})
                if text:
                    yield StreamEvent(event="answer", data={"delta": text})
        text, thought = flt.flush()
        if thought:
            yield StreamEvent(event="reasoning", data={"delta": thought})
        if text:
            yield StreamEvent(event="answer", data={"delta": text})
    finally:
        close = getattr(deltas, "close", None)
        if close is not None:
            close()


def run(state: PipelineState, ctx: Context) -> Generator[StreamEvent, None, PipelineState]:
    model = ctx.chat_model
    settings = state.chat.settings
    results = context_results(state)
    yield StreamEvent(
        event="references",
        data={"results": [r.model_dump(mode="json") for r in results], "model": model.name},
    )
    flt = stream_filter.AnswerFilter(settings.no_match_prefix)
    usage = [Usage()]
    deltas = model.stream(messages(state, system_prompt(state)), options(settings), grounding(state))
    yield from _relay(deltas, flt, usage)
    reasoning = flt.reasoning
    fallback = None
    reason = None
    if not flt.usable:
        fallback = stream_filter.strategy(state, model)
        reason = stream_filter.no_answer_reason(flt)
        if fallback == "model":
            flt = stream_filter.AnswerFilter("")
            yield from _relay(stream_filter.model_fallback(state, model), flt, usage)
        if not flt.usable:  # "fixed", or the fallback model said nothing either: never an empty answer
            flt = stream_filter.AnswerFilter("")
            text, _ = flt.feed(stream_filter.fixed_response(state))
            yield StreamEvent(event="answer", data={"delta": text})
    filter_event = stream_filter.trace(flt, fallback, reason)
    chat = state.chat.model_copy(
        update={
            "answer": flt.answer,
            "reasoning": reasoning + flt.reasoning,
            "model": model.name,
            "usage": usage[0],
            "fallback": fallback,
        }
    )
    yield StreamEvent(
        event="done",
        data={
            "request_id": state.request_id,
            "model": model.name,
            "usage": usage[0].model_dump(),
            "fallback": fallback,
        },
    )
    event = TraceEvent(stage=STAGE, counts={"answer_chars": len(flt.answer)}, detail={"model": model.name})
    return state.model_copy(update={"chat": chat}).with_trace(filter_event, event)
