"""What the chat stages share: the context results, the messages sent to the model, the sampling options."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragstep.errors import RagstepError
from ragstep.models import ChatSettings, PipelineState, SearchResult
from ragstep.ports import ChatGrounding, ChatMessage, ChatOptions, ChatResponse, score_scale

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.ports import ChatModel

_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


def strip_think(text: str) -> str:
    """``text`` without ``<think>...</think>`` blocks (an unclosed one runs to the end) and surrounding blanks."""
    return _THINK_BLOCK.sub("", text).strip()


def context_results(state: PipelineState) -> list[SearchResult]:
    """The results the answer is grounded on: filter_top_k's when it ran (even none), else the merge's (``rag`` has
    no filter_top_k)."""
    return state.latest("final_results", "merge_results")[1]


def options(settings: ChatSettings) -> ChatOptions:
    return ChatOptions(
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        top_p=settings.top_p,
        stop=tuple(settings.stop),
    )


def messages(state: PipelineState, system_prompt: str) -> list[ChatMessage]:
    """System prompt, the history rounds (oldest first), then the current user message: the built context when
    into_chat_message ran, else the question itself (the plain ``chat`` pipelines). The earlier answers go without
    their ``[n]`` markers: those pointed at passages of their own turn, and a model copies them into this one."""
    from ragstep.retrieval.citations import repair_markers

    out = [ChatMessage("system", system_prompt)]
    for round_ in state.chat.history:
        out.append(ChatMessage("user", round_.query))
        out.append(ChatMessage("assistant", repair_markers(round_.answer, 0)[0]))
    out.append(ChatMessage("user", state.chat.user_content or state.request.query))
    return out


def grounding(state: PipelineState, ctx: Context | None = None) -> ChatGrounding:
    """What a model-free answerer reads instead of the prompt: the question, the passages and their retrieval
    scores, and (for a model that is not generative, given ``ctx``) the configured embedding model to compare the
    question with the passages' sentences by meaning: the one instance the process holds, loaded on first use."""
    passages = tuple(state.chat.passages)
    results = context_results(state)[: len(passages)]
    scores = tuple(r.score for r in results)
    encoder = None
    if ctx is not None and not ctx.chat_model.generative:
        with contextlib.suppress(RagstepError):  # an embedder that cannot be built: the words-only decision
            encoder = ctx.embedder(ctx.clients.default_embedding_model())
    # A follow-up resolved without a model was searched with its subject added; it is answered by its own words
    # (the subject helped find the passages), not with the sentence the previous turn already quoted, and from the
    # documents that turn quoted (each passage's document is given for that).
    follow_up = encoder is not None and state.rewritten_query is not None
    history = state.chat.history
    return ChatGrounding(
        question=state.request.query if follow_up else state.search_query,
        passages=passages,
        max_chars=state.chat.settings.extractive_max_chars,
        scores=scores,
        encoder=encoder,
        encoder_scale=score_scale(encoder),
        searched=state.search_query if follow_up else "",
        previous_question=history[-1].query if follow_up and history else "",
        previous_answer=history[-1].answer if follow_up and history else "",
        documents=tuple(r.knowledge_id for r in results) if follow_up else (),
    )


def empty_retrieval(state: PipelineState) -> bool:
    """Retrieval ran for this answer (into_chat_message built the message) and found nothing."""
    return bool(state.chat.user_content) and not context_results(state)


def cache_key(kind: str, model: str, messages: Sequence[ChatMessage], options: ChatOptions | None = None) -> str:
    """The response cache's key: a hash of what kind of call it is, the model, every message and the generation
    settings (a different temperature or max_tokens is a different answer)."""
    payload = {
        "kind": kind,
        "model": model,
        "messages": [[m.role, m.content] for m in messages],
        "options": None
        if options is None
        else [options.temperature, options.max_tokens, options.top_p, list(options.stop)],
    }
    blob = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return f"{kind}:{hashlib.sha256(blob.encode('utf-8')).hexdigest()}"


def answer_key(state: PipelineState, model: str, system: str, options: ChatOptions) -> str:
    """The cache key of an answer. The context template stamps the current time into the user message, so the key
    is built from what the message was made of instead (question, passages, template), not the message itself."""
    msgs = messages(state, system)
    if state.chat.user_content:
        made_of = [state.request.query, state.chat.settings.context_template or "", *state.chat.passages]
        msgs[-1] = ChatMessage("user", json.dumps(made_of, ensure_ascii=False))
    return cache_key("answer", model, msgs, options)


def cached(ctx: Context, key: str) -> ChatResponse | None:
    """The cached response under ``key`` (None on a miss or without a cache)."""
    cache = ctx.cache
    text = cache.get(key) if cache is not None else None
    if text is None:
        return None
    data = json.loads(text)
    decline = data.get("decline")
    return ChatResponse(
        content=str(data.get("content", "")),
        reasoning=str(data.get("reasoning", "")),
        decline=decline if isinstance(decline, dict) else None,
    )


def remember(
    ctx: Context, key: str, content: str, reasoning: str = "", decline: dict[str, object] | None = None
) -> None:
    """Caches a response under ``key``: its text, its reasoning and, for a model-free answerer's decline, why it
    declined (:attr:`~ragstep.ports.ChatResponse.decline`), so that the same question answered from the cache says
    why as the first answer did."""
    cache = ctx.cache
    if cache is not None and content.strip():
        data: dict[str, object] = {"content": content, "reasoning": reasoning}
        if decline:
            data["decline"] = decline
        cache.put(key, json.dumps(data, ensure_ascii=False), ctx.settings.cache_ttl_seconds)


def complete_cached(
    ctx: Context,
    model: ChatModel,
    kind: str,
    messages: Sequence[ChatMessage],
    options: ChatOptions,
    grounding: ChatGrounding | None = None,
    key: str | None = None,
) -> tuple[ChatResponse, bool]:
    """``model.complete`` through the response cache (under ``key``, by default the hash of the call); returns the
    response and whether it was a hit."""
    key = key or cache_key(kind, model.name, messages, options)
    hit = cached(ctx, key)
    if hit is not None:
        return hit, True
    response = model.complete(messages, options, grounding)
    remember(ctx, key, response.content, response.reasoning, response.decline)
    return response, False
