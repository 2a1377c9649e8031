"""The chat use case: a question in a session -> a state, the chat pipeline run or streamed, the turn saved.

The turn (question, final answer, references, rewritten query, model, usage) is written once, after the answer is
final, as one history record: a failed request leaves no trace in the session, and a reader who leaves mid-stream
leaves what had been shown, marked ``interrupted``. The model stream itself is closed by the streaming stage.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator
from typing import Any

from pydantic import ValidationError

from ragstep.app.answers import answer_notes, answer_references
from ragstep.app.cost import observe
from ragstep.app.profiles import resolve as resolve_profile
from ragstep.app.search import new_state
from ragstep.app.session_access import LIST_HINT, require_session
from ragstep.context import Context
from ragstep.errors import InputError, InvalidFieldError
from ragstep.models import (
    ChatRequest,
    ChatSettings,
    HistoryRound,
    PipelineState,
    Reference,
    SearchRequest,
    SearchResult,
    StreamEvent,
    Turn,
    Usage,
    language_of,
)
from ragstep.pipeline.definitions import CHAT_PIPELINES, get_pipeline
from ragstep.pipeline.executor import drain, run_stage, stream_pipeline
from ragstep.stages.chat.common import strip_think
from ragstep.stages.chat.into_chat_message import validate_query


def _invalid(exc: ValidationError) -> InputError:
    """422, as the API's own body validation: "name at least one knowledge base" is the same answer from chat as
    from search."""
    from ragstep.models.unknown_fields import first_problem

    return InvalidFieldError(first_problem(exc))


def new_chat_state(request: ChatRequest, ctx: Context) -> PipelineState:
    """The state of one chat request: the search part as :func:`ragstep.app.search.new_state` builds it, the
    effective chat settings (configured defaults + the request's overrides), the question's language, and the
    session (a new id when the request names none)."""
    if request.pipeline not in CHAT_PIPELINES:
        raise InputError(f"unknown chat pipeline {request.pipeline!r}; one of {', '.join(CHAT_PIPELINES)}")
    # into_chat_message checks again (a stage Lambda trusts no caller); checked here too so a bad question costs
    # no retrieval and every pipeline refuses it, not only those that build a chat message.
    validate_query(request.query)
    if request.session_id is not None:
        require_session(ctx, request.session_id)
    session_id = request.session_id or uuid.uuid4().hex
    try:
        search = SearchRequest(
            query=request.query,
            session_id=session_id,
            knowledge_base_ids=request.knowledge_base_ids,
            knowledge_ids=request.knowledge_ids,
            overrides=request.overrides,
            user=request.user,
            profile=request.profile,
            budget_ms=request.budget_ms,
            cost_budget_usd=request.cost_budget_usd,
        )
        profile = resolve_profile(request.profile, ctx)
        base = {**ctx.settings.chat_defaults().model_dump(), **profile.chat}
        settings = ChatSettings.model_validate({**base, **request.chat})
    except ValidationError as exc:
        raise _invalid(exc) from None
    state = new_state(search, ctx, pipeline=request.pipeline)
    chat = state.chat.model_copy(update={"settings": settings, "language": language_of(search.query)})
    return state.model_copy(update={"chat": chat})


def turn_of(
    state: PipelineState,
    *,
    answer: str,
    references: list[SearchResult],
    model: str,
    usage: Usage,
    interrupted: bool,
) -> Turn:
    assert state.request.session_id is not None  # new_chat_state always sets one
    return Turn(
        session_id=state.request.session_id,
        created_at=time.time(),
        query=state.request.query,
        answer=answer,
        references=references,
        request_id=state.request_id,
        rewritten_query=state.rewritten_query,
        model=model,
        usage=usage,
        interrupted=interrupted,
        knowledge_bases=[kb.id for kb in state.knowledge_bases],
    )


def stream_chat(request: ChatRequest, ctx: Context) -> Generator[StreamEvent, None, PipelineState]:
    """Run the request's chat pipeline, relaying its events (a non-streaming pipeline yields none); returns the final
    state after saving the turn.

    Closing this generator early (the client went away), or a KeyboardInterrupt while it runs, closes the pipeline's
    stream -- and with it the model's -- and saves the answer shown so far, marked interrupted.
    """
    state = _with_session_history(new_chat_state(request, ctx), ctx)
    events = stream_pipeline(request.pipeline, state, ctx)
    shown: list[str] = []
    references: list[SearchResult] = []
    model = ""
    try:
        while True:
            try:
                event = next(events)
            except StopIteration as stop:
                final: PipelineState = stop.value
                break
            if event.event == "references":
                references = [Reference.model_validate(r) for r in event.data.get("results", [])]
                model = str(event.data.get("model", ""))
            elif event.event == "answer":
                shown.append(str(event.data.get("delta", "")))
            yield event
    except (GeneratorExit, KeyboardInterrupt):
        # The reader left: closed this generator (GeneratorExit at the yield), or Ctrl-C landed inside the pipeline
        # (the streaming stage has closed the model's stream on its way out). Either way, keep what was shown.
        events.close()
        ctx.history.append(
            turn_of(state, answer="".join(shown), references=references, model=model, usage=Usage(), interrupted=True)
        )
        raise
    turn = turn_of(
        final,
        answer=final.chat.answer,
        references=answer_references(final),
        model=final.chat.model,
        usage=final.chat.usage,
        interrupted=False,
    )
    ctx.history.append(turn)
    observe(final, ctx)
    if request.pipeline == "viking_stream" and ctx.settings.viking_auto_remember and turn.answer:
        _remember(ctx, turn, request.user)
    return final


def _remember(ctx: Context, turn: Turn, user: str | None) -> None:
    """OpenViking's session commit, turn by turn: what the user said of themselves becomes their memories. The
    answer is already out: a failure here is logged, never the request's."""
    import logging

    from ragstep.app.memories import remember
    from ragstep.errors import RagstepError

    try:
        remember(ctx, turn.session_id, user=user, turns=[turn])
    except RagstepError as exc:
        logging.getLogger(__name__).warning("memories of session %s not saved: %s", turn.session_id, exc.message)


def _with_session_history(state: PipelineState, ctx: Context) -> PipelineState:
    """The session's rounds read ahead for a pipeline that rewrites follow-ups but loads no history itself (``rag``:
    its state machine reads only the rounds its input carries), as its ``load_history`` stage would; without them a
    follow-up in a session would be searched as if asked alone."""
    names = get_pipeline(state.pipeline).stage_names()
    if state.request.session_id is None or "rewrite_query" not in names or "load_history" in names:
        return state
    return run_stage("load_history", state, ctx)


def run_chat(request: ChatRequest, ctx: Context) -> PipelineState:
    """Run the request's chat pipeline to the end (its events dropped) and save the turn."""
    return drain(stream_chat(request, ctx))


def chat_response(state: PipelineState, ctx: Context | None = None) -> dict[str, Any]:
    """The public JSON shape of an answer (``ragstep chat --json``); with ``ctx``, ``usage.cost`` is the request's
    cost receipt (:mod:`ragstep.app.cost`)."""
    usage: dict[str, Any] = state.chat.usage.model_dump()
    if ctx is not None:
        from ragstep.app.cost import cost_of

        usage["cost"] = cost_of(state, ctx).model_dump(mode="json")
    return {
        "session_id": state.request.session_id,
        "request_id": state.request_id,
        "pipeline": state.pipeline,
        "query": state.request.query,
        "rewritten_query": state.rewritten_query,
        "answer": state.chat.answer,
        "model": state.chat.model,
        "usage": usage,
        "profile": state.profile,
        "fallback": state.chat.fallback,
        "references": [r.model_dump(mode="json") for r in answer_references(state)],
        "doc_aggs": [a.model_dump(mode="json") for a in state.chat.doc_aggs],
        "citation_mode": state.chat.citation_mode,
        "notes": answer_notes(state),
        "trace": [t.model_dump(mode="json") for t in state.trace],
    }


def delete_session(ctx: Context, session_id: str) -> int:
    require_session(ctx, session_id, hint=LIST_HINT)
    from ragstep.stages.search.web_search import forget_session

    forget_session(ctx, session_id)  # its temporary web knowledge base goes with it
    return ctx.history.delete_session(session_id)


def stream_stateless_chat(
    request: ChatRequest, history: list[HistoryRound], ctx: Context
) -> Generator[StreamEvent, None, PipelineState]:
    """Like :func:`stream_chat`, with the earlier rounds given by the caller: nothing is read from or written to the
    history store (a client that keeps its own conversation, as OpenAI-style clients do).

    The rounds get the history stage's treatment: ``<think>`` blocks removed from answers, rounds with an empty
    question or answer dropped, the newest ``max_rounds`` kept. The state carries no session, so the history stage
    skips and leaves them as given.
    """
    if request.session_id is not None:
        raise InputError("a stateless chat takes its history from the request; drop the session id or the history")
    state = new_chat_state(request, ctx)
    max_rounds = state.chat.settings.max_rounds
    rounds = [HistoryRound(query=r.query.strip(), answer=strip_think(r.answer)) for r in history]
    rounds = [r for r in rounds if r.query and r.answer][-max_rounds:] if max_rounds else []
    chat = state.chat.model_copy(update={"history": rounds})
    state = state.model_copy(update={"request": state.request.model_copy(update={"session_id": None}), "chat": chat})
    return (yield from stream_pipeline(request.pipeline, state, ctx))
