"""``ingest_embed_batch``: one iteration of the ingest state machine's ``embed_batches`` Map state, the embedding
phase of progressive indexing on AWS.

``ingest_index`` indexed the document's chunks without vectors (keyword-searchable from there), kept them under the
record's ``vectors_pending`` blob, and listed ranges of them (:class:`~ragstep.models.EmbedBatch`); this stage embeds
one range and adds its vectors in one index write (:meth:`~ragstep.index_capabilities.VectorBackfill.add_vectors`).

Running it again never duplicates nor loses a vector, so Step Functions may retry or redrive it freely:

* the work is read from the index, not remembered: only chunks of the range the index still has without a vector are
  embedded (a re-run after a write that landed embeds nothing);
* the write gives a vector only to a row without one whose stored chunk is the one embedded;
* a batch whose document changed meanwhile does not land: when the record no longer names this run's pending blob
  (ingested again with other content, or deleted) it stops before embedding, and a re-ingest of the same chunk ids
  between its read and its write is caught by the write's guard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError, NotFoundError
from ragstep.index_capabilities import scoped_reads, vector_backfill
from ragstep.models import IngestState, TraceEvent
from ragstep.ports import InProcessEmbedder
from ragstep.stages.ingest.common import require_kb
from ragstep.stages.ingest.embed import embed_texts
from ragstep.stages.ingest.products import get_chunks, pending_chunks_key

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "ingest_embed_batch"


def run(state: IngestState, ctx: Context) -> IngestState:
    batch = state.embed_batch
    if batch is None:
        raise InputError(f"{STAGE} needs an embed_batch (one item of the state's embed_batches)")
    src = state.source
    kb = require_kb(ctx, src.knowledge_base_id)
    pending = pending_chunks_key(kb.id, src.knowledge_id, src.content_hash)
    span = {"start": batch.start, "stop": batch.stop}
    knowledge = ctx.catalog.get_knowledge(src.knowledge_id)
    if knowledge is None or knowledge.vectors_pending != pending:
        reason = (
            "stale: the document was deleted"
            if knowledge is None
            else "done: the document has every vector"
            if not knowledge.vectors_pending
            else "stale: the document was ingested again since (its own run embeds it)"
        )
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason=reason, detail=span))
    backfill = vector_backfill(scoped_reads(ctx.index, [kb.id]))
    if backfill is None:
        raise InputError(f"{STAGE}: this index takes the vectors with the chunks; nothing can be embedded later")
    embedder = ctx.embedder(kb.embedding_model)
    if embedder is None:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="no embedding model", detail=span))
    try:
        chunks = get_chunks(ctx.blobs, pending)[batch.start : batch.stop]
    except NotFoundError:
        # Removed by the final step of a run that found every vector written (a redrive after it).
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="done: no pending chunks", detail=span))
    missing = set(backfill.missing_vectors(src.knowledge_id))
    todo = [c for c in chunks if c.id in missing]
    written = 0
    if todo:
        batch_size = (
            embedder.engine_batch_size if isinstance(embedder, InProcessEmbedder) else ctx.settings.embedding_batch_size
        )
        vectors, _ = embed_texts(embedder, [c.embed_text or c.content for c in todo], batch_size=batch_size)
        written = backfill.add_vectors(todo, vectors, kb.embedding_model)
    counts = {"embedded": written, "had_vectors": len(chunks) - len(todo), "not_landed": len(todo) - written}
    return state.with_trace(TraceEvent(stage=STAGE, counts=counts, detail={**span, "model": kb.embedding_model}))
