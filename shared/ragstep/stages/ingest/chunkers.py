"""What a parsed file becomes in the index: the chunk rows of a document, a FAQ file or a data file.

Pure functions of (knowledge base, knowledge item, parsed content); the ``ingest_chunk`` stage picks one:

* documents: structure-preserving text chunks (:func:`text_chunks`), or with ``parent_child`` small child chunks
  that are indexed and searched, each carrying its parent's text (:func:`parent_child_chunks`);
* FAQ files: one row per phrasing of every entry (:func:`faq_entry_chunks`);
* data files (``.csv .xlsx``): a ``table_summary`` chunk and one ``table_column`` chunk per column of every sheet
  (:func:`data_chunks`).

Every row carries the knowledge item's tag (a FAQ entry's own tag wins), title and file name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ragstep.models import Chunk, ChunkType, IngestOptions, Knowledge, KnowledgeBase
from ragstep.parsers import DataFileSummary
from ragstep.parsers.faq import FaqEntry
from ragstep.retrieval.chunking import DEFAULT_CONFIG, ChunkerConfig, TextChunk, split_parent_child, split_text
from ragstep.stages.ingest.products import data_blob_key


def text_chunks(
    kb: KnowledgeBase,
    knowledge: Knowledge,
    text: str,
    config: ChunkerConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Chunk]:
    """Structure-preserving chunks with exact offsets; heading breadcrumbs go to the embedder only. ``progress``:
    how far the cutting is (``split_text``'s)."""
    pieces = split_text(text, config or DEFAULT_CONFIG, progress)
    return [_piece_chunk(kb, knowledge, p, {}) for p in pieces]


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
        chunks.append(_piece_chunk(kb, knowledge, child, metadata, parent_id=f"{knowledge.id}-p{child.parent_index}"))
    return chunks


def mark_ocr(chunks: list[Chunk], text: str) -> list[Chunk]:
    """Chunks whose text is mostly OCR'd text (:data:`ragstep.parsers.ocr.OCR_SPAN`) become ``IMAGE_OCR`` chunks with
    the page most of it was read from (``metadata["page"]``; ``metadata["image"]``: the stored picture, for a
    picture inside a document), so an answer can say a passage came from a scan or a figure."""
    from ragstep.parsers.ocr import OCR_SPAN

    spans = [(m.start(), m.end(), m.group(1), m.group(2)) for m in OCR_SPAN.finditer(text)]
    if not spans:
        return chunks
    out = []
    for chunk in chunks:
        overlaps = [min(end, chunk.end_at) - max(start, chunk.start_at) for start, end, _, _ in spans]
        best = max(range(len(spans)), key=lambda i: overlaps[i])
        if 2 * sum(o for o in overlaps if o > 0) >= chunk.end_at - chunk.start_at > 0:
            _, _, page, image = spans[best]
            metadata = {**chunk.metadata, "source": "ocr"}
            if page is not None:
                metadata["page"] = int(page)
            if image is not None:  # read from a picture inside the document (ragstep.stages.ingest.figures)
                metadata["image"] = image
            chunk = chunk.model_copy(update={"chunk_type": ChunkType.IMAGE_OCR, "metadata": metadata})
        out.append(chunk)
    return out


def _piece_chunk(
    kb: KnowledgeBase, knowledge: Knowledge, piece: TextChunk, metadata: dict[str, Any], parent_id: str | None = None
) -> Chunk:
    """The index row of one piece of a document's text; its heading breadcrumb goes to the embedder only."""
    header = piece.context_header
    return Chunk(
        id=f"{knowledge.id}-{piece.chunk_index}",
        parent_id=parent_id,
        knowledge_id=knowledge.id,
        knowledge_base_id=kb.id,
        content=piece.content,
        chunk_index=piece.chunk_index,
        start_at=piece.start_at,
        end_at=piece.end_at,
        tag_id=knowledge.tag_id,
        knowledge_title=knowledge.title,
        knowledge_filename=knowledge.filename,
        embed_text=f"{header}\n{piece.content}" if header else None,
        metadata={**metadata, "context_header": header} if header else metadata,
    )


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
                    tag_id=entry.tag_id or knowledge.tag_id,
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
