"""Ingestion into a knowledge base: parse -> chunk -> embed -> index.

Each step is a plain function, so the CLI runs them in-process and the benchmark feeds them documents directly.
Parsing is :mod:`ragstep.parsers` (one ordered Markdown stream per document; DuckDB summaries for data files).

What a file becomes, by knowledge base type and extension:

* document KB, ``.txt .md .markdown .html .htm .pdf .docx``: parsed text -> structure-preserving text chunks;
* document KB, ``.csv .xlsx``: a ``table_summary`` chunk and one ``table_column`` chunk per column for each
  sheet; the raw file goes to the blob store under ``data/<kb id>/<knowledge id>/<file name>`` (the chunks'
  ``metadata["blob_key"]``), where the data-analysis stage queries it with DuckDB;
* FAQ KB, ``.json .csv``: FAQ entries (formats in :mod:`ragstep.parsers.faq`), one index row per phrasing.

Idempotent: a file's knowledge id is derived from its knowledge base and path, so ingesting it again replaces its
chunks in one index transaction; when the content hash is unchanged nothing is re-embedded or re-indexed. A file
that fails at any step leaves the previous version of that document, and every other document, untouched.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .chunking import ChunkerConfig, split_text
from .errors import InputError, RagstepError
from .models import Chunk, ChunkType, Knowledge, KnowledgeBase, KnowledgeBaseType
from .parsers import FAQ_EXTENSIONS, SUPPORTED_EXTENSIONS, DataFileSummary, parse, unsupported
from .parsers import decode_text as decode_text  # re-exported: it moved to ragstep.parsers.text
from .parsers.faq import parse_faq
from .services import Services

#: What a document knowledge base ingests (text documents and data files); the CLI expands folders with it.
DOCUMENT_SUFFIXES = SUPPORTED_EXTENSIONS
TEXT_SUFFIXES = DOCUMENT_SUFFIXES  # the former name
FAQ_SUFFIXES = FAQ_EXTENSIONS
_CONTENT_TYPES = {
    ".csv": "text/csv",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}
_NAMESPACE = uuid.UUID("6b1d3c1e-6a53-4c5c-9d0e-3f7f2a1b9c10")


@dataclass(frozen=True, slots=True)
class IngestResult:
    path: str
    knowledge_id: str
    status: str  # "indexed" | "unchanged" | "failed"
    chunks: int = 0
    error: str = ""


def knowledge_id_for(kb: KnowledgeBase, name: str) -> str:
    return uuid.uuid5(_NAMESPACE, f"{kb.id}/{name}").hex


def expand_paths(paths: Iterable[str | Path], suffixes: tuple[str, ...]) -> Iterator[Path]:
    """Files named directly, plus the supported files found under named folders (sorted, hidden files skipped)."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                rel = child.relative_to(path)
                if (
                    child.is_file()
                    and child.suffix.lower() in suffixes
                    and not any(part.startswith(".") for part in rel.parts)
                ):
                    yield child
        else:
            yield path


# -- chunk ---------------------------------------------------------------------------------------------------------


def text_chunks(kb: KnowledgeBase, knowledge: Knowledge, text: str, config: ChunkerConfig | None = None) -> list[Chunk]:
    """Structure-preserving chunks with exact offsets; heading breadcrumbs go to the embedder only."""
    pieces = split_text(text, config) if config else split_text(text)
    return [
        Chunk(
            id=f"{knowledge.id}-{p.chunk_index}",
            knowledge_id=knowledge.id,
            knowledge_base_id=kb.id,
            content=p.content,
            chunk_index=p.chunk_index,
            start_at=p.start_at,
            end_at=p.end_at,
            tag_id=knowledge.tag_id,
            knowledge_title=knowledge.title,
            knowledge_filename=knowledge.filename,
            embed_text=f"{p.context_header}\n{p.content}" if p.context_header else None,
            metadata={"context_header": p.context_header} if p.context_header else {},
        )
        for p in pieces
    ]


