"""``ragstep bench analysis``: what the ``data_analysis`` stage adds to an answer for a large CSV (load + query).

A generated CSV (``rows`` rows: date, city, product, price with thousands separators, quantity, an empty-cell column;
deterministic) is stored in a local blob store as ingestion stores data files, and a state whose final results hold
its ``table_summary`` chunk is run through the real stage ``repeat`` times (medians reported, every run kept):

* ``stage``: :func:`ragstep.stages.analysis.data_analysis.run` end to end -- blob read, file to a temporary folder,
  DuckDB load (``read_csv_auto`` over the whole file), lock-down, the SQL check, the query, the Markdown result. The
  chat model is an OpenAI-compatible server on 127.0.0.1 in this process answering a fixed plan at once, so the
  figure is ragstep's own cost plus one local HTTP round trip, never a provider's think time.
* the same steps one by one through the sandbox (``fetch``, ``load``, ``lock``, ``check``, ``query``), for each of
  three typical queries (group-by average with a cast, a date-range sum, a top 10).

JSON shape: ``{"rows", "csv_mb", "repeat", "python", "duckdb", "stage": {"median_ms", "runs_ms"}, "steps": {name:
{"median_ms", "runs_ms"}}, "queries": {name: {"median_ms", "runs_ms", "result_rows"}}}``.
"""

from __future__ import annotations

import json
import platform
import random
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ragstep.bench.common import median

CITIES = ["北京", "上海", "广州", "深圳", "杭州", "成都", "武汉", "西安", "南京", "重庆"]
PRODUCTS = ["desk", "chair", "lamp", "shelf", "sofa", "bed", "rug", "mirror"]
QUERIES = {
    "avg_by_city": (
        "SELECT \"城市\", round(avg(CAST(replace(\"价格\", ',', '') AS DOUBLE)), 2) AS avg_price "
        'FROM {table} GROUP BY "城市" ORDER BY "城市"'
    ),
    "march_sum": (
        'SELECT sum("数量") AS units FROM {table} WHERE "日期" >= DATE \'2024-03-01\' AND "日期" < DATE \'2024-04-01\''
    ),
    "top10": 'SELECT "产品", "城市", "数量" FROM {table} ORDER BY "数量" DESC, "产品" LIMIT 10',
}


def make_csv(rows: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    lines = ["日期,城市,产品,价格,数量,备注"]
    for i in range(rows):
        day = f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}"
        price = rng.randrange(500, 50_000)
        note = "促销" if i % 10 == 0 else ""
        lines.append(f'{day},{rng.choice(CITIES)},{rng.choice(PRODUCTS)},"{price:,}",{rng.randrange(1, 50)},{note}')
    return ("\n".join(lines) + "\n").encode("utf-8")


