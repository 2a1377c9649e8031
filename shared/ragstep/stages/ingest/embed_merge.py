"""``ingest_embed_merge``: after the ingest state machine's ``embed_batches`` Map state, the document marked fully
embedded (its record's ``vectors_pending`` cleared, the pending blob removed) once the index holds no chunk of it
without a vector; the index is asked, so a batch that did not land is seen, not assumed.

A chunk still without a vector (a batch whose document changed under it) leaves the record pending and says so in
the trace: the document stays keyword-searchable, and ``ragstep kb embed`` against the stack's tables and index adds
the rest (uploading the same content again is skipped as unchanged). A run with no batches (the vectors came with the
chunks, or there were none) passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.index_capabilities import scoped_reads, vector_backfill
from ragstep.models import IngestState, TraceEvent
from ragstep.stages.ingest.backfill import mark_done
from ragstep.stages.ingest.products import pending_chunks_key

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "ingest_embed_merge"


def run(state: IngestState, ctx: Context) -> IngestState:
    if not state.embed_batches:
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason="no vectors to add later"))
    src = state.source
    pending = pending_chunks_key(src.knowledge_base_id, src.knowledge_id, src.content_hash)
    knowledge = ctx.catalog.get_knowledge(src.knowledge_id)
    if knowledge is None or knowledge.vectors_pending != pending:
        reason = "done already" if knowledge is not None and not knowledge.vectors_pending else "stale"
        return state.with_trace(TraceEvent(stage=STAGE, action="skip", reason=reason))
    backfill = vector_backfill(scoped_reads(ctx.index, [src.knowledge_base_id]))
    missing = backfill.missing_vectors(src.knowledge_id) if backfill is not None else []
    if missing:
        reason = (
            f"{len(missing)} chunks still without a vector (their document changed under a batch): keyword search "
            "finds them; `ragstep kb embed` against the stack's tables and index adds them"
        )
        event = TraceEvent(stage=STAGE, action="degrade", reason=reason, counts={"vectors_missing": len(missing)})
        return state.with_trace(event)
    done = mark_done(knowledge, ctx)
    counts = {"vectors_pending": 0, "batches": len(state.embed_batches)}
    return state.with_trace(TraceEvent(stage=STAGE, counts=counts, detail={"marked": done}))
