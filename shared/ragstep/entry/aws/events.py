"""The S3 ``Object Created`` event that starts the ingest state machine, turned into the state it starts from.

An upload to the blob store's bucket, under ``<RAGSTEP_BLOB_PREFIX>``:

* ``uploads/<knowledge base>/<path>`` -- a file for a knowledge base of the default tenant;
* ``tenants/<tenant>/uploads/<knowledge base>/<path>`` -- the same for another tenant: where that tenant's blob store
  keeps its objects (:meth:`ragstep.context.Clients.blobs`), so the ingest stages read the upload from it.

Importing this module costs only the standard library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragstep.context import Clients
    from ragstep.models import IngestState

#: Where uploads start the ingest state machine: ``<RAGSTEP_BLOB_PREFIX>uploads/<knowledge base>/<path>``.
UPLOADS_PREFIX = "uploads/"
#: Where another tenant's uploads go: ``<RAGSTEP_BLOB_PREFIX>tenants/<tenant>/uploads/<knowledge base>/<path>``.
TENANTS_PREFIX = "tenants/"


def is_s3_object_created(event: Any) -> bool:
    """``event`` is an S3 ``Object Created`` event as EventBridge delivers it."""
    return (
        isinstance(event, dict)
        and event.get("source") == "aws.s3"
        and event.get("detail-type") == "Object Created"
        and isinstance(event.get("detail"), dict)
    )


def object_key(obj: dict[str, Any]) -> str:
    """The object key of an event's ``detail.object``, decoded once, here and nowhere else.

    S3 URL-encodes the key in the events it sends EventBridge as in its other notifications, in the form encoding:
    ``Q3 report + notes 中文.md`` arrives as ``Q3+report+%2B+notes+%E4%B8%AD%E6%96%87.md`` (``/`` stays). Decoding it
    as a form value (``+`` is a space, ``%2B`` a plus) gives the key to read the object with.
    """
    from urllib.parse import unquote_plus

    return unquote_plus(str(obj.get("key") or ""), encoding="utf-8", errors="strict")


def split_upload_key(key: str, prefix: str, where: str) -> tuple[str, str, str]:
    """``(tenant, knowledge base reference, path)`` of the upload ``key`` (an object key that starts with the blob
    ``prefix``); :class:`InputError` saying where uploads go when it is not a file under one of the two layouts."""
    from ragstep.errors import InputError
    from ragstep.models import DEFAULT_TENANT, check_tenant

    layout = (
        f"{prefix}{UPLOADS_PREFIX}<knowledge base id or name>/<file> "
        f"(another tenant's: {prefix}{TENANTS_PREFIX}<tenant>/{UPLOADS_PREFIX}...)"
    )
    if not key.startswith(prefix):
        raise InputError(f"{where}: uploads to ingest go under {layout}")
    tenant, rest = DEFAULT_TENANT, key.removeprefix(prefix)
    if rest.startswith(TENANTS_PREFIX):
        tenant, _, rest = rest.removeprefix(TENANTS_PREFIX).partition("/")
        try:
            check_tenant(tenant)
        except ValueError as exc:
            raise InputError(f"{where}: {exc}") from None
        if tenant == DEFAULT_TENANT:
            # The default tenant's blob store is the prefix itself: an upload here would never be found.
            raise InputError(f"{where}: the default tenant's uploads go under {UPLOADS_PREFIX}, not {TENANTS_PREFIX}")
    if not rest.startswith(UPLOADS_PREFIX):
        raise InputError(f"{where}: uploads to ingest go under {layout}")
    kb_ref, _, path = rest.removeprefix(UPLOADS_PREFIX).partition("/")
    if not kb_ref or not path or path.endswith("/"):
        raise InputError(f"{where}: not a file under {layout}")
    return tenant, kb_ref, path


def ingest_state_from_s3_event(event: dict[str, Any], clients: Clients) -> IngestState:
    """The :class:`~ragstep.models.IngestState` the ingest pipeline starts from, for an upload to the blob store's
    bucket (see the module docstring for where uploads go).

    ``<knowledge base>`` is the id or the name of an existing knowledge base of the tenant; ``<path>`` may have
    folders, and its last part is the file name. The knowledge id comes from the knowledge base id and the path, so
    uploading the same path again replaces that document (or skips it when the content is unchanged).
    """
    from pathlib import PurePosixPath

    from ragstep.app.ingest import knowledge_id_for, new_ingest_state
    from ragstep.errors import InputError
    from ragstep.models import DEFAULT_TENANT

    detail = event["detail"]
    bucket_info, obj = detail.get("bucket"), detail.get("object")
    bucket = str(bucket_info.get("name") or "") if isinstance(bucket_info, dict) else ""
    obj = obj if isinstance(obj, dict) else {}
    key = object_key(obj)
    where = f"s3://{bucket}/{key}"
    settings = clients.settings
    if settings.blob_backend == "s3" and bucket != settings.blob_bucket:
        raise InputError(
            f"{where}: uploads are read from the blob store's bucket {settings.blob_bucket!r}, not {bucket!r}"
        )
    prefix = settings.blob_prefix.strip("/") + "/" if settings.blob_prefix.strip("/") else ""
    tenant, kb_ref, path = split_upload_key(key, prefix, where)
    kb = clients.context(tenant).require_kb(kb_ref)
    tenant_part = "" if tenant == DEFAULT_TENANT else f"{TENANTS_PREFIX}{tenant}/"
    size = obj.get("size")
    state = new_ingest_state(
        kb,
        # Canonical (knowledge base id, not the name the upload used), so both spellings are the same document.
        knowledge_id=knowledge_id_for(kb, f"s3://{bucket}/{prefix}{tenant_part}{UPLOADS_PREFIX}{kb.id}/{path}"),
        # Relative to the tenant's blob store, which holds the upload.
        blob_key=f"{UPLOADS_PREFIX}{kb_ref}/{path}",
        filename=PurePosixPath(path).name,
        uri=where,
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        tenant_id=tenant,
    )
    event_id = str(event.get("id") or "").replace("-", "")
    # The EventBridge event id is the request id: the stages' logs and the event share it.
    return state.model_copy(update={"request_id": event_id}) if event_id else state
