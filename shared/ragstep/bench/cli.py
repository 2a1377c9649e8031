"""``ragstep bench cli``: what a user waits for at the prompt, against the floor of the stack ragstep runs on.

Every figure is a new process (``python -m ragstep ...``, as the console script runs it), timed from its start to
the last byte it printed (the results: the command line flushes its output before the interpreter's teardown) and to
its exit, with its CPU time (user + system). In one run, in interleaved rounds (each round runs every command once,
in turn), so the machine's load falls on all of them alike:

* ``ragstep search QUERY --kb bench-latency`` on a ``--docs``-chunk knowledge base of the embedded model (the
  default for new ones), so the query is embedded by that engine as a user's is: the latency benchmark's corpus
  (:func:`~ragstep.bench.latency.corpus_batches`) with msmarco-5k's e5 embeddings of its passages tiled with noise
  (``--vectors e5``, the default: the vector list finds neighbours, as on a real knowledge base) or random vectors;
* ``ragstep --help`` and ``ragstep kb list`` on the same data dir;
* the floor, the same way: the interpreter alone; ``import numpy``; and ``import numpy`` with pydantic importing and
  validating one model -- what any process that searches with numpy over pydantic models pays before its first line
  of ragstep code.

A warm-up round first leaves bytecode and the page cache as a user's second command finds them. The knowledge base
is built in a temporary folder and removed after, or once in ``--reuse DIR`` and read from there on later runs.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragstep.bench.common import find_bench_dir, fresh_process_env, median
from ragstep.errors import InputError

#: The query every timed search asks: a msmarco-5k question, so both lists find its passages.
QUERY = "causes of left ventricular hypertrophy"
KB_NAME = "bench-latency"  # the name build_index_batches gives its knowledge base
MARKER = "bench-cli.json"
TIMEOUT_S = 120.0  # per process: far above any of these commands  # in a --reuse folder: what was built there
#: What the knowledge base's vectors are (bench.latency_vectors): the passages' e5 embeddings, or random ones.
VECTORS = ("e5", "random")
TARGETS_MS = {"search": 300.0, "--help": 150.0, "kb list": 150.0}

FLOOR_MODEL = "import numpy\nfrom pydantic import BaseModel\nclass M(BaseModel):\n    x: int\nprint(M(x=1).x)\n"
#: Reference processes: (name, python -c code). Each prints one line, as the commands print their output.
FLOOR = (
    ("python (interpreter alone)", "print(1)"),
    ("python: import numpy", "import numpy\nprint(1)"),
    ("python: numpy + pydantic, one model", FLOOR_MODEL),
)


@dataclass(frozen=True)
class Sample:
    """One process: milliseconds from its start to the last byte it wrote to stdout, to its exit; its CPU time."""

    printed_ms: float
    exit_ms: float
    cpu_ms: float


def timed(argv: Sequence[str], env: dict[str, str]) -> Sample:
    """Run ``argv`` to its end, reading its stdout as it comes; an exit status other than 0 is an error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env)
        assert proc.stdout is not None  # stdout=PIPE
        stop = threading.Timer(TIMEOUT_S, proc.kill)  # a process that hangs is ended, and its run fails
        stop.start()
        try:
            printed = started
            while os.read(proc.stdout.fileno(), 1 << 16):
                printed = time.perf_counter()
            code = proc.wait()
            ended = time.perf_counter()
        finally:
            stop.cancel()
            proc.stdout.close()
        if code != 0:
            err.seek(0)
            tail = err.read().decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"{' '.join(argv[2:5])} ... failed (exit {code}): {tail[0]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Sample(1000.0 * (printed - started), 1000.0 * (ended - started), 1000.0 * cpu)


def prepare(
    data_dir: Path, docs: int, seed: int, vectors: str, bench_dir: str | Path | None, say: Callable[[str], None]
) -> float:
    """The knowledge base in ``data_dir``: built there (returns the seconds it took) or, when a run of this benchmark
    already built the same one there (``docs`` chunks, ``seed``, ``vectors``), reused (returns 0)."""
    marker = data_dir / MARKER
    wanted = {"docs": docs, "seed": seed, "vectors": vectors, "kb": KB_NAME}
    if marker.is_file():
        if json.loads(marker.read_text(encoding="utf-8")) == wanted:
            return 0.0
        raise InputError(f"{data_dir} holds another run's knowledge base ({marker.read_text().strip()}); "
                         "pass a new folder to --reuse")  # fmt: skip
    if data_dir.exists() and any(data_dir.iterdir()):
        raise InputError(f"{data_dir} is not empty; pass a new or empty folder to --reuse")
    from ragstep.adapters.embedders import DEFAULT_LOCAL_MODEL
    from ragstep.bench.latency import build_index_batches, corpus_batches
    from ragstep.context import Clients
    from ragstep.settings import Settings

    say(f"indexing {docs:,} chunks in {data_dir}")
    started = time.perf_counter()
    ctx = Clients(Settings(data_dir=data_dir)).context()
    batches = corpus_batches(find_bench_dir(bench_dir), docs, 1000, seed, vectors)
    build_index_batches(ctx, batches, f"local:{DEFAULT_LOCAL_MODEL}")
    marker.write_text(json.dumps(wanted), encoding="utf-8")
    return time.perf_counter() - started


