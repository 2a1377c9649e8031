"""``rewrite_query``: resolve pronouns and ellipsis against the history so retrieval gets a self-contained question.

WeKnora's rewrite prompts (five few-shot examples) in the question's language. Skipped when rewriting is disabled or
when there is no history to resolve against. The original question stays in ``request.query`` (the final message and
the trace use it); the rewrite goes to ``rewritten_query``, which retrieval reads.

A model's rewrite is checked before retrieval trusts it (:func:`check_rewrite`): it must share a content word with
the question or the conversation, must not be the prompt given back (small models echo their instructions), and must
stay within a length the question and its subject can need. A rewrite that fails, comes back empty or fails a check
is traced as ``degrade`` with the reason and not used: the question is then resolved as without a model (below), so
a small model that echoes its prompt costs the follow-up no more than having no model at all (the degrade row's
``fallback`` says which: ``history_terms`` or ``as_asked``).

Without a generative model (the extractive answerer) an elliptical follow-up is still resolved: the question is
searched with the content words of the question it leans on (:mod:`ragstep.retrieval.followup`), traced as ``run``
with ``method: history_terms``; a question that stands alone is searched as asked (``skip``). The model-free answerer
then answers the user's own words, the added subject only helping to read them, and does not give the previous
answer again for a new ask (:mod:`ragstep.retrieval.follow_up_answer`; the grounding carries both).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ragstep.errors import ProviderError
from ragstep.models import PipelineState, TraceEvent, check_query
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.retrieval.followup import resolve
from ragstep.retrieval.text import tokenize
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


def _size(text: str, language: str) -> int:
    return len(text.strip()) if language == "zh" else len(text.split())


def check_rewrite(
    rewrite: str, question: str, earlier: list[str], conversation: str, prompt: str, language: str
) -> str | None:
    """Why ``rewrite`` cannot stand for ``question`` (None when it can); ``earlier`` are the conversation's previous
    questions, ``conversation`` its whole text (answers too), ``prompt`` the instructions the model was given.

    * ``rewrite_too_long`` -- longer than the question and the previous question together, plus a few words of
      headroom (a rewrite adds the subject the question left out, nothing more), or than twice the asked limit;
    * ``echoed_prompt`` -- most of its words are the prompt's own, not the question's or the conversation's (the
      model gave its instructions back);
    * ``unrelated_rewrite`` -- no content word in common with the question or the conversation."""
    previous = earlier[-1] if earlier else ""
    headroom = 15 if language == "zh" else 8
    if too_long(rewrite, language) or _size(rewrite, language) > (
        _size(question, language) + _size(previous, language) + headroom
    ):
        return "rewrite_too_long"
    words = set(tokenize(rewrite))
    grounded = set(tokenize(question)) | set(tokenize(conversation))
    from_prompt = (words - grounded) & set(tokenize(prompt))
    if words and len(from_prompt) * 2 > len(words):
        return "echoed_prompt"
    if words and grounded and not words & grounded:
        return "unrelated_rewrite"
    return None


def _without_model(state: PipelineState, degraded: TraceEvent | None = None) -> PipelineState:
    """The follow-up resolved from the conversation's questions, when it leans on them (no model to rewrite it, or
    ``degraded``: the model's rewrite was not usable, traced first with the fallback taken)."""
    earlier = [r.query for r in state.chat.history]
    found = resolve(state.request.query, earlier)
    if degraded is not None:
        fallback = "as_asked" if found is None else "history_terms"
        state = state.with_trace(degraded.model_copy(update={"detail": {**degraded.detail, "fallback": fallback}}))
        if found is None:
            return state
    if found is None:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="standalone_question"))
    try:
        query = check_query(found.query)
    except ValueError as exc:
        return _degrade(state, "invalid_rewrite", error=str(exc), method="history_terms")
    event = TraceEvent(
        stage=STAGE,
        detail={
            "original": state.request.query,
            "rewritten": query,
            "method": "history_terms",
            "follow_up": found.reason,
            "added_terms": list(found.added),
            # The same words as the user wrote them ("Pro", not "pro"), for the note that quotes them.
            "added_words": as_written(found.added, reversed(earlier)),
        },
    )
    return state.with_rewritten_query(query, event)


def as_written(terms: Iterable[str], questions: Iterable[str]) -> list[str]:
    """Each of ``terms`` (search tokens: lowercased) as it is written in the first of ``questions`` that holds it
    as a whole word (the token itself when none does)."""
    texts = [unicodedata.normalize("NFKC", q) for q in questions]
    out: list[str] = []
    for term in terms:
        word = re.compile(rf"(?<!\w){re.escape(term)}(?!\w)", re.IGNORECASE)
        found = next((m.group(0) for text in texts if (m := word.search(text))), term)
        out.append(found)
    return out


def _degrade(state: PipelineState, reason: str, **detail: object) -> PipelineState:
    return state.with_trace(TraceEvent(stage=STAGE, action="degrade", reason=reason, detail=dict(detail)))


def _fall_back(state: PipelineState, reason: str, **detail: object) -> PipelineState:
    """The model's rewrite is not used (``reason``): the follow-up is resolved as without a model."""
    return _without_model(state, TraceEvent(stage=STAGE, action="degrade", reason=reason, detail=dict(detail)))


def run(state: PipelineState, ctx: Context) -> PipelineState:
    settings = state.chat.settings
    if not settings.enable_rewrite:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="rewrite_disabled"))
    if not state.chat.history:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="empty_history"))
    model = ctx.chat_model
    if not model.generative:
        return _without_model(state)
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
        return _fall_back(state, "rewrite_failed", error=exc.message, model=model.name)
    rewritten = clean_rewrite(response.content)
    if not rewritten:
        return _fall_back(state, "empty_rewrite", model=model.name)
    talk = conversation(state)
    instructions = system + "\n" + user.replace(talk, "").replace(state.request.query, "")
    earlier = [r.query for r in state.chat.history]
    rejected = check_rewrite(rewritten, state.request.query, earlier, talk, instructions, language)
    if rejected is not None:
        return _fall_back(state, rejected, rewrite=rewritten[:200], model=model.name)
    try:
        rewritten = check_query(rewritten)
    except ValueError as exc:
        return _fall_back(state, "invalid_rewrite", error=str(exc), model=model.name)
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
