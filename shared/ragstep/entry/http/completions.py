"""What ``POST /v1/chat/completions`` (OpenAI Chat Completions compatible) and ``GET /v1/models`` do, for both HTTP
apps: the FastAPI routes (:mod:`ragstep.entry.http.chat`) and the streaming chat function's Starlette app
(:mod:`ragstep.entry.http.chat_app`) parse the same bodies and call the same functions here.

The official ``openai`` SDKs, LangChain's ChatOpenAI, litellm, Open WebUI and curl work unchanged: ``model`` names a
pipeline profile and, for clients that can send nothing else, the knowledge bases (``ragstep/<knowledge base>``,
:mod:`ragstep.entry.http.model_ids`); ``messages`` end with the user's question, and ``stream`` picks an event stream
of ``chat.completion.chunk`` frames or one ``chat.completion`` body. ``finish_reason`` is the model's (``length``
when it was cut at ``max_tokens``, ``stop`` otherwise); ``usage`` is the model's count, or ragstep's estimate marked
``"estimated": true`` (the extractive answerer). Errors, before the stream and inside it, are OpenAI's shape
(:mod:`ragstep.entry.http.errors`). ``append_sources`` ends the answer's text with its notes and sources as Markdown
(:mod:`ragstep.entry.http.sources`).

The ragstep options (:class:`RagstepOptions`) are read both at the top level and under ``extra_body``: the ``openai``
SDK's ``extra_body=`` merges its keys into the top level, while curl users and other clients send the nested form,
and either alone would silently lose the other's options.

History: with a ``session_id`` the server keeps the conversation (the earlier messages must then be left out);
without one the request is stateless -- the earlier user/assistant messages are the history, and nothing is written.

A stream is: a chunk with ``delta.role``; one chunk per ``delta.content`` delta (``delta.reasoning_content`` for a
reasoning model's thoughts), sent as soon as the model gives it; a last chunk with ``finish_reason`` and, when asked
(``reference: true``), ``delta.reference``, ``delta.final_content`` and ``delta.notes`` (the answer's notes, as
``message.notes`` of a whole answer); the usage chunk when asked; ``[DONE]``. The finish reason rides on a chunk
of its own, as OpenAI's own streams do: holding each delta back until the next one arrives, only to mark the last,
would delay every delta by one. A stopped answer ends the same way, with ``delta.interrupted: true``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response

from ragstep.app.answers import answer_notes, grounding_results
from ragstep.app.chat_runs import Relayed, Run, run_to_end, start
from ragstep.context import Context
from ragstep.entry.http.auth import Meter
from ragstep.entry.http.errors import FieldError, openai_error
from ragstep.entry.http.model_ids import (
    KB_JOINER,
    MODEL_PROFILES,
    choice_of,
    knowledge_bases,
    no_knowledge_base,
    retrieves,
    searches_nothing,
)
from ragstep.entry.http.sources import notes_markdown, sources_markdown, without_sources
from ragstep.entry.http.sse import DONE, SSEResponse, data_frame
from ragstep.errors import InputError, RagstepError
from ragstep.models import ChatRequest, HistoryRound, PipelineState, RetrievalOverrides, Usage, check_query
from ragstep.models.base import check_markup
from ragstep.models.cost import CostReceipt

log = logging.getLogger("ragstep.http")

__all__ = ["MODEL_PROFILES", "ChatCompletionRequest", "Plan", "complete"]

#: What a model or provider says when it stopped -> OpenAI's ``finish_reason`` (anything else: ``stop``).
FINISH_REASONS = {
    "length": "length",
    "max_tokens": "length",  # Bedrock
    "content_filter": "content_filter",
    "content_filtered": "content_filter",  # Bedrock
    "guardrail_intervened": "content_filter",  # Bedrock
}


class RagstepOptions(BaseModel):
    """What ragstep adds to a Chat Completions request (top level, or nested under ``extra_body``)."""

    model_config = ConfigDict(extra="forbid")

    knowledge_base_ids: list[str] | None = Field(None, description="knowledge bases to answer from (names or ids)")
    knowledge_ids: list[str] | None = Field(None, description="limit retrieval to these knowledge items")
    session_id: str | None = Field(None, description="continue this session (POST /v1/sessions); else stateless")
    overrides: RetrievalOverrides | None = Field(None, description="retrieval settings for this request")
    chat: dict[str, Any] | None = Field(None, description="chat settings for this request (ChatSettings fields)")
    reference: bool | None = Field(None, description="return the references (and the answer with its citations)")
    append_sources: bool | None = Field(
        None,
        description="end the answer's text with its sources as Markdown (default: RAGSTEP_OPENAI_APPEND_SOURCES; "
        "unset: yes unless `reference` is asked for)",
    )


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


class ResponseFormat(BaseModel):
    """OpenAI's ``response_format``: only ``text`` (what every answer is) is accepted."""

    model_config = ConfigDict(extra="allow")

    type: str


