"""Ingestion into a knowledge base: parse -> chunk -> embed -> index.

The four steps are the stages of the ``ingest`` pipeline (:mod:`ragstep.stages.ingest.parse`, ``ingest_chunk``,
``ingest_embed``, ``ingest_index``), declared once in :mod:`ragstep.pipeline.definitions`: the CLI runs them
in-process (:func:`ingest_file`), AWS runs them as Lambda functions chained by a STANDARD state machine after an
S3 upload. Their state (:class:`ragstep.models.IngestState`) stays a few kilobytes whatever the file: every product
travels through the blob store. The chunk builders and :func:`index_document` / :func:`ingest_document` are plain
functions too, which the benchmark feeds directly. Parsing is :mod:`ragstep.parsers`.

What a file becomes, by knowledge base type and extension:

* document KB, ``.txt .md .markdown .html .htm .pdf .docx``: parsed text -> structure-preserving text chunks (or,
  with ``parent_child``, small child chunks that are indexed and searched, each carrying its parent's text in
  ``metadata["parent_content"]``, which the search stage returns instead of the child's);
* document KB, ``.csv .xlsx``: a ``table_summary`` chunk and one ``table_column`` chunk per column for each
  sheet; the raw file is published to ``data/<kb id>/<knowledge id>/<file name>`` (the chunks'
  ``metadata["blob_key"]``), where the data-analysis stage queries it with DuckDB;
* FAQ KB, ``.json .csv``: FAQ entries (formats in :mod:`ragstep.parsers.faq`), one index row per phrasing.

Blob store layout (keys are the same on a laptop and in S3):

* ``sources/<kb id>/<knowledge id>/<sha256><ext>``: the original file as the CLI stored it (on AWS the upload's own
  key plays this role). Content-addressed, so a new version never overwrites the version that is indexed; the
  previous one is removed once the new one is indexed. Recorded as ``Knowledge.source_key``.
* ``ingest/<knowledge id>/<sha256>/``: what the stages hand to each other -- ``parsed.md`` (or ``faq.json``),
  ``tables.json`` (data files), ``chunks.jsonl``, ``vectors.npy``. Transient: removed when the document is indexed
  or skipped, and by :func:`discard_products` when a stage fails (on AWS, a lifecycle rule on ``ingest/`` can
  sweep what a failed execution leaves).
* ``data/<kb id>/<knowledge id>/<file name>``: data files, written by ``ingest_index`` just before the index swap.
* ``hashes/<kb id>/<sha256>``: the id of the knowledge item that indexed this content, so duplicate detection is
  one read however large the knowledge base is (a hint, checked against the catalog; items indexed before these
  markers existed are not found by it).

``ragstep delete`` (:func:`delete_knowledge`) removes the chunks, every blob above of the item (and its original
wherever it is, e.g. the S3 upload), then the catalog record.

Idempotent: a file's knowledge id is derived from its knowledge base and path, so ingesting it again replaces its
chunks in one index transaction (``replace_knowledge``: the previous version stays searchable until the new one is
complete). Unchanged content (same sha256, same chunking options, same tag) is skipped as ``unchanged``; nothing is
re-embedded. The same bytes under another path of the same knowledge base are skipped as ``duplicate`` ("duplicate
of a.md"): a knowledge base holds each content once, under the knowledge item that indexed it first; if the path had
an older, different version, that version is removed (the file no longer says it). If the first item is deleted
later, ingest the folder again and the duplicate becomes the one that is indexed. A file that fails at any step
leaves the previous version of that document, and every other document, untouched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from ragstep.context import Context
from ragstep.errors import InputError, RagstepError
from ragstep.models import (
    Chunk,
    ChunkType,
    IngestOptions,
    IngestSource,
    IngestState,
    Knowledge,
    KnowledgeBase,
    KnowledgeBaseType,
)
from ragstep.parsers import FAQ_EXTENSIONS, SUPPORTED_EXTENSIONS, ColumnSummary, DataFileSummary, unsupported
from ragstep.parsers import decode_text as decode_text  # re-exported: it moved to ragstep.parsers.text
from ragstep.parsers.faq import FaqEntry, parse_faq
from ragstep.retrieval.chunking import ChunkerConfig, split_parent_child, split_text

if TYPE_CHECKING:
    import numpy as np

    from ragstep.ports import BlobStore, Embedder

#: What a document knowledge base ingests (text documents and data files); the CLI expands folders with it.
DOCUMENT_SUFFIXES = SUPPORTED_EXTENSIONS
TEXT_SUFFIXES = DOCUMENT_SUFFIXES  # the former name
FAQ_SUFFIXES = FAQ_EXTENSIONS
CONTENT_TYPES = {
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".markdown": "text/markdown; charset=utf-8",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".csv": "text/csv",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".json": "application/json",
}
_NAMESPACE = uuid.UUID("6b1d3c1e-6a53-4c5c-9d0e-3f7f2a1b9c10")

#: Blob key prefixes ingestion owns (see the module docstring).
SOURCES_PREFIX = "sources/"
INGEST_PREFIX = "ingest/"
DATA_PREFIX = "data/"
HASHES_PREFIX = "hashes/"
#: Texts per embedding request, and requests in flight at once for one document.
EMBED_BATCH_SIZE = 64
EMBED_CONCURRENCY = 4


@dataclass(frozen=True, slots=True)
class IngestResult:
    path: str
    knowledge_id: str
    # "indexed" | "unchanged" | "duplicate" | "failed". For "duplicate", ``knowledge_id`` is the item that holds
    # the content and ``error`` says which file that is ("duplicate of a.md"); the file is skipped, not failed.
    status: str
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


# -- blob keys -----------------------------------------------------------------------------------------------------


def source_blob_key(kb_id: str, knowledge_id: str, content_hash: str, filename: str) -> str:
    """Where the CLI keeps an original file: content-addressed, so a new version never overwrites the current one."""
    return f"{SOURCES_PREFIX}{kb_id}/{knowledge_id}/{content_hash}{PurePath(filename).suffix.lower()}"


def products_prefix(knowledge_id: str, content_hash: str) -> str:
    """The folder of what the ingest stages hand to each other for one version of one document."""
    return f"{INGEST_PREFIX}{knowledge_id}/{content_hash}/"


def product_key(state: IngestState, name: str) -> str:
    return products_prefix(state.source.knowledge_id, state.source.content_hash) + name


def data_blob_key(kb: KnowledgeBase, knowledge: Knowledge) -> str:
    """Where ingestion keeps a data file's raw bytes for the data-analysis stage."""
    return f"{DATA_PREFIX}{kb.id}/{knowledge.id}/{knowledge.filename}"


