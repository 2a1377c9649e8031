"""The ``data_analysis`` stage: SQL written by a scripted chat model (a real HTTP server on 127.0.0.1) over real
CSV and XLSX files ingested into a data dir -- end to end through ``ragstep chat``, and stage by stage for every way
a model's answer can go wrong."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import openpyxl
import pytest

from conftest import run_cli
from ragstep.context import Clients, Context
from ragstep.models import MatchType, PipelineState, SearchRequest, SearchResult
from ragstep.settings import Settings
from ragstep.stages.analysis.data_analysis import parse_plan, run
from support.llm_server import LLMServer, Reply, completion, streamed

QUESTION = "每个城市的平均价格是多少"
CSV = (
    "日期,城市,价格,备注\n"
    '2024-03-01,北京,"12,500",\n'
    '2024-03-02,上海,"9,800",促销\n'
    '2024-03-05,北京,"13,100",\n'
    '2024-04-01,广州,"7,450",\n'
    '2024-04-03,上海,"10,200",\n'
)
# Prices are text with thousands separators (as the sample rows show the model): the query casts them.
AVG_SQL = (
    'SELECT "城市", round(avg(CAST(replace("价格", \',\', \'\') AS DOUBLE)), 2) AS "平均价格" '
    'FROM {table} GROUP BY "城市" ORDER BY "城市"'
)


def workbook() -> bytes:
    book = openpyxl.Workbook()
    sales = book.active
    sales.title = "销售"
    sales.append(["日期", "城市", "价格", "备注"])
    rows = [
        (dt.date(2024, 3, 1), "北京", 12500, None),
        (dt.date(2024, 3, 9), "上海", 9800, "促销"),
        (dt.date(2024, 4, 2), "北京", 13100, None),
    ]
    for row in rows:
        sales.append(list(row))
    for cell in sales["C"][1:]:
        cell.number_format = "#,##0"  # shown as 12,500; stored as a number
    stock = book.create_sheet("Stock")
    stock.append(["item", "count"])
    stock.append(["desk", 3])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two knowledge bases, ingested once for the module: ``sales`` (a CSV and a Markdown note) and ``books`` (a
    workbook of two sheets)."""
    import contextlib
    import os

    from ragstep.entry.cli.main import main

    root = tmp_path_factory.mktemp("analysis")
    docs, books, data = root / "docs", root / "books", root / "data"
    docs.mkdir()
    books.mkdir()
    (docs / "sales.csv").write_text(CSV, encoding="utf-8")
    (docs / "notes.md").write_text("# 说明\n\n价格单位是人民币元，城市按门店所在地统计。\n", encoding="utf-8")
    (books / "销售.xlsx").write_bytes(workbook())
    with pytest.MonkeyPatch.context() as env, contextlib.redirect_stdout(io.StringIO()):
        for key in [k for k in os.environ if k.startswith("RAGSTEP_")]:
            env.delenv(key)  # the defaults only, whatever the developer's shell sets
        for kb, folder in (("sales", docs), ("books", books)):
            assert main(["--data-dir", str(data), "kb", "create", kb, "--embedding-model", "none"]) == 0
            assert main(["--data-dir", str(data), "ingest", str(folder), "--kb", kb]) == 0
    return data


@pytest.fixture
def data_dir(ingested: Path, tmp_path: Path, plain_environment: None) -> str:
    """A copy of the ingested data dir of its own (sessions and caches a test writes stay in it)."""
    import shutil

    return str(shutil.copytree(ingested, tmp_path / "data"))


def use_model(monkeypatch: pytest.MonkeyPatch, server: LLMServer) -> None:
    monkeypatch.setenv("RAGSTEP_CHAT_PROVIDER", "openai")
    monkeypatch.setenv("RAGSTEP_CHAT_MODEL", "scripted")
    monkeypatch.setenv("RAGSTEP_CHAT_BASE_URL", server.url)
    monkeypatch.setenv("RAGSTEP_CHAT_MAX_RETRIES", "0")


def plan(sql: str, knowledge_id: str = "") -> Reply:
    return Reply(body=completion(json.dumps({"knowledge_id": knowledge_id, "sql": sql}, ensure_ascii=False)))


