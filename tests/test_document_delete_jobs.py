"""Deleting a document whose upload job has not run yet: the job ends ``cancelled`` with the reason, not a 404.

Before, the delete removed the document's jobs with it, so the uploader polling ``GET /v1/ingestion-jobs/{id}``
got "unknown job" for a file it had just been told was queued.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
from tests.support.api_server import api_server

from ragstep.app.documents import CANCELLED_BY_DELETE, delete_document
from ragstep.app.ingest import knowledge_id_for
from ragstep.app.jobs import queue_ingestion, run_job
from ragstep.app.knowledge_bases import create_knowledge_base
from ragstep.context import Clients, Context
from ragstep.models import KnowledgeBase
from ragstep.models.catalog import IngestionJob
from ragstep.settings import Settings
from ragstep.stages.ingest.products import source_blob_key

TEXT = b"Otters hold hands while sleeping so that they do not drift apart."


def queued(ctx: Context, kb: KnowledgeBase, name: str, **update: object) -> IngestionJob:
    digest = hashlib.sha256(TEXT).hexdigest()
    key = source_blob_key(kb.id, knowledge_id_for(kb, name), digest, name)
    ctx.blobs.put(key, TEXT)
    job = queue_ingestion(ctx, kb, filename=name, blob_key=key, content_hash=digest, size=len(TEXT))
    if update:
        job = job.model_copy(update=update)
        ctx.catalog.put_job(job)
    return job


def test_a_queued_upload_of_a_deleted_document_reads_cancelled_over_http(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path / "data", embedder="none"))
    ctx = clients.context()
    kb = create_knowledge_base(ctx, "docs")
    # Queued until its upload's S3 event starts the state machine (AWS): no worker of this server takes it.
    job = queued(ctx, kb, "otters.txt", runs_on="state_machine")
    with api_server(clients) as base, httpx.Client(base_url=base, timeout=30) as http:
        deleted = http.delete(f"/v1/documents/{job.knowledge_id}")
        assert deleted.status_code == 200, deleted.text
        polled = http.get(f"/v1/ingestion-jobs/{job.id}")
        assert polled.status_code == 200, polled.text
        body = polled.json()
        assert (body["status"], body["error"]) == ("cancelled", CANCELLED_BY_DELETE)
        assert body["finished_at"] is not None
        # The document itself is gone: not shown, not listed.
        assert http.get(f"/v1/documents/{job.knowledge_id}").status_code == 404
        assert http.get("/v1/knowledge-bases/docs/documents").json()["items"] == []


def test_a_worker_never_runs_a_job_cancelled_before_it_claimed_it(tmp_path: Path) -> None:
    ctx = Clients(Settings(data_dir=tmp_path / "data", embedder="none")).context()
    kb = create_knowledge_base(ctx, "docs")
    job = queued(ctx, kb, "otters.txt")
    assert delete_document(ctx, job.knowledge_id) == 0
    ran = run_job(ctx, job.id)
    assert ran is not None and ran.status == "cancelled"
    assert ctx.catalog.get_knowledge(job.knowledge_id) is None and ctx.catalog.list_knowledge(kb.id) == []
    # Uploaded again, the same file is a document again.
    again = queued(ctx, kb, "otters.txt")
    done = run_job(ctx, again.id)
    assert done is not None and done.status == "indexed"
    assert [item.filename for item in ctx.catalog.list_knowledge(kb.id)] == ["otters.txt"]
