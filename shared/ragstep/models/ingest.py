"""The ingestion state: what the ingest stages (parse -> chunk -> embed -> index) pass along."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ragstep.models.base import (
    DEFAULT_TENANT,
    ErrorInfo,
    TraceEvent,
    _Model,
    check_identifier,
    check_tenant,
    empty_list,
)

INGEST_SCHEMA_VERSION: Literal["1"] = "1"
DEFAULT_PARENT_SIZE = 4096
#: Parent-child mode's own defaults (WeKnora's): children of 384 characters overlapping by a fifth of that.
DEFAULT_CHILD_SIZE = 384
CHILD_OVERLAP_DIVISOR = 5

IngestStatus = Literal["pending", "parsed", "chunked", "embedded", "indexed", "unchanged", "duplicate"]
#: Statuses after which the remaining ingest stages have nothing to do.
INGEST_SKIPPED: tuple[str, ...] = ("unchanged", "duplicate")


class IngestOptions(_Model):
    """How a document is chunked. In parent-child mode ``chunk_size`` / ``chunk_overlap`` are the children's (what
    is indexed and searched; when not given, 384 and a fifth of ``chunk_size``) and ``parent_size`` (default: the
    larger of 4096 and ``chunk_size``) the parents'."""

    chunk_size: Annotated[int, Field(strict=True)] = 512
    chunk_overlap: Annotated[int, Field(strict=True)] = 80
    parent_child: bool = False
    parent_size: Annotated[int, Field(strict=True)] | None = None

    @model_validator(mode="after")
    def _valid(self) -> IngestOptions:
        # The chunker's own rules (ChunkerConfig), checked size first, with a plainer word for overlap >= size.
        from ragstep.errors import InputError
        from ragstep.retrieval.chunking import ChunkerConfig

        if self.parent_child:
            # Sizes not given take parent-child mode's defaults (a dumped state gives both, so this is stable).
            given = self.model_fields_set
            if "chunk_size" not in given:
                self.chunk_size = DEFAULT_CHILD_SIZE
            if "chunk_overlap" not in given and isinstance(self.chunk_size, int):
                self.chunk_overlap = self.chunk_size // CHILD_OVERLAP_DIVISOR
        try:
            ChunkerConfig(self.chunk_size, 0)
            if self.chunk_overlap >= self.chunk_size:
                raise InputError(
                    f"chunk_overlap {self.chunk_overlap} must be smaller than chunk_size {self.chunk_size}"
                )
            ChunkerConfig(self.chunk_size, self.chunk_overlap)
        except InputError as exc:
            raise ValueError(exc.message) from None
        if self.parent_size is not None and not self.chunk_size <= self.parent_size <= 7500:
            raise ValueError(
                f"parent_size must be between chunk_size ({self.chunk_size}) and 7500, got {self.parent_size}"
            )
        return self

    @property
    def effective_parent_size(self) -> int:
        return self.parent_size if self.parent_size is not None else max(DEFAULT_PARENT_SIZE, self.chunk_size)


class IngestSource(_Model):
    """What to ingest, and as what. The bytes are in the blob store under ``blob_key``; never in the state."""

    knowledge_base_id: str
    knowledge_id: str
    blob_key: str
    filename: str
    # Where the file came from, for display (file:// URI of a local path, s3:// URI of an upload).
    uri: str = ""
    title: str = ""
    # sha256 of the bytes; computed by ``ingest_parse`` when the starter did not know it.
    content_hash: str = ""
    # Size in bytes when known up front (refused before reading when over the limit).
    size: int | None = None
    tag_id: str = ""

    @field_validator("knowledge_base_id", "knowledge_id")
    @classmethod
    def _valid_ids(cls, value: str) -> str:
        return check_identifier(value)

    @field_validator("blob_key", "filename")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


class IngestProducts(_Model):
    """Blob keys of what the stages produced (all under ``ingest/<knowledge id>/<content hash>/``)."""

    # Parsed text (``parsed.md``) of a document, or the FAQ entries (``faq.json``) of a FAQ file.
    parsed: str | None = None
    # Data files: the DuckDB summaries (``tables.json``).
    tables: str | None = None
    # One Chunk JSON per line (``chunks.jsonl``).
    chunks: str | None = None
    # float32 matrix, one row per chunk, ``numpy.save`` format (``vectors.npy``); None when the KB is BM25-only.
    vectors: str | None = None
    # The vector space of ``vectors`` (the knowledge base's embedding model id).
    space: str | None = None
    format: str = ""


