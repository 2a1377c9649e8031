"""``chat_completion_stream``: the answer, streamed as it is generated (the ``Stream`` step of the chat pipelines).

Events, in order: ``references`` (the passages the answer may cite, ``[n]`` = ``results[n-1]``), any number of
``reasoning`` and ``answer`` deltas (after :mod:`stream_filter`; citation markers repaired on the way, a marker split
across chunks held back until it is whole), and ``done`` (model, usage, fallback, and the final answer with the
references flagged cited and the per-document aggregate). The final answer is the deltas joined: citations
inserted after the stream flag the references and do not change the text. The final state holds the whole answer,
so a drained run returns what the events said. With nothing retrieved, the events are the
references (none), the empty response and ``done``: the model is not called.

When the reader goes away, this generator gets ``GeneratorExit`` at its ``yield``: it closes the model's stream
(the HTTP response, so the provider stops generating) and lets the exit propagate; whoever consumed the events
saves what had been shown, marked interrupted (:mod:`ragstep.app.chat`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING

from ragstep.models import PipelineState, StreamEvent, TraceEvent, Usage
from ragstep.ports import ChatDelta
from ragstep.retrieval.citations import MarkerRepair
from ragstep.stages.chat import budget, citing, notes, stream_filter
from ragstep.stages.chat.chat_completion import empty_answer
from ragstep.stages.chat.common import answer_key, cached, context_results, grounding, messages, options, remember

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "chat_completion_stream"


def system_prompt(state: PipelineState) -> str:
    return citing.system_prompt(state)


def _usage(total: Usage, delta: ChatDelta) -> Usage:
    if delta.usage is None:
        return total
    # Providers send usage once, on the last chunk; a later report supersedes an earlier one.
    return Usage(
        prompt_tokens=delta.usage.prompt_tokens,
        completion_tokens=delta.usage.completion_tokens,
        total_tokens=delta.usage.total_tokens,
        estimated=delta.usage.estimated,
    )


def _relay(
    deltas: Iterator[ChatDelta],
    flt: stream_filter.AnswerFilter,
    usage: list[Usage],
    repair: MarkerRepair | None = None,
    shown: list[str] | None = None,
    finish: list[str | None] | None = None,
) -> Generator[StreamEvent, None, None]:
    """Filtered events of one model stream (markers repaired, split ones held back, when ``repair`` is given; the
    answer text sent is appended to ``shown``; the model's finish reason kept in ``finish[0]``); the stream is closed
    however this ends (GeneratorExit included)."""

    def answer(text: str, final: bool = False) -> Iterator[StreamEvent]:
        if repair is not None:
            text = repair.feed(text) + (repair.flush() if final else "")
        if text:
            if shown is not None:
                shown.append(text)
            yield StreamEvent(event="answer", data={"delta": text})

    try:
        for delta in deltas:
            usage[0] = _usage(usage[0], delta)
            if finish is not None and delta.finish_reason:
                finish[0] = delta.finish_reason
            if delta.reasoning:
                yield StreamEvent(event="reasoning", data={"delta": delta.reasoning})
            if delta.content:
                text, thought = flt.feed(delta.content)
                if thought:
                    yield StreamEvent(event="reasoning", data={"delta": thought})
                yield from answer(text)
        text, thought = flt.flush()
        if thought:
            yield StreamEvent(event="reasoning", data={"delta": thought})
        yield from answer(text, final=True)
    finally:
        close = getattr(deltas, "close", None)
        if close is not None:
            close()


def _recorded(deltas: Iterator[ChatDelta], content: list[str]) -> Iterator[ChatDelta]:
    """``deltas`` passed through, their answer text collected in ``content`` (what the cache stores)."""
    try:
        for delta in deltas:
            content.append(delta.content)
            yield delta
    finally:
        close = getattr(deltas, "close", None)
        if close is not None:
            close()


def _declined(deltas: Iterator[ChatDelta], decline: list[dict[str, object] | None]) -> Iterator[ChatDelta]:
    """``deltas`` passed through, why a model-free answerer declined kept in ``decline[0]``."""
    try:
        for delta in deltas:
            if delta.decline:
                decline[0] = delta.decline
            yield delta
    finally:
        close = getattr(deltas, "close", None)
        if close is not None:
            close()


def run(state: PipelineState, ctx: Context) -> Generator[StreamEvent, None, PipelineState]:
    model = ctx.chat_model
    results = state.chat.references or context_results(state)
    yield StreamEvent(
        event="references",
        data={"results": [r.model_dump(mode="json") for r in results], "model": model.name},
    )
    answered = empty_answer(state, model)
    if answered is not None:
        yield StreamEvent(event="answer", data={"delta": answered.chat.answer})
        yield StreamEvent(event="done", data=_done(answered, model.name))
        return answered
    system = system_prompt(state)
    state, fit_event = budget.fit_state(state, system)
    settings = state.chat.settings
    flt = stream_filter.AnswerFilter(settings.no_match_prefix)
    usage = [Usage()]
    msgs = messages(state, system)
    repair = citing.stream_repair(state)
    shown: list[str] = []
    cache_detail: dict[str, object] = {}
    raw: list[str] = []
    key = answer_key(state, model.name, system, options(settings))
    hit = cached(ctx, key) if settings.cache_answers else None
    if hit is not None:
        deltas: Iterator[ChatDelta] = iter(
            [ChatDelta(content=hit.content, reasoning=hit.reasoning, decline=hit.decline)]
        )
        cache_detail["cache"] = "hit"
    else:
        deltas = _recorded(model.stream(msgs, options(settings), grounding(state, ctx)), raw)
        cache_detail = {"cache": "miss"} if settings.cache_answers else {}
    finish: list[str | None] = [None]
    decline: list[dict[str, object] | None] = [None]
    yield from _relay(_declined(deltas, decline), flt, usage, repair, shown, finish)
    if settings.cache_answers and hit is None:
        remember(ctx, key, "".join(raw), decline=decline[0])
    reasoning = flt.reasoning
    fallback = None
    reason = None
    answer = "".join(shown) if repair is not None else flt.answer
    if not flt.usable:
        fallback = stream_filter.strategy(state, model)
        reason = stream_filter.no_answer_reason(flt)
        finish[0], decline[0] = None, None
        if fallback == "model":
            flt = stream_filter.AnswerFilter("")
            # Not grounded: no marker of it can cite anything (removed as it streams, when citations are on).
            bare = MarkerRepair(0) if settings.citations else None
            fallback_shown: list[str] = []
            yield from _relay(
                stream_filter.model_fallback(state, model), flt, usage, bare, fallback_shown, finish=finish
            )
            answer = "".join(fallback_shown) if bare is not None else flt.answer
        if not flt.usable:  # "fixed", or the fallback model said nothing either: never an empty answer
            flt, finish[0] = stream_filter.AnswerFilter(""), None
            text, _ = flt.feed(stream_filter.fixed_response(state))
            yield StreamEvent(event="answer", data={"delta": text})
            answer = flt.answer
    filter_event = stream_filter.trace(flt, fallback, reason)
    chat = state.chat.model_copy()
    chat.answer, chat.reasoning, chat.model = answer, reasoning + flt.reasoning, model.name
    chat.usage, chat.fallback, chat.finish_reason = usage[0], fallback, finish[0]
    state = state.with_chat(chat)
    # streamed: the text shown is the final text (inserted citations flag the references instead).
    state, cite_event = citing.cite(state, ctx, model, answer, repaired=repair is not None, streamed=True)
    if repair is not None and cite_event is not None:
        cite_event.counts.update(repaired=repair.repaired, dropped=repair.dropped, collapsed=repair.collapsed)
    event = TraceEvent(
        stage=STAGE,
        counts={"answer_chars": len(state.chat.answer)},
        reason=str(decline[0]["reason"]) if decline[0] else None,
        detail={"model": model.name, **cache_detail, **({"decline": decline[0]} if decline[0] else {})},
    )
    events = [e for e in (fit_event, filter_event, cite_event, event) if e is not None]
    state = state.with_trace(*events)  # before ``done``: its notes read the trace (a decline's reason)
    yield StreamEvent(event="done", data=_done(state, model.name))
    return state


def _done(state: PipelineState, model: str) -> dict[str, object]:
    """The ``done`` event: the final answer (the deltas joined: what was shown), the references flagged cited, the
    per-document aggregate, model, usage, fallback, and the notes (a stage the question needed that did not run)."""
    chat = state.chat
    return {
        "notes": notes.notes(state),
        "request_id": state.request_id,
        "model": model,
        "usage": chat.usage.model_dump(),
        "fallback": chat.fallback,
        "answer": chat.answer,
        "citation_mode": chat.citation_mode,
        "references": [r.model_dump(mode="json") for r in chat.references],
        "doc_aggs": [a.model_dump(mode="json") for a in chat.doc_aggs],
    }
