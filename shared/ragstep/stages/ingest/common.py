"""What the four ingest stages share: the knowledge base a state names, the files it takes, the size limit, and the
knowledge item a state describes."""

from __future__ import annotations

from pathlib import PurePath

from ragstep.context import Context
from ragstep.errors import InputError, NotFoundError
from ragstep.models import IngestState, Knowledge, KnowledgeBase, KnowledgeBaseType
from ragstep.parsers import FAQ_EXTENSIONS, SUPPORTED_EXTENSIONS

#: What a document knowledge base ingests (text documents and data files) and what a FAQ knowledge base ingests.
DOCUMENT_SUFFIXES = SUPPORTED_EXTENSIONS
FAQ_SUFFIXES = FAQ_EXTENSIONS


def require_kb(ctx: Context, kb_id: str) -> KnowledgeBase:
    kb = ctx.catalog.get_kb(kb_id)
    if kb is None:
        raise NotFoundError(f"knowledge base {kb_id!r} not found; create it before ingesting into it")
    return kb


def allowed_suffixes(kb: KnowledgeBase) -> tuple[str, ...]:
    return FAQ_SUFFIXES if kb.type == KnowledgeBaseType.FAQ else DOCUMENT_SUFFIXES


def check_size(name: str, size: int, ctx: Context) -> None:
    limit = ctx.settings.max_file_bytes
    if size > limit:
        raise InputError(f"{name}: {size} bytes is over the {limit}-byte limit (RAGSTEP_MAX_FILE_BYTES)")


def state_knowledge(state: IngestState) -> Knowledge:
    """The knowledge item a state describes (as its chunks name it)."""
    src = state.source
    return Knowledge(
        id=src.knowledge_id,
        knowledge_base_id=src.knowledge_base_id,
        title=src.title or PurePath(src.filename).stem,
        filename=src.filename,
        source_uri=src.uri,
        content_hash=src.content_hash,
        tag_id=src.tag_id,
        source_key=src.blob_key,
        size=src.size or 0,
        options=state.options.model_dump(mode="json"),
        note=state.note,
    )
