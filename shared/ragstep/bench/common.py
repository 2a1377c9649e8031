"""Helpers shared by the ``ragstep bench`` commands: percentiles, peak memory, where the benchmark data lives."""

from __future__ import annotations

import math
import os
import resource
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
    containers set it) every timed run compiled ragstep from source again, ~80 ms."""
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
