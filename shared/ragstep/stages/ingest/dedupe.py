"""Skipping work: ``unchanged`` (same content, options and tag as the indexed version) and ``duplicate`` (another
item of the knowledge base already indexed these bytes).

A knowledge base holds each content once, under the knowledge item that indexed it first. The lookup is one read
however large the knowledge base is: ``hashes/<kb id>/<sha256>`` names the item that indexed the content. The marker
is a hint, checked against the catalog (items indexed before these markers existed are not found by it).
"""

from __future__ import annotations

from ragstep.context import Context
from ragstep.errors import NotFoundError
from ragstep.models import IngestOptions, Knowledge
from ragstep.stages.ingest.products import HASHES_PREFIX


def hash_marker_key(knowledge_base_id: str, content_hash: str) -> str:
    return f"{HASHES_PREFIX}{knowledge_base_id}/{content_hash}"


def same_options(knowledge: Knowledge, options: IngestOptions) -> bool:
    try:
        return IngestOptions.model_validate(knowledge.options or {}) == options
    except ValueError:
        return False


def is_unchanged(existing: Knowledge | None, content_hash: str, tag_id: str, options: IngestOptions) -> bool:
    """The indexed version is this content, tagged and chunked the same way: nothing to do."""
    return (
        existing is not None
        and existing.status == "completed"
        and existing.content_hash == content_hash
        and existing.tag_id == tag_id
        and same_options(existing, options)
    )


def find_twin(ctx: Context, knowledge_base_id: str, content_hash: str, knowledge_id: str) -> Knowledge | None:
    """The other completed item of the knowledge base whose content has this hash, if any.

    The marker is only a hint: the catalog record it names must still say this hash (a stale marker -- the item
    changed or was deleted -- is ignored and overwritten by the next item that indexes the content).
    """
    try:
        twin_id = ctx.blobs.get(hash_marker_key(knowledge_base_id, content_hash)).decode("utf-8")
    except NotFoundError:
        return None
    if twin_id == knowledge_id:
        return None
    twin = ctx.catalog.get_knowledge(twin_id)
    if (
        twin is None
        or twin.status != "completed"
        or twin.knowledge_base_id != knowledge_base_id
        or twin.content_hash != content_hash
    ):
        return None
    return twin


def mark_hash(ctx: Context, knowledge: Knowledge) -> None:
    key = hash_marker_key(knowledge.knowledge_base_id, knowledge.content_hash)
    ctx.blobs.put(key, knowledge.id.encode(), "text/plain")


def unmark_hash(ctx: Context, knowledge: Knowledge) -> None:
    """Remove the hash marker of ``knowledge`` if it names this item (another item may own the content now)."""
    if not knowledge.content_hash:
        return
    key = hash_marker_key(knowledge.knowledge_base_id, knowledge.content_hash)
    try:
        if ctx.blobs.get(key).decode("utf-8") == knowledge.id:
            ctx.blobs.delete(key)
    except NotFoundError:
        pass
