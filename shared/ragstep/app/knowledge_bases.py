"""Knowledge base use cases, called by every entry point (CLI, HTTP API)."""

from __future__ import annotations

import base64
import json
import time
import unicodedata
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import Field

from ragstep.context import Context
from ragstep.errors import InputError
from ragstep.models import Knowledge, KnowledgeBase, KnowledgeBaseType
from ragstep.models.base import _Model
from ragstep.models.blob_keys import is_owned_key, knowledge_base_prefixes
from ragstep.models.catalog import PENDING_JOB_STATUSES
from ragstep.stages.ingest.products import delete_blobs

# -- create / show -------------------------------------------------------------------------------------------------


def create_knowledge_base(
    ctx: Context,
    name: str,
    kb_type: KnowledgeBaseType | str = KnowledgeBaseType.DOCUMENT,
    embedding_model: str | None = None,
    description: str = "",
    *,
    graph: bool = False,
    layers: bool = False,
) -> KnowledgeBase:
    """A new, empty knowledge base of ``ctx``'s tenant (``graph``: with a knowledge graph built at ingest).

    ``embedding_model`` ("provider:model" or "none"; None = the settings' model) is checked here, before anything is
    stored: a typo would otherwise surface only at the first ingest, in a knowledge base nobody can fill. The catalog
    checks the name (its rules, and that no other knowledge base has it).
    """
    from ragstep.adapters.embedders import normalize_model_id

    try:
        kind = KnowledgeBaseType(kb_type)
    except ValueError:
        choices = ", ".join(t.value for t in KnowledgeBaseType)
        raise InputError(f"unknown knowledge base type {kb_type!r}; choose one of: {choices}") from None
    model = ctx.default_embedding_model() if embedding_model is None else normalize_model_id(embedding_model)
    kb = KnowledgeBase(
        id=uuid.uuid4().hex,
        name=name,
        type=kind,
        embedding_model=model,
        created_at=time.time(),
        description=check_description(description),
        graph=graph,
        layers=layers,
    )
    return ctx.catalog.create_kb(kb)


class KnowledgeBaseContents(_Model):
    """A knowledge base and its documents (``ragstep kb show``): every knowledge item whatever its status, in
    file-name order, and their chunks added up."""

    knowledge_base: KnowledgeBase
    documents: list[Knowledge]
    chunks: int


def show_knowledge_base(ctx: Context, ref: str) -> KnowledgeBaseContents:
    kb = ctx.require_kb(ref)
    documents = sorted(ctx.catalog.list_knowledge(kb.id), key=lambda k: (k.filename or k.title or k.source_uri, k.id))
    return KnowledgeBaseContents(knowledge_base=kb, documents=documents, chunks=sum(d.chunk_count for d in documents))


# -- delete --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KnowledgeBaseDeletion:
    """What ``delete_knowledge_base`` removed."""

    knowledge_base: KnowledgeBase
    chunks: int
    documents: int
    blobs: int


def delete_knowledge_base(ctx: Context, ref: str) -> KnowledgeBaseDeletion:
    """Remove a knowledge base (by id or name) and everything it owns: its chunks, the stored originals of its
    documents (uploads outside ingestion's own prefixes included), its data files, ingest products and hash
    markers, then its catalog rows.

    The catalog goes last, so a delete that is interrupted (or fails on one blob) can be run again.
    """
    kb = ctx.require_kb(ref)
    items = ctx.catalog.list_knowledge(kb.id)
    if kb.graph:  # before the chunks: no node ever points at a chunk that is gone
        ctx.graph.delete_knowledge_base(kb.id)
    chunks = ctx.index.delete_knowledge_base(kb.id)
    gone = delete_blobs(ctx.blobs, knowledge_base_prefixes(kb.id))
    gone += delete_blobs(ctx.blobs, [f"viking/{kb.id}/"])  # its hierarchy (ragstep.stages.viking.tree)
    for item in items:
        # An S3 upload (uploads/<kb>/...) is the original of its document: it goes with it, as `ragstep delete` does.
        if item.source_key and not is_owned_key(item.source_key) and ctx.blobs.exists(item.source_key):
            ctx.blobs.delete(item.source_key)
            gone.append(item.source_key)
    # Its ingestion jobs go with its catalog rows; their uploads were under sources/<kb id>/, removed above.
    ctx.catalog.delete_kb(kb.id)
    return KnowledgeBaseDeletion(kb, chunks=chunks, documents=len(items), blobs=len(gone))


