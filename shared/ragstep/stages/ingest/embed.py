"""``ingest_embed``: ``chunks.jsonl`` -> ``vectors.npy`` (one float32 row per chunk) with the knowledge base's model.

Batches of ``embedding_batch_size`` (64) texts, :data:`EMBED_CONCURRENCY` requests in flight at once; the embedders
retry transient failures themselves. A batch that still fails fails the stage, so the document is never
half-indexed: nothing has been written to the index yet, and the previous version stays searchable. A BM25-only
knowledge base (embedding model "none") skips the stage, and so does a state with ``vectors_later`` (the ingest
state machine's uploads) when the index takes vectors after the chunks: its vectors come in batches after
``ingest_index`` (:mod:`.embed_batch`).

A model that computes in this process (:class:`~ragstep.ports.InProcessEmbedder`) gets small batches one after
another instead, on a worker thread the caller waits on: progress is noted after each batch (:mod:`.progress`) and
Ctrl-C lands at once, never behind a queue of batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragstep.deadline import ContextThreadPool
from ragstep.errors import InputError
from ragstep.index_capabilities import vector_backfill
from ragstep.ingest_notes import note_embedded
from ragstep.models import IngestState, TraceEvent
from ragstep.ports import InProcessEmbedder
from ragstep.stages.ingest.common import require_kb
from ragstep.stages.ingest.products import get_chunks, product_key, put_vectors

if TYPE_CHECKING:
    import numpy as np

    from ragstep.context import Context
    from ragstep.ports import Embedder

STAGE = "ingest_embed"
#: Embedding requests in flight at once for one document.
EMBED_CONCURRENCY = 4


def embed_texts(
    embedder: Embedder, texts: Sequence[str], *, batch_size: int, concurrency: int = EMBED_CONCURRENCY
) -> tuple[np.ndarray, int]:
    """Embed in batches of ``batch_size``, at most ``concurrency`` requests in flight; returns (vectors, batches).

    A batch that fails fails the whole call (the other batches are cancelled), so a document is never indexed with
    some of its vectors missing.
    """
    import numpy as np

    if isinstance(embedder, InProcessEmbedder):
        batch_size, concurrency = embedder.engine_batch_size, 1
    batches = [list(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    if isinstance(embedder, InProcessEmbedder):
        parts = _one_after_another(embedder, batches)
    elif len(batches) <= 1 or concurrency <= 1:
        parts = []
        for batch in batches:
            parts.append(embedder.embed(batch))
            note_embedded(len(batch))
    else:
        # The batches keep the invocation's deadline (ragstep.deadline) in their threads.
        pool = ContextThreadPool(max_workers=min(concurrency, len(batches)), thread_name_prefix="ragstep-embed")
        futures = [pool.submit(embedder.embed, b) for b in batches]
        try:
            parts = []
            for future, batch in zip(futures, batches, strict=True):
                parts.append(future.result())
                note_embedded(len(batch))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    if not parts:
        return np.zeros((0, 0), dtype=np.float32), 0
    return np.vstack(parts).astype(np.float32, copy=False), len(batches)


def _one_after_another(embedder: Embedder, batches: list[list[str]]) -> list[np.ndarray]:
    """Each batch on a worker thread while this thread waits: a signal (Ctrl-C) reaches this thread at once, where a
    call into the engine's C code would hold it until the call returned. On an interrupt no further batch starts; the
    one running finishes on its own (its vectors are dropped) and the worker ends with it."""
    pool = ContextThreadPool(max_workers=1, thread_name_prefix="ragstep-embed")
    parts: list[np.ndarray] = []
    try:
        for batch in batches:
            parts.append(pool.submit(embedder.embed, batch).result())
            note_embedded(len(batch))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return parts


def run(state: IngestState, ctx: Context) -> IngestState:
    if state.skipped:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason=state.status))
    if state.status != "chunked" or not state.products.chunks:
        raise InputError(f"{STAGE} needs a chunked state (status 'chunked'), got status {state.status!r}")
    kb = require_kb(ctx, state.source.knowledge_base_id)
    if state.vectors_later and kb.embedding_model != "none" and vector_backfill(ctx.index) is not None:
        # Progressive indexing on the ingest machine: ingest_index indexes the chunks for keyword search, and the
        # embed_batches Map adds their vectors (ragstep.stages.ingest.embed_batch).
        reason = "vectors later: embedded in batches after the chunks are indexed"
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason=reason))
    embedder = ctx.embedder(kb.embedding_model)
    if embedder is None:
        event = TraceEvent(stage=STAGE, action="skip", reason="no embedding model: keyword (BM25) search only")
        return state.advanced("embedded", event)
    chunks = get_chunks(ctx.blobs, state.products.chunks)
    batch_size = (
        embedder.engine_batch_size if isinstance(embedder, InProcessEmbedder) else ctx.settings.embedding_batch_size
    )
    vectors, batches = embed_texts(embedder, [c.embed_text or c.content for c in chunks], batch_size=batch_size)
    key = product_key(state, "vectors.npy")
    put_vectors(ctx.blobs, key, vectors)
    found = {"vectors": int(vectors.shape[0]), "batches": batches}
    event = TraceEvent(
        stage=STAGE,
        counts=found,
        detail={"model": kb.embedding_model, "dimensions": int(vectors.shape[1]), "batch_size": batch_size},
    )
    products = state.products.model_copy()
    products.vectors, products.space = key, kb.embedding_model
    return state.advanced("embedded", event, products=products, counts=found)
