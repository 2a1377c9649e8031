"""Progressive indexing, phase 2: the vectors of chunks that were indexed for keyword search first.

Phase 1 (the ``ingest_keywords`` pipeline: parse, chunk, index) makes a document keyword-searchable as soon as it is
chunked, at thousands of chunks a second; embedding runs at the model's pace (tens of chunks a second on a laptop's
cores). Its record names the chunks still to embed (``Knowledge.vectors_pending``, a ``pending/`` blob holding them
with their ``embed_text``). This module adds the vectors: ``ragstep ingest`` runs it after phase 1, ``ragstep kb
embed`` resumes it, and ``ragstep serve`` runs it on a background worker after each upload (:mod:`ragstep.app.jobs`).
Until a chunk has its vector, search finds it by keyword only and its trace counts it (``keyword_only_chunks``).

Nothing is lost or done twice, however the process ends:

* The work to do is read from the index, not remembered: the chunks of a pending document that have no vector yet
  (:meth:`~ragstep.index_capabilities.VectorBackfill.missing_vectors`). A resumed run embeds only those.
* Vectors are written every :data:`FLUSH_S` seconds of embedding (and at once on Ctrl-C, before it propagates), each
  write one index transaction; a SIGKILL loses at most the vectors computed since the last write.
* A vector is only written onto a chunk that has none and is still stored as it was embedded: two runs at once (a
  server's worker and ``ragstep kb embed``) or a re-ingest meanwhile (chunk ids are reused) never write twice, nor
  onto other content.
* A document is marked done (its blob removed, then ``vectors_pending`` cleared) only once the index holds no chunk of
  it without a vector. A record whose blob is gone falls back on the chunks' indexed content.
* Two processes at once (``ragstep serve`` and ``ragstep kb embed`` on one data dir, two ingests of one knowledge
  base) share the documents rather than both embedding each: a document is embedded under a claim, a file under the
  data dir locked with ``flock`` (``vector-claims/<knowledge id>.lock``); one whose claim another process holds is
  left to it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ragstep.errors import InputError, RagstepError
from ragstep.index_capabilities import VectorBackfill, vector_backfill
from ragstep.models import Chunk, Knowledge, KnowledgeBase
from ragstep.ports import Embedder, InProcessEmbedder
from ragstep.stages.ingest.backfill import chunks_to_embed as _chunks_to_embed
from ragstep.stages.ingest.backfill import mark_done as _mark_done
from ragstep.stages.ingest.embed import EMBED_CONCURRENCY, embed_texts

if TYPE_CHECKING:
    import numpy as np

    from ragstep.context import Context

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, no claims (see _claim)
    fcntl = None  # type: ignore[assignment]

#: The folder of the documents' claim files, under the tenant's data dir.
CLAIMS_DIR = "vector-claims"
#: Seconds of embedding between two writes of vectors: what a SIGKILL may lose, and how often readers' snapshots
#: of the index go stale while a knowledge base is being embedded.
FLUSH_S = 5.0


@dataclass(slots=True)
class EmbedOutcome:
    """What one pass over a knowledge base's pending documents did."""

    #: Documents whose every chunk has its vector now.
    documents: int = 0
    #: Chunks given a vector by this pass.
    chunks: int = 0
    #: (file name, error line) of each document whose vectors could not be made; it stays pending.
    failed: list[tuple[str, str]] = field(default_factory=list)
    #: File names of the documents another process was embedding (it held their claim): left to it, still pending.
    elsewhere: list[str] = field(default_factory=list)


def pending_documents(kb: KnowledgeBase, ctx: Context) -> list[Knowledge]:
    """The documents of ``kb`` with chunks still waiting for their vectors, oldest first."""
    return [k for k in ctx.catalog.list_knowledge(kb.id) if k.vectors_pending]


def require_backfill(ctx: Context) -> VectorBackfill:
    backfill = vector_backfill(ctx.index)
    if backfill is None:
        raise InputError("this index takes the vectors with the chunks: there is nothing to embed later")
    return backfill


def pending_chunks(kb: KnowledgeBase, ctx: Context) -> int:
    """How many chunks of ``kb`` are indexed without their vector (what :func:`embed_pending` has to do)."""
    backfill = vector_backfill(ctx.index)
    if backfill is None:
        return 0
    return sum(len(backfill.missing_vectors(k.id)) for k in pending_documents(kb, ctx))