def context(data_dir: str, server: LLMServer | None, **settings: Any) -> Context:
    if server is not None:
        settings |= {"chat_provider": "openai", "chat_model": "scripted", "chat_base_url": server.url}
    return Clients(Settings(data_dir=Path(data_dir), chat_max_retries=0, **settings)).context()


def state_of(ctx: Context, kb_name: str, query: str = QUESTION) -> PipelineState:
    """A state as filter_top_k leaves it: every chunk of the knowledge base in the final results."""
    kb = ctx.require_kb(kb_name)
    results = [
        SearchResult.from_chunk(chunk, score=0.5, match_type=MatchType.KEYWORD)
        for item in ctx.catalog.list_knowledge(kb.id)
        for chunk in ctx.index.knowledge_chunks(item.id, 100)
    ]
    request = SearchRequest(query=query, knowledge_base_ids=[kb.id])
    return PipelineState(pipeline="rag_stream", request=request, knowledge_bases=[kb], final_results=results)


def table_of(ctx: Context, kb_name: str, suffix: str = "") -> str:
    (item,) = [k for k in ctx.catalog.list_knowledge(ctx.require_kb(kb_name).id) if k.filename.endswith((".csv", "x"))]
    return f"k_{item.id}{suffix}"


def rows(state: PipelineState) -> list[tuple[str, str, str | None]]:
    return [(t.stage, t.action, t.reason) for t in state.trace]