class EmbedBatch(_Model):
    """One batch of the embedding phase on AWS (the ingest machine's ``embed_batches`` Map state): the chunks at
    positions ``start`` to ``stop`` (excluded) of the document's pending chunks."""

    start: Annotated[int, Field(ge=0)]
    stop: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _ordered(self) -> EmbedBatch:
        if self.stop <= self.start:
            raise ValueError(f"an embed batch ends after it starts, got {self.start}..{self.stop}")
        return self


class IngestState(_Model):
    """The JSON the ingest stages pass along (``ingest_parse -> ingest_chunk -> ingest_embed -> ingest_index``).

    It stays a few kilobytes whatever the file: products travel through the blob store (:class:`IngestProducts`).
    """

    schema_version: Literal["1"] = INGEST_SCHEMA_VERSION
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    pipeline: str = "ingest"
    # Whose knowledge base this file goes into: set by the entry point (the uploads prefix on AWS).
    tenant_id: str = DEFAULT_TENANT
    # The ingestion job following this run on AWS (:mod:`ragstep.app.s3_jobs`); "" when none does.
    job_id: str = ""
    source: IngestSource
    options: IngestOptions = Field(default_factory=IngestOptions)
    status: IngestStatus = "pending"
    # What the user should know about this file, in words: why it was skipped ("duplicate of a.md"), or how it was
    # read ("JSON read as text"); empty otherwise.
    note: str = ""
    # Knowledge id holding the same content, when ``status == "duplicate"``.
    duplicate_of: str | None = None
    # characters, pages, entries, chunks, vectors, batches ... whatever the stages measured.
    counts: dict[str, int] = Field(default_factory=dict)
    products: IngestProducts = Field(default_factory=IngestProducts)
    trace: list[TraceEvent] = Field(default_factory=empty_list)
    error: ErrorInfo | None = None
    # Progressive indexing on the ingest state machine: True (set where an upload starts it) lets ``ingest_embed``
    # leave the vectors to the batches that follow ``ingest_index`` (when the index takes vectors later).
    vectors_later: bool = False
    # The batches ``ingest_index`` lists for them (the Map state's items), one per iteration at ``embed_batch``, and
    # how many run at once (the Map's MaxConcurrencyPath: the EmbedBatchConcurrency template parameter).
    embed_batches: list[EmbedBatch] = Field(default_factory=empty_list)
    embed_batch: EmbedBatch | None = None
    embed_concurrency: Annotated[int, Field(ge=1, le=1000)] = 1

    @field_validator("tenant_id")
    @classmethod
    def _valid_tenant(cls, value: str) -> str:
        return check_tenant(value)

    @property
    def skipped(self) -> bool:
        return self.status in INGEST_SKIPPED

    def with_trace(self, *events: TraceEvent) -> IngestState:
        return self.model_copy(update={"trace": [*self.trace, *events]})

    # Typed steps for the stages: each names what changes, so a misspelt field is a type error, not a silent no-op.

    def with_content_hash(self, digest: str) -> IngestState:
        return self.model_copy(update={"source": self.source.model_copy(update={"content_hash": digest})})

    def advanced(
        self,
        status: IngestStatus,
        *events: TraceEvent,
        products: IngestProducts | None = None,
        counts: dict[str, int] | None = None,
        note: str | None = None,
        duplicate_of: str | None = None,
    ) -> IngestState:
        """The state one stage further: its new status, products, the counts it measured (added to the earlier
        stages' counts) and its trace events."""
        update: dict[str, object] = {"status": status, "trace": [*self.trace, *events]}
        if products is not None:
            update["products"] = products
        if counts:
            update["counts"] = {**self.counts, **counts}
        if note is not None:
            update["note"] = note
        if duplicate_of is not None:
            update["duplicate_of"] = duplicate_of
        return self.model_copy(update=update)
