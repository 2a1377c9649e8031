"""Ingestion jobs of uploads to S3: on AWS a job is the ingest state machine's execution plus its catalog record.

* ``POST /v1/knowledge-bases/{kb}/uploads`` (a presigned PUT) and a direct upload through the API on Lambda record a
  ``queued`` job for the document the upload becomes (:func:`queue_upload`), blob key
  ``uploads/<knowledge base id>/<file>``; it ``runs_on`` the state machine, so no local worker ever takes it.
* The upload's S3 event starts the STANDARD ingest machine, whose generated definition hands its first stage the
  event together with the execution's ARN (:data:`ragstep.pipeline.asl.EXECUTION_PARAMETERS`).
  :func:`start_for_execution` takes the oldest queued job of that document no execution has taken yet, or records
  a new one (a file dropped into the bucket without the API: every ingestion is visible), marks it ``running``
  with the ARN and puts its id in the ingest state, which carries it to the last stage.
* The last stage finishes it (:func:`stage_finished`: indexed, unchanged or duplicate, and the chunk count); a
  stage that raises fails it with its error line (:func:`stage_failed`). The generic stage handler calls these two
  after every ingest stage; the rules of which stage records what are here.
* A stage that never got to say (a Lambda timeout, a crash) leaves it ``running``: :func:`reconcile` asks
  ``DescribeExecution`` when the job is read and records how the execution ended.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from typing import Any

from ragstep.context import Context
from ragstep.errors import NotFoundError, RagstepError
from ragstep.models import IngestState, KnowledgeBase
from ragstep.models.catalog import PENDING_JOB_STATUSES, WROTE_JOB_STATUSES, IngestionJob

log = logging.getLogger("ragstep.jobs")

#: The ingest state's statuses a run can end at (anything else at the last stage is a failure); an ``indexed`` state
#: is the job's ``indexed`` or ``updated`` (:func:`ragstep.app.ingest.result_of`).
_OUTCOMES: frozenset[str] = frozenset({"indexed", "unchanged", "duplicate"})
#: Claims of a job lost to other executions before giving up (each loss means another execution took that job).
_CLAIM_ATTEMPTS = 8
#: Step Functions statuses of an execution that is still going (a redrive may start a failed one again).
_GOING = ("RUNNING", "PENDING_REDRIVE")
#: How long after its upload URL expired a job may still wait for the upload's event: EventBridge retries delivering
#: it for up to an hour (the ingest rule's MaximumEventAgeInSeconds in template.yaml).
EVENT_GRACE_S = 3600.0


def queue_upload(
    ctx: Context, kb: KnowledgeBase, *, filename: str, blob_key: str, knowledge_id: str, size: int
) -> IngestionJob:
    """Record the ``queued`` job of an upload to ``blob_key`` before the file is there (a presigned PUT, or the API
    storing it on Lambda): the upload's S3 event takes it instead of recording one."""
    job = IngestionJob(
        id=uuid.uuid4().hex,
        knowledge_base_id=kb.id,
        knowledge_id=knowledge_id,
        filename=filename,
        blob_key=blob_key,
        size=size,
        runs_on="state_machine",
        created_at=time.time(),
    )
    ctx.catalog.put_job(job)
    return job


def start_for_execution(ctx: Context, state: IngestState, execution_arn: str) -> IngestState:
    """``state`` (built from an upload's S3 event) with the id of the job that follows it, now ``running``.

    An invocation retried by the state machine finds the job its execution already took, so it is never two jobs.
    Two executions of one document starting at once (two uploads of it) may both see the same queued job: the claim
    is a compare-and-set, and the one that loses reads the jobs again and takes the next one (or records its own).
    """
    for _ in range(_CLAIM_ATTEMPTS):
        job = _claim(ctx, state, execution_arn)
        if job is not None:
            return state.model_copy(update={"job_id": job.id})
    raise RagstepError(f"could not claim an ingestion job for {state.source.filename!r}: it kept changing under us")


