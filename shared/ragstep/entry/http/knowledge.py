"""Knowledge bases, documents and ingestion jobs over HTTP: the use cases ``ragstep kb`` and ``ragstep ingest`` run,
for API users.

Every route takes its context from :mod:`ragstep.entry.http.deps`: a knowledge base, document or job of another
tenant (or outside the key's knowledge bases) is a 404 with the text of an unknown one. Uploaded files are ingested
by the process's background worker (:class:`ragstep.app.jobs.JobRunner`), which this router's lifespan starts on the
jobs an earlier process left pending and stops (leaving waiting jobs queued) on shutdown.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, File, Form, Query, Response, UploadFile
from pydantic import Field

from ragstep.app.documents import DocumentInfo, delete_document, get_document, list_documents, update_document
from ragstep.app.jobs import require_job, runner_for
from ragstep.app.knowledge_bases import (
    KnowledgeBaseInfo,
    Page,
    create_knowledge_base,
    delete_knowledge_base,
    describe_knowledge_base,
    list_knowledge_bases,
    update_knowledge_base,
)
from ragstep.app.s3_jobs import reconcile
from ragstep.app.uploads import (
    PresignedUpload,
    UploadRequest,
    chunking_options,
    presign_upload,
    store_for_s3_ingestion,
    store_uploads,
)
from ragstep.context import Clients, Context
from ragstep.entry.http.deps import RequestContext, SearchContext
from ragstep.entry.http.errors import error_doc
from ragstep.entry.http.uploads import received
from ragstep.errors import InputError, InvalidFieldError
from ragstep.models import KnowledgeBaseType
from ragstep.models.base import _Model
from ragstep.models.catalog import IngestionJob

log = logging.getLogger("ragstep.http")


@asynccontextmanager
async def _worker(app: FastAPI) -> AsyncIterator[None]:
    clients: Clients = app.state.clients
    runner = runner_for(clients)
    try:
        resumed = runner.resume()
        if resumed:
            log.info("resumed %d pending ingestion jobs", resumed)
    except Exception:
        # The API still serves; the jobs stay pending in the catalog for the next start.
        log.exception("could not resume pending ingestion jobs")
    try:
        yield
    finally:
        runner.shutdown()


router = APIRouter(lifespan=_worker, tags=["knowledge"])

_SAID = {
    400: "invalid input: a bad file name, an unsupported, empty or over-size file, a bad cursor",
    401: "no, a malformed, revoked or expired API key",
    403: "the API key lacks the scope of this route",
    404: "an unknown knowledge base, document or ingestion job (another tenant's included)",
    409: "a knowledge base name already taken, or a document being ingested",
    413: "the request body is over its limit (RAGSTEP_MAX_UPLOAD_BYTES for uploads)",
    422: "the request is invalid: the message names the field and the rule",
    500: "an internal error (the server's log has the details)",
    503: "the catalog, index or blob store cannot be used",
}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: error_doc(_SAID[status]) for status in statuses}


_COMMON = (400, 401, 403, 404, 422, 500, 503)
Limit = Annotated[int, Query(ge=1, le=200, description="items per page")]
Cursor = Annotated[str | None, Query(description="the next_cursor of the previous page")]


class KnowledgeBaseCreate(_Model):
    name: str = Field(description="unique within the tenant")
    type: KnowledgeBaseType = KnowledgeBaseType.DOCUMENT
    embedding_model: str | None = Field(default=None, description='"provider:model", "none", or null: the default')
    description: str = ""
    graph: bool = Field(default=False, description="build a knowledge graph at ingest (needs a chat model)")
    layers: bool = Field(default=False, description="index hierarchy layers (abstracts, overviews) at ingest")


class KnowledgeBaseUpdate(_Model):
    name: str | None = None
    description: str | None = None


class KnowledgeBaseDeleted(_Model):
    id: str
    name: str
    documents: int
    chunks: int
    blobs: int


class UploadAccepted(_Model):
    """One ingestion job per file, in the order sent: follow each at ``GET /v1/ingestion-jobs/{id}``. On AWS
    Lambda the files go to S3, and each job follows the ingest execution its S3 event starts."""

    jobs: list[IngestionJob]
    #: On AWS: the document each file becomes (``GET /v1/documents/{id}`` once ingested), in the order sent.
    documents: list[str] = Field(default_factory=list)


class DocumentUpdate(_Model):
    enabled: bool | None = Field(default=None, description="false: kept, never retrieved")
    tag: str | None = Field(default=None, description='the tag of every chunk ("" removes it); re-ingests the file')


class DocumentUpdated(_Model):
    document: DocumentInfo
    #: The re-ingestion a new tag started (null when only ``enabled`` changed).
    job: IngestionJob | None = None


class DocumentDeleted(_Model):
    id: str
    chunks: int


def _needs_a_worker() -> None:
    """Refuse work for the background worker inside Lambda: an execution environment is frozen between
    invocations, so a job started there could stay ``running`` for good. The S3 path needs no worker."""
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        raise InputError(
            "this API runs on AWS Lambda, which ingests uploads from S3: ask POST /v1/knowledge-bases/{kb}/uploads "
            "for a presigned upload URL instead (a tag is set by uploading the file again)"
        )


def _submit(ctx: Context, jobs: list[IngestionJob]) -> None:
    runner = runner_for(ctx.clients)
    for job in jobs:
        runner.submit(ctx.tenant_id, job.id)


# -- knowledge bases -----------------------------------------------------------------------------------------------


@router.post("/v1/knowledge-bases", status_code=201, responses=_errors(409, *_COMMON))
def create_kb(body: KnowledgeBaseCreate, ctx: RequestContext) -> KnowledgeBaseInfo:
    """A new, empty knowledge base (as ``ragstep kb create``)."""
    kb = create_knowledge_base(
        ctx,
        body.name,
        body.type,
        body.embedding_model,
        description=body.description,
        graph=body.graph,
        layers=body.layers,
    )
    return describe_knowledge_base(ctx, kb)


@router.get("/v1/knowledge-bases", responses=_errors(*_COMMON))
def list_kbs(ctx: RequestContext, limit: Limit = 50, cursor: Cursor = None) -> Page[KnowledgeBaseInfo]:
    """The tenant's knowledge bases with their counts, oldest first."""
    return list_knowledge_bases(ctx, limit, cursor)