def faq_chunks(kb: KnowledgeBase, knowledge: Knowledge, data: bytes) -> list[Chunk]:
    """FAQ entries of a JSON or CSV file (by ``knowledge.filename``; formats in :mod:`ragstep.parsers.faq`).

    The questions are what BM25 and the embedder match; the answers are what a hit returns.
    """
    chunks = []
    for i, entry in enumerate(parse_faq(data, knowledge.filename)):
        question = entry.standard_question
        similar = list(entry.similar_questions)
        answers = list(entry.answers)
        content = f"Q: {question}\nAnswer:\n" + "\n".join(f"- {a}" for a in answers)
        entry_id = f"{knowledge.id}-{entry.id if entry.id is not None else i}"
        metadata = {
            "standard_question": question,
            "similar_questions": similar,
            "negative_questions": list(entry.negative_questions),
            "answers": answers,
        }
        # One index row per question (standard first, then similar ones), all returning the same entry: a query close
        # to one phrasing matches it strongly instead of matching an average of every phrasing.
        for j, phrasing in enumerate(dict.fromkeys([question, *similar])):
            chunks.append(
                Chunk(
                    id=entry_id if j == 0 else f"{entry_id}-q{j}",
                    parent_id=entry_id,
                    knowledge_id=knowledge.id,
                    knowledge_base_id=kb.id,
                    content=content,
                    chunk_index=i,
                    end_at=len(content),
                    chunk_type=ChunkType.FAQ,
                    tag_id=entry.tag_id,
                    knowledge_title=knowledge.title,
                    knowledge_filename=knowledge.filename,
                    index_text=phrasing,
                    embed_text=phrasing,
                    metadata={**metadata, "matched_question": phrasing},
                )
            )
    return chunks


def data_blob_key(kb: KnowledgeBase, knowledge: Knowledge) -> str:
    """Where ingestion keeps a data file's raw bytes for the data-analysis stage."""
    return f"data/{kb.id}/{knowledge.id}/{knowledge.filename}"


def data_file_chunks(
    kb: KnowledgeBase,
    knowledge: Knowledge,
    summary: DataFileSummary,
    *,
    start_index: int = 0,
    offset: int = 0,
) -> list[Chunk]:
    """One ``table_summary`` chunk, then one ``table_column`` chunk per column, of one sheet / table.

    Contents are :meth:`DataFileSummary.blocks`; offsets point into the parsed text (the blocks of every sheet
    separated by blank lines), so for a later sheet pass ``start_index`` / ``offset`` past the earlier chunks.
    Metadata carries ``blob_key`` (the raw file, see :func:`data_blob_key`), ``format`` and ``sheet``.
    """
    base: dict[str, Any] = {"blob_key": data_blob_key(kb, knowledge), "format": summary.format, "sheet": summary.sheet}
    kinds: list[tuple[ChunkType, dict[str, Any]]] = [
        (
            ChunkType.TABLE_SUMMARY,
            {
                **base,
                "row_count": summary.row_count,
                "columns": [{"name": c.name, "type": c.type} for c in summary.columns],
            },
        )
    ]
    kinds.extend(
        (
            ChunkType.TABLE_COLUMN,
            {
                **base,
                "column": c.name,
                "type": c.type,
                "distinct_count": c.distinct_count,
                "null_count": c.null_count,
                "samples": list(c.samples),
            },
        )
        for c in summary.columns
    )
    chunks = []
    pos = offset
    for k, (block, (chunk_type, metadata)) in enumerate(zip(summary.blocks(), kinds, strict=True)):
        index = start_index + k
        chunks.append(
            Chunk(
                id=f"{knowledge.id}-{index}",
                knowledge_id=knowledge.id,
                knowledge_base_id=kb.id,
                content=block,
                chunk_index=index,
                start_at=pos,
                end_at=pos + len(block),
                chunk_type=chunk_type,
                tag_id=knowledge.tag_id,
                knowledge_title=knowledge.title,
                knowledge_filename=knowledge.filename,
                metadata=metadata,
            )
        )
        pos += len(block) + 2  # the blank line between blocks
    return chunks


# -- embed + index -------------------------------------------------------------------------------------------------


def embed_chunks(chunks: list[Chunk], kb: KnowledgeBase, services: Services) -> np.ndarray | None:
    embedder = services.embedder(kb.embedding_model)
    if embedder is None or not chunks:
        return None
    return embedder.embed([c.embed_text or c.content for c in chunks])


