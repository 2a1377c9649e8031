"""``ingest_chunk``: the parsed text (or FAQ entries, or data-file summaries) -> ``chunks.jsonl`` in the blob store.

* Documents: structure-preserving chunks of ``options.chunk_size`` / ``chunk_overlap``
  (:func:`ragstep.retrieval.chunking.split_text`), or with ``options.parent_child`` children of that size that carry
  their parent's text (:func:`ragstep.stages.ingest.chunkers.parent_child_chunks`).
* Data files: a ``table_summary`` chunk and one ``table_column`` chunk per column of every sheet.
* FAQ files: one row per phrasing of every entry.

Status ``chunked``; ``counts["chunks"]`` is what will be indexed. Skipped files (unchanged, duplicate) pass through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError
from ragstep.ingest_notes import note_chunked, note_chunking
from ragstep.models import IngestState, KnowledgeBaseType, TraceEvent
from ragstep.retrieval.chunking import ChunkerConfig
from ragstep.stages.ingest.chunkers import data_chunks, faq_entry_chunks, mark_ocr, parent_child_chunks, text_chunks
from ragstep.stages.ingest.common import require_kb, state_knowledge
from ragstep.stages.ingest.figures import FIGURES_JSON, attach_figures, caption_chunks, figures_from_json
from ragstep.stages.ingest.products import (
    faq_entries_from_json,
    get_json,
    product_key,
    put_chunks,
    summaries_from_json,
)

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "ingest_chunk"


def run(state: IngestState, ctx: Context) -> IngestState:
    if state.skipped:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason=state.status))
    parsed = state.products.parsed
    if state.status != "parsed" or not parsed:
        raise InputError(f"{STAGE} needs a parsed state (status 'parsed'), got status {state.status!r}")
    kb = require_kb(ctx, state.source.knowledge_base_id)
    knowledge = state_knowledge(state)
    products = state.products
    detail: dict[str, object] = {}
    if kb.type == KnowledgeBaseType.FAQ:
        chunks = faq_entry_chunks(kb, knowledge, faq_entries_from_json(get_json(ctx.blobs, parsed)))
        detail["mode"] = "faq"
    elif products.tables:
        chunks = data_chunks(kb, knowledge, summaries_from_json(get_json(ctx.blobs, products.tables)))
        detail["mode"] = "data"
    else:
        text = ctx.blobs.get(parsed).decode("utf-8")
        options = state.options
        if options.parent_child:
            chunks = parent_child_chunks(kb, knowledge, text, options)
            detail.update(mode="parent_child", parent_size=options.effective_parent_size)
        else:
            config = ChunkerConfig(options.chunk_size, options.chunk_overlap)
            chunks = text_chunks(kb, knowledge, text, config, progress=note_chunking)
            detail["mode"] = "text"
        chunks = mark_ocr(chunks, text)
        if state.counts.get("images"):  # pictures inside the document (ragstep.stages.ingest.figures)
            figures = figures_from_json(get_json(ctx.blobs, product_key(state, FIGURES_JSON)))
            chunks = attach_figures(chunks, figures)
            chunks += caption_chunks(kb, knowledge, text, chunks, figures)
        detail.update(chunk_size=options.chunk_size, chunk_overlap=options.chunk_overlap)
    if not chunks:
        raise InputError(f"{state.source.filename}: the document is empty")
    key = product_key(state, "chunks.jsonl")
    put_chunks(ctx.blobs, key, chunks)
    note_chunked(len(chunks))
    found = {"chunks": len(chunks)}
    if state.options.parent_child and detail.get("mode") == "parent_child":
        found["parents"] = len({c.parent_id for c in chunks})
    event = TraceEvent(stage=STAGE, counts=found, detail=detail)
    products = products.model_copy()
    products.chunks = key
    return state.advanced("chunked", event, products=products, counts=found)
