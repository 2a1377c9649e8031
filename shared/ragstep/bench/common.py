"""Helpers shared by the ``ragstep bench`` commands: percentiles, peak memory, where the benchmark data lives."""

from __future__ import annotations

import datetime
import math
import os
import platform
import resource
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ragstep.errors import InputError

BENCH_DIR_ENV = "RAGSTEP_BENCH_DIR"


def repo_root() -> Path:
    """The checkout this ``ragstep`` package lives in (``<root>/shared/ragstep``), when it is one."""
    return Path(__file__).resolve().parents[3]


def find_bench_dir(explicit: str | Path | None = None) -> Path:
    """The benchmark sets folder: ``--bench-dir``, ``$RAGSTEP_BENCH_DIR``, or ``../shared/bench`` beside the repo."""
    candidates = [Path(explicit)] if explicit else []
    if not explicit and os.environ.get(BENCH_DIR_ENV):
        candidates.append(Path(os.environ[BENCH_DIR_ENV]))
    if not candidates:
        candidates += [repo_root().parent / "shared" / "bench", Path.cwd().parent / "shared" / "bench"]
    for folder in candidates:
        if (folder / "msmarco-5k" / "corpus.jsonl").is_file():
            return folder
    tried = ", ".join(str(c) for c in candidates)
    raise InputError(f"benchmark sets not found (looked for msmarco-5k/corpus.jsonl in {tried}); pass --bench-dir")


def fresh_process_env(strip: tuple[str, ...] = ("RAGSTEP_",)) -> dict[str, str]:
    """This environment for a benchmark's child process: without the variables named with a prefix of ``strip`` (in
    any case, as the settings read them), with this ragstep package importable, and writing bytecode. A warm-up run
    leaves it, as an installed package or a layer has it; with ``PYTHONDONTWRITEBYTECODE`` inherited (some shells and
    containers set it) every timed run compiled ragstep from source again."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(strip)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    package_parent = str(Path(__file__).resolve().parents[2])  # the folder that holds this ragstep package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, os.environ.get("PYTHONPATH", "")) if p)
    return env


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def fmt(value: object, digits: int = 2) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)


def machine() -> str:
    """This machine in one line (CPUs and their model, memory, OS, Python): what a figure was measured on."""
    cpu = ""
    memory = ""
    try:
        cpu = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            "",
        )
        kib = next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
        memory = f", {int(kib) / 1024 / 1024:.1f} GiB memory"
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    cpus = f"{os.cpu_count()} CPUs" + (
        f" ({cpu})" if cpu else f" ({platform.processor()})" if platform.processor() else ""
    )
    return (
        f"{cpus}{memory}, {platform.system()} {platform.release()} {platform.machine()}, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )


def _shown_argument(arg: str) -> str:
    """A path argument as the repository's root would reach it (``../shared/bench/...``), not this machine's."""
    if not arg.startswith("/") or not Path(arg).exists():
        return arg
    return os.path.relpath(arg, repo_root()) if Path(arg).is_relative_to(repo_root().parent) else arg


def run_record(kind: str, argv: Sequence[str]) -> dict[str, str]:
    """Where a ``--json`` report came from: the benchmark, the command, the UTC date, the machine and the code
    (``git describe``, ``-dirty`` when the tree had changes). ``docs/bench_page.py`` renders the reports kept under
    ``bench-results/`` with it."""
    try:
        code = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=repo_root(), capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        code = ""
    return {
        "kind": kind,
        "command": shlex.join(["ragstep", *(_shown_argument(a) for a in argv)]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "code": code or "unknown",
    }
