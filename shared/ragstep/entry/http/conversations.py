"""What chat sessions and WeKnora's knowledge chat do (``/v1/sessions``, ``/v1/knowledge-chat``), for both HTTP apps:
the FastAPI routes (:mod:`ragstep.entry.http.sessions`) and the streaming chat function's Starlette app
(:mod:`ragstep.entry.http.chat_app`) parse the same bodies and call the same functions here.

``POST /v1/knowledge-chat/{session_id}`` streams WeKnora's frames -- ``event: message`` with ``{id, response_type,
content, done, ...}`` -- in WeKnora's order: ``agent_query`` (done, with the ids), ``references``, ``thinking``
deltas (a reasoning model), ``answer`` deltas, then ``complete`` (done, with the totals and the trace) or ``error``.
``POST /v1/knowledge-chat`` is the stateless form: the history comes in the body and nothing is written.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ragstep.app.answers import answer_notes, grounding_results
from ragstep.app.chat import delete_session
from ragstep.app.chat_runs import Relayed, Run, start
from ragstep.app.sessions import sessions_page, stop_answer, turns_page
from ragstep.context import Context
from ragstep.entry.http.auth import Meter
from ragstep.entry.http.completions import report, sse_response, stream_error
from ragstep.entry.http.sse import SSEResponse, event_frame
from ragstep.models import ChatRequest, HistoryRound, RetrievalOverrides, SessionSummary, Turn, check_query


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


class SessionsQuery(BaseModel):
    """``GET /v1/sessions``' query parameters, for the Starlette app (the FastAPI route declares the same rules as
    ``Query`` parameters; tests/test_chat_app.py holds the two to the same schema)."""

    page: int = Field(1, ge=1)
    page_size: int = Field(20, ge=1, le=100)


class MessagesQuery(BaseModel):
    """``GET /v1/sessions/{session_id}/messages``' query parameters, for the Starlette app (as
    :class:`SessionsQuery`)."""

    before: float | None = None
    limit: int = Field(20, ge=1, le=100)


def session_page(ctx: Context, page: int, page_size: int) -> SessionPage:
    sessions, more = sessions_page(ctx, offset=(page - 1) * page_size, limit=page_size)
    return SessionPage(sessions=sessions, page=page, page_size=page_size, has_more=more)


def turn_page(ctx: Context, session_id: str, before: float | None, limit: int) -> TurnPage:
    turns, next_before = turns_page(ctx, session_id, before=before, limit=limit)
    return TurnPage(session_id=session_id, turns=turns, next_before=next_before)


def removed(ctx: Context, session_id: str) -> Deleted:
    return Deleted(session_id=session_id, deleted_turns=delete_session(ctx, session_id))


def stopped(ctx: Context, session_id: str) -> Stopped:
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
    profile: str | None = Field(None, description="quick, standard (the default), deep, or one of RAGSTEP_PROFILES")
    # The bounds are ChatRequest's, checked here so a value out of them is a 422 naming the field.
    budget_ms: int | None = Field(
        None, ge=10, le=600_000, description="latency budget: optional stages are given up to meet it"
    )
    cost_budget_usd: float | None = Field(
        None, gt=0, le=1000, description="cost budget (estimated USD): optional stages are given up to meet it"
    )

    @field_validator("query")
    @classmethod
    def _valid_query(cls, value: str) -> str:
        """Checked as ``/v1/knowledge-search`` checks it (:class:`ragstep.models.SearchRequest`): an empty, overlong
        or control-character query is the same 422 ``{error, message}`` ("query: query is empty; ...") on both
        routes, not a 400 from the chat use case's own check."""
        check_query(value)
        return value

    def request(self, session_id: str | None) -> ChatRequest:
        return ChatRequest(
            query=self.query,
            knowledge_base_ids=self.knowledge_base_ids,
            knowledge_ids=self.knowledge_ids,
            session_id=session_id,
            pipeline=self.pipeline,
            overrides=self.overrides,
            chat=self.chat,
            profile=self.profile,
            budget_ms=self.budget_ms,
            cost_budget_usd=self.cost_budget_usd,
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
    receipt = report(usage_meter, final)
    if not referenced:  # a pipeline that does not stream: its references and answer now
        yield frame("references", knowledge_references=[r.model_dump(mode="json") for r in grounding_results(final)])
    if not shown and final.chat.answer:
        yield frame("answer", final.chat.answer)
    totals = {
        "request_id": final.request_id,
        "model": final.chat.model,
        "usage": final.chat.usage.model_dump() | ({"cost": receipt.model_dump(mode="json")} if receipt else {}),
        "fallback": final.chat.fallback,
        "references": len(grounding_results(final)),
        "notes": answer_notes(final),
        "interrupted": False,
        "trace": [t.model_dump(mode="json") for t in final.trace],
    }
    yield frame("complete", "", True, session_id=session_id, data=totals)


def session_chat(session_id: str, body: KnowledgeChatBody, ctx: Context, usage_meter: Meter) -> SSEResponse:
    """Answer in the session (its history read, the turn saved), streamed in WeKnora's frames."""
    run = start(body.request(session_id), None, ctx)
    return sse_response(knowledge_frames(body.query, session_id, run, usage_meter), run)


def stateless_chat(body: StatelessChatBody, ctx: Context, usage_meter: Meter) -> SSEResponse:
    """Answer with the history given in the body, streamed in WeKnora's frames; nothing is written."""
    history = [HistoryRound(query=h.query, answer=h.answer) for h in body.history]
    run = start(body.request(None), history, ctx)
    return sse_response(knowledge_frames(body.query, None, run, usage_meter), run)