@router.get("/v1/knowledge-bases/{kb}", responses=_errors(*_COMMON))
def show_kb(kb: str, ctx: RequestContext) -> KnowledgeBaseInfo:
    """One knowledge base (by id or name): settings, documents, chunks, stored bytes, pending jobs."""
    return describe_knowledge_base(ctx, ctx.require_kb(kb))


@router.patch("/v1/knowledge-bases/{kb}", responses=_errors(409, *_COMMON))
def update_kb(kb: str, body: KnowledgeBaseUpdate, ctx: RequestContext) -> KnowledgeBaseInfo:
    """Rename a knowledge base or change its description."""
    updated = update_knowledge_base(ctx, kb, name=body.name, description=body.description)
    return describe_knowledge_base(ctx, updated)


@router.delete("/v1/knowledge-bases/{kb}", responses=_errors(*_COMMON))
def delete_kb(kb: str, ctx: RequestContext) -> KnowledgeBaseDeleted:
    """A knowledge base and everything it owns (as ``ragstep kb delete``)."""
    gone = delete_knowledge_base(ctx, kb)
    k = gone.knowledge_base
    return KnowledgeBaseDeleted(id=k.id, name=k.name, documents=gone.documents, chunks=gone.chunks, blobs=gone.blobs)


# -- documents -----------------------------------------------------------------------------------------------------


