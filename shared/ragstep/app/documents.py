"""The documents of a knowledge base as the HTTP API shows them: each knowledge item with the state of its latest
ingestion job, and the changes a user makes to one (tag, enabled, delete).

A document's id is its knowledge id. A file whose upload never produced a knowledge item (still queued, failed, or
a duplicate of another document) is listed too, from its latest job, so what a user uploaded never vanishes from
the listing without a word.
"""

from __future__ import annotations

import time

from ragstep.app.ingest import check_tag, delete_knowledge, set_document_enabled
from ragstep.app.jobs import queue_ingestion
from ragstep.app.knowledge_bases import Page, paginate
from ragstep.context import Context
from ragstep.errors import ConflictError, InputError, NotFoundError
from ragstep.index_capabilities import vector_backfill
from ragstep.models import Knowledge
from ragstep.models.base import _Model
from ragstep.models.blob_keys import owned_prefixes
from ragstep.models.catalog import WROTE_JOB_STATUSES, IngestionJob, JobStatus
from ragstep.stages.ingest.products import delete_blobs

#: The error of a job whose document was deleted before it ran (its status: ``cancelled``).
CANCELLED_BY_DELETE = "the document was deleted before this job ran"

_ITEM_STATUS: dict[str, JobStatus] = {"completed": "indexed", "failed": "failed", "processing": "running"}


class DocumentInfo(_Model):
    id: str
    knowledge_base_id: str
    file: str
    status: JobStatus
    #: One line: why the latest ingestion failed, or which document holds the same content.
    error: str = ""
    chunks: int = 0
    tag: str = ""
    #: False: kept, never retrieved.
    enabled: bool = True
    #: The latest ingestion job of this document ("" for one ingested otherwise, e.g. by the CLI).
    job_id: str = ""
    #: Chunks indexed without their vector yet (progressive indexing): found by keyword search only until the
    #: background worker (or ``ragstep kb embed``) adds it; 0 once every chunk has its vector.
    vectors_pending: int = 0
    created_at: float
    updated_at: float


def vectors_pending(ctx: Context, item: Knowledge | None) -> int:
    """How many chunks of ``item`` the index holds without a vector (0 unless its record says some are waiting)."""
    if item is None or not item.vectors_pending:
        return 0
    backfill = vector_backfill(ctx.index)
    return len(backfill.missing_vectors(item.id)) if backfill is not None else 0


def document_info(item: Knowledge | None, job: IngestionJob | None, pending: int = 0) -> DocumentInfo:
    """One listing row from the knowledge item and/or its latest job (at least one of them); ``pending``: its
    chunks without a vector (:func:`vectors_pending`)."""
    if item is None and job is None:
        raise ValueError("a document row needs its knowledge item or a job")
    if job is not None and (item is None or job.status not in WROTE_JOB_STATUSES or job.finished_at is None):
        status: JobStatus = job.status  # queued, running, or an outcome that did not replace the item
    else:
        status = _ITEM_STATUS.get(item.status, "failed") if item is not None else "failed"
    stamps = [t for t in (item and item.updated_at, job and (job.finished_at or job.created_at)) if t]
    created = item.created_at if item is not None else job.created_at if job is not None else 0.0
    return DocumentInfo(
        id=item.id if item is not None else job.knowledge_id if job is not None else "",
        knowledge_base_id=item.knowledge_base_id if item is not None else job.knowledge_base_id if job else "",
        file=item.filename if item is not None and item.filename else job.filename if job is not None else "",
        status=status,
        error=job.error if job is not None else item.error if item is not None else "",
        chunks=item.chunk_count if item is not None else 0,
        tag=item.tag_id if item is not None else job.tag_id if job is not None else "",
        enabled=item.enabled if item is not None else True,
        job_id=job.id if job is not None else "",
        vectors_pending=pending,
        created_at=created,
        updated_at=max(stamps, default=created),
    )


def _live(jobs: list[IngestionJob]) -> list[IngestionJob]:
    """``jobs`` without the cancelled ones: what is left of a deleted document, which is gone from the listing."""
    return [job for job in jobs if job.status != "cancelled"]


def _latest_jobs(jobs: list[IngestionJob]) -> dict[str, IngestionJob]:
    latest: dict[str, IngestionJob] = {}
    for job in sorted(jobs, key=lambda j: (j.created_at, j.id)):
        latest[job.knowledge_id] = job
    return latest


