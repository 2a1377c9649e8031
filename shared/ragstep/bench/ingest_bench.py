"""``ragstep bench ingest``: chunking in MB/s of Markdown, ingestion in chunks/s without embedding.

:func:`run` measures, on generated Markdown (deterministic: headings, paragraphs, lists, code blocks, tables) and
optionally on a BEIR-layout corpus (``corpus.jsonl``, e.g. msmarco-5k), each measurement ``repeat`` times (the
median is reported, with every run's seconds for the spread):

* ``chunking``: :func:`ragstep.retrieval.chunking.split_text` alone, default settings -- MB/s of UTF-8 input.
* ``pipeline``: every document as a file through :func:`ragstep.app.ingest.ingest_file`, i.e. the ``ingest``
  pipeline in-process exactly as ``ragstep ingest`` runs it (original and products through the local blob store,
  catalog, one index transaction per file), into a BM25-only knowledge base -- chunks/s and MB/s.
* ``snapshot_s``: building the in-memory BM25 snapshot once afterwards (the first search pays it).

Every run goes into a fresh temporary data dir, removed afterwards. No embedding: the figure is the cost of
ragstep itself, not of a model provider. MB are MiB of UTF-8 text.

JSON shape: ``{"repeat", "python", "markdown" | "corpus": {"documents", "bytes", "mb", ["name"], "chunking": {"chunks",
"seconds", "runs_s", "mb_per_s", "chunks_per_s"}, "pipeline": {"chunks", "seconds", "runs_s", "chunks_per_s",
"mb_per_s", "files_per_s", "duplicates", "snapshot_s"}}}``.
"""

from __future__ import annotations

import json
import platform
import random
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragstep.app.ingest import ingest_file
from ragstep.bench.common import median
from ragstep.context import Clients, Context
from ragstep.errors import InputError
from ragstep.models import KnowledgeBase
from ragstep.ports import SearchFilter
from ragstep.retrieval.chunking import split_text
from ragstep.settings import Settings

