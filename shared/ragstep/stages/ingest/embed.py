"""``ingest_embed``: ``chunks.jsonl`` -> ``vectors.npy`` (one float32 row per chunk) with the knowledge base's model.

Batches of ``embedding_batch_size`` (64) texts, a few requests in flight at once
(:data:`ragstep.stages.ingest.products.EMBED_CONCURRENCY`); the embedders retry transient failures themselves. A batch that still
fails fails the stage, so the document is never half-indexed: nothing has been written to the index yet, and the
previous version stays searchable. A BM25-only knowledge base (embedding model "none") skips the stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError
from ragstep.models import IngestState, TraceEvent
from ragstep.stages.ingest.products import (
    EMBED_CONCURRENCY,
    embed_texts,
    get_chunks,
    product_key,
    put_vectors,
    require_kb,
)

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "ingest_embed"


def run(state: IngestState, ctx: Context) -> IngestState:
    if state.skipped:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason=state.status))
    if state.status != "chunked" or not state.products.chunks:
        raise InputError(f"{STAGE} needs a chunked state (status 'chunked'), got status {state.status!r}")
    kb = require_kb(ctx, state.source.knowledge_base_id)
    embedder = ctx.embedder(kb.embedding_model)
    if embedder is None:
        event = TraceEvent(stage=STAGE, action="skip", reason="no embedding model: keyword (BM25) search only")
        return state.model_copy(update={"status": "embedded"}).with_trace(event)
    chunks = get_chunks(ctx.blobs, state.products.chunks)
    batch_size = ctx.settings.embedding_batch_size
    vectors, batches = embed_texts(
        embedder, [c.embed_text or c.content for c in chunks], batch_size=batch_size, concurrency=EMBED_CONCURRENCY
    )
    key = product_key(state, "vectors.npy")
    put_vectors(ctx.blobs, key, vectors)
    found = {"vectors": int(vectors.shape[0]), "batches": batches}
    event = TraceEvent(
        stage=STAGE,
        counts=found,
        detail={"model": kb.embedding_model, "dimensions": int(vectors.shape[1]), "batch_size": batch_size},
    )
    update = {
        "status": "embedded",
        "products": state.products.model_copy(update={"vectors": key, "space": kb.embedding_model}),
        "counts": {**state.counts, **found},
    }
    return state.model_copy(update=update).with_trace(event)