def index_document(knowledge: Knowledge, chunks: list[Chunk], kb: KnowledgeBase, services: Services) -> Knowledge:
    """Embed, then replace the document's chunks in one index transaction, then mark it completed."""
    vectors = embed_chunks(chunks, kb, services)
    # Either every chunk of the new version becomes searchable or none does; the old version stays until then.
    space = kb.embedding_model if vectors is not None else None
    services.index.replace_knowledge(knowledge.id, chunks, vectors, space)
    done = knowledge.model_copy(update={"status": "completed", "chunk_count": len(chunks), "updated_at": time.time()})
    services.catalog.put_knowledge(done)
    return done


def ingest_document(
    kb: KnowledgeBase,
    knowledge_id: str,
    text: str,
    services: Services,
    *,
    title: str = "",
    filename: str = "",
    source_uri: str = "",
    config: ChunkerConfig | None = None,
) -> Knowledge:
    """Ingest already-parsed text as one knowledge item (used by file ingestion and the benchmarks)."""
    if not text.strip():
        raise InputError(f"{filename or knowledge_id}: the document is empty")
    now = time.time()
    knowledge = Knowledge(
        id=knowledge_id,
        knowledge_base_id=kb.id,
        title=title,
        filename=filename,
        source_uri=source_uri,
        content_hash=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        created_at=now,
        updated_at=now,
    )
    return index_document(knowledge, text_chunks(kb, knowledge, text, config), kb, services)


def ingest_file(path: Path, kb: KnowledgeBase, services: Services) -> IngestResult:
    """Ingest one file; errors are returned in the result, so one bad file never stops a batch."""
    name = path.name
    resolved = str(path.resolve())
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in resolved):
        # A name that is not UTF-8 (decoded with surrogateescape) can be neither stored nor printed: refuse the file.
        shown = Path(str(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        return IngestResult(
            str(shown), "", "failed", error=f"{shown.name}: the file name is not valid UTF-8; rename it"
        )
    kid = knowledge_id_for(kb, resolved)
    try:
        suffix = path.suffix.lower()
        allowed = FAQ_SUFFIXES if kb.type == KnowledgeBaseType.FAQ else DOCUMENT_SUFFIXES
        if suffix not in allowed:
            raise unsupported(name, allowed)
        try:
            size = path.stat().st_size
            limit = services.settings.max_file_bytes
            if size > limit:
                raise InputError(f"{name}: {size} bytes is over the {limit}-byte limit (RAGSTEP_MAX_FILE_BYTES)")
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"{name}: cannot read the file: {exc.strerror or exc}") from exc
        digest = hashlib.sha256(data).hexdigest()
        existing = services.catalog.get_knowledge(kid)
        if existing and existing.status == "completed" and existing.content_hash == digest:
            return IngestResult(str(path), kid, "unchanged", existing.chunk_count)
        now = time.time()
        knowledge = Knowledge(
            id=kid,
            knowledge_base_id=kb.id,
            title=path.stem,
            filename=name,
            source_uri=path.resolve().as_uri(),
            content_hash=digest,
            created_at=existing.created_at if existing else now,
            updated_at=now,
        )
        if kb.type == KnowledgeBaseType.FAQ:
            chunks = faq_chunks(kb, knowledge, data)
        else:
            doc = parse(data, name)
            if doc.tables:
                chunks = []
                for summary in doc.tables:
                    offset = chunks[-1].end_at + 2 if chunks else 0
                    chunks += data_file_chunks(kb, knowledge, summary, start_index=len(chunks), offset=offset)
                # The raw file goes first: once the chunks are searchable, the data they describe must be there.
                content_type = _CONTENT_TYPES.get(suffix, "application/octet-stream")
                services.blobs.put(data_blob_key(kb, knowledge), data, content_type)
            else:
                chunks = text_chunks(kb, knowledge, doc.text)
        done = index_document(knowledge, chunks, kb, services)
        return IngestResult(str(path), kid, "indexed", done.chunk_count)
    except RagstepError as exc:
        return IngestResult(str(path), kid, "failed", error=exc.message)