def owned_prefixes(knowledge_base_id: str, knowledge_id: str) -> tuple[str, ...]:
    """Every blob prefix ingestion writes for one knowledge item."""
    return (
        f"{SOURCES_PREFIX}{knowledge_base_id}/{knowledge_id}/",
        f"{INGEST_PREFIX}{knowledge_id}/",
        f"{DATA_PREFIX}{knowledge_base_id}/{knowledge_id}/",
    )


def hash_marker_key(knowledge_base_id: str, content_hash: str) -> str:
    """Content hash -> the knowledge item that indexed it: duplicate detection in O(1), whatever the KB's size."""
    return f"{HASHES_PREFIX}{knowledge_base_id}/{content_hash}"


def find_twin(ctx: Context, knowledge_base_id: str, content_hash: str, knowledge_id: str) -> Knowledge | None:
    """The other completed item of the knowledge base whose content has this hash, if any.

    The marker is only a hint: the catalog record it names must still say this hash (a stale marker -- the item
    changed or was deleted -- is ignored and overwritten by the next item that indexes the content).
    """
    from ragstep.errors import NotFoundError

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
    ctx.blobs.put(
        hash_marker_key(knowledge.knowledge_base_id, knowledge.content_hash), knowledge.id.encode(), "text/plain"
    )


def unmark_hash(ctx: Context, knowledge: Knowledge) -> None:
    """Remove the hash marker of ``knowledge`` if it names this item (another item may own the content now)."""
    from ragstep.errors import NotFoundError

    if not knowledge.content_hash:
        return
    key = hash_marker_key(knowledge.knowledge_base_id, knowledge.content_hash)
    try:
        if ctx.blobs.get(key).decode("utf-8") == knowledge.id:
            ctx.blobs.delete(key)
    except NotFoundError:
        pass


def is_owned_key(key: str) -> bool:
    """A key under ingestion's own prefixes (an upload elsewhere is the user's: only ``delete`` removes it)."""
    return key.startswith((SOURCES_PREFIX, INGEST_PREFIX, DATA_PREFIX))


