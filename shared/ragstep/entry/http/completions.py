"""What ``POST /v1/chat/completions`` (OpenAI Chat Completions compatible) and ``GET /v1/models`` do, for both HTTP
apps: the FastAPI routes (:mod:`ragstep.entry.http.chat`) and the streaming chat function's Starlette app
(:mod:`ragstep.entry.http.chat_app`) parse the same bodies and call the same functions here.

The official ``openai`` SDKs, LangChain's ChatOpenAI, Open WebUI and curl work unchanged: ``model`` names a ragstep
pipeline profile, ``messages`` end with the user's question, and ``stream`` picks an event stream of
``chat.completion.chunk`` frames or one ``chat.completion`` body.

The ragstep options (:class:`RagstepOptions`) are read both at the top level and under ``extra_body``: the ``openai``
SDK's ``extra_body=`` merges its keys into the top level, while curl users and other clients send the nested form,
and either alone would silently lose the other's options.

History: with a ``session_id`` the server keeps the conversation (the earlier messages must then be left out);
without one the request is stateless -- the earlier user/assistant messages are the history, and nothing is written.

A stream is: a chunk with ``delta.role``; one chunk per ``delta.content`` delta (``delta.reasoning_content`` for a
reasoning model's thoughts), sent as soon as the model gives it; a last chunk with ``finish_reason`` and, when asked
(``reference: true``), ``delta.reference`` and ``delta.final_content``; the usage chunk when asked; ``[DONE]``. The
finish reason rides on a chunk of its own, as OpenAI's own streams do: holding each delta back until the next one
arrives, only to mark the last, would delay every delta by one. A stopped answer ends the same way, with
``delta.interrupted: true``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response

from ragstep.app.chat import run_chat, stream_chat, stream_stateless_chat
from ragstep.app.sessions import RUNNING
from ragstep.context import Context
from ragstep.entry.http.auth import Meter
from ragstep.entry.http.errors import redact
from ragstep.entry.http.sse import DONE, SSEResponse, data_frame
from ragstep.errors import InputError, RagstepError
from ragstep.models import ChatRequest, HistoryRound, PipelineState, RetrievalOverrides, StreamEvent
from ragstep.pipeline.definitions import CHAT_PIPELINES
from ragstep.pipeline.executor import drain
from ragstep.stages.chat.common import context_results

log = logging.getLogger("ragstep.http")

#: ``model`` -> chat pipeline: ``ragstep`` is the default RAG pipeline; each pipeline is also a profile by its name.
MODEL_PROFILES: dict[str, str] = {"ragstep": "rag_stream", **{p: p for p in CHAT_PIPELINES}}


class RagstepOptions(BaseModel):
    """What ragstep adds to a Chat Completions request (top level, or nested under ``extra_body``)."""

    model_config = ConfigDict(extra="forbid")

    knowledge_base_ids: list[str] | None = Field(None, description="knowledge bases to answer from (names or ids)")
    knowledge_ids: list[str] | None = Field(None, description="limit retrieval to these knowledge items")
    session_id: str | None = Field(None, description="continue this session (POST /v1/sessions); else stateless")
    overrides: RetrievalOverrides | None = Field(None, description="retrieval settings for this request")
    chat: dict[str, Any] | None = Field(None, description="chat settings for this request (ChatSettings fields)")
    reference: bool | None = Field(None, description="return the references (and the answer with its citations)")


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: str | list[ContentPart] | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatCompletionRequest(RagstepOptions):
    """OpenAI's request body. Fields this server has no use for (``seed``, ``logprobs``, ...) are ignored, as an
    OpenAI-compatible server must; ``user`` is accepted and not stored."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description=f"a pipeline profile: {', '.join(MODEL_PROFILES)}")
    messages: list[Message] = Field(min_length=1, description="the conversation; the last is the user's question")
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    tools: list[Any] | None = None
    user: str | None = None
    extra_body: RagstepOptions | None = None


@dataclass(frozen=True)
class Plan:
    """A request understood: the chat request, the history it brings (None: the session's, saved), the profile."""

    request: ChatRequest
    history: list[HistoryRound] | None
    reference: bool
    profile: str


def _text(message: Message, position: int) -> str:
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    parts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            raise InputError(f"messages[{position}]: only text content is supported, not {part.type!r} parts")
        parts.append(part.text)
    return "".join(parts)


def merged_options(body: ChatCompletionRequest) -> RagstepOptions:
    """The ragstep options from the top level and ``extra_body``; the same option given differently in both is
    refused (which one was meant is not ours to guess)."""
    nested = body.extra_body or RagstepOptions()
    values: dict[str, Any] = {}
    for name in RagstepOptions.model_fields:
        top, inner = getattr(body, name), getattr(nested, name)
        if top is not None and inner is not None and top != inner:
            raise InputError(f"{name} is given at the top level and in extra_body with different values; give it once")
        values[name] = top if top is not None else inner
    return RagstepOptions(**values)


