"""What the chat stages share: the context results, the messages sent to the model, the sampling options."""

from __future__ import annotations

import re

from ragstep.models import ChatSettings, PipelineState, SearchResult
from ragstep.ports import ChatGrounding, ChatMessage, ChatOptions

_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


def strip_think(text: str) -> str:
    """``text`` without ``<think>...</think>`` blocks (an unclosed one runs to the end) and surrounding blanks."""
    return _THINK_BLOCK.sub("", text).strip()


def context_results(state: PipelineState) -> list[SearchResult]:
    """The results the answer is grounded on: filter_top_k's when it ran, else the merge's (``rag`` has none)."""
    return list(state.final_results or state.merge_results)


def options(settings: ChatSettings) -> ChatOptions:
    return ChatOptions(
        temperature=settings.temperature,
        max_tokens=settings.max_tokens,
        top_p=settings.top_p,
        stop=tuple(settings.stop),
    )


def messages(state: PipelineState, system_prompt: str) -> list[ChatMessage]:
    """System prompt, the history rounds (oldest first), then the current user message: the built context when
    into_chat_message ran, else the question itself (the plain ``chat`` pipelines)."""
    out = [ChatMessage("system", system_prompt)]
    for round_ in state.chat.history:
        out.append(ChatMessage("user", round_.query))
        out.append(ChatMessage("assistant", round_.answer))
    out.append(ChatMessage("user", state.chat.user_content or state.request.query))
    return out


def grounding(state: PipelineState) -> ChatGrounding:
    return ChatGrounding(
        question=state.search_query,
        passages=tuple(state.chat.passages),
        max_chars=state.chat.settings.extractive_max_chars,
    )