class _FixedPlan(BaseHTTPRequestHandler):
    """An OpenAI-compatible ``/chat/completions`` that answers one fixed plan at once."""

    plan = ""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = {
            "object": "chat.completion",
            "model": "fixed-plan",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.plan}, "finish_reason": "stop"}],
        }
        payload = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def _timed(runs: list[float], fn: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    value = fn()
    runs.append((time.perf_counter() - started) * 1000)
    return value


def _summary(runs: list[float]) -> dict[str, Any]:
    return {"median_ms": round(median(runs), 2), "runs_ms": [round(r, 2) for r in runs]}


def run_analysis_bench(rows: int = 100_000, repeat: int = 5, progress: Callable[[str], None] | None = None) -> dict:
    import duckdb

    from ragstep.adapters.analysis.duckdb import DuckDBAnalysis, DuckDBSession, table_name
    from ragstep.context import Clients
    from ragstep.models import ChunkType, KnowledgeBase, MatchType, PipelineState, SearchRequest, SearchResult
    from ragstep.settings import Settings
    from ragstep.stages.analysis.data_analysis import run

    say = progress or (lambda _msg: None)
    data = make_csv(rows)
    kb = KnowledgeBase(id="benchkb", name="bench", embedding_model="none", created_at=time.time())
    knowledge_id = "benchcsv"
    key = f"data/{kb.id}/{knowledge_id}/sales.csv"
    table = table_name(knowledge_id)
    handler = type("Handler", (_FixedPlan,), {"plan": json.dumps({"sql": QUERIES["avg_by_city"].format(table=table)})})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory(prefix="ragstep-bench-analysis-") as tmp:
            port = server.server_address[1]
            settings = Settings(
                data_dir=Path(tmp) / "data",
                chat_provider="openai",
                chat_model="fixed-plan",
                chat_base_url=f"http://127.0.0.1:{port}/v1",
                cache_backend="none",  # every run asks the model: the figure must not be a cache hit
            )
            ctx = Clients(settings).context()
            ctx.blobs.put(key, data, "text/csv")
            summary = SearchResult(
                id=f"{knowledge_id}-0",
                content="Data file: sales.csv",
                knowledge_id=knowledge_id,
                knowledge_base_id=kb.id,
                knowledge_filename="sales.csv",
                score=0.5,
                match_type=MatchType.KEYWORD,
                chunk_type=ChunkType.TABLE_SUMMARY,
                metadata={"blob_key": key, "format": "csv", "sheet": None},
            )
            request = SearchRequest(query="每个城市的平均价格是多少", knowledge_base_ids=[kb.id])
            state = PipelineState(request=request, knowledge_bases=[kb], final_results=[summary])
            say(f"{rows:,}-row CSV ({len(data) / 1024 / 1024:.1f} MB): the stage, {repeat} runs")
            stage_runs: list[float] = []
            for _ in range(repeat):
                done = _timed(stage_runs, lambda: run(state, ctx))
                if done.final_results[0].match_type != MatchType.DATA_ANALYSIS:
                    raise RuntimeError(f"the stage did not analyse the file: {done.trace[-1]}")
            say("the steps one by one")
            steps: dict[str, list[float]] = {name: [] for name in ("fetch", "open", "load", "lock", "check")}
            # Each query in the sandbox (a process of its own, hard limits) and, interleaved, on the same engine in
            # this process without that isolation: the ratio is what the isolation costs per query.
            queries: dict[str, list[float]] = {n: [] for name in QUERIES for n in (name, f"{name} (in process)")}
            result_rows: dict[str, int] = {}
            analysis = DuckDBAnalysis.from_settings(settings)
            for i in range(repeat):
                path = Path(tmp) / f"run{i}.csv"
                _timed(steps["fetch"], lambda: path.write_bytes(ctx.blobs.get(key)))  # noqa: B023
                session = _timed(steps["open"], analysis.session)
                engine = DuckDBSession(
                    memory_limit_mb=settings.data_analysis_memory_limit_mb,
                    timeout_s=settings.data_analysis_timeout_s,
                    max_rows=settings.data_analysis_max_rows,
                )
                engine.load(knowledge_id, str(path), "csv")
                engine.lock()
                try:
                    _timed(steps["load"], lambda: session.load(knowledge_id, str(path), "csv"))  # noqa: B023
                    _timed(steps["lock"], session.lock)
                    for name, sql in QUERIES.items():
                        text = sql.format(table=table)
                        if name == "avg_by_city":
                            _timed(steps["check"], lambda: session.check(text))  # noqa: B023
                        result = _timed(queries[name], lambda: session.query(text))  # noqa: B023
                        result_rows[name] = len(result.rows)
                        local = _timed(queries[f"{name} (in process)"], lambda: engine.query(text))  # noqa: B023
                        result_rows[f"{name} (in process)"] = len(local.rows)
                finally:
                    session.close()
                    engine.close()
    finally:
        server.shutdown()
        server.server_close()
    return {
        "rows": rows,
        "csv_mb": round(len(data) / 1024 / 1024, 2),
        "repeat": repeat,
        "python": platform.python_version(),
        "duckdb": duckdb.__version__,
        "stage": _summary(stage_runs),
        "steps": {name: _summary(runs) for name, runs in steps.items()},
        "queries": {name: {**_summary(runs), "result_rows": result_rows[name]} for name, runs in queries.items()},
    }


def render(r: dict[str, Any]) -> str:
    from ragstep.entry.cli.console import table

    lines = [
        f"data_analysis over a {r['rows']:,}-row CSV ({r['csv_mb']} MB): median of {r['repeat']} runs "
        f"(Python {r['python']}, DuckDB {r['duckdb']})",
        "",
    ]
    rows: list[tuple[str, str, str]] = [("stage (end to end, local model)", f"{r['stage']['median_ms']:.1f}", "")]
    rows += [(f"  {name}", f"{s['median_ms']:.1f}", "") for name, s in r["steps"].items()]
    rows += [(f"  query {name}", f"{q['median_ms']:.1f}", str(q["result_rows"])) for name, q in r["queries"].items()]
    lines.append(table(("what", "median ms", "result rows"), rows))
    return "\n".join(lines)
