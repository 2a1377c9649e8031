"""The FastAPI routes of chat sessions and WeKnora's knowledge chat (``/v1/sessions``, ``/v1/knowledge-chat``): their
OpenAPI declarations and dependencies. What they do, and the frames of the stream, is
:mod:`ragstep.entry.http.conversations`, which the streaming chat function's Starlette app serves too.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request

from ragstep.app.sessions import get_session, open_session
from ragstep.entry.http.chat import ERROR_RESPONSES, ChatContext
from ragstep.entry.http.conversations import (
    Deleted,
    KnowledgeChatBody,
    SessionPage,
    StatelessChatBody,
    Stopped,
    TurnPage,
    removed,
    session_chat,
    session_page,
    stateless_chat,
    stopped,
    turn_page,
)
from ragstep.entry.http.deps import meter
from ragstep.entry.http.sse import SSEResponse
from ragstep.models import SessionSummary

router = APIRouter()


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: ERROR_RESPONSES[status] for status in statuses}


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
    return session_page(ctx, page, page_size)


@router.get("/v1/sessions/{session_id}", responses=_errors(400, 401, 403, 404, 422, 429, 500, 503))
def read_session(session_id: str, ctx: ChatContext) -> SessionSummary:
    return get_session(ctx, session_id)


@router.delete("/v1/sessions/{session_id}", responses=_errors(400, 401, 403, 404, 422, 429, 500, 503))
def remove_session(session_id: str, ctx: ChatContext) -> Deleted:
    return removed(ctx, session_id)


@router.get("/v1/sessions/{session_id}/messages", responses=_errors(400, 401, 403, 404, 422, 429, 500, 503))
def session_messages(
    session_id: str,
    ctx: ChatContext,
    before: float | None = Query(None, description="only turns created before this time (a page's next_before)"),
    limit: int = Query(20, ge=1, le=100),
) -> TurnPage:
    """The session's turns, newest first, a page at a time."""
    return turn_page(ctx, session_id, before, limit)


@router.post("/v1/sessions/{session_id}/stop", responses=_errors(400, 401, 403, 404, 409, 422, 429, 500))
def stop_session(session_id: str, ctx: ChatContext) -> Stopped:
    """Stop the session's running answer: its stream ends, and the part streamed so far is saved, marked
    interrupted."""
    return stopped(ctx, session_id)


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
    return session_chat(session_id, body, ctx, meter(request))


@router.post(
    "/v1/knowledge-chat",
    response_model=None,
    responses={**_STREAM, **_errors(400, 401, 403, 404, 413, 422, 429, 500, 502, 503)},
)
def stateless_knowledge_chat(body: StatelessChatBody, ctx: ChatContext, request: Request) -> SSEResponse:
    """Answer with the history given in the body, streamed in WeKnora's frames; nothing is written."""
    return stateless_chat(body, ctx, meter(request))