def _claim(ctx: Context, state: IngestState, execution_arn: str) -> IngestionJob | None:
    """The job ``execution_arn`` now runs, or None when another writer changed the one chosen first."""
    source = state.source
    jobs = ctx.catalog.list_jobs(source.knowledge_base_id)  # oldest first
    job = next((j for j in jobs if execution_arn and j.execution_arn == execution_arn), None)
    if job is None:
        job = next((j for j in jobs if _waiting_for(j, source.knowledge_id)), None)
    now = time.time()
    if job is None:
        job = IngestionJob(
            id=uuid.uuid4().hex,
            knowledge_base_id=source.knowledge_base_id,
            knowledge_id=source.knowledge_id,
            filename=source.filename,
            blob_key=source.blob_key,
            runs_on="state_machine",
            created_at=now,
            status="running",
            started_at=now,
            execution_arn=execution_arn,
            size=source.size or 0,
        )
        ctx.catalog.put_job(job)  # a new id: nobody else can hold it
        return job
    if job.status not in PENDING_JOB_STATUSES:
        return job
    running = job.model_copy(
        update={
            "status": "running",
            "started_at": job.started_at or now,
            "execution_arn": execution_arn,
            "blob_key": source.blob_key,
            "size": source.size if source.size is not None else job.size,
        }
    )
    if running == job:
        return job  # this execution's retry: already recorded as it is
    return running if ctx.catalog.replace_job(job, running) else None


def _waiting_for(job: IngestionJob, knowledge_id: str) -> bool:
    """``job`` is an upload's, of this document, that no execution has taken yet."""
    return (
        job.runs_on == "state_machine"
        and job.status == "queued"
        and not job.execution_arn
        and job.knowledge_id == knowledge_id
    )


def finish_job(ctx: Context, state: IngestState) -> IngestionJob | None:
    """Record the outcome of the run ``state`` ended (the last stage's state) on its job; None without one."""
    job = ctx.catalog.get_job(state.job_id) if state.job_id else None
    if job is None or job.status not in PENDING_JOB_STATUSES:
        return job
    outcome = _outcome(job, state)
    if outcome.get("status") in WROTE_JOB_STATUSES:
        from ragstep.app.viking import refresh_after_change

        # A --layers knowledge base's tree and L0/L1 follow every upload, as after `ragstep ingest`.
        stale = refresh_after_change(job.knowledge_base_id, ctx)
        if stale:
            outcome["error"] = f"{outcome['error']}; {stale}" if outcome.get("error") else stale
            outcome["note"] = f"{outcome['note']}; {stale}" if outcome.get("note") else stale
    return _save(ctx, job, outcome)


def fail_job(ctx: Context, job_id: str, error: str) -> IngestionJob | None:
    """Mark a pending job ``failed`` with one error line; a job already finished stays as it is."""
    job = ctx.catalog.get_job(job_id) if job_id else None
    if job is None or job.status not in PENDING_JOB_STATUSES:
        return job
    return _save(ctx, job, {"status": "failed", "error": error})


def stage_error_line(stage_name: str, exc: BaseException) -> str:
    """The error line a job shows for a stage that raised: our own errors say what to fix; anything else is an
    internal error whose details (a traceback) stay in the function's log."""
    if isinstance(exc, RagstepError):
        return f"{stage_name}: {exc.message}"
    return f"{stage_name} failed with an internal error ({type(exc).__name__}); see the function's log"


def stage_finished(ctx: Context, stage_name: str, state: IngestState) -> IngestionJob | None:
    """After an ingest stage ran: at the machine's last stage, the run's outcome on its job (:func:`finish_job`);
    None before the last stage and for a run without a job."""
    from ragstep.pipeline.definitions import get_pipeline

    if not state.job_id or stage_name != get_pipeline("ingest").stage_names()[-1]:
        return None
    return finish_job(ctx, state)


def stage_failed(ctx: Context, stage_name: str, state: IngestState, exc: BaseException) -> IngestionJob | None:
    """An ingest stage raised: its run's job ``failed`` with the error line (never a traceback); None without one."""
    if not state.job_id:
        return None
    return fail_job(ctx, state.job_id, stage_error_line(stage_name, exc))