class ChatCompletionRequest(RagstepOptions):
    """OpenAI's request body. Fields this server has no use for (``seed``, ``logprobs``, ...) are ignored, as an
    OpenAI-compatible server must; ``user`` is accepted and not stored. Fields that would change what comes back
    (``n`` other than 1, ``tools``, a ``response_format`` other than ``text``) are refused with a 400 naming them:
    ignored, the client would read an answer it did not ask for."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(
        description="ragstep/<knowledge base> (GET /v1/models lists them; ragstep/<kb1>+<kb2> for several), or a "
        f"pipeline profile alone: {', '.join(MODEL_PROFILES)}"
    )
    messages: list[Message] = Field(min_length=1, description="the conversation; the last is the user's question")
    stream: bool = False
    stream_options: StreamOptions | None = None
    # OpenAI's ranges, checked here so that the error names the field (``param``) as OpenAI's would.
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    n: int | None = None
    tools: list[Any] | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None
    extra_body: RagstepOptions | None = None


@dataclass(frozen=True)
class Plan:
    """A request understood: the chat request, the history it brings (None: the session's, saved), the profile
    (``model`` as asked), and whether the answer's text ends with its sources."""

    request: ChatRequest
    history: list[HistoryRound] | None
    reference: bool
    profile: str
    sources: bool = False


def _text(message: Message, position: int) -> str:
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    parts = []
    for part in message.content:
        if part.type != "text" or part.text is None:
            raise FieldError(
                f"messages[{position}]: only text content is supported, not {part.type!r} parts", "messages"
            )
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
            if pending is not None:  # an answer sent back as it was shown: without the sources appended to it
                rounds.append(HistoryRound(query=pending, answer=without_sources(text)))
            pending = None
        else:
            raise FieldError(
                f"messages[{position}]: role {message.role!r} is not supported; use system, user or assistant",
                "messages",
            )
    return rounds, "\n\n".join(system) if system else None


def web_search(options: RagstepOptions) -> bool:
    # RetrievalOverrides is derived at run time, so its fields are read by name.
    return options.overrides is not None and bool(getattr(options.overrides, "web_search", None))


def plan_of(body: ChatCompletionRequest, ctx: Context) -> Plan:
    choice = choice_of(body.model, ctx)
    if body.n not in (None, 1):
        raise FieldError(f"n={body.n} is not supported; ask for one choice (n=1)", "n")
    if body.tools:
        raise FieldError("tools are not supported by this server; send the request without tools", "tools")
    if body.response_format is not None and body.response_format.type != "text":
        # The answer is text with [n] citations (or a quote of the passages): a JSON mode would be ignored or break it.
        raise FieldError(
            f"response_format {body.response_format.type} is not supported; the answer is text with citations: send "
            "the request without response_format (or with type 'text')",
            "response_format",
        )
    options = merged_options(body)
    if options.knowledge_base_ids and not retrieves(choice.pipeline):
        named = KB_JOINER.join(options.knowledge_base_ids)
        raise searches_nothing(body.model, body.model.partition("/")[0], "knowledge_base_ids", named)
    last = body.messages[-1]
    if last.role != "user":
        raise FieldError(f"the last message must be the user's question (role 'user'), not {last.role!r}", "messages")
    query = _text(last, len(body.messages) - 1)
    if not query.strip():
        raise FieldError("query is empty: the last message has no text; send the question as its content", "messages")
    try:  # the question's own rules (length, control characters, markup), said of the field that holds it
        check_markup(check_query(query))
    except ValueError as exc:
        raise FieldError(str(exc), "messages") from None
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
    other_targets = bool(options.knowledge_ids) or web_search(options)
    kb_ids = knowledge_bases(body.model, choice, options.knowledge_base_ids or [], ctx, other_targets=other_targets)
    # Said here for the clients that can send nothing else (with a session, the session is checked first).
    if retrieves(choice.pipeline) and options.session_id is None and not (kb_ids or other_targets):
        raise no_knowledge_base(body.model)
    request = ChatRequest(
        query=query,
        knowledge_base_ids=kb_ids,
        knowledge_ids=options.knowledge_ids or [],
        session_id=options.session_id,
        pipeline=choice.pipeline,
        overrides=options.overrides or RetrievalOverrides(),
        chat=chat,
    )
    history = None if options.session_id is not None else rounds
    sources = _append_sources(options, ctx.settings.openai_append_sources)
    return Plan(
        request=request, history=history, reference=bool(options.reference), profile=body.model, sources=sources
    )


def _append_sources(options: RagstepOptions, server_default: bool | None) -> bool:
    """The request's choice, else the server's, else: a client that asked for ``reference`` reads the sources as
    data; any other sees only the text, so the sources go there (LangChain and litellm drop unknown fields)."""
    if options.append_sources is not None:
        return options.append_sources
    if server_default is not None:
        return server_default
    return not options.reference


# -- formatting a run ------------------------------------------------------------------------------------------------


def stream_error(exc: BaseException) -> dict[str, Any]:
    """An error after the stream started, as the frame's ``error`` object, OpenAI's shape (the server's log has any
    details)."""
    if isinstance(exc, RagstepError):
        if exc.http_status >= 500:
            log.warning("%s: %s", exc.code, exc.message)
        return openai_error(exc.http_status, exc.code, exc.message, getattr(exc, "param", None))
    log.error("chat stream failed", exc_info=exc)
    return openai_error(500, "internal_error", "internal error; see the server log")


def report(usage_meter: Meter, state: PipelineState) -> CostReceipt | None:
    """What the answer used, for the request's usage record: the tokens a model reported (an estimate is what the
    answer would have cost a model, not what it cost: token quotas count only model tokens), and its cost receipt
    (returned, for ``usage.cost``)."""
    usage = state.chat.usage
    usage_meter.pipeline = state.pipeline
    usage_meter.results = len(grounding_results(state))
    counted = (0, 0) if usage.estimated else (usage.prompt_tokens, usage.completion_tokens)
    usage_meter.add_tokens(state.chat.model, *counted)
    return usage_meter.charge(state)


def finish_reason(state: PipelineState) -> str:
    """OpenAI's ``finish_reason`` for the answer: the model's, in OpenAI's words (``length`` when it was cut)."""
    return FINISH_REASONS.get(state.chat.finish_reason or "", "stop")


def usage_body(usage: Usage, receipt: CostReceipt | None = None) -> dict[str, Any]:
    """OpenAI's ``usage``; ``estimated: true`` when ragstep counted the tokens, not a model; ``cost``: the request's
    estimated USD, a number, and ``cost_receipt``: its receipt (:mod:`ragstep.app.cost`), which OpenAI clients keep
    as extra fields.

    ``usage.cost`` is a number on this route only: OpenAI-compatible gateways report what a request cost there
    (OpenRouter's convention), and litellm types the field as a float and bills from it -- a receipt in its place
    made every litellm call warn and left the figure unread. ragstep's own routes keep the receipt in ``usage.cost``.
    """
    body: dict[str, Any] = usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"})
    if usage.estimated:
        body["estimated"] = True
    if receipt is not None:
        body["cost"] = receipt.total_usd
        body["cost_receipt"] = receipt.model_dump(mode="json")
    return body


def appended_sources(plan: Plan, state: PipelineState) -> str:
    """The notes and sources the answer's text ends with (empty unless the plan asks for it)."""
    if not plan.sources:
        return ""
    return notes_markdown(answer_notes(state)) + sources_markdown(state, grounding_results(state))


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
        finish = "stop"
        if final is not None:
            answer = final.chat.answer
            if not shown and answer:  # a pipeline that does not stream: the whole answer at once
                yield chunk({"content": answer})
            block = appended_sources(plan, final)
            if block:
                yield chunk({"content": block})
                answer += block
            references = [r.model_dump(mode="json") for r in grounding_results(final)]
            finish = finish_reason(final)
            usage = usage_body(final.chat.usage, report(usage_meter, final))
        else:
            answer, usage = "".join(shown), usage_body(Usage())
        last: dict[str, Any] = {}
        if plan.reference:
            last.update(reference=references, final_content=answer, notes=answer_notes(final) if final else [])
        if final is None:
            last["interrupted"] = True
        yield chunk(last, finish=finish)
        if include_usage:
            yield data_frame(head | {"choices": [], "usage": usage})
        yield DONE

    frames = answer()
    yield role + next(frames, b"")
    yield from frames


def completion_body(plan: Plan, state: PipelineState, receipt: CostReceipt | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": state.chat.answer + appended_sources(plan, state)}
    if plan.reference:
        message["reference"] = [r.model_dump(mode="json") for r in grounding_results(state)]
        message["notes"] = answer_notes(state)
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(state)}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": plan.profile,
        "choices": [choice],
        "usage": usage_body(state.chat.usage, receipt),
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
    plan = plan_of(body, ctx)
    if not body.stream:
        state = run_to_end(plan.request, plan.history, ctx)
        return JSONResponse(completion_body(plan, state, report(usage_meter, state)))
    run = start(plan.request, plan.history, ctx)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return sse_response(completion_frames(plan, run, include_usage, usage_meter), run)
