"""``ingest_parse``: decide whether the file needs ingesting at all, then parse it into the blob store.

Reads the original from ``state.source.blob_key``. In order:

1. The knowledge base must exist, and take the file's extension; a file over ``max_file_bytes`` is refused (before
   reading it when the starter knew its size).
2. ``unchanged``: the knowledge item is completed with the same sha256, chunking options and tag -> nothing to do.
3. ``duplicate``: another completed item of the same knowledge base has the same sha256 -> skipped, with
   ``note = "duplicate of <its file name>"`` (``ingest_index`` removes an older version of this item, if any).
4. Otherwise the file is parsed: ``parsed.md`` (the text stream the chunker reads) or, for a FAQ knowledge base,
   ``faq.json`` (the entries); data files also get ``tables.json`` (their DuckDB summaries); a document with
   pictures gets ``figures.json`` (:mod:`.figures`: stored, OCR'd, captioned). Keys go to ``state.products``;
   status ``parsed``.

Every refusal is an :class:`~ragstep.errors.InputError` naming the file (unsupported type with the supported ones,
unreadable or encrypted PDF, empty document, undecodable text, over the size limit).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from ragstep.errors import InputError
from ragstep.ingest_notes import note_ocr_page
from ragstep.models import IngestState, KnowledgeBaseType, TraceEvent
from ragstep.parsers import OcrOptions, ParseLimits, accepts, parse, unsupported
from ragstep.parsers.faq import read_faq
from ragstep.stages.ingest.common import allowed_suffixes, check_size, require_kb
from ragstep.stages.ingest.dedupe import find_twin, is_unchanged
from ragstep.stages.ingest.figures import FIGURES_JSON, figures_to_json, read_figures
from ragstep.stages.ingest.products import faq_entries_to_json, product_key, put_json, summaries_to_json

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "ingest_parse"


def run(state: IngestState, ctx: Context) -> IngestState:
    src = state.source
    kb = require_kb(ctx, src.knowledge_base_id)
    name = src.filename
    if not accepts(name, allowed_suffixes(kb)):
        raise unsupported(name, allowed_suffixes(kb))
    if src.size is not None:
        check_size(name, src.size, ctx)

    data: bytes | None = None
    digest = src.content_hash
    if not digest:
        data = ctx.blobs.get(src.blob_key)
        check_size(name, len(data), ctx)
        digest = hashlib.sha256(data).hexdigest()
    state = state.with_content_hash(digest)

    existing = ctx.catalog.get_knowledge(src.knowledge_id)
    if existing is not None and existing.knowledge_base_id != kb.id:
        raise InputError(
            f"{name}: knowledge id {src.knowledge_id} belongs to knowledge base {existing.knowledge_base_id}, "
            f"not {kb.id}"
        )
    if is_unchanged(existing, digest, src.tag_id, state.options):
        event = TraceEvent(stage=STAGE, action="skip", reason="unchanged: same content, options and tag")
        return state.advanced("unchanged", event, counts={"chunks": existing.chunk_count if existing else 0})
    twin = find_twin(ctx, kb.id, digest, src.knowledge_id)
    if twin is not None:
        note = f"duplicate of {twin.filename or twin.id}"
        event = TraceEvent(stage=STAGE, action="skip", reason=note, detail={"duplicate_of": twin.id})
        return state.advanced("duplicate", event, note=note, duplicate_of=twin.id)

    if data is None:
        data = ctx.blobs.get(src.blob_key)
        check_size(name, len(data), ctx)
        if hashlib.sha256(data).hexdigest() != digest:
            raise InputError(f"{name}: the stored file does not match its content hash; upload it again")
    products = state.products.model_copy()
    found = {"bytes": len(data)}
    warnings: list[TraceEvent] = []
    note = ""  # how the file was read, when the user should know (a .json read as text, a text read as windows-1252)
    if kb.type == KnowledgeBaseType.FAQ:
        entries, note = read_faq(data, name)
        products.parsed = product_key(state, "faq.json")
        products.format = "faq"
        put_json(ctx.blobs, products.parsed, faq_entries_to_json(entries))
        found["entries"] = len(entries)
    else:
        settings = ctx.settings
        ocr = OcrOptions(
            settings.ocr_engine,
            settings.ocr_languages,
            settings.ocr_timeout_s,
            settings.ocr_max_pages,
            on_page=note_ocr_page,
        )
        limits = ParseLimits(
            settings.parse_max_inflated_bytes, settings.parse_timeout_s, ocr, settings.image_max_per_file
        )
        doc = parse(data, name, limits)
        note = str(doc.metadata.get("note") or "")
        text = doc.text
        if doc.figures:  # pictures inside the document: stored, OCR'd, captioned (ragstep.stages.ingest.figures)
            report = read_figures(doc, kb, src.knowledge_id, ctx)
            text = report.text
            put_json(ctx.blobs, product_key(state, FIGURES_JSON), figures_to_json(report.figures))
            found["images"] = len(report.figures)
            found["captions"] = sum(1 for f in report.figures if f.caption)
            warnings = [TraceEvent(stage=STAGE, action="degrade", reason=w) for w in report.warnings]
        products.parsed = product_key(state, "parsed.md")
        products.format = doc.format
        ctx.blobs.put(products.parsed, text.encode("utf-8"), "text/markdown; charset=utf-8")
        found["characters"] = len(text)
        if doc.pages:
            found["pages"] = doc.pages
        if doc.tables:
            products.tables = product_key(state, "tables.json")
            put_json(ctx.blobs, products.tables, summaries_to_json(doc.tables))
            found["tables"] = len(doc.tables)
    event = TraceEvent(stage=STAGE, counts=found, reason=note or None, detail={"format": products.format})
    return state.advanced("parsed", event, *warnings, products=products, counts=found, note=note)