def reconcile(ctx: Context, job: IngestionJob) -> IngestionJob:
    """``job`` as it is, or, when its record says ``running`` but its execution has ended without saying so (a
    stage timed out or crashed), as the execution ended: its outcome, or ``failed`` with the execution's status.

    A ``queued`` upload job no event took long after its URL expired (the file was never uploaded, or its event
    never delivered) is ``failed`` too. When Step Functions cannot be asked, the record is answered as it is."""
    if job.status == "queued" and job.runs_on == "state_machine" and not job.execution_arn:
        waited = ctx.settings.upload_url_expiry_s + EVENT_GRACE_S
        if time.time() - job.created_at > waited:
            error = (
                f"no upload started this ingestion within {waited:.0f} s: the file was not uploaded before its URL "
                "expired, or its S3 event was not delivered; upload it again"
            )
            return _save(ctx, job, {"status": "failed", "error": error}) or job
    if job.status != "running" or not job.execution_arn:
        return job
    try:
        described = _stepfunctions(_region(job.execution_arn)).describe_execution(executionArn=job.execution_arn)
    except Exception as exc:
        log.warning("could not describe the execution of ingestion job %s: %s", job.id, type(exc).__name__)
        return job
    status = str(described.get("status") or "")
    if status in _GOING or not status:
        return job
    # The last stage may have recorded the outcome while we asked: that record is the better one.
    current = ctx.catalog.get_job(job.id)
    if current is None or current.status != "running":
        return current or job
    if status == "SUCCEEDED":
        state = _final_state(ctx, described.get("output"))
        if state is not None:
            return _save(ctx, current, _outcome(current, state)) or current
        error = "the ingestion ended, but its outcome could not be read; see the state machine's execution"
    else:
        # Only the error's name: the cause may hold a traceback.
        name = str(described.get("error") or "")
        error = f"the ingestion stopped: its execution ended {status}" + (f" ({name})" if name else "")
        error += "; upload the file again"
    return _save(ctx, current, {"status": "failed", "error": error}) or current


def _outcome(job: IngestionJob, state: IngestState) -> dict[str, Any]:
    if state.status not in _OUTCOMES:
        error = f"the ingestion ended at status {state.status!r}, not indexed"
        return {"status": "failed", "error": error}
    from ragstep.app.ingest import result_of

    # The row `ragstep ingest` would print for this run: ``updated`` when it replaced an indexed version.
    result = result_of(job.filename, job.knowledge_id, state)
    return {
        "status": result.status,
        "chunks": result.chunks if result.status in WROTE_JOB_STATUSES else 0,
        "content_hash": state.source.content_hash or job.content_hash,
        "duplicate_of": (state.duplicate_of or "") if result.status == "duplicate" else "",
        # "duplicate of a.md": which file holds the same content (as the local worker reports it).
        "error": result.error,
        "note": result.note,
    }


def _save(ctx: Context, job: IngestionJob, update: dict[str, Any]) -> IngestionJob | None:
    done = job.model_copy(update={**update, "finished_at": time.time()}).noted()
    try:
        ctx.catalog.put_job(done)
    except NotFoundError:  # its knowledge base was deleted meanwhile, and its jobs with it
        return None
    return done


def _final_state(ctx: Context, output: Any) -> IngestState | None:
    """The ingest state a succeeded execution ended with (its output), or None when it cannot be read."""
    from ragstep.pipeline import transport

    try:
        return transport.decode_event(json.loads(str(output)), ctx.clients.blobs, IngestState)
    except Exception as exc:
        log.warning("could not read the output of an ingest execution: %s", type(exc).__name__)
        return None


def _region(arn: str) -> str | None:
    parts = arn.split(":")
    return parts[3] if len(parts) > 3 and parts[3] else None


@functools.lru_cache(maxsize=4)
def _stepfunctions(region: str | None) -> Any:
    """A Step Functions client of ``region`` (the execution's), kept for the process: a job being polled asks at
    every read until its execution ends."""
    from ragstep.adapters._aws import aws_client

    return aws_client("stepfunctions", region=region)
