"""Knowledge bases and the knowledge items (documents, FAQ sets, data files) they hold."""

# No ``from __future__ import annotations``: see ragstep.models.base (pydantic reads the fields' types as objects).

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from ragstep.models.base import _DeferredModel, _Model, empty_list


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
    description: str = ""
    # Knowledge graph: an LLM extracts entities and relations from every chunk at ingest (`kb create --graph`).
    graph: bool = False
    # Hierarchy layers: an abstract (L0) and an overview (L1) per folder and document, indexed at ingest
    # (`kb create --layers`; ragstep.app.viking).
    layers: bool = False


class Knowledge(_DeferredModel):
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
    # How the file was read, when its owner should know: its ingest row's note ("read as windows-1252 (not valid
    # UTF-8)", "decompressed from gzip"); "" for none, and for items ingested before it was kept.
    note: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    # Blob key of the original file (``sources/...`` from the CLI, the upload's key on AWS); "" when there is none.
    source_key: str = ""
    # Bytes of the original when its ingestion knew them (0: unknown, e.g. an item ingested before this was kept).
    size: int = 0
    # The :class:`IngestOptions` it was chunked with ({} = the defaults, as for items ingested before they existed).
    options: dict[str, Any] = Field(default_factory=dict)
    # False: kept (record, chunks, original) but never retrieved. ``disabled_chunks`` are the index rows switched
    # off, so enabling it again switches exactly those back on (the index only lists a document's enabled chunks).
    enabled: bool = True
    disabled_chunks: list[str] = Field(default_factory=empty_list)
    # Progressive indexing: the chunks are searchable by keyword, their vectors are still to be added from this blob
    # (``pending/...``, :func:`ragstep.stages.ingest.products.pending_chunks_key`); "" when every chunk has its vector
    # (or the knowledge base has no embedding model). See :mod:`ragstep.app.ingest_vectors`.
    vectors_pending: str = ""


#: Where an ingestion job is: waiting for a worker, being ingested, or its outcome (as ``ragstep ingest`` reports it:
#: ``indexed`` a first version, ``updated`` a new version replacing the one indexed); ``cancelled``: its document was
#: deleted before the job ran (the job stays, so whoever polls it learns why).
JobStatus = Literal["queued", "running", "indexed", "updated", "unchanged", "duplicate", "failed", "cancelled"]
#: The outcomes that wrote the index (the document's chunks are this upload's).
WROTE_JOB_STATUSES: tuple[JobStatus, ...] = ("indexed", "updated")
#: The statuses a job leaves only by running: a restarted server picks these up again.
PENDING_JOB_STATUSES: tuple[JobStatus, ...] = ("queued", "running")


class IngestionJob(_DeferredModel):
    """One file to ingest into a knowledge base, from a stored blob (an HTTP upload), and what became of it."""

    id: str
    knowledge_base_id: str
    #: The document it makes (or replaces): :func:`ragstep.app.ingest.knowledge_id_for` of the file name.
    knowledge_id: str
    filename: str
    #: The stored original the job ingests (content-addressed under ``sources/``).
    blob_key: str
    content_hash: str = ""
    size: int = 0
    tag_id: str = ""
    #: The :class:`IngestOptions` to chunk it with ({} = the defaults).
    options: dict[str, Any] = Field(default_factory=dict)
    status: JobStatus = "queued"
    #: One line: why it failed, or which document holds the same content (``duplicate``); kept as it was for its
    #: readers: ``note`` says what happened whatever the outcome.
    error: str = ""
    #: What to know about the outcome, in words: why it failed, "duplicate of a.md", how the file was read, what an
    #: update replaced ("" when there is nothing to add).
    note: str = ""
    chunks: int = 0
    #: ``duplicate``: the document that already holds this content.
    duplicate_of: str = ""
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    #: Who runs it: the serving process's worker, or (on AWS) the ingest state machine its upload's S3 event starts.
    runs_on: Literal["worker", "state_machine"] = "worker"
    #: ``state_machine``: the execution running it ("" until its upload's S3 event started one).
    execution_arn: str = ""

    def noted(self) -> "IngestionJob":
        """This job with its ``error`` as its ``note`` when it has none (a failure's or cancellation's message, the
        duplicate's): how every outcome written gets its note, whoever wrote it."""
        return self.model_copy(update={"note": self.error}) if self.error and not self.note else self