@router.post("/v1/knowledge-bases/{kb}/documents", status_code=202, responses=_errors(413, *_COMMON))
def upload_documents(
    kb: str,
    ctx: RequestContext,
    files: Annotated[list[UploadFile] | None, File(description="one or more files (form parts named 'files')")] = None,
    file: Annotated[list[UploadFile] | None, File(description="the same as 'files' (curl -F file=@x.pdf)")] = None,
    tag: Annotated[str, Form(description="a tag for every chunk of these files")] = "",
    chunk_size: Annotated[int | None, Form(description="characters per chunk (512; a child's in parent-child)")] = None,
    chunk_overlap: Annotated[int | None, Form(description="characters two chunks share (80)")] = None,
    parent_child: Annotated[bool | None, Form(description="index small children, answer with their parents")] = None,
    parent_size: Annotated[int | None, Form(description="characters per parent (parent-child; 4096)")] = None,
) -> UploadAccepted:
    """Upload files to ingest (multipart/form-data). Every file and the chunking options are checked first: one bad
    file or option refuses the request and nothing is stored. Answers at once with one queued job per file;
    re-uploading the same content ends ``unchanged`` (same name and options) or ``duplicate`` (another name), as
    ``ragstep ingest`` reports it. The parts may be named ``file`` as well as ``files`` (the name curl examples and
    other APIs use for one file); both together are one list, ``files`` first."""
    parts = [*(files or ()), *(file or ())]
    if not parts:
        raise InvalidFieldError(
            "files: no file sent; send the file(s) as form parts named `files` (curl -F files=@path)"
        )
    options = chunking_options(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, parent_child=parent_child, parent_size=parent_size
    )
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME") and ctx.settings.blob_backend == "s3":
        # No worker on Lambda (a frozen environment would leave a job running for good): the S3 event ingests.
        if tag or options:
            raise InputError(
                "on AWS an upload is ingested by its S3 event with the knowledge base's defaults: a tag or chunking "
                "options cannot travel with it; upload without them"
            )
        s3_jobs = store_for_s3_ingestion(ctx, ctx.require_kb(kb), received(parts))
        return UploadAccepted(jobs=s3_jobs, documents=[job.knowledge_id for job in s3_jobs])
    _needs_a_worker()
    jobs = store_uploads(ctx, ctx.require_kb(kb), received(parts), tag, options)
    _submit(ctx, jobs)
    return UploadAccepted(jobs=jobs)


class UrlIngest(_Model):
    urls: list[str] = Field(min_length=1, max_length=20, description="pages (http/https), or sitemaps of pages")
    max_pages: int = Field(default=10, ge=1, le=50, description="pages in all, sitemaps' pages included")
    tag: str = ""


class UrlResult(_Model):
    url: str
    document: str = Field(description="the document id (GET /v1/documents/{id})")
    status: str = Field(
        description="indexed (a first version), updated (a new version replaced the one indexed), unchanged, "
        "duplicate or failed; on AWS queued (follow the job)"
    )
    chunks: int = 0
    error: str = Field(default="", description="why it failed; kept for duplicates too, as before: read note")
    note: str = Field(default="", description="what happened, in words: why it failed, duplicate of which file, ...")
    job: str = Field(default="", description="on AWS: the ingestion job (GET /v1/ingestion-jobs/{id})")


@router.post("/v1/knowledge-bases/{kb}/urls", responses=_errors(*_COMMON))
def ingest_web_pages(kb: str, body: UrlIngest, ctx: RequestContext) -> list[UrlResult]:
    """Fetch web pages (or a sitemap's pages) and ingest each with its URL as its source, before answering (at most
    ``max_pages``; README "Web pages by URL" for the fetch's rules: public addresses only, robots.txt, size caps).
    A page that did not change is ``unchanged``; one that cannot be fetched is ``failed`` with the reason. On AWS
    each page is ``queued``: an execution of the ingest state machine fetches and ingests it (follow ``job``)."""
    from ragstep.app.ingest import check_tag
    from ragstep.app.urls import ingest_urls, is_url

    bad = [u for u in body.urls if not is_url(u)]
    if bad:
        raise InputError(f"not an http(s) URL: {bad[0]!r}")
    tag_id = check_tag(body.tag) if body.tag else ""
    if ctx.settings.ingest_state_machine_arn:  # on AWS: one ingest execution per page fetches it (202-like: queued)
        from ragstep.app.url_jobs import queue_url_ingestion

        jobs = queue_url_ingestion(ctx, ctx.require_kb(kb), body.urls, max_pages=body.max_pages, tag_id=tag_id)
        return [UrlResult(url=j.blob_key, document=j.knowledge_id, status="queued", job=j.id) for j in jobs]
    _needs_a_worker()  # on Lambda a fetch and ingest would outlive API Gateway's 29 s: not done there
    results = ingest_urls(body.urls, ctx.require_kb(kb), ctx, max_pages=body.max_pages, tag_id=tag_id)
    return [
        UrlResult(url=r.path, document=r.knowledge_id, status=r.status, chunks=r.chunks, error=r.error, note=r.note)
        for r in results
    ]


