"""Ingestion of files into a knowledge base (in-process): read -> chunk -> embed -> index.

Idempotent: a file's knowledge id is derived from its knowledge base and path, so ingesting it again replaces its
chunks in one transaction; when the content hash is unchanged nothing is re-embedded or re-indexed.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InputError, RagstepError
from .models import Chunk, ChunkType, Knowledge, KnowledgeBase, KnowledgeBaseType
from .services import Services

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
FAQ_SUFFIXES = (".json",)
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


def decode_text(data: bytes, name: str) -> str:
    """UTF-8 (with or without BOM), else GB18030 (a superset of GBK); anything else is refused, not guessed."""
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise InputError(f"{name}: cannot decode the text as UTF-8 or GB18030; convert it to UTF-8")


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


def simple_chunks(text: str, size: int = 512, overlap: int = 80) -> list[tuple[int, int]]:
    """Character windows of at most ``size``, cut at the last paragraph/line/sentence break when there is one.

    Returns (start, end) offsets; consecutive windows overlap by up to ``overlap`` characters.
    """
    spans: list[tuple[int, int]] = []
    n = len(text)
    start = 0
    while start < n:
        while start < n and text[start].isspace():
            start += 1
        if start >= n:
            break
        end = min(start + size, n)
        if end < n:
            window = text[start:end]
            for sep in ("\n\n", "\n", "。", "！", "？", ". ", "! ", "? ", "；", "; "):
                cut = window.rfind(sep)
                if cut > size // 3:
                    end = start + cut + len(sep)
                    break
        stripped_end = end
        while stripped_end > start and text[stripped_end - 1].isspace():
            stripped_end -= 1
        spans.append((start, stripped_end))
        if end >= n:
            break
        start = max(end - overlap, start + 1) if overlap else end
    return spans


def _text_chunks(kb: KnowledgeBase, knowledge: Knowledge, text: str) -> list[Chunk]:
    return [
        Chunk(
            id=f"{knowledge.id}-{i}",
            knowledge_id=knowledge.id,
            knowledge_base_id=kb.id,
            content=text[s:e],
            chunk_index=i,
            start_at=s,
            end_at=e,
            knowledge_title=knowledge.title,
            knowledge_filename=knowledge.filename,
        )
        for i, (s, e) in enumerate(simple_chunks(text))
    ]


def faq_chunks(kb: KnowledgeBase, knowledge: Knowledge, data: bytes) -> list[Chunk]:
    """FAQ entries from a JSON list of ``{standard_question, similar_questions, negative_questions, answers}``.

    The questions are what BM25 and the embedder match; the answers are what a hit returns.
    """
    try:
        entries = json.loads(decode_text(data, knowledge.filename))
    except json.JSONDecodeError as exc:
        raise InputError(f"{knowledge.filename}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{knowledge.filename}: expected a non-empty JSON list of FAQ entries")
    chunks = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not str(entry.get("standard_question", "")).strip():
            raise InputError(f"{knowledge.filename}: entry {i} needs a non-empty 'standard_question'")
        answers = [str(a) for a in entry.get("answers", []) if str(a).strip()]
        if not answers:
            raise InputError(f"{knowledge.filename}: entry {i} needs at least one answer in 'answers'")
        question = str(entry["standard_question"]).strip()
        similar = [str(q).strip() for q in entry.get("similar_questions", []) if str(q).strip()]
        content = f"Q: {question}\nAnswer:\n" + "\n".join(f"- {a}" for a in answers)
        chunks.append(
            Chunk(
                id=f"{knowledge.id}-{entry.get('id', i)}",
                knowledge_id=knowledge.id,
                knowledge_base_id=kb.id,
                content=content,
                chunk_index=i,
                end_at=len(content),
                chunk_type=ChunkType.FAQ,
                tag_id=str(entry.get("tag_id", "")),
                knowledge_title=knowledge.title,
                knowledge_filename=knowledge.filename,
                index_text="\n".join([question, *similar]),
                embed_text="\n".join([question, *similar]),
                metadata={
                    "standard_question": question,
                    "similar_questions": similar,
                    "negative_questions": [str(q) for q in entry.get("negative_questions", [])],
                    "answers": answers,
                },
            )
        )
    return chunks


def embed_chunks(chunks: list[Chunk], kb: KnowledgeBase, services: Services) -> np.ndarray | None:
    embedder = services.embedder(kb.embedding_model)
    if embedder is None or not chunks:
        return None
    return embedder.embed([c.embed_text or c.content for c in chunks])


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
        allowed = FAQ_SUFFIXES if kb.type == KnowledgeBaseType.FAQ else TEXT_SUFFIXES
        if suffix not in allowed:
            raise InputError(f"{name}: unsupported file type {suffix or '(none)'}; supported: {', '.join(allowed)}")
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
            status="processing",
            created_at=existing.created_at if existing else now,
            updated_at=now,
        )
        if kb.type == KnowledgeBaseType.FAQ:
            chunks = faq_chunks(kb, knowledge, data)
        else:
            text = decode_text(data, name)
            if not text.strip():
                raise InputError(f"{name}: the document is empty")
            chunks = _text_chunks(kb, knowledge, text)
        vectors = embed_chunks(chunks, kb, services)
        # The index write is one transaction: either every chunk of the new version is searchable or none is,
        # and the previous version stays until then.
        services.index.replace_knowledge(kid, chunks, vectors, kb.embedding_model if vectors is not None else None)
        services.catalog.put_knowledge(knowledge.model_copy(update={"status": "completed", "chunk_count": len(chunks)}))
        return IngestResult(str(path), kid, "indexed", len(chunks))
    except RagstepError as exc:
        return IngestResult(str(path), kid, "failed", error=exc.message)