def history_of(messages: list[Message]) -> tuple[list[HistoryRound], str | None]:
    """Earlier messages as rounds (a user message and the assistant's reply; a message without its partner is
    dropped, as the history stage drops incomplete rounds) and the system prompt they set, if any."""
    rounds: list[HistoryRound] = []
    system: list[str] = []
    pending: str | None = None
    for position, message in enumerate(messages):
        text = _text(message, position)
        if message.role in ("system", "developer"):
            system.append(text)
        elif message.role == "user":
            pending = text
        elif message.role == "assistant":
            if pending is not None:
                rounds.append(HistoryRound(query=pending, answer=text))
            pending = None
        else:
            raise InputError(
                f"messages[{position}]: role {message.role!r} is not supported; use system, user or assistant"
            )
    return rounds, "\n\n".join(system) if system else None


def plan_of(body: ChatCompletionRequest) -> Plan:
    if body.model not in MODEL_PROFILES:
        raise InputError(f"unknown model {body.model!r}; this server's models are: {', '.join(MODEL_PROFILES)}")
    if body.n not in (None, 1):
        raise InputError(f"n={body.n} is not supported; ask for one choice (n=1)")
    if body.tools:
        raise InputError("tools are not supported by this server; send the request without tools")
    options = merged_options(body)
    last = body.messages[-1]
    if last.role != "user":
        raise InputError(f"the last message must be the user's question (role 'user'), not {last.role!r}")
    query = _text(last, len(body.messages) - 1)
    rounds, system_prompt = history_of(body.messages[:-1])
    if options.session_id is not None and rounds:
        raise InputError(
            "give either session_id (the server keeps the history) or the earlier messages (stateless), not both"
        )
    chat: dict[str, Any] = dict(options.chat or {})
    openai_settings = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_tokens": body.max_completion_tokens or body.max_tokens,
        "stop": [body.stop] if isinstance(body.stop, str) else body.stop,
        "system_prompt": system_prompt,
    }
    chat.update({k: v for k, v in openai_settings.items() if v is not None})
    request = ChatRequest(
        query=query,
        knowledge_base_ids=options.knowledge_base_ids or [],
        knowledge_ids=options.knowledge_ids or [],
        session_id=options.session_id,
        pipeline=MODEL_PROFILES[body.model],
        overrides=options.overrides or RetrievalOverrides(),
        chat=chat,
    )
    history = None if options.session_id is not None else rounds
    return Plan(request=request, history=history, reference=bool(options.reference), profile=body.model)


# -- running a plan ------------------------------------------------------------------------------------------------

Started = StreamEvent | PipelineState


@dataclass
class Run:
    """A started chat: its first event (or, for a pipeline that does not stream, its final state), the rest of its
    events, the stop signal of its session, and ``close`` -- closes the events (saving a partial answer) and
    unregisters the stop signal."""

    first: Started
    events: Generator[StreamEvent, None, PipelineState]
    stop: threading.Event | None
    close: Callable[[], None]


def start(plan: Plan, ctx: Context) -> Run:
    """Start the chat up to its first event, so that bad input and a failed retrieval are an HTTP error, not an
    event stream that breaks at once."""
    stop: threading.Event | None = None
    unregister: Callable[[], None] = lambda: None  # noqa: E731
    if plan.history is None and plan.request.session_id is not None:
        stop, unregister = RUNNING.register(ctx.tenant_id, plan.request.session_id)
    try:
        if plan.history is None:
            events = stream_chat(plan.request, ctx)
        else:
            events = stream_stateless_chat(plan.request, plan.history, ctx)
        try:
            first: Started = next(events)
        except StopIteration as done:
            first = done.value
    except BaseException:
        unregister()
        raise

    def close() -> None:
        try:
            events.close()
        finally:
            unregister()

    return Run(first=first, events=events, stop=stop, close=close)


def relay(run: Run) -> Generator[StreamEvent, None, PipelineState | None]:
    """The run's events; returns its final state, or None when its session's answer was stopped (the events are
    closed then, which saves the part shown, marked interrupted)."""
    if isinstance(run.first, PipelineState):
        return run.first
    yield run.first
    while run.stop is None or not run.stop.is_set():
        try:
            event = next(run.events)
        except StopIteration as done:
            final: PipelineState = done.value
            return final
        yield event
    run.events.close()
    return None