@router.post("/v1/knowledge-bases/{kb}/uploads", responses=_errors(*_COMMON))
def presigned_upload(kb: str, body: UploadRequest, ctx: RequestContext) -> PresignedUpload:
    """On AWS: a short-lived presigned S3 PUT for one large file (it does not pass through the API); its S3 event
    starts the ingestion. Send the returned headers with the PUT, and exactly ``size`` bytes; follow the ingestion
    at ``GET /v1/ingestion-jobs/{job_id}`` (``queued`` until the file is uploaded)."""
    return presign_upload(ctx, ctx.require_kb(kb), body)


@router.get(
    "/v1/knowledge-bases/{kb}/images/{document_id}/{name}",
    response_class=Response,
    responses={200: {"content": {"image/png": {}, "image/jpeg": {}}}, **_errors(*_COMMON)},
)
def show_image(kb: str, document_id: str, name: str, ctx: RequestContext) -> Response:
    """A picture stored from inside a document (PDF, DOCX, HTML): what ``image_info[].url`` in a search result or
    an answer's reference points at. Content-addressed, so it never changes under its URL."""
    from ragstep.app.images import read_image

    data, media_type = read_image(ctx, kb, document_id, name)
    headers = {"Cache-Control": "private, max-age=86400, immutable", "X-Content-Type-Options": "nosniff"}
    return Response(content=data, media_type=media_type, headers=headers)


@router.get("/v1/knowledge-bases/{kb}/documents", responses=_errors(*_COMMON))
def list_docs(kb: str, ctx: RequestContext, limit: Limit = 50, cursor: Cursor = None) -> Page[DocumentInfo]:
    """The knowledge base's documents with the state of their latest ingestion, oldest first."""
    return list_documents(ctx, kb, limit, cursor)


@router.get("/v1/documents/{document_id}", responses=_errors(*_COMMON))
def show_doc(document_id: str, ctx: RequestContext) -> DocumentInfo:
    return get_document(ctx, document_id)


@router.patch("/v1/documents/{document_id}", responses=_errors(409, *_COMMON))
def update_doc(document_id: str, body: DocumentUpdate, ctx: RequestContext) -> DocumentUpdated:
    """Enable or disable a document (a disabled one is kept but never retrieved), or change its tag (re-ingests
    its stored original: follow the returned job)."""
    if body.tag is not None:
        _needs_a_worker()
    document, job = update_document(ctx, document_id, enabled=body.enabled, tag=body.tag)
    if job is not None:
        _submit(ctx, [job])
    return DocumentUpdated(document=document, job=job)


@router.delete("/v1/documents/{document_id}", responses=_errors(409, *_COMMON))
def delete_doc(document_id: str, ctx: RequestContext) -> DocumentDeleted:
    """A document everywhere: chunks, stored files, record and finished jobs. A job of it still queued ends
    ``cancelled`` (kept, so its poller learns why); refused (409) while one is running."""
    return DocumentDeleted(id=document_id, chunks=delete_document(ctx, document_id))


@router.get("/v1/ingestion-jobs/{job_id}", responses=_errors(*_COMMON))
def show_job(job_id: str, ctx: SearchContext) -> IngestionJob:
    """One ingestion job: queued, running, or its outcome (indexed: a first version; updated: a new version replaced
    the one indexed; unchanged, duplicate, failed, or cancelled: its document was deleted before it ran), with its
    note (what happened, in words) and error line (a failure's message; a duplicate's note, as before).
    On AWS a job that says running while its state machine execution has ended is brought up to date from it."""
    return reconcile(ctx, require_job(ctx, job_id))