def delete_blobs(blobs: BlobStore, prefixes: Iterable[str], *, keep: Iterable[str] = ()) -> list[str]:
    """Delete every key under ``prefixes`` except ``keep``; returns the keys deleted."""
    kept = set(keep)
    gone = []
    for prefix in prefixes:
        for key in blobs.list(prefix):
            if key not in kept:
                blobs.delete(key)
                gone.append(key)
    return gone


def put_json(blobs: BlobStore, key: str, data: Any) -> None:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    blobs.put(key, body, "application/json")


def get_json(blobs: BlobStore, key: str) -> Any:
    return json.loads(blobs.get(key))


def put_chunks(blobs: BlobStore, key: str, chunks: Sequence[Chunk]) -> None:
    """One Chunk JSON per line (``embed_text`` included: the embed stage needs it)."""
    body = "\n".join(c.model_dump_json() for c in chunks).encode("utf-8")
    blobs.put(key, body, "application/x-ndjson")


def get_chunks(blobs: BlobStore, key: str) -> list[Chunk]:
    # Split on "\n" only: JSON escapes it inside strings, but not U+2028, U+0085 and the other breaks that
    # str.splitlines() would also cut at.
    return [Chunk.model_validate_json(line) for line in blobs.get(key).decode("utf-8").split("\n") if line]


