"""Chat sessions and WeKnora's knowledge chat: ``/v1/sessions`` and ``/v1/knowledge-chat``.

``POST /v1/knowledge-chat/{session_id}`` streams WeKnora's frames -- ``event: message`` with ``{id, response_type,
content, done, ...}`` -- in WeKnora's order: ``agent_query`` (done, with the ids), ``references``, ``thinking``
deltas (a reasoning model), ``answer`` deltas, then ``complete`` (done, with the totals and the trace) or ``error``.
``POST /v1/knowledge-chat`` is the stateless form: the history comes in the body and nothing is written.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator
from typing import Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from ragstep.app.chat import delete_session
from ragstep.app.sessions import get_session, open_session, sessions_page, stop_answer, turns_page
from ragstep.entry.http.auth import Meter
from ragstep.entry.http.chat import (
    ERROR_RESPONSES,
    ChatContext,
    Plan,
    Relayed,
    Run,
    report,
    sse_response,
    start,
    stream_error,
)
from ragstep.entry.http.deps import meter
from ragstep.entry.http.sse import SSEResponse, event_frame
from ragstep.models import ChatRequest, HistoryRound, RetrievalOverrides, SessionSummary, Turn
from ragstep.stages.chat.common import context_results

router = APIRouter()


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: ERROR_RESPONSES[status] for status in statuses}


class SessionPage(BaseModel):
    sessions: list[SessionSummary]
    page: int
    page_size: int
    has_more: bool = Field(description="whether a next page exists")


class TurnPage(BaseModel):
    session_id: str
    turns: list[Turn] = Field(description="newest first; each turn is a question and its answer")
    next_before: float | None = Field(description="pass as ?before= for the next (older) page; null at the first turn")


class Deleted(BaseModel):
    session_id: str
    deleted_turns: int


class Stopped(BaseModel):
    session_id: str
    stopped: int = Field(description="how many running answers of the session were stopped")


@router.post("/v1/sessions", status_code=201, responses=_errors(401, 403, 429, 500, 503))
def create_session(ctx: ChatContext) -> SessionSummary:
    """A new, empty session: pass its id to /v1/knowledge-chat/{id} or as session_id to /v1/chat/completions."""
    return open_session(ctx)


@router.get("/v1/sessions", responses=_errors(401, 403, 422, 429, 500, 503))
def list_sessions(
    ctx: ChatContext,
    page: int = Query(1, ge=1, description="1 is the most recently active page"),
    page_size: int = Query(20, ge=1, le=100),
) -> SessionPage:
    """The caller's sessions, most recently active first."""
    sessions, more = sessions_page(ctx, offset=(page - 1) * page_size, limit=page_size)
    return SessionPage(sessions=sessions, page=page, page_size=page_size, has_more=more)


@router.get("/v1/sessions/{session_id}", responses=_errors(400, 401, 403, 404, 422, 429, 500, 503))
def read_session(session_id: str, ctx: ChatContext) -> SessionSummary:
    return get_session(ctx, session_id)


@router.delete("/v1/sessions/{session_id}", responses=_errors(400, 401, 403, 404, 422, 429, 500, 503))
def remove_session(session_id: str, ctx: ChatContext) -> Deleted:
    return Deleted(session_id=session_id, deleted_turns=delete_session(ctx, session_id))


@router.get("/v1/sessions/{session_id}/messages", responses=_errors(400, 401, 403, 404, 422, 429, 500, 503))
def session_messages(
    session_id: str,
    ctx: ChatContext,
    before: float | None = Query(None, description="only turns created before this time (a page's next_before)"),
    limit: int = Query(20, ge=1, le=100),
) -> TurnPage:
    """The session's turns, newest first, a page at a time."""
    turns, next_before = turns_page(ctx, session_id, before=before, limit=limit)
    return TurnPage(session_id=session_id, turns=turns, next_before=next_before)


@router.post("/v1/sessions/{session_id}/stop", responses=_errors(400, 401, 403, 404, 409, 422, 429, 500))
def stop_session(session_id: str, ctx: ChatContext) -> Stopped:
    """Stop the session's running answer: its stream ends, and the part streamed so far is saved, marked
    interrupted."""
    return Stopped(session_id=session_id, stopped=stop_answer(ctx, session_id))


# -- knowledge chat (WeKnora's stream) -----------------------------------------------------------------------------


class KnowledgeChatBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str
    knowledge_base_ids: list[str] = Field(default_factory=list)
    knowledge_ids: list[str] = Field(default_factory=list)
    overrides: RetrievalOverrides = Field(default_factory=RetrievalOverrides)
    chat: dict[str, Any] = Field(default_factory=dict, description="chat settings for this request")
    pipeline: str = Field("rag_stream", description="a chat pipeline")

    def request(self, session_id: str | None) -> ChatRequest:
        return ChatRequest(
            query=self.query,
            knowledge_base_ids=self.knowledge_base_ids,
            knowledge_ids=self.knowledge_ids,
            session_id=session_id,
            pipeline=self.pipeline,
            overrides=self.overrides,
            chat=self.chat,
        )


class HistoryItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str
    answer: str


class StatelessChatBody(KnowledgeChatBody):
    history: list[HistoryItem] = Field(default_factory=list, description="earlier rounds, oldest first")


def knowledge_frames(query: str, session_id: str | None, run: Run, usage_meter: Meter) -> Generator[bytes, None, None]:
    rid = uuid.uuid4().hex

    def frame(response_type: str, content: str = "", done: bool = False, **extra: Any) -> bytes:
        body = {"id": rid, "response_type": response_type, "content": content, "done": done}
        return event_frame("message", body | {k: v for k, v in extra.items() if v is not None})

    # ``id`` names this response's frames; the pipeline's request id (the one its turn is saved under) is in
    # ``complete``'s data.
    yield frame("agent_query", query, True, session_id=session_id)
    shown = referenced = False
    relayed = Relayed(run)
    try:
        for event in relayed:
            if event.event == "references":
                referenced = True
                yield frame("references", knowledge_references=event.data.get("results", []))
            elif event.event == "reasoning":
                yield frame("thinking", event.data["delta"])
            elif event.event == "answer":
                shown = True
                yield frame("answer", event.data["delta"])
    except Exception as exc:
        error = stream_error(exc)
        yield frame("error", error["message"], True, data={"error": error["code"]})
        return
    final = relayed.final
    if final is None:
        yield frame("complete", "", True, session_id=session_id, data={"interrupted": True})
        return
    report(usage_meter, final)
    if not referenced:  # a pipeline that does not stream: its references and answer now
        yield frame("references", knowledge_references=[r.model_dump(mode="json") for r in context_results(final)])
    if not shown and final.chat.answer:
        yield frame("answer", final.chat.answer)
    totals = {
        "request_id": final.request_id,
        "model": final.chat.model,
        "usage": final.chat.usage.model_dump(),
        "fallback": final.chat.fallback,
        "references": len(context_results(final)),
        "interrupted": False,
        "trace": [t.model_dump(mode="json") for t in final.trace],
    }
    yield frame("complete", "", True, session_id=session_id, data=totals)


_STREAM: dict[int | str, dict[str, Any]] = {
    200: {"description": "WeKnora's event stream (event: message)", "content": {"text/event-stream": {}}}
}


@router.post(
    "/v1/knowledge-chat/{session_id}",
    response_model=None,
    responses={**_STREAM, **_errors(400, 401, 403, 404, 413, 422, 429, 500, 502, 503)},
)
def knowledge_chat(session_id: str, body: KnowledgeChatBody, ctx: ChatContext, request: Request) -> SSEResponse:
    """Answer in the session (its history read, the turn saved), streamed in WeKnora's frames."""
    chat = body.request(session_id)
    run = start(Plan(request=chat, history=None, reference=True, profile=chat.pipeline), ctx)
    return sse_response(knowledge_frames(body.query, session_id, run, meter(request)), run)


@router.post(
    "/v1/knowledge-chat",
    response_model=None,
    responses={**_STREAM, **_errors(400, 401, 403, 404, 413, 422, 429, 500, 502, 503)},
)
def stateless_knowledge_chat(body: StatelessChatBody, ctx: ChatContext, request: Request) -> SSEResponse:
    """Answer with the history given in the body, streamed in WeKnora's frames; nothing is written."""
    history = [HistoryRound(query=h.query, answer=h.answer) for h in body.history]
    run = start(Plan(request=body.request(None), history=history, reference=True, profile=body.pipeline), ctx)
    return sse_response(knowledge_frames(body.query, None, run, meter(request)), run)
