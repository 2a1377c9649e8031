"""``ragstep bench profiles``: each profile's latency, quality, result count and estimated cost on a BEIR set, as
``POST /v1/knowledge-search`` with that profile runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from ragstep.bench.profiles_bench import run_profiles
from test_bench import QUERIES, error_line, write_beir


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    """No RAGSTEP_* from the developer's shell."""


def test_each_profile_is_measured_as_a_request_naming_it(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "tiny", embeddings=True)
    report = run_profiles(folder)
    assert report["set"] == "tiny" and report["queries"] == len(QUERIES) and report["vectors"] == "precomputed"
    runs = report["runs"]
    assert list(runs) == ["quick", "standard", "deep"]
    for name, run in runs.items():
        assert 0 < run["p50_ms"] <= run["p95_ms"], name
        assert run["ndcg@10"] == 1.0 and run["recall@10"] == 1.0, name  # each query's document is found first
        assert run["usd_per_1000"] > 0, name  # the receipt of each search, as the deployment would bill it
    # Each query's one document passes the thresholds (quick would cut at 5 results, deep at 15).
    assert all(run["mean_results"] >= 1 for run in runs.values()) and runs["quick"]["mean_results"] <= 5


def test_the_command_prints_a_table_or_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_beir(tmp_path / "tiny", embeddings=False)
    code, out, err = run_cli(capsys, "bench", "profiles", "--set", str(folder), "--profile", "quick", "--queries", "2")
    assert code == 0, err
    assert "p95 ms" in out and "quick" in out and "standard" not in out and "2 judged queries" in out
    code, out, err = run_cli(capsys, "bench", "profiles", "--set", str(folder), "--profile", "deep", "--json")
    assert code == 0, err
    assert json.loads(out)["vectors"] == "none (keyword only)" and set(json.loads(out)["runs"]) == {"deep"}
    message = error_line(capsys, "bench", "profiles", "--set", str(folder), "--profile", "fastest")
    assert "unknown profile 'fastest'" in message
    assert "not a folder" in error_line(capsys, "bench", "profiles", "--set", str(tmp_path / "missing"))
