"""The upload use case: files a client sends are checked, then stored and queued for ingestion; or a presigned S3 PUT.

Every file of one request is checked (its name, type, size, that it is not empty) and hashed in 1 MiB pieces before
any is stored: one bad file refuses the whole request and nothing is stored. Then each file is either

* streamed into the blob store (:meth:`~ragstep.ports.BlobStore.put_file`, never one bytes object) under its
  content-addressed ``sources/`` key and queued as one ingestion job for the process's workers
  (:func:`store_uploads`), or
* on AWS, stored where a presigned PUT puts it (the tenant's ``uploads/<kb>/<file>``), whose S3 event starts the
  ingest state machine, with its ``queued`` job recorded first (:func:`store_for_s3_ingestion`, :func:`presign_upload`).

Entry points (the HTTP API, MCP) parse their own request into :class:`Upload` values and call one of these; the key
layout is :mod:`ragstep.models.blob_keys`'.
"""

from __future__ import annotations

import functools
import hashlib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from pydantic import Field, ValidationError

from ragstep.app.ingest import check_tag, knowledge_id_for
from ragstep.app.jobs import queue_ingestion
from ragstep.app.s3_jobs import queue_upload
from ragstep.context import Context
from ragstep.errors import InputError
from ragstep.models import IngestOptions, KnowledgeBase
from ragstep.models.base import _Model
from ragstep.models.blob_keys import content_type, source_blob_key, upload_key, upload_uri
from ragstep.models.catalog import IngestionJob
from ragstep.parsers import accepts, unsupported
from ragstep.stages.ingest.common import allowed_suffixes

MAX_FILES = 100
MAX_NAME_BYTES = 255
_PIECE = 1 << 20


@dataclass(frozen=True, slots=True)
class Upload:
    """One file as an entry point received it: its name as sent (None: none was), a readable and seekable file at
    the start of its content, and whether the name's bytes were not UTF-8 (``name`` then shows them with U+FFFD)."""

    name: str | None
    file: BinaryIO
    name_not_utf8: bool = False


def check_filename(raw: str | None) -> str:
    """A file name as uploaded: one non-empty name, no folder, no control character, at most 255 bytes."""
    name = raw or ""
    if not name.strip():
        raise InputError("an uploaded file has no file name; send each file with a filename in its form part")
    bad = next((ch for ch in name if unicodedata.category(ch) == "Cc"), None)
    if bad is not None:
        raise InputError(f"file name {name!r} contains the control character U+{ord(bad):04X}; rename the file")
    if "/" in name or "\\" in name or name in (".", ".."):
        raise InputError(f"file name {name!r} has a path in it; send the bare file name")
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in name):
        raise InputError(f"file name {name!r} is not valid UTF-8; rename the file")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise InputError(f"file name {name[:40]!r}... is over {MAX_NAME_BYTES} bytes; use a shorter name")
    return name


def chunking_options(**given: int | bool | None) -> dict[str, Any] | None:
    """The upload's chunking options (the fields sent; None when none was), checked as ``ragstep ingest`` checks
    them: :class:`InputError` naming the rule, before anything is stored."""
    sent = {name: value for name, value in given.items() if value is not None}
    if not sent:
        return None
    try:
        return IngestOptions.model_validate(sent).model_dump()
    except ValidationError as exc:
        from ragstep.models.unknown_fields import first_problem

        problem = first_problem(exc, IngestOptions)
        raise InputError(problem if exc.errors()[0]["loc"] else f"chunking options: {problem}") from None


@dataclass(frozen=True, slots=True)
class _Checked:
    name: str
    file: BinaryIO
    start: int
    size: int
    digest: str


def _check_name(name: str | None, kb: KnowledgeBase, not_utf8: bool = False) -> str:
    if not_utf8:
        raise InputError(f"file name {name!r} is not valid UTF-8; rename the file")
    checked = check_filename(name)
    suffixes = allowed_suffixes(kb)
    if not accepts(checked, suffixes):
        raise unsupported(checked, suffixes)
    return checked


