"""The examples of the docs run as written: every code block marked ``<!-- runnable -->`` in README.md and docs/*.md
(shell and Python, the ``openai`` SDK and curl included) runs, in the order of the pages, in a folder set up as a
new user's clone is: the demo's data dir (``ragstep demo``), the repository's files beside it, ``ragstep`` on the
PATH and a real ``ragstep serve`` on 127.0.0.1 (a free port standing in for the examples' 8000).

The Security page runs last: its first key makes the server require keys, as it says. The knowledge bases are
keyword-only (``RAGSTEP_EMBEDDER=none``) so the demo ingests in seconds; the commands are the same with the model.
curl runs with ``--fail-with-body``, so an example answered with an HTTP error fails here even though a user's curl
would print the error and exit 0."""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
MARK = "<!-- runnable -->"
#: Under several times today's load a step may take this long; the examples themselves take seconds.
STEP_TIMEOUT_S = 180


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def runnable_blocks() -> list[Block]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    pages.sort(key=lambda p: p.name == "security.md")  # keys make the server require them: last
    blocks = []
    for page in pages:
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.strip() != MARK:
                continue
            fence = lines[i + 1]
            assert fence.startswith("```"), f"{page.name}:{i + 1}: {MARK} must stand right above a code block"
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            blocks.append(
                Block(page.relative_to(REPO).as_posix(), i + 2, fence[3:].strip(), "\n".join(lines[i + 2 : end]))
            )
    return blocks


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Site:
    folder: Path
    env: dict[str, str]
    port: int
    log: Path


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-chars:] if path.exists() else ""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("clone")
    for name in ("README.md", "shared"):  # the files the examples name, as in a clone
        (folder / name).symlink_to(REPO / name)
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("RAGSTEP_")}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "RAGSTEP_EMBEDDER": "none"}
    env.pop("KEY", None)
    demo = subprocess.run(
        ["ragstep", "demo"], cwd=folder, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S
    )
    assert demo.returncode == 0, demo.stderr
    port = _free_port()
    log_path = tmp_path_factory.mktemp("serve") / "serve.log"
    log = log_path.open("w", encoding="utf-8")  # a file: a pipe nobody reads would fill up and stall the server
    server = subprocess.Popen(
        ["ragstep", "serve", "--port", str(port)], cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while True:
            assert server.poll() is None, f"ragstep serve exited: {_tail(log_path)}"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "ragstep serve did not start"
            time.sleep(0.2)
        yield Site(folder, env, port, log_path)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def _missing_module(code: str) -> str | None:
    for name in re.findall(r"^(?:from|import)\s+([A-Za-z_][\w]*)", code, re.M):
        if importlib.util.find_spec(name) is None:
            return name
    return None


def test_the_runnable_examples_are_found() -> None:
    blocks = runnable_blocks()
    pages = {b.page for b in blocks}
    assert {"docs/chat-http.md", "docs/knowledge-http.md", "docs/security.md", "docs/channels.md"} <= pages
    assert all(b.lang in {"sh", "bash", "python"} for b in blocks), [b.where for b in blocks]


@pytest.mark.slow  # a demo, a server and the SDKs' imports: ~15 s idle, ~50 s at a load average of 15
def test_every_runnable_example_runs_as_written(site: Site) -> None:
    ran, skipped = [], []
    for block in runnable_blocks():
        text = block.text.replace("127.0.0.1:8000", f"127.0.0.1:{site.port}")
        if block.lang == "python":
            missing = _missing_module(text)
            if missing:
                skipped.append(f"{block.where} ({missing} not installed)")
                continue
            command = [sys.executable, "-c", text]
        else:
            prelude = 'curl() { command curl --fail-with-body --no-progress-meter "$@"; }\n'
            command = ["bash", "-euo", "pipefail", "-c", prelude + text]
        done = subprocess.run(
            command, cwd=site.folder, env=site.env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S
        )
        assert done.returncode == 0, (
            f"{block.where} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr}\n"
            f"server log:\n{_tail(site.log)}"
        )
        assert "Traceback" not in done.stderr, f"{block.where}:\n{done.stderr}"
        assert not re.search(r'"error":\s*\{', done.stdout), f"{block.where} answered an error:\n{done.stdout[-2000:]}"
        if "ragstep events run" in text:  # run twice: the second says it is the recorded result
            assert '"replayed": true' in done.stdout and "was processed before" in done.stderr, block.where
        if "chat/completions" in text or "OpenAI(" in text or "ChatOpenAI(" in text or "knowledge-chat" in text:
            assert "cold start" in done.stdout.lower(), f"{block.where}: no answer from the demo's documents"
        ran.append(block.where)
    assert len(ran) >= 6, (ran, skipped)
