"""Files uploaded to the HTTP API, as the upload use case (:mod:`ragstep.app.uploads`) takes them.

A multipart upload is spooled by the form parser (in memory up to 1 MiB per file, on disk beyond); each form part
becomes an :class:`~ragstep.app.uploads.Upload` (its name as its bytes say it), and the use case checks, stores and
queues them. The whole request is held to ``RAGSTEP_MAX_UPLOAD_BYTES`` by the body limit middleware
(:func:`upload_limits`), each file to ``RAGSTEP_MAX_FILE_BYTES``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ragstep.app.uploads import Upload

if TYPE_CHECKING:
    from fastapi import UploadFile

    from ragstep.settings import Settings

#: The route of document uploads, which the body limit holds to RAGSTEP_MAX_UPLOAD_BYTES instead.
UPLOAD_ROUTE = re.compile(r"/v1/knowledge-bases/[^/]+/documents")


def upload_limits(settings: Settings) -> dict[re.Pattern[str], int]:
    """The body limit of each upload route (the body limit middleware's ``per_path``)."""
    return {UPLOAD_ROUTE: settings.max_upload_bytes}


def _sent_name(upload: UploadFile) -> str | None:
    """The file name as its form part's bytes carry it, when they are not UTF-8 (the form parser would have read
    them as Latin-1 and turned ``a\\xff\\xfeb.md`` into ``aÿþb.md``); None when they are."""
    from python_multipart.multipart import parse_options_header

    for field, value in upload.headers.raw:
        if field.lower() == b"content-disposition":
            raw = parse_options_header(value)[1].get(b"filename", b"")
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return raw.decode("utf-8", "replace")
    return None


def received(files: list[UploadFile]) -> list[Upload]:
    """The form's files as the upload use case takes them."""
    uploads = []
    for upload in files:
        shown = _sent_name(upload)
        name = upload.filename if shown is None else shown
        uploads.append(Upload(name=name, file=upload.file, name_not_utf8=shown is not None))
    return uploads
