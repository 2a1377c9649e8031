"""``rewrite_query``: resolve pronouns and ellipsis against the history so retrieval gets a self-contained question.

WeKnora's rewrite prompts (five few-shot examples) in the question's language. Skipped when rewriting is disabled,
when there is no history to resolve against, or when the chat model cannot generate text (the extractive answerer).
The original question stays in ``request.query`` (the final message and the trace use it); the rewrite goes to
``rewritten_query``, which retrieval reads. A rewrite that fails, comes back empty or is far longer than asked
(more than twice the limit: the model answered instead of rewriting) keeps the original, traced as ``degrade``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ragstep.errors import ProviderError
from ragstep.models import PipelineState, TraceEvent, check_query
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.stages.chat import prompts
from ragstep.stages.chat.common import complete_cached, strip_think

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "rewrite_query"
# Labels a model may echo from the prompt before its rewrite.
_LABEL = re.compile(r"^\s*(?:改写后的问题|改写后|rewritten question|rewritten)\s*[:：]\s*", re.IGNORECASE)
_QUOTES = "\"'“”‘’「」"
# Rewrites are one short question; a little headroom for reasoning models that emit a few tokens of preamble.
REWRITE_MAX_TOKENS = 256


def conversation(state: PipelineState) -> str:
    user, assistant = prompts.CONVERSATION_ROLES[state.chat.language]
    return "\n".join(f"{user}: {r.query}\n{assistant}: {r.answer}\n" for r in state.chat.history).strip()


def clean_rewrite(text: str) -> str:
    """The question a model's rewrite output holds: ``<think>`` removed, first non-empty line, label and quotes
    stripped."""
    lines = [line.strip() for line in strip_think(text).splitlines() if line.strip()]
    if not lines:
        return ""
    return _LABEL.sub("", lines[0]).strip().strip(_QUOTES).strip()


def too_long(text: str, language: str) -> bool:
    if language == "zh":
        return len(text) > 2 * prompts.REWRITE_MAX_CHARS
    return len(text.split()) > 2 * prompts.REWRITE_MAX_WORDS


def _degrade(state: PipelineState, reason: str, **detail: object) -> PipelineState:
    return state.with_trace(TraceEvent(stage=STAGE, action="degrade", reason=reason, detail=dict(detail)))


def run(state: PipelineState, ctx: Context) -> PipelineState:
    settings = state.chat.settings
    if not settings.enable_rewrite:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="rewrite_disabled"))
    if not state.chat.history:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="empty_history"))
    model = ctx.chat_model
    if not model.generative:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="model_not_generative"))
    language = state.chat.language
    system = prompts.fill(
        settings.rewrite_system_prompt or prompts.REWRITE_SYSTEM_PROMPT[language],
        conversation=conversation(state),
        query=state.request.query,
        **prompts.time_values(language),
    )
    user = prompts.fill(
        settings.rewrite_user_prompt or prompts.REWRITE_USER_PROMPT[language],
        conversation=conversation(state),
        query=state.request.query,
        **prompts.time_values(language),
    )
    try:
        # Rewrites repeat (the same follow-up in the same conversation): served from the response cache.
        response, hit = complete_cached(
            ctx,
            model,
            "rewrite",
            [ChatMessage("system", system), ChatMessage("user", user)],
            ChatOptions(temperature=settings.temperature, max_tokens=REWRITE_MAX_TOKENS),
        )
    except ProviderError as exc:
        return _degrade(state, "rewrite_failed", error=exc.message, model=model.name)
    rewritten = clean_rewrite(response.content)
    if not rewritten:
        return _degrade(state, "empty_rewrite", model=model.name)
    if too_long(rewritten, language):
        return _degrade(state, "rewrite_too_long", rewrite=rewritten[:200], model=model.name)
    try:
        rewritten = check_query(rewritten)
    except ValueError as exc:
        return _degrade(state, "invalid_rewrite", error=str(exc), model=model.name)
    event = TraceEvent(
        stage=STAGE,
        detail={
            "original": state.request.query,
            "rewritten": rewritten,
            "model": model.name,
            **({"cache": "hit" if hit else "miss"} if ctx.cache is not None else {}),
        },
    )
    return state.with_rewritten_query(rewritten, event)