MB = 1024 * 1024
#: Generated Markdown above this is refused (it is built in memory, and written to disk once).
MAX_MARKDOWN_MB = 1024
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
    try:
        with Path(path).open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}: line {number} is not JSON ({exc.msg})") from None
                if not isinstance(doc, dict):
                    raise InputError(f"{path}: line {number} is not a JSON object")
                title, text = str(doc.get("title") or ""), str(doc.get("text") or "")
                body = f"{title} {text}".strip() if title else text
                if body.strip():
                    texts.append(body)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the corpus {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not texts:
        raise InputError(f"{path}: no documents with text")
    return texts


def _kb(ctx: Context, name: str) -> KnowledgeBase:
    kb = KnowledgeBase(id=uuid.uuid4().hex, name=name, embedding_model="none", created_at=time.time())
    return ctx.catalog.create_kb(kb)


def _snapshot(ctx: Context) -> float:
    started = time.perf_counter()
    ctx.index.keyword_search(["warm"], SearchFilter(), 1, 0.0)
    return time.perf_counter() - started


def _figures(chunks: int, runs: list[float], size: int, **extra: Any) -> dict[str, Any]:
    seconds = max(median(runs), 1e-9)
    return {
        "chunks": chunks,
        "seconds": round(seconds, 6),
        "runs_s": [round(r, 6) for r in runs],
        "chunks_per_s": round(chunks / seconds, 1),
        "mb_per_s": round(size / MB / seconds, 2),
        **extra,
    }


def _pipeline_once(paths: Sequence[Path], data_dir: Path) -> tuple[float, int, int, float]:
    """(seconds, chunks, duplicates, snapshot seconds) of ``ragstep ingest`` on ``paths`` into a fresh data dir."""
    ctx = Clients(Settings(data_dir=data_dir)).context()
    kb = _kb(ctx, "bench-pipeline")
    started = time.perf_counter()
    results = [ingest_file(p, kb, ctx) for p in paths]
    elapsed = time.perf_counter() - started
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise RuntimeError(f"{len(failed)} documents failed to ingest, e.g. {failed[0].error}")
    duplicates = sum(r.status == "duplicate" for r in results)
    return elapsed, sum(r.chunks for r in results), duplicates, _snapshot(ctx)


def measure(
    texts: Sequence[str],
    workdir: Path,
    *,
    repeat: int = 3,
    pipeline: bool = True,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The figures for one set of documents (see the module docstring); medians of ``repeat`` runs."""
    say = say or (lambda _msg: None)
    size = sum(len(t.encode("utf-8")) for t in texts)
    out: dict[str, Any] = {"documents": len(texts), "bytes": size, "mb": round(size / MB, 3)}

    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        chunks = sum(len(split_text(t)) for t in texts)
        runs.append(time.perf_counter() - started)
    out["chunking"] = _figures(chunks, runs, size)
    say(f"chunking: {out['chunking']['mb_per_s']} MB/s")

    if pipeline:
        files = workdir / "files"
        files.mkdir(parents=True)
        width = len(str(len(texts)))
        paths = []
        for i, text in enumerate(texts):
            path = files / f"doc-{i:0{width}d}.md"
            path.write_text(text, encoding="utf-8")
            paths.append(path)
        runs, snapshots = [], []
        for r in range(repeat):
            elapsed, chunks, duplicates, snapshot = _pipeline_once(paths, workdir / f"pipeline-{r}")
            runs.append(elapsed)
            snapshots.append(snapshot)
            say(f"pipeline run {r + 1}/{repeat}: {chunks / elapsed:,.0f} chunks/s")
        out["pipeline"] = _figures(
            chunks,
            runs,
            size,
            files_per_s=round(len(texts) / median(runs), 1),
            # Same text as an earlier document: skipped (a knowledge base holds each content once).
            duplicates=duplicates,
            snapshot_s=round(median(snapshots), 6),
        )

    return out


def run(
    *,
    markdown_mb: float = 5.0,
    corpus: Path | str | None = None,
    repeat: int = 3,
    pipeline: bool = True,
    workdir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Ingestion figures on ``markdown_mb`` MB of generated Markdown (0 skips it) and, when given, on the BEIR
    ``corpus.jsonl`` at ``corpus`` (the file or its folder). Temporary files go to ``workdir`` (default: a temp
    dir). See the module docstring for the shape."""
    if not 0 <= markdown_mb <= MAX_MARKDOWN_MB:
        raise InputError(f"--markdown-mb must be between 0 and {MAX_MARKDOWN_MB}, got {markdown_mb:g}")
    if markdown_mb == 0 and corpus is None:
        raise InputError("nothing to measure: --markdown-mb is 0 and no --corpus was given")
    if repeat < 1:
        raise InputError(f"--repeat must be at least 1, got {repeat}")
    corpus_file: Path | None = None
    if corpus is not None:
        corpus_file = Path(corpus) / "corpus.jsonl" if Path(corpus).is_dir() else Path(corpus)
        if not corpus_file.is_file():
            raise InputError(f"corpus not found: {corpus_file} (a BEIR corpus.jsonl, or the folder holding it)")
    say = progress or (lambda _msg: None)
    results: dict[str, Any] = {"repeat": repeat, "python": platform.python_version()}
    with tempfile.TemporaryDirectory(prefix="ragstep-ingest-bench-", dir=workdir) as tmp:
        root = Path(tmp)
        if markdown_mb > 0:
            docs = generate_markdown(int(markdown_mb * MB))
            say(f"generated Markdown: {len(docs)} documents, {markdown_mb:g} MB")
            results["markdown"] = measure(docs, root / "markdown", repeat=repeat, pipeline=pipeline, say=say)
        if corpus_file is not None:
            texts = load_corpus(corpus_file)
            say(f"corpus {corpus_file}: {len(texts)} documents")
            part = measure(texts, root / "corpus", repeat=repeat, pipeline=pipeline, say=say)
            results["corpus"] = {"name": corpus_file.parent.name, **part}
    return results


def render(r: dict[str, Any]) -> str:
    from ragstep.entry.cli.console import table

    lines = [f"ingestion throughput, no embedding: median of {r['repeat']} runs (Python {r['python']})", ""]
    rows = []
    for key in ("markdown", "corpus"):
        part = r.get(key)
        if not part:
            continue
        name = "generated Markdown" if key == "markdown" else part["name"]
        label = f"{name} ({part['documents']:,} docs, {part['mb']} MB)"
        for stage, what in (
            ("chunking", "split_text"),
            ("pipeline", "ragstep ingest (4 stages, blobs)"),
        ):
            f = part.get(stage)
            if f is None:
                continue
            spread = f"{min(f['runs_s']):.3f}-{max(f['runs_s']):.3f}" if len(f["runs_s"]) > 1 else ""
            rows.append(
                (label, what, f"{f['chunks']:,}", f"{f['seconds']:.3f}", spread, f"{f['mb_per_s']:.2f}",
                 f"{f['chunks_per_s']:,.0f}", f.get("files_per_s", ""))
            )  # fmt: skip
            label = ""
    headers = ("set", "what", "chunks", "median s", "runs s", "MB/s", "chunks/s", "files/s")
    lines.append(table(headers, rows))
    return "\n".join(lines)
