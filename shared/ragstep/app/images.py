"""The pictures stored from inside documents (:mod:`ragstep.stages.ingest.figures`), read back for a client: what
``image_info[].url`` in a reference points at."""

from __future__ import annotations

import re

from ragstep.context import Context
from ragstep.errors import NotFoundError
from ragstep.parsers.figures import EXTENSIONS
from ragstep.stages.ingest.products import image_blob_key

_MEDIA_TYPES = {extension: media_type for media_type, extension in EXTENSIONS.items()}
# <sha256><ext>: the only names ingestion writes, so no other key of the blob store can be asked for.
_NAME = re.compile(r"^[0-9a-f]{64}(\.[a-z]{3,4})$")


def read_image(ctx: Context, kb: str, document_id: str, name: str) -> tuple[bytes, str]:
    """``(bytes, media type)`` of one stored picture of a document of the knowledge base ``kb`` (id or name);
    :class:`NotFoundError` for anything else (another tenant's or knowledge base's, a deleted document's)."""
    base = ctx.require_kb(kb)
    match = _NAME.match(name)
    media_type = _MEDIA_TYPES.get(match.group(1)) if match else None
    knowledge = ctx.catalog.get_knowledge(document_id)
    key = image_blob_key(base.id, document_id, name)
    if media_type is None or knowledge is None or knowledge.knowledge_base_id != base.id or not ctx.blobs.exists(key):
        raise NotFoundError(f"no picture {name!r} in document {document_id!r} of knowledge base {kb!r}")
    return ctx.blobs.get(key), media_type
