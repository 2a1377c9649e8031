"""What the MCP ``ingest`` tool is sent: a document's text, its bytes as base64, or -- over stdio only -- a local file.

Over stdio the caller is the machine's own user, who started ``ragstep mcp`` as the command line is started: a path
or a ``file:`` URI names a file as it does to ``ragstep ingest`` (:func:`ragstep.app.ingest.local_path`), read under
the same rules (:mod:`ragstep.app.local_files`: regular files only, never ``/proc``, ``/sys`` or ``/dev``, never past
``RAGSTEP_MAX_FILE_BYTES``). It must be absolute: the server's working folder is whatever the desktop client chose.
Over HTTP the caller is anyone holding a key, and the server's disk is not theirs to read: a path is refused there,
as the API's URL ingestion refuses ``file:`` URLs.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragstep.errors import InputError

__all__ = ["MAX_INGEST_BYTES", "SOURCES", "document_of"]

#: The largest document a call may send in its arguments (the HTTP upload limit applies over HTTP as well).
MAX_INGEST_BYTES = 5 * 1024 * 1024
#: The arguments that carry the document: one of them.
SOURCES = ("text", "content_base64", "path")


def _string(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{name} is required: a non-empty string")
    return value


def _local(arg: str, limit: int) -> tuple[str, bytes]:
    from ragstep.app.ingest import local_path
    from ragstep.app.local_files import read_local_file

    path = Path(local_path(arg)).expanduser()
    if not path.is_absolute():
        raise InputError(f"path {arg!r} is relative; name the file from the root (/home/me/notes.md) or as file:///...")
    if not path.exists():
        raise InputError(f"path {arg!r}: no such file")
    return path.name, read_local_file(path, limit, str(path))


def document_of(args: Mapping[str, Any], *, local_files: bool, file_limit: int) -> tuple[str, bytes]:
    """The file name and bytes of the document an ``ingest`` call sends. ``local_files``: the caller may name a file
    of this machine (stdio); ``file_limit``: the size limit of such a file (``RAGSTEP_MAX_FILE_BYTES``)."""
    sent = [name for name in SOURCES if name in args]
    if len(sent) > 1:
        raise InputError(f"send one of text, content_base64 or path, not {' and '.join(sent)}")
    if sent == ["path"]:
        if not local_files:
            raise InputError(
                "path: this server does not read its own disk for a caller over HTTP; send the document as text or"
                " content_base64"
            )
        name, data = _local(_string(args, "path"), file_limit)
        return (_string(args, "filename") if "filename" in args else name), data
    name = _string(args, "filename")
    if sent == ["content_base64"]:
        try:
            data = base64.b64decode(_string(args, "content_base64"), validate=True)
        except (binascii.Error, ValueError):
            raise InputError("content_base64 is not valid base64") from None
    else:
        data = _string(args, "text").encode("utf-8")
    if len(data) > MAX_INGEST_BYTES:
        raise InputError(f"the document is {len(data)} bytes; the limit is {MAX_INGEST_BYTES}")
    return name, data
