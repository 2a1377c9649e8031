"""``ingest_index``: make the new version searchable in one step, record it, then tidy the blob store.

1. Data files: the original is published to ``data/<kb id>/<knowledge id>/<file name>`` (where DuckDB reads it),
   just before the swap, so the data always matches the chunks that describe it.
2. ``replace_knowledge``: every chunk of the previous version is replaced by the new ones in one index transaction
   (readers see the old version or the new one, never nothing and never a mix).
3. The knowledge record (status ``completed``, chunk count, content hash, options, ``source_key``). When it
   replaces a completed version of other content, tag or options, the state's counts say so (``replaced_chunks``:
   that version's chunks), which is how an ingest reports ``updated`` rather than ``indexed``
   (:mod:`ragstep.app.ingest`).
4. Clean-up, best effort: this run's transient products (``ingest/<kb id>/<knowledge id>/<sha256>/<run id>/``), the
   originals of earlier versions (``sources/...``) and stale data files. A failure here is logged on the trace, not
   raised: the document is indexed.

Progress (:mod:`ragstep.ingest_notes`): the chunks are noted as the index takes them (its keyword statistics are
most of a large document's keyword phase), and with ``done`` 0 while they are read back before (seconds too).

A ``chunked`` state (the ``ingest_keywords`` pipeline: no embed stage) is indexed for keyword search first: its chunks
go in without vectors and, when the knowledge base has an embedding model, are kept under ``pending/`` and named by
the record's ``vectors_pending``, for :mod:`ragstep.app.ingest_vectors` to add the vectors later. The ingest state
machine's uploads (``vectors_later``) take that path too, and here get the batches its ``embed_batches`` Map embeds
(:mod:`.embed_batch`).

``duplicate``: nothing is indexed; an older version of this knowledge item (the path used to hold other content) is
removed with its blobs. ``unchanged`` passes through.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ragstep.errors import InputError, RagstepError
from ragstep.index_capabilities import capacity_warning, vector_backfill
from ragstep.ingest_notes import note_indexing
from ragstep.models import EmbedBatch, IngestState, Knowledge, TraceEvent
from ragstep.stages.ingest.common import require_kb, state_knowledge
from ragstep.stages.ingest.dedupe import is_unchanged, mark_hash, unmark_hash
from ragstep.stages.ingest.products import (
    CHUNKS_TYPE,
    chunks_of,
    content_type,
    data_blob_key,
    delete_blobs,
    get_vectors,
    is_owned_key,
    kept_prefixes,
    pending_chunks_key,
    pending_prefix,
    run_products_prefix,
)

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "ingest_index"


def run(state: IngestState, ctx: Context) -> IngestState:
    src = state.source
    if state.status == "unchanged":
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="unchanged"))
    kb = require_kb(ctx, src.knowledge_base_id)
    existing = ctx.catalog.get_knowledge(src.knowledge_id)
    if state.status == "duplicate":
        return _drop_duplicate(state, ctx, existing)
    if state.status not in ("embedded", "chunked") or not state.products.chunks:
        raise InputError(f"{STAGE} needs an embedded or chunked state, got status {state.status!r}")

    body = ctx.blobs.get(state.products.chunks)
    chunks = chunks_of(body, reading=lambda _, total: note_indexing(0, total))
    vectors = get_vectors(ctx.blobs, state.products.vectors) if state.products.vectors else None
    if vectors is not None and vectors.shape[0] != len(chunks):
        raise InputError(f"{src.filename}: {vectors.shape[0]} vectors for {len(chunks)} chunks; ingest it again")
    knowledge = state_knowledge(state)
    keep = {src.blob_key}
    if state.status == "chunked" and kb.embedding_model != "none" and chunks:
        if vector_backfill(ctx.index) is None:
            raise InputError(f"{STAGE}: this index takes no vectors after the chunks; run the ingest pipeline")
        # Written before the swap: a record naming it always finds it.
        pending = pending_chunks_key(kb.id, src.knowledge_id, src.content_hash)
        ctx.blobs.put(pending, body, CHUNKS_TYPE)  # the chunks file as read: no second serialisation
        knowledge = knowledge.model_copy(update={"vectors_pending": pending})
        keep.add(pending)
    if state.products.tables:
        key = data_blob_key(kb, knowledge)
        ctx.blobs.put(key, ctx.blobs.get(src.blob_key), content_type(src.filename))
        keep.add(key)
    space = state.products.space if vectors is not None else None
    ctx.index.replace_knowledge(src.knowledge_id, chunks, vectors, space)
    now = time.time()
    done = knowledge.model_copy(
        update={
            "status": "completed",
            "chunk_count": len(chunks),
            "created_at": existing.created_at if existing else now,
            "updated_at": now,
        }
    )
    ctx.catalog.put_knowledge(done)

    events = []
    cleaned = 0
    try:
        if existing is not None and existing.content_hash != done.content_hash:
            unmark_hash(ctx, existing)
        mark_hash(ctx, done)
        # This run's products, and earlier versions' originals and data files. Not other runs' products: a
        # concurrent run of the same file (same folder ingested twice at once) is still reading them.
        prefixes = (
            *kept_prefixes(kb.id, src.knowledge_id),
            pending_prefix(kb.id, src.knowledge_id),  # an earlier version's chunks waiting for vectors
            run_products_prefix(state),
        )
        cleaned = len(delete_blobs(ctx.blobs, prefixes, keep=keep))
        old = existing.source_key if existing else ""
        if old and old not in keep and is_owned_key(old):
            ctx.blobs.delete(old)
    except RagstepError as exc:
        events.append(TraceEvent(stage=STAGE, action="degrade", reason=f"blob clean-up failed: {exc.message}"))
    found = {"indexed": len(chunks), "blobs_removed": cleaned}
    if done.vectors_pending:
        found["vectors_pending"] = len(chunks)
    # An index with a size limit (S3 snapshots) says when this knowledge base should move to OpenSearch.
    warning = capacity_warning(ctx.index, kb.id)
    batches = embed_batches(len(chunks), ctx) if done.vectors_pending and state.vectors_later else []
    if batches:
        found["embed_batches"] = len(batches)
    events.insert(0, TraceEvent(stage=STAGE, counts=found, reason=warning, detail={"space": state.products.space}))
    counts = {"chunks": len(chunks)}
    replaced = existing is not None and existing.status == "completed"
    if replaced and not is_unchanged(existing, src.content_hash, src.tag_id, state.options):
        # This run replaced another version that was searchable: an update, not a first ingest. (The same version,
        # indexed meanwhile by a concurrent run of the same file, is not one.)
        counts["replaced_chunks"] = existing.chunk_count if existing else 0
    indexed = state.advanced("indexed", *events, counts=counts)
    if not batches:
        return indexed
    update = {"embed_batches": batches, "embed_concurrency": ctx.settings.embed_batch_concurrency}
    return indexed.model_copy(update=update)


def embed_batches(chunks: int, ctx: Context) -> list[EmbedBatch]:
    """The ingest machine's embedding batches of a document of ``chunks`` pending chunks: ranges of
    ``embed_batch_chunks`` (RAGSTEP_EMBED_BATCH_CHUNKS), larger when that would pass the Map's ``max_items``."""
    from ragstep.pipeline.definitions import EMBED_BATCHES

    size = max(ctx.settings.embed_batch_chunks, -(-chunks // EMBED_BATCHES.max_items))
    return [EmbedBatch(start=start, stop=min(start + size, chunks)) for start in range(0, chunks, size)]


def _drop_duplicate(state: IngestState, ctx: Context, previous: Knowledge | None) -> IngestState:
    """Index nothing; remove this item's older version (the path now holds another item's content) and blobs."""
    src = state.source
    removed = ctx.index.delete_knowledge([src.knowledge_id]) if previous else 0
    # Only ingestion's own blobs: an upload outside them is the user's (``ragstep delete`` removes it).
    gone = delete_blobs(
        ctx.blobs, (*kept_prefixes(src.knowledge_base_id, src.knowledge_id), run_products_prefix(state))
    )
    if previous is not None:
        unmark_hash(ctx, previous)
        ctx.catalog.delete_knowledge(src.knowledge_id)
    event = TraceEvent(
        stage=STAGE,
        action="skip",
        reason=state.note,
        counts={"removed_chunks": removed, "blobs_removed": len(gone)},
        detail={"duplicate_of": state.duplicate_of},
    )
    return state.with_trace(event)
