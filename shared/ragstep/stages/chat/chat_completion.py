"""``chat_completion``: the whole answer in one call (the ``rag`` and ``chat`` pipelines, and Step Functions).

System prompt (with the citation rules when there are passages) + history rounds + the user message, within the
token budget (:mod:`budget`); then :mod:`stream_filter`'s rules on the whole text: reasoning removed, the no-match
prefix recognised, the fallback answered when nothing usable came out; then the citations (:mod:`citing`).
When retrieval found nothing, the empty response is the answer and the model is not called (RAGFlow's
``empty_response``; ``RAGSTEP_CHAT_EMPTY_RESPONSE``, by default :data:`prompts.EMPTY_RESPONSE` in the question's
language): a model given no passages answers from what it believes, which a RAG answer must not.
With ``cache_answers`` a repeated question (same model, messages and settings) is answered from the cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.models import PipelineState, TraceEvent, Usage
from ragstep.models.message_language import message_language_of
from ragstep.ports import ChatResponse
from ragstep.stages.chat import budget, citing, prompts, stream_filter
from ragstep.stages.chat.common import answer_key, complete_cached, empty_retrieval, grounding, messages, options

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.ports import ChatModel

STAGE = "chat_completion"


def system_prompt(state: PipelineState) -> str:
    return citing.system_prompt(state)


def _usage(response: ChatResponse) -> Usage:
    u = response.usage
    return (
        Usage()
        if u is None
        else Usage(
            prompt_tokens=u.prompt_tokens,
            completion_tokens=u.completion_tokens,
            total_tokens=u.total_tokens,
            estimated=u.estimated,
        )
    )


def _filtered(text: str, prefix: str) -> stream_filter.AnswerFilter:
    flt = stream_filter.AnswerFilter(prefix)
    flt.feed(text)
    flt.flush()
    return flt


def empty_answer(state: PipelineState, model: ChatModel) -> PipelineState | None:
    """The state answered with the empty response (configured, or the shipped one), when retrieval found nothing
    (else None)."""
    if not empty_retrieval(state):
        return None
    text = (
        state.chat.settings.empty_response
        or prompts.EMPTY_RESPONSE[message_language_of(state.request.query, state.chat.language)]
    )
    chat = state.chat.model_copy()
    chat.answer, chat.model, chat.usage = text, model.name, Usage()
    event = TraceEvent(stage=STAGE, action="skip", reason="empty_retrieval", detail={"empty_response": True})
    return state.with_chat(chat, event)


def run(state: PipelineState, ctx: Context) -> PipelineState:
    model = ctx.chat_model
    answered = empty_answer(state, model)
    if answered is not None:
        return answered
    system = system_prompt(state)
    state, fit_event = budget.fit_state(state, system)
    settings = state.chat.settings
    msgs = messages(state, system)
    if settings.cache_answers:
        key = answer_key(state, model.name, system, options(settings))
        response, hit = complete_cached(ctx, model, "answer", msgs, options(settings), grounding(state, ctx), key)
    else:
        response, hit = model.complete(msgs, options(settings), grounding(state, ctx)), False
    flt = _filtered(response.content, settings.no_match_prefix)
    reasoning = "\n".join(t for t in (response.reasoning, flt.reasoning) if t)
    usage = _usage(response)
    finish = response.finish_reason
    fallback = None
    reason = None
    if not flt.usable:
        fallback = stream_filter.strategy(state, model)
        reason = stream_filter.no_answer_reason(flt)
        finish = None
        if fallback == "fixed":
            flt = _filtered(stream_filter.fixed_response(state), "")
        else:
            again = model.complete(stream_filter.fallback_messages(state), options(settings))
            flt = _filtered(again.content, "")
            usage, finish = _usage(again), again.finish_reason
            if not flt.usable:  # the fallback model said nothing either: the fixed response, never an empty answer
                flt, finish = _filtered(stream_filter.fixed_response(state), ""), None
    chat = state.chat.model_copy()
    chat.answer, chat.reasoning, chat.model, chat.usage, chat.fallback = (
        flt.answer, reasoning, model.name, usage, fallback,
    )  # fmt: skip
    chat.finish_reason = finish
    state = state.with_chat(chat)
    state, cite_event = citing.cite(state, ctx, model, flt.answer)
    detail: dict[str, object] = {"model": model.name}
    if settings.cache_answers:
        detail["cache"] = "hit" if hit else "miss"
    decline = response.decline if fallback is None else None  # why a model-free answerer declined
    if decline:
        detail["decline"] = decline
    why = str(decline["reason"]) if decline else None
    event = TraceEvent(stage=STAGE, counts={"answer_chars": len(state.chat.answer)}, reason=why, detail=detail)
    events = [e for e in (fit_event, stream_filter.trace(flt, fallback, reason), cite_event, event) if e is not None]
    return state.with_trace(*events)