def commands(data_dir: Path, query: str) -> list[tuple[str, list[str]]]:
    """(name, argv) of every process a round runs: ragstep's commands, then the floor."""
    ragstep = [sys.executable, "-m", "ragstep"]
    at = ["--data-dir", str(data_dir)]
    return [
        ("search", [*ragstep, *at, "search", query, "--kb", KB_NAME]),
        ("--help", [*ragstep, "--help"]),
        ("kb list", [*ragstep, *at, "kb", "list"]),
        *((name, [sys.executable, "-c", code]) for name, code in FLOOR),
    ]


def run_cli_bench(
    docs: int = 100_000,
    runs: int = 15,
    *,
    query: str = QUERY,
    seed: int = 0,
    vectors: str = "e5",
    reuse: str | Path | None = None,
    bench_dir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    if docs < 1 or runs < 1 or not query.strip() or vectors not in VECTORS:
        raise InputError(
            f"--docs and --runs must be at least 1, --query must hold a word, --vectors one of {', '.join(VECTORS)}"
        )
    say = progress or (lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-cli-") as tmp:
        data_dir = Path(reuse) if reuse else Path(tmp) / "data"
        build_s = prepare(data_dir, docs, seed, vectors, bench_dir, say)
        env = fresh_process_env()  # the commands on their defaults, as on a fresh install
        env.pop("PYTHONUNBUFFERED", None)  # a terminal's default: the output is written when the command flushes it
        todo = commands(data_dir, query)
        for _, argv in todo:  # warm-up: bytecode, page cache
            timed(argv, env)
        load_before = os.getloadavg()[0]
        samples: dict[str, list[Sample]] = {name: [] for name, _ in todo}
        for i in range(runs):
            say(f"round {i + 1} of {runs}")
            for name, argv in todo:
                samples[name].append(timed(argv, env))
        load_after = os.getloadavg()[0]
    figures = {
        name: {
            "printed_ms": round(median([s.printed_ms for s in got]), 1),
            "printed_min_ms": round(min(s.printed_ms for s in got), 1),
            "printed_max_ms": round(max(s.printed_ms for s in got), 1),
            "exit_ms": round(median([s.exit_ms for s in got]), 1),
            "cpu_ms": round(median([s.cpu_ms for s in got]), 1),
            **({"target_ms": TARGETS_MS[name]} if name in TARGETS_MS else {}),
        }
        for name, got in samples.items()
    }
    return {
        "docs": docs,
        "runs": runs,
        "query": query,
        "vectors": vectors,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "build_s": round(build_s, 1),
        "reused": build_s == 0.0,
        "load_avg_1m": [round(load_before, 2), round(load_after, 2)],
        "commands": figures,
    }


def render(r: dict[str, Any]) -> str:
    from ragstep.entry.cli.console import table

    rows = []
    for name, f in r["commands"].items():
        target = f.get("target_ms")
        met = "-" if target is None else ("yes" if f["printed_ms"] <= target else "no")
        spread = f"{f['printed_ms']:.1f} ({f['printed_min_ms']:.0f}-{f['printed_max_ms']:.0f})"
        limit = "-" if target is None else f"<= {target:.0f}"
        rows.append((name, spread, f"{f['exit_ms']:.1f}", f"{f['cpu_ms']:.1f}", limit, met))
    c = r["commands"]
    floor = c["python: numpy + pydantic, one model"]["printed_ms"]
    built = "reused" if r["reused"] else f"built in {r['build_s']} s"
    return "\n".join(
        [
            f"fresh processes, median of {r['runs']} interleaved rounds (Python {r['python']}, {r['cpus']} CPUs, "
            f"load {r['load_avg_1m'][0]}-{r['load_avg_1m'][1]})",
            f"knowledge base: {r['docs']:,} chunks, {r['vectors']} vectors ({built}); query: {r['query']!r}",
            "",
            table(("command", "to output ms (min-max)", "to exit ms", "CPU ms", "target", "met"), rows),
            "",
            f"search over its floor (numpy + pydantic, one model): {c['search']['printed_ms'] - floor:.1f} ms, "
            f"x{c['search']['printed_ms'] / floor:.2f}",
        ]
    )
