"""Knowledge base use cases, called by every entry point (CLI, HTTP API)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from ragstep.context import Context
from ragstep.errors import InputError
from ragstep.models import Knowledge, KnowledgeBase, KnowledgeBaseType
from ragstep.models.base import _Model
from ragstep.stages.ingest.products import delete_blobs, is_owned_key, knowledge_base_prefixes

# -- create / show -------------------------------------------------------------------------------------------------


def create_knowledge_base(
    ctx: Context,
    name: str,
    kb_type: KnowledgeBaseType | str = KnowledgeBaseType.DOCUMENT,
    embedding_model: str | None = None,
) -> KnowledgeBase:
    """A new, empty knowledge base of ``ctx``'s tenant.

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
    kb = KnowledgeBase(id=uuid.uuid4().hex, name=name, type=kind, embedding_model=model, created_at=time.time())
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
    chunks = ctx.index.delete_knowledge_base(kb.id)
    gone = delete_blobs(ctx.blobs, knowledge_base_prefixes(kb.id))
    for item in items:
        # An S3 upload (uploads/<kb>/...) is the original of its document: it goes with it, as `ragstep delete` does.
        if item.source_key and not is_owned_key(item.source_key) and ctx.blobs.exists(item.source_key):
            ctx.blobs.delete(item.source_key)
            gone.append(item.source_key)
    ctx.catalog.delete_kb(kb.id)
    return KnowledgeBaseDeletion(kb, chunks=chunks, documents=len(items), blobs=len(gone))