def _check_file(upload: Upload, kb: KnowledgeBase, ctx: Context) -> _Checked:
    name = _check_name(upload.name, kb, upload.name_not_utf8)
    limit = ctx.settings.max_file_bytes
    file = upload.file
    start = file.tell()
    digest = hashlib.sha256()
    size = 0
    while piece := file.read(_PIECE):
        size += len(piece)
        if size > limit:
            raise InputError(f"{name}: over the {limit}-byte limit per file (RAGSTEP_MAX_FILE_BYTES); send it alone")
        digest.update(piece)
    if size == 0:
        raise InputError(f"{name}: the file is empty; nothing to ingest")
    return _Checked(name, file, start, size, digest.hexdigest())


def _check_all(ctx: Context, kb: KnowledgeBase, files: Sequence[Upload]) -> list[_Checked]:
    """Every file of one request checked (in the order sent), before any is stored."""
    if not files:
        raise InputError("no file in the request; send one or more form parts named 'files'")
    if len(files) > MAX_FILES:
        raise InputError(f"{len(files)} files in one request; the limit is {MAX_FILES}")
    checked = [_check_file(upload, kb, ctx) for upload in files]
    names = [c.name for c in checked]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"file name {twice[0]!r} is sent twice; one document per name and request")
    return checked


def store_uploads(
    ctx: Context, kb: KnowledgeBase, files: Sequence[Upload], tag: str = "", options: dict[str, Any] | None = None
) -> list[IngestionJob]:
    """Check every file, then store each and queue its ingestion job (in the order sent), chunked with ``options``
    (:func:`chunking_options`; None: the defaults)."""
    tag_id = check_tag(tag) if tag else ""
    jobs = []
    for c in _check_all(ctx, kb, files):
        key = source_blob_key(kb.id, knowledge_id_for(kb, c.name), c.digest, c.name)
        if not ctx.blobs.exists(key):  # content-addressed: the same bytes are already there
            c.file.seek(c.start)
            ctx.blobs.put_file(key, c.file, content_type(c.name))
        jobs.append(
            queue_ingestion(
                ctx,
                kb,
                filename=c.name,
                blob_key=key,
                content_hash=c.digest,
                size=c.size,
                tag_id=tag_id,
                options=options,
            )
        )
    return jobs


# -- uploads that S3 events ingest (AWS) ---------------------------------------------------------------------------


class UploadRequest(_Model):
    filename: str = Field(description="the file's name (no folder); its extension decides how it is parsed")
    size: int = Field(ge=1, description="its exact size in bytes: the URL accepts only a body of this length")
    content_type: str = Field(default="", description="sent as Content-Type (default: from the extension)")


class PresignedUpload(_Model):
    method: str = "PUT"
    url: str
    #: Send exactly these headers with the PUT (they are part of the signature).
    headers: dict[str, str]
    expires_in: int
    #: The object key; its S3 event starts the ingestion.
    key: str
    #: The document the upload becomes: ``GET /v1/documents/{document_id}`` once it is ingested.
    document_id: str
    #: Its ingestion job, ``queued`` until the upload's S3 event starts it: ``GET /v1/ingestion-jobs/{job_id}``.
    job_id: str


@functools.lru_cache(maxsize=4)
def _presigner(region: str | None) -> Any:
    """An S3 client that presigns with SigV4, whose signature covers the headers given (length, type, encryption);
    the older query signature a default client may use covers neither. One per region, kept for the process."""
    from botocore.config import Config

    from ragstep.adapters._aws import aws_client

    return aws_client("s3", region=region, config=Config(signature_version="s3v4"))


def _s3_blobs(ctx: Context) -> Any:
    """The tenant's S3 blob store; :class:`InputError` when the blobs are not in S3."""
    from ragstep.adapters.blobs.s3 import S3BlobStore

    blobs = ctx.blobs
    if ctx.settings.blob_backend != "s3" or not isinstance(blobs, S3BlobStore):
        raise InputError("presigned uploads need the S3 blob store; POST the file to /documents instead")
    return blobs


