"""Fixtures shared by the test suite: a fresh data dir with the embedded defaults."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from ragstep.context import Clients, Context
from ragstep.models import KnowledgeBase, KnowledgeBaseType
from ragstep.settings import Settings

# The Ctrl-C tests stand for a person at a terminal, whose foreground process takes SIGINT. A suite started in the
# background of a non-interactive shell (`.ci/run &`, nohup) inherits SIGINT ignored, and so would every process it
# starts: Python then installs no KeyboardInterrupt, `_thread.interrupt_main()` does nothing, and a child sent
# SIGINT runs on to its end. The terminal's disposition is restored for the suite and the processes it starts.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

SHARED_BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench"


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return Clients(Settings(data_dir=tmp_path / "data")).context()


@pytest.fixture
def make_kb(ctx: Context) -> Callable[..., KnowledgeBase]:
    def make(name: str, kb_type: str = "document", embedding_model: str = "none") -> KnowledgeBase:
        kb = KnowledgeBase(
            id=uuid.uuid4().hex,
            name=name,
            type=KnowledgeBaseType(kb_type),
            embedding_model=embedding_model,
            created_at=time.time(),
        )
        return ctx.catalog.create_kb(kb)

    return make


@pytest.fixture
def bench_dir() -> Path:
    if not SHARED_BENCH.is_dir():
        pytest.skip(f"benchmark sets not found at {SHARED_BENCH} (../shared/bench beside the repo)")
    return SHARED_BENCH


@pytest.fixture
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults only: no embedder or jieba table from the developer's shell, no RAGSTEP_DEBUG re-raising."""
    import os

    for key in list(os.environ):
        if key.startswith("RAGSTEP_"):
            monkeypatch.delenv(key)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``ragstep ARGS`` in-process: (exit status, stdout, stderr)."""
    from ragstep.entry.cli.main import main

    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err
