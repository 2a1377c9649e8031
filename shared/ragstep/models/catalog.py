"""Knowledge bases and the knowledge items (documents, FAQ sets, data files) they hold."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from ragstep.models.base import _Model


class KnowledgeBaseType(StrEnum):
    DOCUMENT = "document"
    FAQ = "faq"


class KnowledgeBase(_Model):
    id: str
    name: str
    type: KnowledgeBaseType = KnowledgeBaseType.DOCUMENT
    # Embedding model id ("none" for BM25 only). Knowledge bases are searched in groups by this id.
    embedding_model: str = "none"
    created_at: float = 0.0


class Knowledge(_Model):
    """One ingested source (a file, a FAQ set) of a knowledge base."""

    id: str
    knowledge_base_id: str
    title: str = ""
    filename: str = ""
    source_uri: str = ""
    content_hash: str = ""
    status: Literal["processing", "completed", "failed"] = "processing"
    chunk_count: int = 0
    tag_id: str = ""
    error: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    # Blob key of the original file (``sources/...`` from the CLI, the upload's key on AWS); "" when there is none.
    source_key: str = ""
    # The :class:`IngestOptions` it was chunked with ({} = the defaults, as for items ingested before they existed).
    options: dict[str, Any] = Field(default_factory=dict)