def list_documents(ctx: Context, kb_ref: str, limit: int, cursor: str | None = None) -> Page[DocumentInfo]:
    kb = ctx.require_kb(kb_ref)
    items = {item.id: item for item in ctx.catalog.list_knowledge(kb.id)}
    latest = _latest_jobs(_live(ctx.catalog.list_jobs(kb.id)))
    rows = [
        document_info(items.get(kid), latest.get(kid), vectors_pending(ctx, items.get(kid)))
        for kid in {*items, *latest}
    ]
    return paginate(rows, lambda row: (row.created_at, row.id), limit, cursor)


def _find(ctx: Context, document_id: str) -> tuple[Knowledge | None, list[IngestionJob]]:
    """The document's knowledge item and its jobs (not the cancelled ones); :class:`NotFoundError` (the same for
    another tenant's id) when it has neither."""
    item = ctx.catalog.get_knowledge(document_id)
    if item is not None:
        jobs = [job for job in ctx.catalog.list_jobs(item.knowledge_base_id) if job.knowledge_id == document_id]
    else:
        jobs = [job for job in ctx.catalog.list_jobs() if job.knowledge_id == document_id]
    jobs = _live(jobs)
    if item is None and not jobs:
        raise NotFoundError(f"unknown document {document_id!r}")
    return item, jobs


def get_document(ctx: Context, document_id: str) -> DocumentInfo:
    item, jobs = _find(ctx, document_id)
    return document_info(item, _latest_jobs(jobs).get(document_id), vectors_pending(ctx, item))


def update_document(
    ctx: Context, document_id: str, *, enabled: bool | None = None, tag: str | None = None
) -> tuple[DocumentInfo, IngestionJob | None]:
    """Enable or disable a document at once; a new tag re-ingests its stored original (the tag is on every chunk),
    so that change comes back as a queued job for the caller to run."""
    item, jobs = _find(ctx, document_id)
    if item is None:
        raise ConflictError(f"document {document_id!r} is not indexed yet; change it once its job is done")
    job = None
    if tag is not None:
        tag = check_tag(tag) if tag else ""
        if tag != item.tag_id:
            if not item.source_key or not ctx.blobs.exists(item.source_key):
                raise InputError(f"document {document_id!r} has no stored original to re-tag; upload it again")
            kb = ctx.require_kb(item.knowledge_base_id)
            size = next((j.size for j in reversed(jobs) if j.blob_key == item.source_key), 0)
            job = queue_ingestion(
                ctx,
                kb,
                filename=item.filename,
                blob_key=item.source_key,
                content_hash=item.content_hash,
                size=size,
                tag_id=tag,
                knowledge_id=item.id,
                options=item.options,
            )
    if enabled is not None:
        was = item.enabled
        item = set_document_enabled(item, enabled, ctx)
        if item.enabled != was:  # a disabled document leaves the tree, an enabled one comes back
            from ragstep.app.viking import refresh_after_change

            refresh_after_change(item.knowledge_base_id, ctx)
    all_jobs = [*jobs, job] if job is not None else jobs
    return document_info(item, _latest_jobs(all_jobs).get(document_id), vectors_pending(ctx, item)), job


def delete_document(ctx: Context, document_id: str) -> int:
    """Remove a document everywhere (chunks, blobs, record) with its finished jobs; returns the chunks removed.
    A job still queued is kept, ``cancelled`` with :data:`CANCELLED_BY_DELETE` as its error, so whoever polls it
    (the uploader) learns what became of it instead of a 404. Refused while one of its jobs is running (it would
    index the document again right after)."""
    item, jobs = _find(ctx, document_id)
    if any(job.status == "running" for job in jobs):
        raise ConflictError(f"document {document_id!r} is being ingested; delete it once its job is done")
    kb_id = item.knowledge_base_id if item is not None else jobs[0].knowledge_base_id
    # Jobs first: a worker claims a queued job by compare-and-set, so once cancelled it is never run.
    now = time.time()
    for job in jobs:
        if job.status == "queued":
            cancelled = job.model_copy(update={"status": "cancelled", "error": CANCELLED_BY_DELETE, "finished_at": now})
            cancelled = cancelled.noted()
            if not ctx.catalog.replace_job(job, cancelled):  # a worker claimed it meanwhile
                raise ConflictError(f"document {document_id!r} is being ingested; delete it once its job is done")
    ctx.catalog.delete_jobs(kb_id, document_id, keep=("cancelled",))
    if item is not None:
        removed = delete_knowledge(item, ctx)
        from ragstep.app.viking import refresh_after_change

        refresh_after_change(kb_id, ctx)  # its node, and its folders' layers, go with it
        return removed
    # Never indexed (queued, failed, duplicate): its uploads and any run's leftovers are all it has.
    delete_blobs(ctx.blobs, owned_prefixes(kb_id, document_id))
    return 0
