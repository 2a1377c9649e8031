"""The docs site: its reference pages are what the code says today, every setting, command and route has a
description, and the site builds strictly (no broken link) and reads offline (no asset from another host)."""

from __future__ import annotations

import json
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
GENERATOR = REPO / "docs" / "reference_gen.py"


@pytest.fixture(scope="module")
def generator() -> dict[str, Any]:
    return runpy.run_path(str(GENERATOR))


def test_the_reference_pages_are_up_to_date(generator: dict[str, Any]) -> None:
    stale = [
        name
        for name, text in generator["pages"]().items()
        if (REPO / "docs" / "reference" / name).read_text(encoding="utf-8") != text
    ]
    assert not stale, f"docs/reference/{stale} are out of date: run `python docs/reference_gen.py`"


def test_every_setting_command_and_route_has_a_description(generator: dict[str, Any]) -> None:
    from ragstep.models.chat import ChatSettings
    from ragstep.settings import Settings

    missing = [row[0] for model, prefix in ((Settings, "RAGSTEP_"), (ChatSettings, "RAGSTEP_CHAT_"))
               for row in generator["_settings_rows"](model, prefix) if not row[3].strip()]  # fmt: skip
    assert not missing, f"settings without a description (a comment above the field): {missing}"
    _, helps = generator["cli_page"]()
    assert not [name for name, text in helps.items() if not text.strip()], "commands without a help line"
    _, routes = generator["http_page"]()
    assert "POST /v1/knowledge-search" in routes and "POST /mcp" in routes
    assert not [route for route, text in routes.items() if not text.strip()], "routes without a docstring"


@pytest.mark.skipif(shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None, reason="mkdocs (dev extra)")
def test_the_site_builds_strictly_and_reads_offline(tmp_path: Path) -> None:
    mkdocs = str(Path(sys.executable).with_name("mkdocs"))
    built = subprocess.run(
        [mkdocs, "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    remote = re.compile(r"""(?:<script[^>]+src|<link[^>]+href|url\()\s*=?\s*["']?(?:https?:)?//""", re.I)
    pages = [p for p in (tmp_path / "site").rglob("*") if p.suffix in {".html", ".css", ".js"}]
    assert pages
    fetched = [
        str(p.relative_to(tmp_path)) for p in pages if remote.search(p.read_text(encoding="utf-8", errors="ignore"))
    ]
    assert not fetched, f"assets loaded from another host (the site must read offline): {fetched}"


BENCH_PAGE = REPO / "docs" / "bench_page.py"


@pytest.fixture(scope="module")
def bench_page() -> dict[str, Any]:
    return runpy.run_path(str(BENCH_PAGE))


def test_the_benchmarks_page_is_current_with_the_reports(bench_page: dict[str, Any]) -> None:
    warnings: list[str] = []
    text = bench_page["page"](warn=warnings.append)
    assert (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8") == text, (
        "docs/benchmarks.md is out of date with bench-results/: run `python docs/bench_page.py`"
    )
    shown = {line.split("`")[1] for line in text.splitlines() if line.startswith("- report: ")}
    assert shown, "no report rendered"


def test_the_benchmarks_page_shows_the_newest_run_once_and_skips_what_it_cannot_read(
    bench_page: dict[str, Any], tmp_path: Path
) -> None:
    report = json.loads((REPO / "bench-results" / "profiles" / "msmarco-5k.json").read_text(encoding="utf-8"))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "other").mkdir()
    older = {**report, "run": {**report["run"], "date": "2026-01-01 00:00 UTC", "command": "ragstep bench OLD"}}
    (tmp_path / "profiles" / "a-old.json").write_text(json.dumps(older), encoding="utf-8")
    newer = {**report, "run": {**report["run"], "date": "2026-12-01 00:00 UTC", "command": "ragstep bench NEW"}}
    (tmp_path / "profiles" / "b-new.json").write_text(json.dumps(newer), encoding="utf-8")
    raw = {k: v for k, v in report.items() if k != "run"}  # a report from before `--json` recorded its run
    (tmp_path / "profiles" / "c-raw.json").write_text(json.dumps({**raw, "set": "raw-set"}), encoding="utf-8")
    (tmp_path / "other" / "unknown.json").write_text('{"run": {"kind": "telepathy"}, "x": 1}', encoding="utf-8")
    (tmp_path / "other" / "broken.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "profiles" / "wrong-layout.json").write_text('{"run": {"kind": "profiles"}}', encoding="utf-8")
    warnings: list[str] = []
    text = bench_page["page"](tmp_path, warn=warnings.append)
    assert "ragstep bench NEW" in text and "ragstep bench OLD" not in text
    assert f"superseded: `{tmp_path.name}/profiles/a-old.json` (2026-01-01 00:00 UTC)" in text
    assert "### raw-set" in text and "command: not recorded in the report" in text
    assert text.count("p50") >= 2  # the benchmark's own table, for both subjects
    assert len(warnings) == 3 and all("skipped" in w for w in warnings), warnings
    assert any("telepathy" in w for w in warnings) and any("broken.json" in w for w in warnings)


def test_a_json_report_records_its_command_machine_and_code() -> None:
    from ragstep.bench.common import repo_root, run_record

    set_dir = repo_root().parent / "shared" / "bench" / "msmarco-5k"
    record = run_record("quality", ["bench", "quality", "--set", str(set_dir), "--json"])
    assert record["kind"] == "quality" and record["date"].endswith(" UTC") and record["code"]
    assert "CPUs" in record["machine"] and "Python" in record["machine"]
    expected = "--set ../shared/bench/msmarco-5k" if set_dir.exists() else f"--set {set_dir}"
    assert record["command"] == f"ragstep bench quality {expected} --json"