class Relayed:
    """The run's events (:func:`relay`) for a ``for`` loop; :attr:`final` is its final state once the loop has ended
    (None when its session's answer was stopped, or while it has not ended)."""

    def __init__(self, run: Run) -> None:
        self.final: PipelineState | None = None
        self._events = relay(run)

    def __iter__(self) -> Iterator[StreamEvent]:
        self.final = yield from self._events


def stream_error(exc: BaseException) -> dict[str, str]:
    """An error after the stream started, as the frame's ``error`` object (the server's log has any details)."""
    if isinstance(exc, RagstepError):
        if exc.http_status >= 500:
            log.warning("%s: %s", exc.code, exc.message)
        return {"message": redact(" ".join(exc.message.split())), "type": exc.code, "code": exc.code}
    log.error("chat stream failed", exc_info=exc)
    message = f"internal error ({type(exc).__name__}); see the server log"
    return {"message": message, "type": "internal_error", "code": "internal_error"}


def report(usage_meter: Meter, state: PipelineState) -> None:
    """What the answer used, for the request's usage record."""
    usage = state.chat.usage
    usage_meter.pipeline = state.pipeline
    usage_meter.results = len(context_results(state))
    usage_meter.add_tokens(state.chat.model, usage.prompt_tokens, usage.completion_tokens)


def completion_frames(plan: Plan, run: Run, include_usage: bool, usage_meter: Meter) -> Generator[bytes, None, None]:
    """The ``chat.completion.chunk`` frames of one answer, then ``[DONE]``; an error ends the stream with an
    ``error`` frame instead (never text in the answer)."""
    # The same id and created in every chunk, as OpenAI sends them.
    head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk", "created": int(time.time())}
    head["model"] = plan.profile

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return data_frame(head | {"choices": [choice]})

    # The role chunk goes out with the first frame after it, not alone: the response fetches each frame on a worker
    # thread, and under load every extra hand-off before the first token waits for a CPU. OpenAI's own role chunk
    # also arrives when the first token is ready.
    role = chunk({"role": "assistant", "content": ""})

    def answer() -> Generator[bytes, None, None]:
        shown: list[str] = []
        references: list[Any] = []
        relayed = Relayed(run)
        try:
            for event in relayed:
                if event.event == "answer":
                    shown.append(event.data["delta"])
                    yield chunk({"content": event.data["delta"]})
                elif event.event == "reasoning":
                    yield chunk({"reasoning_content": event.data["delta"]})
                elif event.event == "references":
                    references = event.data.get("results", [])
        except Exception as exc:
            yield data_frame({"error": stream_error(exc)})
            return
        final = relayed.final
        if final is not None:
            answer = final.chat.answer
            if not shown and answer:  # a pipeline that does not stream: the whole answer at once
                yield chunk({"content": answer})
            references = [r.model_dump(mode="json") for r in context_results(final)]
            usage = final.chat.usage.model_dump()
            report(usage_meter, final)
        else:
            answer, usage = "".join(shown), {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        last: dict[str, Any] = {}
        if plan.reference:
            last.update(reference=references, final_content=answer)
        if final is None:
            last["interrupted"] = True
        yield chunk(last, finish="stop")
        if include_usage:
            yield data_frame(head | {"choices": [], "usage": usage})
        yield DONE

    frames = answer()
    yield role + next(frames, b"")
    yield from frames


def completion_body(plan: Plan, state: PipelineState) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": state.chat.answer}
    if plan.reference:
        message["reference"] = [r.model_dump(mode="json") for r in context_results(state)]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": plan.profile,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": state.chat.usage.model_dump(),
    }


def sse_response(frames: Generator[bytes, None, None], run: Run) -> SSEResponse:
    """The event stream of ``frames``; when it ends, however it ends, the frames and then the run are closed."""

    def close() -> None:
        try:
            frames.close()
        finally:
            run.close()

    return SSEResponse(frames, close=close)


def complete(body: ChatCompletionRequest, ctx: Context, usage_meter: Meter) -> Response:
    """The route's answer: one ``chat.completion`` body, or with ``stream`` its chunks as an event stream (started up
    to its first event here, so that bad input and a failed retrieval are an HTTP error)."""
    plan = plan_of(body)
    if not body.stream:
        if plan.history is None:
            state = run_chat(plan.request, ctx)
        else:
            state = drain(stream_stateless_chat(plan.request, plan.history, ctx))
        report(usage_meter, state)
        return JSONResponse(completion_body(plan, state))
    run = start(plan, ctx)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return sse_response(completion_frames(plan, run, include_usage, usage_meter), run)


def model_list() -> dict[str, Any]:
    """``GET /v1/models``: the pipeline profiles ``model`` may name."""
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": 0, "owned_by": "ragstep"} for name in MODEL_PROFILES],
    }