def s3_document_id(ctx: Context, kb: KnowledgeBase, name: str) -> str:
    """The knowledge id the S3 event gives an upload of ``name`` (:mod:`ragstep.entry.aws.events`)."""
    blobs = _s3_blobs(ctx)
    return knowledge_id_for(kb, upload_uri(blobs.bucket, ctx.settings.blob_prefix, ctx.tenant_id, kb.id, name))


def queue_s3_upload(ctx: Context, kb: KnowledgeBase, name: str, size: int) -> IngestionJob:
    """The ``queued`` job of an upload to the tenant's ``uploads/<kb id>/<name>``, recorded before the file is
    there: the upload's S3 event takes it (:func:`ragstep.app.s3_jobs.start_for_execution`)."""
    return queue_upload(
        ctx, kb, filename=name, blob_key=upload_key(kb.id, name), knowledge_id=s3_document_id(ctx, kb, name), size=size
    )


def store_for_s3_ingestion(ctx: Context, kb: KnowledgeBase, files: Sequence[Upload]) -> list[IngestionJob]:
    """A small direct upload on Lambda: every file checked first, then each stored where a presigned PUT puts it
    (the tenant's ``uploads/<kb>/<file>``), whose S3 event starts the ingest state machine; one queued job per
    file (its ``knowledge_id`` is the document it becomes)."""
    blobs = _s3_blobs(ctx)
    jobs = []
    for c in _check_all(ctx, kb, files):
        jobs.append(queue_s3_upload(ctx, kb, c.name, c.size))  # before the upload, whose event looks for it
        c.file.seek(c.start)
        blobs.put_file(upload_key(kb.id, c.name), c.file, content_type(c.name))
    return jobs


def presign_upload(ctx: Context, kb: KnowledgeBase, request: UploadRequest) -> PresignedUpload:
    """A short-lived presigned S3 PUT of one file into the tenant's uploads prefix (where the S3 event starts the
    ingest state machine, :mod:`ragstep.entry.aws.events`). The signature covers the length, the type and the
    encryption header, so S3 refuses any other body."""
    settings = ctx.settings
    blobs = _s3_blobs(ctx)
    name = _check_name(request.filename, kb)
    if request.size > settings.max_file_bytes:
        raise InputError(f"{name}: {request.size} bytes is over the {settings.max_file_bytes}-byte limit per file")
    kind = request.content_type or content_type(name)
    if any(unicodedata.category(ch) == "Cc" for ch in kind) or not kind.isascii():
        raise InputError("content_type must be printable ASCII")
    key = f"{blobs.prefix}{upload_key(kb.id, name)}"
    params = {"Bucket": blobs.bucket, "Key": key, "ContentType": kind, "ContentLength": request.size}
    headers = {"Content-Type": kind, "Content-Length": str(request.size)}
    if blobs.kms_key_id:
        params.update(ServerSideEncryption="aws:kms", SSEKMSKeyId=blobs.kms_key_id)
        headers.update(
            {"x-amz-server-side-encryption": "aws:kms", "x-amz-server-side-encryption-aws-kms-key-id": blobs.kms_key_id}
        )
    else:
        params["ServerSideEncryption"] = "AES256"
        headers["x-amz-server-side-encryption"] = "AES256"
    expiry = settings.upload_url_expiry_s
    url = _presigner(blobs.client.meta.region_name).generate_presigned_url(
        "put_object", Params=params, ExpiresIn=expiry
    )
    # The job (and the document it makes) the S3 event of this upload takes, so the caller can follow it.
    job = queue_s3_upload(ctx, kb, name, request.size)
    return PresignedUpload(
        url=url, headers=headers, expires_in=expiry, key=key, document_id=job.knowledge_id, job_id=job.id
    )