def put_vectors(blobs: BlobStore, key: str, vectors: np.ndarray) -> None:
    import numpy as np

    out = io.BytesIO()
    np.save(out, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
    blobs.put(key, out.getvalue(), "application/octet-stream")


def get_vectors(blobs: BlobStore, key: str) -> np.ndarray:
    import numpy as np

    return np.load(io.BytesIO(blobs.get(key)), allow_pickle=False)


# -- parse products ------------------------------------------------------------------------------------------------


def faq_entries_to_json(entries: Sequence[FaqEntry]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(e) for e in entries]


def faq_entries_from_json(items: Sequence[dict[str, Any]]) -> list[FaqEntry]:
    return [
        FaqEntry(
            standard_question=i["standard_question"],
            answers=tuple(i["answers"]),
            similar_questions=tuple(i.get("similar_questions", ())),
            negative_questions=tuple(i.get("negative_questions", ())),
            tag_id=i.get("tag_id", ""),
            id=i.get("id"),
        )
        for i in items
    ]


def summaries_to_json(summaries: Sequence[DataFileSummary]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in summaries]


def summaries_from_json(items: Sequence[dict[str, Any]]) -> list[DataFileSummary]:
    return [
        DataFileSummary(
            filename=i["filename"],
            format=i["format"],
            sheet=i["sheet"],
            row_count=i["row_count"],
            columns=tuple(ColumnSummary(**{**c, "samples": tuple(c["samples"])}) for c in i["columns"]),
            sample_rows=tuple(tuple(row) for row in i["sample_rows"]),
        )
        for i in items
    ]


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


def parent_child_chunks(kb: KnowledgeBase, knowledge: Knowledge, text: str, options: IngestOptions) -> list[Chunk]:
    """Children of ``options.chunk_size`` are the indexed, searched rows; each carries its parent's text.

    Parents are not rows of their own: ``metadata["parent_content"]`` (with ``parent_index``, ``parent_start_at``,
    ``parent_end_at``) is what the search stage returns for a child hit (``match_type`` "parent"), so no second
    lookup is needed at query time. The price is index size: each parent's text is stored once per child.
    """
    split = split_parent_child(
        text,
        parent_size=options.effective_parent_size,
        child_size=options.chunk_size,
        child_overlap=options.chunk_overlap,
    )
    chunks = []
    for child in split.children:
        parent = split.parents[child.parent_index]
        metadata: dict[str, Any] = {
            "parent_index": child.parent_index,
            "parent_content": parent.content,
            "parent_start_at": parent.start_at,
            "parent_end_at": parent.end_at,
        }
        if child.context_header:
            metadata["context_header"] = child.context_header
        chunks.append(
            Chunk(
                id=f"{knowledge.id}-{child.chunk_index}",
                parent_id=f"{knowledge.id}-p{child.parent_index}",
                knowledge_id=knowledge.id,
                knowledge_base_id=kb.id,
                content=child.content,
                chunk_index=child.chunk_index,
                start_at=child.start_at,
                end_at=child.end_at,
                tag_id=knowledge.tag_id,
                knowledge_title=knowledge.title,
                knowledge_filename=knowledge.filename,
                embed_text=f"{child.context_header}\n{child.content}" if child.context_header else None,
                metadata=metadata,
            )
        )
    return chunks


def faq_chunks(kb: KnowledgeBase, knowledge: Knowledge, data: bytes) -> list[Chunk]:
    """FAQ entries of a JSON or CSV file (by ``knowledge.filename``; formats in :mod:`ragstep.parsers.faq`)."""
    return faq_entry_chunks(kb, knowledge, parse_faq(data, knowledge.filename))


def faq_entry_chunks(kb: KnowledgeBase, knowledge: Knowledge, entries: Sequence[FaqEntry]) -> list[Chunk]:
    """The index rows of FAQ entries. The questions are what BM25 and the embedder match; the answers are what a
    hit returns."""
    chunks = []
    for i, entry in enumerate(entries):
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


def data_chunks(kb: KnowledgeBase, knowledge: Knowledge, summaries: Sequence[DataFileSummary]) -> list[Chunk]:
    """Every sheet's chunks, numbered and offset as one stream."""
    chunks: list[Chunk] = []
    for summary in summaries:
        offset = chunks[-1].end_at + 2 if chunks else 0
        chunks += data_file_chunks(kb, knowledge, summary, start_index=len(chunks), offset=offset)
    return chunks


# -- embed + index -------------------------------------------------------------------------------------------------


def embed_texts(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    batch_size: int = EMBED_BATCH_SIZE,
    concurrency: int = EMBED_CONCURRENCY,
) -> tuple[np.ndarray, int]:
    """Embed in batches of ``batch_size``, at most ``concurrency`` requests in flight; returns (vectors, batches).

    The embedders retry transient failures themselves; a batch that still fails fails the whole call (the other
    batches are cancelled), so a document is never indexed with some of its vectors missing.
    """
    import numpy as np

    batches = [list(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    if len(batches) <= 1 or concurrency <= 1:
        parts = [embedder.embed(b) for b in batches]
    else:
        pool = ThreadPoolExecutor(max_workers=min(concurrency, len(batches)), thread_name_prefix="ragstep-embed")
        futures = [pool.submit(embedder.embed, b) for b in batches]
        try:
            parts = [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    if not parts:
        return np.zeros((0, 0), dtype=np.float32), 0
    return np.vstack(parts).astype(np.float32, copy=False), len(batches)


def embed_chunks(chunks: list[Chunk], kb: KnowledgeBase, ctx: Context) -> np.ndarray | None:
    embedder = ctx.embedder(kb.embedding_model)
    if embedder is None or not chunks:
        return None
    batch = ctx.settings.embedding_batch_size
    return embed_texts(embedder, [c.embed_text or c.content for c in chunks], batch_size=batch)[0]


def index_document(knowledge: Knowledge, chunks: list[Chunk], kb: KnowledgeBase, ctx: Context) -> Knowledge:
    """Embed, then replace the document's chunks in one index transaction, then mark it completed."""
    vectors = embed_chunks(chunks, kb, ctx)
    # Either every chunk of the new version becomes searchable or none does; the old version stays until then.
    space = kb.embedding_model if vectors is not None else None
    ctx.index.replace_knowledge(knowledge.id, chunks, vectors, space)
    done = knowledge.model_copy(update={"status": "completed", "chunk_count": len(chunks), "updated_at": time.time()})
    ctx.catalog.put_knowledge(done)
    return done


def ingest_document(
    kb: KnowledgeBase,
    knowledge_id: str,
    text: str,
    ctx: Context,
    *,
    title: str = "",
    filename: str = "",
    source_uri: str = "",
    config: ChunkerConfig | None = None,
) -> Knowledge:
    """Ingest already-parsed text as one knowledge item (used by the benchmarks; no blobs are written)."""
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
    return index_document(knowledge, text_chunks(kb, knowledge, text, config), kb, ctx)


# -- the staged pipeline ------------------------------------------------------------------------------------------


def require_kb(ctx: Context, kb_id: str) -> KnowledgeBase:
    kb = ctx.catalog.get_kb(kb_id)
    if kb is None:
        from ragstep.errors import NotFoundError

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
        options=state.options.model_dump(mode="json"),
    )


def same_options(knowledge: Knowledge, options: IngestOptions) -> bool:
    try:
        return IngestOptions.model_validate(knowledge.options or {}) == options
    except ValueError:
        return False


def new_ingest_state(
    kb: KnowledgeBase,
    *,
    knowledge_id: str,
    blob_key: str,
    filename: str,
    uri: str = "",
    title: str = "",
    content_hash: str = "",
    size: int | None = None,
    tag_id: str = "",
    options: IngestOptions | None = None,
) -> IngestState:
    """The state the ``ingest`` pipeline starts from (the AWS starter builds the same from an S3 event)."""
    return IngestState(
        source=IngestSource(
            knowledge_base_id=kb.id,
            knowledge_id=knowledge_id,
            blob_key=blob_key,
            filename=filename,
            uri=uri,
            title=title,
            content_hash=content_hash,
            size=size,
            tag_id=tag_id,
        ),
        options=options or IngestOptions(),
    )


def discard_products(state: IngestState, ctx: Context) -> list[str]:
    """After a failed run: remove its transient products, and its staged original unless it is the one indexed.

    The indexed version (its chunks, its original, its data file) is never touched.
    """
    src = state.source
    if not src.content_hash:
        return []
    current = ctx.catalog.get_knowledge(src.knowledge_id)
    keep = {current.source_key} if current and current.source_key else set()
    gone = delete_blobs(ctx.blobs, [products_prefix(src.knowledge_id, src.content_hash)])
    if src.blob_key.startswith(SOURCES_PREFIX) and src.blob_key not in keep and ctx.blobs.exists(src.blob_key):
        ctx.blobs.delete(src.blob_key)
        gone.append(src.blob_key)
    return gone


def delete_knowledge(knowledge: Knowledge, ctx: Context) -> int:
    """Remove a knowledge item everywhere: its chunks, its blobs (original, products, data file), then its record.

    The record goes last, so an interrupted delete can be run again. Returns the number of chunks removed.
    """
    removed = ctx.index.delete_knowledge([knowledge.id])
    delete_blobs(ctx.blobs, owned_prefixes(knowledge.knowledge_base_id, knowledge.id))
    unmark_hash(ctx, knowledge)
    if knowledge.source_key:
        ctx.blobs.delete(knowledge.source_key)
    ctx.catalog.delete_knowledge(knowledge.id)
    return removed


def ingest_file(
    path: Path,
    kb: KnowledgeBase,
    ctx: Context,
    options: IngestOptions | None = None,
    *,
    check_transport: bool = False,
) -> IngestResult:
    """Ingest one file; errors are returned in the result, so one bad file never stops a batch.

    The file goes to the blob store (:func:`source_blob_key`), then the ``ingest`` pipeline runs in-process on it,
    exactly as the state machine runs it on AWS. ``check_transport`` round-trips the state through JSON between
    stages as Step Functions would.
    """
    from ragstep.pipeline import run_pipeline

    name = path.name
    resolved = str(path.resolve())
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in resolved):
        # A name that is not UTF-8 (decoded with surrogateescape) can be neither stored nor printed: refuse the file.
        shown = Path(str(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        return IngestResult(
            str(shown), "", "failed", error=f"{shown.name}: the file name is not valid UTF-8; rename it"
        )
    kid = knowledge_id_for(kb, resolved)
    state: IngestState | None = None
    try:
        suffix = path.suffix.lower()
        if suffix not in allowed_suffixes(kb):
            raise unsupported(name, allowed_suffixes(kb))
        try:
            size = path.stat().st_size
            check_size(name, size, ctx)
            data = path.read_bytes()
        except OSError as exc:
            raise InputError(f"{name}: cannot read the file: {exc.strerror or exc}") from exc
        check_size(name, len(data), ctx)  # it may have grown since stat
        digest = hashlib.sha256(data).hexdigest()
        key = source_blob_key(kb.id, kid, digest, name)
        if not ctx.blobs.exists(key):
            ctx.blobs.put(key, data, CONTENT_TYPES.get(suffix, "application/octet-stream"))
        del data
        state = new_ingest_state(
            kb,
            knowledge_id=kid,
            blob_key=key,
            filename=name,
            uri=path.resolve().as_uri(),
            title=path.stem,
            content_hash=digest,
            size=size,
            options=options,
        )
        state = run_pipeline("ingest", state, ctx, check_transport=check_transport)
    except RagstepError as exc:
        failed = exc.state if isinstance(exc.state, IngestState) else state
        if failed is not None:
            # The failure to report is the first one; leftovers under ingest/ would be harmless.
            with contextlib.suppress(RagstepError):
                discard_products(failed, ctx)
        return IngestResult(str(path), kid, "failed", error=exc.message)
    if state.status == "duplicate":
        return IngestResult(str(path), state.duplicate_of or kid, "duplicate", 0, state.note)
    return IngestResult(str(path), kid, state.status, state.counts.get("chunks", 0))
