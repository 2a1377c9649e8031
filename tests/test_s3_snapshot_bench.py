"""``ragstep bench s3snapshot`` end to end at a small size: the report's figures are there and consistent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli

pytest.importorskip("flask")  # moto[server]: the benchmark serves S3 from moto on 127.0.0.1

pytestmark = [pytest.mark.aws, pytest.mark.slow]


def test_s3snapshot_bench_reports_cold_load_and_warm_ratio(
    bench_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    args = ["bench", "s3snapshot", "--docs", "300", "--queries", "5", "--runs", "1", "--batch", "100"]
    code, out, err = run_cli(capsys, *args, "--bench-dir", str(bench_dir), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["docs"] == 300 and report["runs"] == 1
    assert report["generation_files"] >= 2  # the database and the snapshot's files
    assert report["bytes_per_chunk"] * 300 == pytest.approx(report["generation_mb"] * 1e6, rel=0.01)
    cold = report["cold"]
    assert cold["total_ms"] >= cold["import_ms"] + cold["load_ms"] + cold["first_query_ms"] - 1
    assert 0 < cold["peak_rss_mb"] < 4096
    assert report["warm_s3snapshot"]["p50_ms"] > 0 and report["warm_local"]["p50_ms"] > 0
    assert report["warm_ratio_p50"] == pytest.approx(
        report["warm_s3snapshot"]["p50_ms"] / report["warm_local"]["p50_ms"], rel=0.01
    )