# -- list / describe / change (the HTTP API) -----------------------------------------------------------------------

MAX_DESCRIPTION_CHARS = 2000
T = TypeVar("T")


def check_description(text: str) -> str:
    if len(text) > MAX_DESCRIPTION_CHARS:
        raise InputError(f"description has {len(text)} characters; the limit is {MAX_DESCRIPTION_CHARS}")
    if any(unicodedata.category(ch) == "Cc" and ch not in "\t\n\r" for ch in text):
        raise InputError("description contains a control character; remove it")
    return text.strip()


class Page(_Model, Generic[T]):
    """One page of a listing, oldest first; ``next_cursor`` fetches the next one (null on the last page)."""

    items: list[T]
    next_cursor: str | None = None


def paginate(items: Sequence[T], key: Callable[[T], tuple[float, str]], limit: int, cursor: str | None) -> Page[T]:
    """Keyset pagination over ``items`` sorted by ``key`` (created_at, id): a page starts after the cursor's key, so
    an item added or removed meanwhile shifts no other item to another page."""
    ordered = sorted(items, key=key)
    if cursor:
        after = _decode_cursor(cursor)
        ordered = [item for item in ordered if key(item) > after]
    page = ordered[:limit]
    more = len(ordered) > limit
    return Page[T](items=page, next_cursor=_encode_cursor(key(page[-1])) if more and page else None)


def _encode_cursor(position: tuple[float, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(position)).encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        created, ident = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return float(created), str(ident)
    except (ValueError, TypeError) as exc:
        raise InputError("cursor is not one this API gave; pass the next_cursor of the previous page") from exc


class KnowledgeBaseInfo(_Model):
    """A knowledge base with what it holds: documents (indexed or not), chunks, stored bytes, pending jobs."""

    knowledge_base: KnowledgeBase
    documents: int
    chunks: int
    size: int = Field(description="bytes of the originals of its indexed documents (as uploaded)")
    pending_jobs: int


def describe_knowledge_base(ctx: Context, kb: KnowledgeBase) -> KnowledgeBaseInfo:
    items = ctx.catalog.list_knowledge(kb.id)
    jobs = ctx.catalog.list_jobs(kb.id)
    sizes = {job.blob_key: job.size for job in jobs}
    return KnowledgeBaseInfo(
        knowledge_base=kb,
        documents=len(items),
        chunks=sum(item.chunk_count for item in items),
        # The item's own size (every ingestion that knows it: the CLI's, an upload's); an older item's from its job.
        size=sum(item.size or sizes.get(item.source_key, 0) for item in items),
        pending_jobs=sum(1 for job in jobs if job.status in PENDING_JOB_STATUSES),
    )


def list_knowledge_bases(ctx: Context, limit: int, cursor: str | None = None) -> Page[KnowledgeBaseInfo]:
    page = paginate(ctx.catalog.list_kbs(), lambda kb: (kb.created_at, kb.id), limit, cursor)
    return Page[KnowledgeBaseInfo](
        items=[describe_knowledge_base(ctx, kb) for kb in page.items], next_cursor=page.next_cursor
    )


def update_knowledge_base(
    ctx: Context, ref: str, *, name: str | None = None, description: str | None = None
) -> KnowledgeBase:
    """Rename a knowledge base or change its description (its type and embedding model are fixed: its chunks
    were made with them)."""
    kb = ctx.require_kb(ref)
    changes: dict[str, str] = {}
    if name is not None:
        changes["name"] = name
    if description is not None:
        changes["description"] = check_description(description)
    if not changes:
        return kb
    return ctx.catalog.update_kb(kb.model_copy(update=changes))