def test_chat_answers_over_an_ingested_spreadsheet(
    data_dir: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = table_of(context(data_dir, None), "sales")
    answer = "北京的平均价格是 12800 元，上海 10000 元，广州 7450 元 [1]。"
    with LLMServer(plan(AVG_SQL.format(table=table)), Reply(chunks=streamed(answer))) as server:
        use_model(monkeypatch, server)
        code, out, err = run_cli(capsys, "--data-dir", data_dir, "chat", QUESTION, "--kb", "sales")
    assert code == 0, err
    assert out.startswith(answer)
    lines = out.splitlines()
    sources = lines.index("Sources:")
    assert lines[sources + 3].split()[:2] == ["1", "sales.csv"]
    assert f"[1] SQL: {AVG_SQL.format(table=table)}" in lines
    sql_call, answer_call = server.requests
    # WeKnora's plan call: one user message, temperature 0.1, the provider's JSON mode.
    assert sql_call.json["response_format"] == {"type": "json_object"} and sql_call.json["temperature"] == 0.1
    assert "response_format" not in answer_call.json  # the answer itself is free text
    prompt = sql_call.json["messages"][0]["content"]
    assert (
        f"Table name: {table}" in prompt
        and "- 价格 (VARCHAR)" in prompt
        and "| 2024-03-01 | 北京 | 12,500 |  |" in prompt
    )
    # The computed figures reach the answer's context first; the file's summary and column chunks do not.
    context_text = answer_call.json["messages"][-1]["content"]
    assert "[1] Data analysis of sales.csv" in context_text
    assert "| 上海 | 10000 |\n| 北京 | 12800 |\n| 广州 | 7450 |" in context_text
    assert "Column: 价格" not in context_text and "Data file: sales.csv" not in context_text


def test_the_deployed_rag_pipeline_analyses_every_sheet_of_a_workbook(
    data_dir: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = table_of(context(data_dir, None), "books", "_销售")
    sql = f'SELECT sum("价格") AS total FROM {table} WHERE "日期" < DATE \'2024-04-01\' AND "备注" IS NULL'
    with LLMServer(plan(sql), Reply(body=completion("三月份无备注的销售额是 12500 [1]"))) as server:
        use_model(monkeypatch, server)
        args = ("--data-dir", data_dir, "chat", "三月份无备注的销售额？", "--kb", "books", "--pipeline", "rag")
        code, out, err = run_cli(capsys, *args, "--json")
    assert code == 0, err
    body = json.loads(out)
    first = body["references"][0]
    assert first["match_type"] == "data_analysis" and first["metadata"]["sql"] == sql
    assert "| total |\n| --- |\n| 12500 |" in first["content"]
    assert first["metadata"]["tables"] == [table, table.removesuffix("_销售") + "_stock"]
    prompt = server.requests[0].json["messages"][0]["content"]
    # Every sheet is a table; dates are dates and the formatted numbers numbers.
    assert "Sheet: 销售" in prompt and "Sheet: Stock" in prompt and "- 日期 (DATE)" in prompt
    assert "- 价格 (DOUBLE)" in prompt
    assert [t["stage"] for t in body["trace"]].index("data_analysis") > [t["stage"] for t in body["trace"]].index(
        "chunk_merge"
    )


BAD_ANSWERS = [
    ("syntax", plan("SELEC 城市 FROM t"), "refused", "not valid SQL"),
    ("prose", Reply(body=completion("每个城市的平均价格：北京 12800 元。")), "not_json", "JSON object"),
    ("read_file", plan("SELECT * FROM read_csv('/etc/passwd')"), "refused", "table function 'read_csv'"),
    ("write", plan("DROP TABLE {table}"), "refused", "only SELECT"),
    ("stacked", plan("SELECT 1; DELETE FROM {table}"), "refused", "exactly one statement"),
    ("other_table", plan("SELECT * FROM k_someone_elses_file"), "refused", "not one of the loaded tables"),
    ("bad_column", plan("SELECT missing_column FROM {table}"), "failed", "missing_column"),
    ("model_down", Reply(500, {"error": {"message": "overloaded"}}), "model_failed", "HTTP 500"),
]


@pytest.mark.parametrize(("reply", "reason", "message"), [a[1:] for a in BAD_ANSWERS], ids=[a[0] for a in BAD_ANSWERS])
def test_a_bad_answer_degrades_and_keeps_the_summaries(data_dir: str, reply: Reply, reason: str, message: str) -> None:
    if reply.body and "choices" in reply.body:
        content = reply.body["choices"][0]["message"]["content"]
        reply.body["choices"][0]["message"]["content"] = content.replace(
            "{table}", table_of(context(data_dir, None), "sales")
        )
    with LLMServer(reply) as server:
        ctx = context(data_dir, server)
        before = state_of(ctx, "sales")
        after = run(before, ctx)
    assert after.final_results == before.final_results  # nothing analysed, nothing removed
    degrade = [t for t in after.trace if t.action == "degrade"]
    assert [(t.stage, t.reason) for t in degrade] == [("data_analysis", reason)]
    assert message in degrade[0].detail["error"]
    assert after.trace[0].counts["analysed"] == 0


def test_no_analysis_needed_and_the_extractive_answerer_skip(data_dir: str) -> None:
    with LLMServer(plan("")) as server:
        ctx = context(data_dir, server)
        state = state_of(ctx, "sales", "价格用什么货币？")
        after = run(state, ctx)
    assert after.final_results == state.final_results
    assert ("data_analysis", "skip", "no_analysis_needed") in rows(after)
    ctx = context(data_dir, None)  # the embedded default: the extractive answerer
    after = run(state_of(ctx, "sales"), ctx)
    assert rows(after) == [("data_analysis", "skip", "model_not_generative")]
    after = run(state_of(ctx, "sales").model_copy(update={"final_results": []}), ctx)
    assert rows(after) == [("data_analysis", "skip", "no_data_files")]


def test_a_slow_query_is_interrupted_at_the_timeout(data_dir: str) -> None:
    endless = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    with LLMServer(plan(endless)) as server:
        ctx = context(data_dir, server, data_analysis_timeout_s=0.3)
        after = run(state_of(ctx, "sales"), ctx)
    (degrade,) = [t for t in after.trace if t.action == "degrade"]
    assert degrade.reason == "timeout" and degrade.detail["sql"] == endless
    # How long the query held the request, measured around the sandbox call (the first request of a process also
    # starts the sandbox's fork server, which is not the query's time).
    assert degrade.detail["wall_ms"] < (0.3 + 1) * 1000
    assert degrade.detail["peak_rss_mb"] > 0  # the kernel's figure for the query process


def test_rows_are_capped_files_are_limited_and_only_the_requests_own_files_load(data_dir: str) -> None:
    ctx = context(data_dir, None)
    sales, books = state_of(ctx, "sales"), state_of(ctx, "books")
    table = table_of(ctx, "sales")
    both = sales.model_copy(
        update={
            "final_results": [*sales.final_results, *books.final_results],
            "knowledge_bases": [*sales.knowledge_bases, *books.knowledge_bases],
        }
    )
    with LLMServer(plan(f'SELECT "日期" FROM {table} ORDER BY 1')) as server:
        ctx = context(data_dir, server, data_analysis_max_rows=2, data_analysis_max_files=1)
        after = run(both, ctx)
    first = after.final_results[0]
    assert first.match_type == MatchType.DATA_ANALYSIS and first.metadata["truncated"] is True
    assert "Result (the first 2 rows; the query returned more):" in first.content
    assert "| 2024-03-01 |\n| 2024-03-02 |" in first.content and "2024-03-05" not in first.content
    assert after.trace[0].counts == {"files": 1, "loaded": 1, "analysed": 1, "removed_chunks": 5, "files_over_limit": 1}
    # The workbook's chunks are another knowledge base's when the request did not resolve it: never loaded.
    foreign = books.model_copy(update={"knowledge_bases": sales.knowledge_bases})
    assert rows(run(foreign, ctx)) == [("data_analysis", "skip", "no_data_files")]
    # A result pointing at another knowledge item's stored file is not a data file of this request either.
    forged = [
        r.with_metadata({**r.metadata, "blob_key": books.final_results[0].metadata["blob_key"]})
        for r in sales.final_results
    ]
    assert rows(run(sales.model_copy(update={"final_results": forged}), ctx)) == [
        ("data_analysis", "skip", "no_data_files")
    ]


@pytest.mark.parametrize(
    ("text", "sql"),
    [
        ('{"knowledge_id": "k1", "sql": "SELECT 1"}', "SELECT 1"),
        ('```json\n{"knowledge_id": "k1", "sql": " SELECT 2 "}\n```', "SELECT 2"),
        ('<think>which table?</think>Here: {"sql": "SELECT 3"} done', "SELECT 3"),
        ('{"knowledge_id": "k1", "sql": ""}', ""),
    ],
)
def test_plans_are_read_from_what_models_actually_send(text: str, sql: str) -> None:
    assert parse_plan(text)["sql"] == sql


def test_the_benchmark_reports_the_stage_and_its_steps(plain_environment: None) -> None:
    from ragstep.bench.analysis import QUERIES, render, run_analysis_bench

    report = run_analysis_bench(rows=300, repeat=1)
    assert report["rows"] == 300 and len(report["stage"]["runs_ms"]) == 1
    assert set(report["steps"]) == {"fetch", "open", "load", "lock", "check"}
    # Each query in the sandbox and, for the ratio, in-process on the same engine.
    assert set(report["queries"]) == {n for q in QUERIES for n in (q, f"{q} (in process)")}
    # Ten cities, one March total, a top 10: the queries ran over the whole file.
    assert [q["result_rows"] for q in report["queries"].values()] == [10, 10, 1, 1, 10, 10]
    assert "data_analysis over a 300-row CSV" in render(report)


@pytest.mark.parametrize(("change", "reason"), [("delete", "missing"), ("cap", "too_large"), ("garble", "unreadable")])
def test_a_file_that_cannot_be_loaded_degrades_without_asking_the_model(
    data_dir: str, change: str, reason: str
) -> None:
    with LLMServer() as server:
        ctx = context(data_dir, server, data_analysis_max_file_bytes=10 if change == "cap" else 50 * 1024 * 1024)
        state = state_of(ctx, "books")
        key = next(r.metadata["blob_key"] for r in state.final_results if r.metadata.get("blob_key"))
        if change == "delete":
            ctx.blobs.delete(key)
        elif change == "garble":
            ctx.blobs.put(key, b"PK\x03\x04 not a workbook")
        after = run(state, ctx)
    assert server.requests == [] and after.final_results == state.final_results
    assert [(t.action, t.reason) for t in after.trace if t.action != "run"] == [("degrade", reason)]
    assert after.trace[0].counts == {"files": 1, "loaded": 0, "analysed": 0, "removed_chunks": 0}
