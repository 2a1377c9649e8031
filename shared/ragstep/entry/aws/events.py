"""The S3 ``Object Created`` event that starts the ingest state machine, turned into the state it starts from.

An upload to the blob store's bucket, under ``<RAGSTEP_BLOB_PREFIX>``, where :mod:`ragstep.models.blob_keys` says
uploads go (``uploads/<knowledge base>/<path>``, or ``tenants/<tenant>/uploads/...`` for another tenant).

Importing this module costs only the standard library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragstep.context import Clients
    from ragstep.models import IngestState


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
    from ragstep.models.blob_keys import root_prefix, split_upload_key, upload_key, upload_uri

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
    tenant, kb_ref, path = split_upload_key(key, root_prefix(settings.blob_prefix), where)
    kb = clients.context(tenant).require_kb(kb_ref)
    size = obj.get("size")
    state = new_ingest_state(
        kb,
        # Canonical (knowledge base id, not the name the upload used), so both spellings are the same document.
        knowledge_id=knowledge_id_for(kb, upload_uri(bucket, settings.blob_prefix, tenant, kb.id, path)),
        # Relative to the tenant's blob store, which holds the upload.
        blob_key=upload_key(kb_ref, path),
        filename=PurePosixPath(path).name,
        uri=where,
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
        tenant_id=tenant,
    )
    event_id = str(event.get("id") or "").replace("-", "")
    # The EventBridge event id is the request id: the stages' logs and the event share it.
    return state.model_copy(update={"request_id": event_id}) if event_id else state


def ingest_input_state(stage_name: str, event: Any, clients: Clients) -> IngestState:
    """The state an ingest stage runs on. The ingest machine's first task gets its input together with the
    execution's ARN (:data:`ragstep.pipeline.asl.EXECUTION_PARAMETERS`): ``{"input": <event>, "execution_arn": ...}``;
    an upload's S3 event there becomes the state it starts, with the upload's ingestion job taken and ``running``
    (:func:`ragstep.app.s3_jobs.start_for_execution`: every upload is followed by a job, presigned by the API or
    not). A web page request (``{"ragstep_url": ...}``, started by the API: :mod:`ragstep.app.url_jobs`) is fetched
    there and becomes the state it starts. Both start with ``vectors_later`` as ``RAGSTEP_INGEST_PROGRESSIVE`` says
    (the vectors added after the index, by the machine's ``embed_batches``). Any other event is a state, decoded as
    the stage handler decodes every state."""
    from ragstep.errors import InputError
    from ragstep.models import IngestState
    from ragstep.pipeline import transport
    from ragstep.pipeline.definitions import get_pipeline

    execution_arn = ""
    if isinstance(event, dict) and set(event) == {"input", "execution_arn"}:
        execution_arn, event = str(event["execution_arn"] or ""), event["input"]
    if isinstance(event, dict) and set(event) == {"ragstep_url"}:  # a web page to fetch (ragstep.app.url_jobs)
        if stage_name != get_pipeline("ingest").stage_names()[0]:
            raise InputError(f"{stage_name} takes an ingest state; a web page request starts the first stage")
        from ragstep.app.url_jobs import state_from_url_request

        started = state_from_url_request(event, clients, execution_arn)
        return started.model_copy(update={"vectors_later": clients.settings.ingest_progressive})
    if not is_s3_object_created(event):
        return transport.decode_event(event, clients.blobs, IngestState)
    if stage_name != get_pipeline("ingest").stage_names()[0]:
        raise InputError(f"{stage_name} takes an ingest state; an S3 event starts the first stage")
    from ragstep.app.s3_jobs import start_for_execution

    state = ingest_state_from_s3_event(event, clients)
    # Progressive indexing (RAGSTEP_INGEST_PROGRESSIVE): keyword-searchable once indexed, vectors in batches after.
    state = state.model_copy(update={"vectors_later": clients.settings.ingest_progressive})
    return start_for_execution(clients.context(state.tenant_id), state, execution_arn)
