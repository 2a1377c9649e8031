"""``ragstep bench ingest --end-to-end``: ``ragstep ingest`` as a user runs it, with and without the embedding model.

Each workload is written to a temporary folder and ingested by the real command in a child process (``python -m
ragstep ingest FOLDER --kb ... --json``), once into a keyword-only knowledge base (embedding model ``none``) and once
into one with the default model; the wall time and the child's peak resident set (``VmHWM``) are recorded:

* ``small``: many small Markdown files (generated, 2-3 KB each);
* ``large``: one large plain-text file (generated paragraphs);
* ``corpus``: the documents of a BEIR ``corpus.jsonl`` (e.g. msmarco-5k), one file each.

With progressive indexing (:mod:`ragstep.app.ingest_vectors`) the run with the model has two phases: every file
searchable by keyword, then the vectors. Its ``keyword_searchable_s`` is when the command said the first phase was
over (its ``... searchable by keyword after ...`` line on stderr, timed by this process from the start of the
command), ``fully_embedded_s`` when it exited (= ``seconds``). The keyword-only run (``--embedding-model none``) is
the floor of the first phase.

``engine`` compares, in this process and on the same texts (the small workload's chunks), how the ingest fed the
in-process model before (batches of 64 texts, four at once, which the engine serialises in calls of 32) and now (calls
of ``engine_batch_size`` texts, one after another): passages per second each way, measured alternately so both see
the same load.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragstep.bench.common import median
from ragstep.bench.ingest_bench import MB, generate_markdown, load_corpus
from ragstep.errors import InputError


def _write_small(folder: Path, files: int) -> int:
    docs: list[str] = []
    while len(docs) < files:  # a generated document may run over its size: ask for more until there are enough
        docs += generate_markdown((files - len(docs)) * 3000, doc_bytes=1500, seed=len(docs))
    docs = docs[:files]
    for i, doc in enumerate(docs):
        (folder / f"note-{i:04d}.md").write_text(doc, encoding="utf-8")
    return sum(len(d.encode()) for d in docs)


def _write_large(folder: Path, mb: float) -> int:
    text = "\n\n".join(generate_markdown(int(mb * MB), doc_bytes=int(mb * MB) + 1))
    # Plain text: the Markdown's marks stay, as they would in a text export.
    (folder / "large.txt").write_text(text, encoding="utf-8")
    return len(text.encode())


def _write_corpus(folder: Path, corpus: Path, limit: int | None) -> int:
    corpus_file = corpus / "corpus.jsonl" if corpus.is_dir() else corpus
    docs = load_corpus(corpus_file)[:limit] if limit else load_corpus(corpus_file)
    for i, doc in enumerate(docs):
        (folder / f"doc-{i:05d}.txt").write_text(doc, encoding="utf-8")
    return sum(len(d.encode()) for d in docs)


def _peak_rss_mib(pid: int) -> float | None:
    """The child's resident high-water mark so far (``VmHWM``; None once it has exited)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


#: What ``ragstep ingest`` says on stderr when every file is searchable by keyword and the vectors begin.
KEYWORD_PHASE_OVER = b"searchable by keyword after"


