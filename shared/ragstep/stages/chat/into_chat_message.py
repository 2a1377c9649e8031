"""``into_chat_message``: the user message of the answer -- the context passages and the question in the context
template (WeKnora's IntoChatMessage).

The question is checked again (it may have come through a rewrite or a stage Lambda): control characters, invalid
UTF-8 and markup that could inject script into a rendered answer are refused. Passages are numbered ``[n]`` in
result order, each enriched with its images' captions and OCR text after the Markdown image link; with FAQ priority
on, WeKnora's two-section layout puts the FAQ answers first (the high-confidence one marked) and the documents after.

The passages are fitted to the chat model's context window first (:mod:`budget`: the lowest-ranked go first, and the
oldest history rounds before any passage); the ones kept are the answer's references (``[n]`` = the n-th), and what
was dropped is traced as a ``token_budget`` row.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ragstep.errors import InputError
from ragstep.models import ChunkType, Language, PipelineState, Reference, SearchResult, TraceEvent, check_query
from ragstep.models.base import check_markup
from ragstep.retrieval.tokens import count_tokens
from ragstep.stages.chat import budget, citing, prompts
from ragstep.stages.chat.common import context_results

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "into_chat_message"
_IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def validate_query(text: str) -> str:
    """The question, checked as every route checks one (markup that turns a rendered answer into script is refused
    rather than escaped, so the stored history never holds it: :func:`ragstep.models.base.check_markup`)."""
    try:
        return check_markup(check_query(text))
    except ValueError as exc:
        raise InputError(str(exc)) from None


def enrich(result: SearchResult, language: Language) -> str:
    """The passage with each image's caption and OCR text after its Markdown link; images the text does not link
    are appended at the end."""
    content = result.content
    if not result.image_info:
        return content
    labels = prompts.IMAGE_LABELS[language]
    by_url = {info.url: info for info in result.image_info}
    linked: set[str] = set()

    def annotate(match: re.Match[str]) -> str:
        url = match.group(1)
        info = by_url.get(url)
        if info is None or url in linked:
            return match.group(0)
        linked.add(url)
        extra = "".join(
            f"\n{label}{text}"
            for label, text in ((labels["caption"], info.caption), (labels["ocr"], info.ocr_text))
            if text and text not in content  # a picture's OCR text is often in the passage already
        )
        return match.group(0) + extra

    content = _IMAGE_LINK.sub(annotate, content)
    unlinked = [
        f"{info.url} {label}{text}"
        for info in result.image_info
        if info.url not in linked
        for label, text in ((labels["caption"], info.caption), (labels["ocr"], info.ocr_text))
        if text
    ]
    if unlinked:
        content = f"{content}\n\n{labels['extra']}\n" + "\n".join(unlinked)
    return content


def build_contexts(
    state: PipelineState, results: list[SearchResult], passages: list[str] | None = None
) -> tuple[str, list[str], str, dict[str, int]]:
    """The ``{{contexts}}`` text, the passages (in result order; ``passages`` when given, else the enriched
    results), the layout used, and the layout's labels ("FAQ-1" -> reference number)."""
    language = state.chat.language
    if passages is None:
        passages = [enrich(r, language) for r in results]
    settings = state.retrieval
    faq = [i for i, r in enumerate(results) if r.chunk_type == ChunkType.FAQ]
    if not (settings.faq_priority_enabled and faq):
        return "\n\n".join(f"[{n}] {p}" for n, p in enumerate(passages, start=1)), passages, "plain", {}
    docs = [i for i, r in enumerate(results) if r.chunk_type != ChunkType.FAQ]
    layout = prompts.FAQ_LAYOUT[language]
    exact = results[faq[0]].score >= settings.faq_direct_answer_threshold
    lines = [layout["faq_header"]]
    labels: dict[str, int] = {}
    for k, i in enumerate(faq, start=1):
        mark = layout["exact"] if exact and k == 1 else ""
        lines.append(f"[FAQ-{k}] {mark}{passages[i]}\n")
        labels[f"FAQ-{k}"] = i + 1
    if docs:
        lines.append(layout["doc_header"])
        for k, i in enumerate(docs, start=1):
            lines.append(f"[DOC-{k}] {passages[i]}\n")
            labels[f"DOC-{k}"] = i + 1
    # Passages stay in result order: an [n] of the extractive answer is row n of the references (the Sources table).
    return "".join(lines).rstrip("\n"), passages, "faq_priority", labels


def _user_content(state: PipelineState, query: str, contexts: str) -> str:
    language = state.chat.language
    template = state.chat.settings.context_template or prompts.CONTEXT_TEMPLATE[language]
    return prompts.fill(template, query=query, contexts=contexts, **prompts.time_values(language))


def run(state: PipelineState, ctx: Context) -> PipelineState:
    query = validate_query(state.request.query)
    results = context_results(state)
    settings = state.chat.settings
    language = state.chat.language
    # Budgets (RAGFlow kb_prompt, then message_fit_in): the knowledge first, within what the system prompt, the
    # history and the question leave; then the whole conversation within 95 % of the window.
    system = citing.system_prompt(state, grounded=bool(results))
    frame = _user_content(state, query, "")
    knowledge_budget = budget.knowledge_budget(settings, system, state.chat.history, frame)
    fitted = budget.fit_passages([enrich(r, language) for r in results], knowledge_budget)
    kept = results[: len(fitted.passages)]
    if fitted.truncated:
        kept = [kept[0].with_content(fitted.passages[0])]
    costs = [count_tokens(p) + budget.PASSAGE_OVERHEAD for p in fitted.passages]
    fit = budget.fit_messages(settings, system, state.chat.history, frame, costs)
    if fit.drop_passages:
        kept = kept[: len(kept) - fit.drop_passages]
    passages = fitted.passages[: len(kept)]
    contexts, passages, layout, labels = build_contexts(state, kept, passages)
    user_content = _user_content(state, query, contexts)
    chat = state.chat.model_copy()
    chat.user_content, chat.passages, chat.labels, chat.history = user_content, passages, labels, fit.history
    chat.references = [Reference.model_validate(r.model_dump()) for r in kept]
    chat.settings = settings.with_max_tokens(fit.max_tokens)
    dropped = [r.id for r in results[len(kept) :]]
    event = TraceEvent(
        stage=STAGE,
        counts={
            "passages": len(passages),
            "chars": len(user_content),
            "prompt_tokens": fit.prompt_tokens,
            "max_tokens": fit.max_tokens,
        },
        detail={"layout": layout, "language": language},
    )
    events = [event]
    if dropped or fitted.truncated or fit.dropped_rounds or fit.max_tokens < settings.max_tokens:
        events.append(
            TraceEvent(
                stage=budget.STAGE,
                action="degrade",
                reason="context_window",
                counts={
                    "dropped_passages": len(dropped),
                    "dropped_rounds": fit.dropped_rounds,
                    "max_tokens": fit.max_tokens,
                },
                detail={
                    "dropped_passage_ids": dropped,
                    "truncated_passage": kept[0].id if fitted.truncated else None,
                    "context_window": settings.context_window,
                    "knowledge_budget": knowledge_budget,
                },
            )
        )
    return state.with_chat(chat, *events)
