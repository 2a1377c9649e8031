"""The docs site: its reference pages are what the code says today, every setting, command and route has a
description, and the site builds strictly (no broken link) and reads offline (no asset from another host)."""

from __future__ import annotations

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