def embed_pending(kb: KnowledgeBase, ctx: Context, *, should_stop: Callable[[], bool] | None = None) -> EmbedOutcome:
    """Add the missing vectors of every pending document of ``kb``, one document after another.

    Progress is noted as chunks are embedded (:mod:`ragstep.ingest_notes`). ``should_stop`` is asked
    between writes (a server shutting down): the pass then ends early, what was written stays. A document whose
    embedding fails is a row of :attr:`EmbedOutcome.failed` and stays pending; the others go on. Ctrl-C writes the
    vectors already computed, then propagates.
    """
    outcome = EmbedOutcome()
    embedder = ctx.embedder(kb.embedding_model)
    if embedder is None:
        return outcome
    backfill = require_backfill(ctx)
    for knowledge in pending_documents(kb, ctx):
        if should_stop is not None and should_stop():
            break
        try:
            with _claim(ctx, knowledge.id) as mine:
                if not mine:  # another process is embedding it
                    outcome.elsewhere.append(knowledge.filename or knowledge.id)
                    continue
                added, complete = embed_document(knowledge, kb.embedding_model, embedder, backfill, ctx, should_stop)
        except RagstepError as exc:
            outcome.failed.append((knowledge.filename or knowledge.id, exc.message))
            continue
        outcome.chunks += added
        outcome.documents += int(complete)
    return outcome


def embed_document(
    knowledge: Knowledge,
    space: str,
    embedder: Embedder,
    backfill: VectorBackfill,
    ctx: Context,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[int, bool]:
    """Embed the chunks of one pending document that have no vector yet; returns (vectors written, whether the
    document is now complete and marked so)."""
    missing = backfill.missing_vectors(knowledge.id)
    todo = _chunks_to_embed(knowledge, missing, ctx)
    written = 0
    if todo:
        written = _embed_and_write(todo, space, embedder, backfill, ctx, should_stop)
    if backfill.missing_vectors(knowledge.id):
        return written, False
    return written, _mark_done(knowledge, ctx)


def _embed_and_write(
    chunks: Sequence[Chunk],
    space: str,
    embedder: Embedder,
    backfill: VectorBackfill,
    ctx: Context,
    should_stop: Callable[[], bool] | None,
) -> int:
    """Embed ``chunks`` in the engine's batches, writing the vectors every :data:`FLUSH_S` seconds and on the way
    out (Ctrl-C included); returns how many were written."""
    import numpy as np

    if isinstance(embedder, InProcessEmbedder):
        step, batch_size = embedder.engine_batch_size, embedder.engine_batch_size
    else:
        batch_size = ctx.settings.embedding_batch_size
        step = batch_size * EMBED_CONCURRENCY
    done: list[Chunk] = []
    parts: list[np.ndarray] = []
    written = 0

    def flush() -> None:
        nonlocal written
        if done:
            written += backfill.add_vectors(done, np.vstack(parts), space)
            done.clear()
            parts.clear()

    last = time.monotonic()
    try:
        for start in range(0, len(chunks), step):
            group = chunks[start : start + step]
            vectors, _ = embed_texts(embedder, [c.embed_text or c.content for c in group], batch_size=batch_size)
            done.extend(group)
            parts.append(vectors)
            if should_stop is not None and should_stop():
                break  # written below, as on the way out
            if time.monotonic() - last >= FLUSH_S:
                flush()
                last = time.monotonic()
    finally:
        flush()  # also on Ctrl-C: the vectors computed so far are kept
    return written


@contextlib.contextmanager
def _claim(ctx: Context, knowledge_id: str) -> Iterator[bool]:
    """Whether this process may embed the document now: True while it holds the document's claim file's lock (or
    where there is no ``flock``, or the data dir takes no file: then nothing is shared, at worst work is done twice,
    never a vector written twice); False while another holds it."""
    if fcntl is None:
        yield True
        return
    path = ctx.data_dir / CLAIMS_DIR / f"{knowledge_id}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("wb")
    except OSError:
        yield True
        return
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            # Removed while still locked: whoever opens the path next makes a new file and claims it afresh.
            with contextlib.suppress(OSError):
                path.unlink()
