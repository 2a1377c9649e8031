"""Heavy initialisation runs during init when Lambda initialises the environment ahead of requests (provisioned
concurrency, SnapStart), and stays lazy for on-demand init."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragstep.entry.aws import runtime

ROOT = Path(__file__).resolve().parents[1]

# A fresh interpreter per case: what init builds is process-wide, as in a Lambda execution environment.
CHILD = """
import json, runpy, sys
sys.path[:0] = [sys.argv[2]]
runpy.run_path(sys.argv[1], run_name="app")  # the init phase: the handler module is imported
from ragstep.entry.aws import runtime
print(json.dumps({"clients": runtime._clients is not None,
                  "stage": "ragstep.stages.search.chunk_search" in sys.modules,
                  "api_app": "ragstep.entry.http.app" in sys.modules}))
"""


def init(app: str, init_type: str | None, tmp_path: Path) -> dict[str, bool]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGSTEP_", "AWS_LAMBDA_INITIALIZATION"))}
    env |= {"RAGSTEP_DATA_DIR": str(tmp_path), "POWERTOOLS_TRACE_DISABLED": "true"}
    if init_type:
        env["AWS_LAMBDA_INITIALIZATION_TYPE"] = init_type
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT / "functions" / app / "app.py"), str(ROOT / "shared")],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("init_type", ["provisioned-concurrency", "snap-start"])
def test_ahead_of_time_init_builds_the_clients_and_imports_the_stage(init_type: str, tmp_path: Path) -> None:
    assert init("chunk_search", init_type, tmp_path) == {"clients": True, "stage": True, "api_app": False}
    assert init("api", init_type, tmp_path)["api_app"] is True


def test_on_demand_init_stays_lazy(tmp_path: Path) -> None:
    assert init("chunk_search", None, tmp_path) == {"clients": False, "stage": False, "api_app": False}
    assert init("chunk_search", "on-demand", tmp_path)["clients"] is False


def test_a_failing_warm_up_is_left_to_the_first_invocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "provisioned-concurrency")
    monkeypatch.setenv("RAGSTEP_EMBEDDING_BATCH_SIZE", "0")  # the settings do not validate: no clients
    runtime.reset()
    try:
        assert runtime.warm_up() is False
        assert runtime._clients is None
    finally:
        runtime.reset()
