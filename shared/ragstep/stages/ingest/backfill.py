"""Progressive indexing's two steps that every embedding phase shares (the CLI's and the server's,
:mod:`ragstep.app.ingest_vectors`, and the ingest state machine's batches, :mod:`.embed_batch`): which chunks of a
pending document still need their vector, and marking a document complete once none does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragstep.errors import NotFoundError
from ragstep.stages.ingest.products import get_chunks

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.models import Chunk, Knowledge


def chunks_to_embed(knowledge: Knowledge, missing: Sequence[str], ctx: Context) -> list[Chunk]:
    """The chunks named by ``missing`` as phase 1 cut them (``embed_text`` included), from the pending blob; from
    the index (their content) should the blob be gone."""
    if not missing:
        return []
    try:
        by_id = {c.id: c for c in get_chunks(ctx.blobs, knowledge.vectors_pending)}
    except NotFoundError:
        by_id = {}
    lost = [cid for cid in missing if cid not in by_id]
    if lost:
        by_id.update(ctx.index.fetch(lost))
    return [by_id[cid] for cid in missing if cid in by_id]


def mark_done(knowledge: Knowledge, ctx: Context) -> bool:
    """Every chunk has its vector: remove the pending blob, then clear the record's mark (a record read back still
    naming the blob it embedded; a re-ingest meanwhile has a mark of its own)."""
    current = ctx.catalog.get_knowledge(knowledge.id)
    if current is None or current.vectors_pending != knowledge.vectors_pending:
        return False
    # The blob first: a run killed between the two finds a record whose chunks all have vectors and clears it.
    ctx.blobs.delete(knowledge.vectors_pending)
    # Compare-and-set: a document deleted since it was read (its vectors were still being written) stays deleted.
    return ctx.catalog.replace_knowledge(
        current, current.model_copy(update={"vectors_pending": "", "updated_at": time.time()})
    )
