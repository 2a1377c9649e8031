"""Ingestion jobs: an uploaded file waits in the catalog as a ``queued`` job until a worker ingests it.

The HTTP API stores an upload (:mod:`ragstep.app.uploads`), records one job per file and answers at once;
:class:`JobRunner`, a small pool of threads of the serving process (created on the first job, ``RAGSTEP_INGEST_WORKERS``
of them), runs :func:`run_job`. Jobs live in the catalog, not in memory: a server stopped with jobs waiting (or one
running) finds them ``queued``/``running`` on start-up and runs them again (:meth:`JobRunner.resume`); ingesting is
idempotent, so a job interrupted half-way is simply done again.

Progressive indexing (:mod:`ragstep.app.ingest_vectors`): the worker makes an upload searchable by keyword (its job is
``indexed`` then), and one more background thread adds the vectors, a knowledge base at a time, after the uploads
(``ragstep kb show`` and the documents' ``vectors_pending`` say what is still waiting). Started again on start-up for
every knowledge base with chunks still waiting, so a server stopped in the middle finishes them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ragstep.app.ingest import ingest_blob, knowledge_id_for, set_document_enabled
from ragstep.context import Clients, Context
from ragstep.errors import InputError, NotFoundError, RagstepError
from ragstep.models import DEFAULT_TENANT, IngestOptions, KnowledgeBase, check_tenant
from ragstep.models.catalog import PENDING_JOB_STATUSES, WROTE_JOB_STATUSES, IngestionJob, JobStatus

log = logging.getLogger("ragstep.jobs")


def queue_ingestion(
    ctx: Context,
    kb: KnowledgeBase,
    *,
    filename: str,
    blob_key: str,
    content_hash: str,
    size: int,
    tag_id: str = "",
    knowledge_id: str | None = None,
    options: dict[str, Any] | None = None,
) -> IngestionJob:
    """Record a ``queued`` job for a file already stored at ``blob_key``. The document it makes is named by the
    file name: uploading that name again replaces it (or reports ``unchanged``), as ``ragstep ingest`` does.
    ``knowledge_id`` re-ingests an existing document (its tag changed); ``options`` are its chunking options."""
    job = IngestionJob(
        id=uuid.uuid4().hex,
        knowledge_base_id=kb.id,
        knowledge_id=knowledge_id or knowledge_id_for(kb, filename),
        filename=filename,
        blob_key=blob_key,
        content_hash=content_hash,
        size=size,
        tag_id=tag_id,
        options=options or {},
        created_at=time.time(),
    )
    ctx.catalog.put_job(job)
    return job


def require_job(ctx: Context, job_id: str) -> IngestionJob:
    """This tenant's job; another tenant's is as unknown as one never made (same message)."""
    job = ctx.catalog.get_job(job_id)
    if job is None:
        raise NotFoundError(f"unknown ingestion job {job_id!r}")
    return job


def run_job(ctx: Context, job_id: str, *, keywords_first: bool = False) -> IngestionJob | None:
    """Ingest a pending job's file and record the outcome; None when the job (or its knowledge base) is gone.

    ``keywords_first``: index it for keyword search only, its vectors left to
    :func:`~ragstep.app.ingest_vectors.embed_pending` (the caller runs it, as :class:`JobRunner` does). A job already
    finished is returned as it is. A failure is the job's ``failed`` status and error line; the version of the
    document already indexed stays as it was. A disabled document stays disabled when its file is replaced (the new
    chunks are switched off right after they are indexed).
    """
    job = ctx.catalog.get_job(job_id)
    if job is None or job.status not in PENDING_JOB_STATUSES:
        return job
    kb = ctx.catalog.get_kb(job.knowledge_base_id)
    if kb is None:
        return None
    before = ctx.catalog.get_knowledge(job.knowledge_id)
    running = job.model_copy(update={"status": "running", "started_at": time.time()})
    # Claimed by compare-and-set: a job cancelled meanwhile (its document deleted) or claimed by another worker is
    # returned as it now is, not run again.
    if not ctx.catalog.replace_job(job, running):
        return ctx.catalog.get_job(job_id)
    result = ingest_blob(
        kb,
        ctx,
        knowledge_id=job.knowledge_id,
        blob_key=job.blob_key,
        filename=job.filename,
        content_hash=job.content_hash,
        size=job.size,
        tag_id=job.tag_id,
        options=IngestOptions.model_validate(job.options) if job.options else None,
        keywords_first=keywords_first,
    )
    status: JobStatus = "failed" if result.status == "skipped" else result.status
    error = result.error
    if status in WROTE_JOB_STATUSES and before is not None and not before.enabled:
        after = ctx.catalog.get_knowledge(job.knowledge_id)
        if after is not None:
            try:
                set_document_enabled(after, False, ctx)
            except RagstepError as exc:
                error = f"indexed, but it could not be disabled again: {exc.message}"
    if status in WROTE_JOB_STATUSES:
        from ragstep.app.viking import refresh_after_change

        # A --layers knowledge base's tree and L0/L1 follow every upload, as after `ragstep ingest`.
        stale = refresh_after_change(kb.id, ctx)
        error = "; ".join(e for e in (error, stale) if e)
    done = running.model_copy(
        update={
            "status": status,
            "error": error,
            "note": "; ".join(n for n in (result.note, error if error != result.error else "") if n),
            "chunks": result.chunks,
            "duplicate_of": result.knowledge_id if status == "duplicate" else "",
            "finished_at": time.time(),
        }
    )
    return done if _save(ctx, done) else None


def prune_jobs(ctx: Context, retention_s: float, now: float | None = None) -> int:
    """Remove this tenant's jobs that finished more than ``retention_s`` ago (queued and running jobs stay, however
    old); returns how many went. The documents they made stay: a job is only the record of one upload."""
    if retention_s < 0:
        raise InputError("the retention must be 0 or more")
    return ctx.catalog.prune_jobs((time.time() if now is None else now) - retention_s)


def _save(ctx: Context, job: IngestionJob) -> bool:
    """Store the job; False when its knowledge base was deleted meanwhile (the jobs went with it)."""
    try:
        ctx.catalog.put_job(job.noted())
    except NotFoundError:
        return False
    return True


def known_tenants(clients: Clients) -> list[str]:
    """The tenants whose embedded catalog exists (the default one, and each ``<data dir>/tenants/<tenant>``); with a
    shared catalog service (DynamoDB), the default tenant only."""
    if clients.settings.catalog_backend != "sqlite":
        return [DEFAULT_TENANT]
    found = [DEFAULT_TENANT] if (clients.tenant_dir(DEFAULT_TENANT) / "catalog.sqlite").is_file() else []
    root = clients.data_dir / "tenants"
    if root.is_dir():
        for folder in sorted(root.iterdir()):
            with contextlib.suppress(ValueError):
                if check_tenant(folder.name) != DEFAULT_TENANT and (folder / "catalog.sqlite").is_file():
                    found.append(folder.name)
    return found


class JobRunner:
    """The serving process's ingestion worker: at most ``RAGSTEP_INGEST_WORKERS`` jobs at once, in threads created
    on the first job. One per :class:`Clients` (:func:`runner_for`)."""

    #: How often the worker removes old finished jobs (per tenant, after a job of that tenant finished).
    PRUNE_EVERY_S = 3600.0

    def __init__(self, clients: Clients) -> None:
        self.clients = clients
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._pruned: dict[str, float] = {}
        # The vectors' worker: one thread (the model computes on every core already); knowledge bases waiting for a
        # pass, so that a burst of uploads to one makes one pass, not one each.
        self._embed_pool: ThreadPoolExecutor | None = None
        self._embed_waiting: set[tuple[str, str]] = set()
        self._stopping = threading.Event()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                workers = self.clients.settings.ingest_workers
                self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragstep-ingest")
            return self._pool

    def submit(self, tenant_id: str, job_id: str) -> None:
        self._executor().submit(self._run, tenant_id, job_id)

    def _run(self, tenant_id: str, job_id: str) -> None:
        ctx = self.clients.context(tenant_id)
        try:
            job = run_job(ctx, job_id, keywords_first=True)
            if job is not None and job.status in WROTE_JOB_STATUSES:
                self.embed_later(tenant_id, job.knowledge_base_id)
        except Exception:
            # Not the file's fault (the catalog or the blob store failed): say so on the job, details in the log.
            log.exception("ingestion job %s failed", job_id)
            with contextlib.suppress(Exception):
                job = ctx.catalog.get_job(job_id)
                if job is not None and job.status in PENDING_JOB_STATUSES:
                    error = "internal error while ingesting; see the server log, then upload the file again"
                    _save(ctx, job.model_copy(update={"status": "failed", "error": error, "finished_at": time.time()}))
        self.prune(tenant_id)

    def embed_later(self, tenant_id: str, kb_id: str) -> None:
        """Add the missing vectors of a knowledge base on the background thread (once, however often asked while it
        waits)."""
        with self._lock:
            if self._stopping.is_set() or (tenant_id, kb_id) in self._embed_waiting:
                return
            self._embed_waiting.add((tenant_id, kb_id))
            if self._embed_pool is None:
                self._embed_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragstep-vectors")
            pool = self._embed_pool
        pool.submit(self._embed, tenant_id, kb_id)

    def _embed(self, tenant_id: str, kb_id: str) -> None:
        from ragstep.app.ingest_vectors import embed_pending

        with self._lock:  # from here, an upload to this knowledge base asks for another pass
            self._embed_waiting.discard((tenant_id, kb_id))
        try:
            ctx = self.clients.context(tenant_id)
            kb = ctx.catalog.get_kb(kb_id)
            if kb is None:
                return
            outcome = embed_pending(kb, ctx, should_stop=self._stopping.is_set)
            for filename, error in outcome.failed:
                log.warning(
                    "vectors of %s (knowledge base %s) not made: %s; it stays keyword-only", filename, kb_id, error
                )
        except Exception:
            log.exception("adding the vectors of knowledge base %s failed; they stay pending", kb_id)

    def prune(self, tenant_id: str, force: bool = False) -> int:
        """Remove the tenant's finished jobs older than ``RAGSTEP_JOB_RETENTION_DAYS`` (at most once per
        :attr:`PRUNE_EVERY_S` unless ``force``); a failure is logged, never raised: it must not stop the worker."""
        days = self.clients.settings.job_retention_days
        now = time.time()
        with self._lock:
            if not days or (not force and now - self._pruned.get(tenant_id, -math.inf) < self.PRUNE_EVERY_S):
                return 0
            self._pruned[tenant_id] = now
        try:
            return prune_jobs(self.clients.context(tenant_id), days * 86400.0, now)
        except Exception:
            log.exception("could not prune the finished ingestion jobs of tenant %s", tenant_id)
            return 0

    def resume(self) -> int:
        """Queue again every job left ``queued`` or ``running`` by an earlier process; returns how many."""
        from ragstep.app.ingest_vectors import pending_documents

        self._stopping.clear()  # a server started again (one runner per clients: a test's app may restart)
        count = 0
        for tenant in known_tenants(self.clients):
            self.prune(tenant, force=True)
            ctx = self.clients.context(tenant)
            for job in ctx.catalog.list_jobs():
                # An upload's job on AWS is the ingest state machine's to run (ragstep.app.s3_jobs), never this one's.
                if job.status in PENDING_JOB_STATUSES and job.runs_on == "worker":
                    self.submit(tenant, job.id)
                    count += 1
            for kb in ctx.catalog.list_kbs():
                if kb.embedding_model != "none" and pending_documents(kb, ctx):
                    self.embed_later(tenant, kb.id)  # vectors a stopped server (or an interrupted ingest) left
        return count

    def shutdown(self) -> None:
        """Stop taking jobs: those waiting stay ``queued`` in the catalog for the next start; a running one ends."""
        with self._lock:
            pool, self._pool = self._pool, None
            embed_pool, self._embed_pool = self._embed_pool, None
            self._stopping.set()  # the vectors' pass writes what it has and ends; the rest waits for the next start
        for each in (pool, embed_pool):
            if each is not None:
                each.shutdown(wait=False, cancel_futures=True)


_RUNNERS: weakref.WeakKeyDictionary[Clients, JobRunner] = weakref.WeakKeyDictionary()
_RUNNERS_LOCK = threading.Lock()


def runner_for(clients: Clients) -> JobRunner:
    """The job runner of these clients (one per process serving them), created on first use."""
    with _RUNNERS_LOCK:
        runner = _RUNNERS.get(clients)
        if runner is None:
            runner = _RUNNERS[clients] = JobRunner(clients)
        return runner
