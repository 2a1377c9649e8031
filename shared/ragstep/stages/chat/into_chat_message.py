"""``into_chat_message``: the user message of the answer -- the context passages and the question in the context
template (WeKnora's IntoChatMessage).

The question is checked again (it may have come through a rewrite or a stage Lambda): control characters, invalid
UTF-8 and markup that could inject script into a rendered answer are refused. Passages are numbered ``[n]`` in
result order, each enriched with its images' captions and OCR text after the Markdown image link; with FAQ priority
on, WeKnora's two-section layout puts the FAQ answers first (the high-confidence one marked) and the documents after.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ragstep.errors import InputError
from ragstep.models import ChunkType, Language, PipelineState, SearchResult, TraceEvent, check_query
from ragstep.stages.chat import prompts
from ragstep.stages.chat.common import context_results

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "into_chat_message"
_IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)[^)]*\)")
# Markup that turns a rendered answer into script: refused in questions rather than escaped, so the stored
# history never holds it.
_XSS = re.compile(
    r"<\s*(?:script|iframe|object|embed|svg|img|link|meta|style)\b|javascript\s*:|vbscript\s*:|\bon[a-z]+\s*=",
    re.IGNORECASE,
)


def validate_query(text: str) -> str:
    try:
        query = check_query(text)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if _XSS.search(query):
        raise InputError("query contains HTML or script markup (e.g. <script>, javascript:, onerror=); remove it")
    return query


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
            if text
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


def build_contexts(state: PipelineState, results: list[SearchResult]) -> tuple[str, list[str], str]:
    """The ``{{contexts}}`` text, the passages (in result order) and the layout used."""
    language = state.chat.language
    passages = [enrich(r, language) for r in results]
    settings = state.retrieval
    faq = [i for i, r in enumerate(results) if r.chunk_type == ChunkType.FAQ]
    if not (settings.faq_priority_enabled and faq):
        return "\n\n".join(f"[{n}] {p}" for n, p in enumerate(passages, start=1)), passages, "plain"
    docs = [i for i, r in enumerate(results) if r.chunk_type != ChunkType.FAQ]
    layout = prompts.FAQ_LAYOUT[language]
    exact = results[faq[0]].score >= settings.faq_direct_answer_threshold
    lines = [layout["faq_header"]]
    for k, i in enumerate(faq, start=1):
        mark = layout["exact"] if exact and k == 1 else ""
        lines.append(f"[FAQ-{k}] {mark}{passages[i]}\n")
    if docs:
        lines.append(layout["doc_header"])
        lines.extend(f"[DOC-{k}] {passages[i]}\n" for k, i in enumerate(docs, start=1))
    # Passages stay in result order: an [n] of the extractive answer is row n of the references (the Sources table).
    return "".join(lines).rstrip("\n"), passages, "faq_priority"


def run(state: PipelineState, ctx: Context) -> PipelineState:
    query = validate_query(state.request.query)
    results = context_results(state)
    contexts, passages, layout = build_contexts(state, results)
    language = state.chat.language
    template = state.chat.settings.context_template or prompts.CONTEXT_TEMPLATE[language]
    user_content = prompts.fill(template, query=query, contexts=contexts, **prompts.time_values(language))
    chat = state.chat.model_copy(update={"user_content": user_content, "passages": passages})
    event = TraceEvent(
        stage=STAGE,
        counts={"passages": len(passages), "chars": len(user_content)},
        detail={"layout": layout, "language": language},
    )
    return state.model_copy(update={"chat": chat}).with_trace(event)
