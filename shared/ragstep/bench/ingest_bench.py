"""Ingestion throughput: chunking in MB/s of Markdown, ingestion in chunks/s without embedding.

:func:`run` measures, on generated Markdown (deterministic: headings, paragraphs, lists, code blocks, tables) and
optionally on a BEIR-layout corpus (``corpus.jsonl``, e.g. msmarco-5k):

* ``chunking``: :func:`ragstep.chunking.split_text` alone, default settings -- MB/s of UTF-8 input.
* ``pipeline``: every document as a file through :func:`ragstep.ingest.ingest_file`, i.e. the ``ingest`` pipeline
  in-process exactly as ``ragstep ingest`` runs it (original and products through the local blob store, catalog,
  one index transaction per file), into a BM25-only knowledge base -- chunks/s and MB/s.
* ``direct``: :func:`ragstep.ingest.text_chunks` + :func:`ragstep.ingest.index_document` (no blobs, what the quality
  benchmark does) -- chunks/s, for comparison.
* ``snapshot_s``: building the in-memory BM25 snapshot once afterwards (the first search pays it).

Everything goes into a fresh temporary data dir, removed afterwards. No embedding: the figure is the cost of
ragstep itself, not of a model provider.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..chunking import split_text
from ..ingest import index_document, ingest_file, text_chunks
from ..models import Knowledge, KnowledgeBase
from ..ports import SearchFilter
from ..services import Services
from ..settings import Settings

MB = 1024 * 1024
_WORDS = [
    "retrieval",
    "augmented",
    "generation",
    "pipeline",
    "stage",
    "lambda",
    "state",
    "machine",
    "chunk",
    "index",
    "vector",
    "keyword",
    "search",
    "query",
    "document",
    "parser",
    "markdown",
    "table",
    "heading",
    "paragraph",
    "embedding",
    "model",
    "latency",
    "throughput",
    "batch",
    "concurrency",
    "serverless",
    "storage",
    "bucket",
    "object",
    "catalog",
    "knowledge",
    "base",
    "tenant",
    "request",
    "response",
    "payload",
    "limit",
    "transport",
]


def generate_markdown(total_bytes: int, doc_bytes: int = 50_000, seed: int = 7) -> list[str]:
    """Documents of about ``doc_bytes`` each, about ``total_bytes`` in all, mixing the structures the chunker
    protects (code fences, tables, links) with headings, paragraphs and lists."""
    rng = random.Random(seed)

    def sentence() -> str:
        words = rng.choices(_WORDS, k=rng.randint(6, 18))
        return " ".join(words).capitalize() + "."

    docs: list[str] = []
    produced = 0
    while produced < total_bytes:
        parts = [f"# Document {len(docs) + 1}\n"]
        size = 0
        section = 0
        while size < doc_bytes:
            section += 1
            block = [f"## Section {section}\n"]
            for _ in range(rng.randint(2, 5)):
                kind = rng.random()
                if kind < 0.6:
                    block.append(" ".join(sentence() for _ in range(rng.randint(3, 8))) + "\n")
                elif kind < 0.75:
                    block.append("\n".join(f"- {sentence()}" for _ in range(rng.randint(3, 6))) + "\n")
                elif kind < 0.85:
                    lines = [f"value_{i} = compute({rng.randint(0, 999)})" for i in range(rng.randint(3, 10))]
                    block.append("```python\n" + "\n".join(lines) + "\n```\n")
                elif kind < 0.95:
                    rows = ["| name | value | note |", "| --- | --- | --- |"]
                    rows += [f"| {rng.choice(_WORDS)} | {rng.randint(0, 9999)} | {sentence()} |" for _ in range(5)]
                    block.append("\n".join(rows) + "\n")
                else:
                    block.append(
                        f"See [{rng.choice(_WORDS)}](https://example.com/{rng.randint(0, 99)}). {sentence()}\n"
                    )
            text = "\n".join(block)
            parts.append(text)
            size += len(text.encode("utf-8"))
        doc = "\n".join(parts)
        docs.append(doc)
        produced += len(doc.encode("utf-8"))
    return docs


def load_corpus(path: Path) -> list[str]:
    """Texts of a BEIR ``corpus.jsonl`` (title and text joined, as the quality benchmark does)."""
    texts = []
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                doc = json.loads(line)
                title, text = doc.get("title") or "", doc.get("text") or ""
                body = f"{title} {text}".strip() if title else text
                if body.strip():
                    texts.append(body)
    return texts


def _kb(services: Services, name: str) -> KnowledgeBase:
    kb = KnowledgeBase(id=uuid.uuid4().hex, name=name, embedding_model="none", created_at=time.time())
    return services.catalog.create_kb(kb)


def _snapshot(services: Services) -> float:
    started = time.perf_counter()
    services.index.keyword_search(["warm"], SearchFilter(), 1, 0.0)
    return time.perf_counter() - started


def measure(texts: Sequence[str], workdir: Path, *, pipeline: bool = True, direct: bool = True) -> dict[str, Any]:
    """The figures for one set of documents (see the module docstring)."""
    size = sum(len(t.encode("utf-8")) for t in texts)
    out: dict[str, Any] = {"documents": len(texts), "mb": round(size / MB, 3)}

    started = time.perf_counter()
    chunks = sum(len(split_text(t)) for t in texts)
    elapsed = time.perf_counter() - started
    out["chunking"] = {"chunks": chunks, "seconds": round(elapsed, 3), "mb_per_s": round(size / MB / elapsed, 2)}

    if pipeline:
        files = workdir / "files"
        files.mkdir(parents=True)
        width = len(str(len(texts)))
        paths = []
        for i, text in enumerate(texts):
            path = files / f"doc-{i:0{width}d}.md"
            path.write_text(text, encoding="utf-8")
            paths.append(path)
        services = Services(Settings(data_dir=workdir / "pipeline"))
        kb = _kb(services, "bench-pipeline")
        started = time.perf_counter()
        results = [ingest_file(p, kb, services) for p in paths]
        elapsed = time.perf_counter() - started
        failed = [r for r in results if r.status == "failed"]
        if failed:
            raise RuntimeError(f"{len(failed)} documents failed to ingest, e.g. {failed[0].error}")
        indexed = sum(r.chunks for r in results)
        out["pipeline"] = {
            "chunks": indexed,
            "seconds": round(elapsed, 3),
            "chunks_per_s": round(indexed / elapsed, 1),
            "mb_per_s": round(size / MB / elapsed, 2),
            "files_per_s": round(len(texts) / elapsed, 1),
            # Same text as an earlier document: skipped (a knowledge base holds each content once).
            "duplicates": sum(r.status == "duplicate" for r in results),
            "snapshot_s": round(_snapshot(services), 3),
        }

    if direct:
        services = Services(Settings(data_dir=workdir / "direct"))
        kb = _kb(services, "bench-direct")
        started = time.perf_counter()
        indexed = 0
        for i, text in enumerate(texts):
            knowledge = Knowledge(id=f"doc-{i}", knowledge_base_id=kb.id, filename=f"doc-{i}")
            done = index_document(knowledge, text_chunks(kb, knowledge, text), kb, services)
            indexed += done.chunk_count
        elapsed = time.perf_counter() - started
        out["direct"] = {
            "chunks": indexed,
            "seconds": round(elapsed, 3),
            "chunks_per_s": round(indexed / elapsed, 1),
            "mb_per_s": round(size / MB / elapsed, 2),
            "snapshot_s": round(_snapshot(services), 3),
        }
    return out


def run(
    *,
    markdown_mb: float = 5.0,
    corpus: Path | str | None = None,
    pipeline: bool = True,
    direct: bool = True,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Ingestion figures on ``markdown_mb`` MB of generated Markdown (0 skips it) and, when given, on the BEIR
    ``corpus.jsonl`` at ``corpus``. Returns ``{"markdown": {...}, "corpus": {...}}``; each part has ``chunking``
    (MB/s), ``pipeline`` and ``direct`` (chunks/s). Temporary files go to ``workdir`` (default: a temp dir)."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ragstep-ingest-bench-", dir=workdir) as tmp:
        root = Path(tmp)
        if markdown_mb > 0:
            docs = generate_markdown(int(markdown_mb * MB))
            results["markdown"] = measure(docs, root / "markdown", pipeline=pipeline, direct=direct)
        if corpus is not None:
            path = Path(corpus)
            texts = load_corpus(path / "corpus.jsonl" if path.is_dir() else path)
            part = measure(texts, root / "corpus", pipeline=pipeline, direct=direct)
            results["corpus"] = {"name": path.parent.name if path.is_file() else path.name, **part}
    return results