def _ragstep(data_dir: Path, *args: str, out: Path) -> tuple[int, float, float, float | None]:
    """Run the CLI in a child process: (exit status, seconds, peak RSS MiB, seconds until it said its keyword phase
    was over or None).

    The peak is the child's own ``VmHWM``, read while it runs (every 50 ms): ``wait4``'s ``ru_maxrss`` would
    include this process's memory, which a forked child inherits as its starting high-water mark."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTEP_")}
    started = time.perf_counter()
    peak = 0.0
    keywords: float | None = None
    err = out.with_suffix(".err")
    with out.open("wb") as sink, err.open("wb") as said:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragstep", "--data-dir", str(data_dir), *args],
            stdout=sink,
            stderr=said,
            env=env,
        )
        while proc.poll() is None:
            peak = max(peak, _peak_rss_mib(proc.pid) or 0.0)
            if keywords is None and KEYWORD_PHASE_OVER in err.read_bytes():
                keywords = time.perf_counter() - started
            time.sleep(0.05)
    return proc.returncode, time.perf_counter() - started, peak, keywords


def _ingest(folder: Path, model: str, work: Path, *, vectors_later: bool = False) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="data-", dir=work))
    out = work / "out.json"
    code, *_ = _ragstep(data_dir, "kb", "create", "bench", "--embedding-model", model, out=out)
    if code != 0:
        raise InputError(f"could not create a knowledge base with embedding model {model}")
    later = ("--vectors-later",) if vectors_later else ()
    code, seconds, rss, keywords = _ragstep(data_dir, "ingest", str(folder), "--kb", "bench", "--json", *later, out=out)
    rows = json.loads(out.read_text() or "[]")
    chunks = sum(r["chunks"] for r in rows)
    return {
        "exit": code,
        "seconds": round(seconds, 2),
        "chunks": chunks,
        "chunks_per_s": round(chunks / seconds, 1) if seconds else 0.0,
        "peak_rss_mib": rss,
        "failed": sum(r["status"] == "failed" for r in rows),
        # A keyword-only run is searchable when it ends; one with a model when its first phase is over.
        "keyword_searchable_s": round(seconds if model == "none" or keywords is None else keywords, 2),
        # None: the vectors were left for later (--vectors-later), not timed.
        "fully_embedded_s": None if vectors_later and model != "none" else round(seconds, 2),
    }


def _engine(texts: list[str], rounds: int) -> dict[str, Any]:
    """Passages/s of the in-process model fed the previous way and the present way, alternately."""
    from ragstep.adapters.embedders import LocalEmbedder
    from ragstep.stages.ingest.embed import embed_texts

    local = LocalEmbedder()
    local.embed(texts[:2])  # load the model outside the timings

    class Previous:  # the same model, without the in-process declaration: batches of 64, four in flight
        model_id = local.model_id

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return local.embed(texts)

        def embed_query(self, text: str) -> np.ndarray:
            return local.embed_query(text)

    runs: dict[str, list[float]] = {"previous": [], "present": []}
    feeds: dict[str, Callable[[], object]] = {
        "previous": lambda: embed_texts(Previous(), texts, batch_size=64),
        "present": lambda: embed_texts(local, texts, batch_size=64),
    }
    for _ in range(rounds):
        for name, feed in feeds.items():
            started = time.perf_counter()
            feed()
            runs[name].append(time.perf_counter() - started)
    figures = {
        name: {"runs_s": [round(s, 2) for s in r], "passages_per_s": round(len(texts) / median(r), 1)}
        for name, r in runs.items()
    }
    return {"passages": len(texts), **figures}


def _chunk_texts(folder: Path, limit: int) -> list[str]:
    from ragstep.retrieval.chunking import ChunkerConfig, split_text

    texts: list[str] = []
    for path in sorted(folder.iterdir()):
        texts.extend(c.content for c in split_text(path.read_text(encoding="utf-8"), ChunkerConfig(512, 80)))
        if len(texts) >= limit:
            break
    return texts[:limit]


def run(
    *,
    small_files: int = 1000,
    large_mb: float = 20.0,
    corpus: Path | None = None,
    corpus_limit: int | None = None,
    engine_passages: int = 32,
    engine_rounds: int = 3,
    vectors_later: bool = False,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The workloads, each ingested without and with the default model; ``vectors_later``: the run with the model
    stops after its keyword phase (``ingest --vectors-later``), for workloads whose vectors would take hours."""
    say = progress or (lambda _m: None)
    result: dict[str, Any] = {"python": platform.python_version(), "cores": os.cpu_count(), "workloads": {}}
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-e2e-") as tmp:
        work = Path(tmp)
        writers: dict[str, Callable[[Path], int]] = {}
        if small_files:
            writers["small"] = lambda f: _write_small(f, small_files)
        if large_mb:
            writers["large"] = lambda f: _write_large(f, large_mb)
        if corpus is not None:
            writers["corpus"] = lambda f: _write_corpus(f, corpus, corpus_limit)
        for name, write in writers.items():
            folder = work / name
            folder.mkdir()
            size = write(folder)
            entry: dict[str, Any] = {"files": len(list(folder.iterdir())), "mb": round(size / MB, 2)}
            for model in ("none", "default"):
                say(f"ingest {name} ({entry['files']} files, {entry['mb']} MB), embedding model {model}")
                entry["keyword" if model == "none" else "embedded"] = _ingest(
                    folder,
                    "none" if model == "none" else "local:multilingual-e5-small",
                    work,
                    vectors_later=vectors_later,
                )
            result["workloads"][name] = entry
            if name == "small" and engine_passages:
                say(f"engine: previous vs present feeding, {engine_passages} passages x {engine_rounds}")
                result["engine"] = _engine(_chunk_texts(folder, engine_passages), engine_rounds)
    return result


def render(r: dict[str, Any]) -> str:
    lines = [
        f"ragstep ingest end to end (python {r['python']}, {r['cores']} cores)",
        f"  {'workload':<8} {'files':>6} {'MB':>7} {'chunks':>7}  {'keyword-only s':>14}  {'searchable s':>12}"
        f"  {'embedded s':>10}  {'peak RSS MiB':>12}",
    ]
    for name, w in r["workloads"].items():
        k, e = w["keyword"], w["embedded"]
        # With the model: searchable by keyword after its first phase, fully embedded at its end ("-": not timed).
        searchable = e.get("keyword_searchable_s", e["seconds"])
        embedded = e.get("fully_embedded_s", e["seconds"])
        lines.append(
            f"  {name:<8} {w['files']:>6} {w['mb']:>7} {e['chunks']:>7}  {k['seconds']:>14}  {searchable:>12}"
            f"  {'-' if embedded is None else embedded:>10}  {k['peak_rss_mib']:>5} / {e['peak_rss_mib']:<5}"
        )
    if "engine" in r:
        eng = r["engine"]
        lines.append(
            f"  engine on {eng['passages']} chunks: previous feeding {eng['previous']['passages_per_s']} passages/s, "
            f"present {eng['present']['passages_per_s']} passages/s"
        )
    return "\n".join(lines)
