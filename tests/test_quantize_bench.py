"""``ragstep bench vectors`` on a small tile of the benchmark vectors: the report's shape and its recall figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from ragstep.bench.vectors import tiled


def test_vectors_bench_json(bench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys,
        "bench",
        "vectors",
        "--docs",
        "800",
        "--queries",
        "12",
        "--no-hnsw",
        "--bench-dir",
        str(bench_dir),
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["docs"] == 800 and report["dim"] == 384
    systems = {row["system"]: row for row in report["systems"]}
    # ragstep's own two paths are always there, and agree with numpy's exact top 10
    for name in ("numpy exact (float32)", "ragstep int8 + rescore", "ragstep float32 exact"):
        assert systems[name]["recall_at_10"] == 1.0
        assert systems[name]["p50_ms"] > 0
    assert report["snapshot"]["int8_over_float32"] <= 0.30
    assert any(name.startswith("faiss IndexFlatIP") for name in systems) == report["faiss"]


def test_tiled_vectors_are_deterministic_unit_rows() -> None:
    base = np.eye(3, dtype=np.float32)
    a, b = tiled(base, 10, np.random.default_rng(0)), tiled(base, 10, np.random.default_rng(0))
    assert a.shape == (10, 3) and np.array_equal(a, b)
    assert np.linalg.norm(a, axis=1) == pytest.approx(np.ones(10), abs=1e-6)
    assert int(np.argmax(a[4])) == 1  # copy 4 is still nearest the row it copies
