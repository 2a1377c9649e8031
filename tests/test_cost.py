"""Cost receipts: the sum matches the parts, each stage's compute is priced from its measured time, tokens from the
model's price, both executors; and the figures agree with README "Cost per 1,000 queries" for the same usage."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ragstep.app.cost import cost_of, price_table, receipt
from ragstep.app.search import knowledge_search
from ragstep.context import Context
from ragstep.models import KnowledgeBase, SearchRequest, TraceEvent
from ragstep.models.chat import Usage


def _searched(ctx: Context, kb: KnowledgeBase) -> object:
    from ragstep.app.ingest import ingest_file

    folder = ctx.data_dir / "docs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "a.md").write_text("Cold starts happen when a new execution environment starts.", encoding="utf-8")
    ingest_file(folder / "a.md", kb, ctx)
    return knowledge_search(SearchRequest(query="when do cold starts happen", knowledge_base_ids=[kb.id]), ctx)


def test_a_search_receipt_adds_up_and_prices_each_stage(ctx: Context, make_kb: object) -> None:
    kb = make_kb("docs")  # type: ignore[operator]
    state = _searched(ctx, kb)
    cost = cost_of(state, ctx)  # type: ignore[arg-type]
    assert cost.estimate and cost.currency == "USD" and cost.price_table.startswith("us-east-1")
    assert math.isclose(cost.total_usd, sum(line.usd for line in cost.lines), abs_tol=1e-9)
    assert math.isclose(cost.total_usd, sum(cost.by_stage.values()), abs_tol=1e-9)
    stages = {t.stage for t in state.trace if t.action == "run" and t.duration_ms > 0}  # type: ignore[attr-defined]
    assert stages and stages <= set(cost.by_stage)
    gb_s = {line.stage: line.quantity for line in cost.lines if line.item == "lambda_duration"}
    for run in state.trace:  # type: ignore[attr-defined]
        if run.action == "run" and run.duration_ms > 0:
            assert gb_s[run.stage] == pytest.approx(run.duration_ms / 1000.0, rel=1e-3, abs=1e-6)  # 1024 MB


def test_step_functions_and_tokens_are_priced_from_the_table(ctx: Context, make_kb: object) -> None:
    kb = make_kb("docs")  # type: ignore[operator]
    state = _searched(ctx, kb)
    chat = state.chat.model_copy(  # type: ignore[attr-defined]
        update={
            "model": "openai:gpt-4o-mini",
            "usage": Usage(prompt_tokens=1000, completion_tokens=200, total_tokens=1200),
        }
    )
    state = state.model_copy(update={"chat": chat})  # type: ignore[attr-defined]
    table = price_table()
    cost = receipt(state, executor="stepfunctions", index_backend="s3snapshot", table=table)  # type: ignore[arg-type]
    items = {line.item for line in cost.lines}
    assert {"stepfunctions_express_request", "stepfunctions_express_duration", "s3_get"} <= items
    prompt = next(line for line in cost.lines if line.item == "chat_prompt_tokens")
    assert prompt.usd == pytest.approx(1000 * 0.15 / 1e6)
    completion = next(line for line in cost.lines if line.item == "chat_completion_tokens")
    assert completion.usd == pytest.approx(200 * 0.6 / 1e6)
    unknown = state.model_copy(update={"chat": chat.model_copy(update={"model": "openai:some-new-model"})})
    priced = receipt(unknown, executor="inprocess", index_backend="local", table=table)  # type: ignore[arg-type]
    assert any("no price for chat model 'openai:some-new-model'" in n for n in priced.notes)


def test_the_receipt_agrees_with_the_readmes_cost_model(ctx: Context, make_kb: object) -> None:
    """README: one query with Executor=stepfunctions, S3-snapshot index, four stages (~0.32 s billed together at
    1024 MB), ~0.4 s of Express execution: per 1,000 queries, HTTP API $0.0010, Lambda requests $0.0010 (the API
    function included), stage and API duration $0.0153 of which ~0.32 GB-s is the stages', Express $0.0014,
    DynamoDB $0.0010, S3 $0.0004. The receipt prices the same usage within 5 % of those items (the API function's
    0.6 s of waiting is not a stage and is not in the state's trace)."""
    kb = make_kb("docs")  # type: ignore[operator]
    state = _searched(ctx, kb)
    runs = [
        TraceEvent(stage=name, duration_ms=80.0)
        for name in ("chunk_search", "chunk_rerank", "chunk_merge", "filter_top_k")
    ]
    state = state.model_copy(update={"trace": runs})  # type: ignore[attr-defined]
    cost = receipt(state, executor="stepfunctions", index_backend="s3snapshot", table=price_table())  # type: ignore[arg-type]
    per_1000 = {}
    for line in cost.lines:
        per_1000[line.item] = per_1000.get(line.item, 0.0) + line.usd * 1000
    assert per_1000["http_api_request"] == pytest.approx(0.0010, rel=0.05)
    assert per_1000["lambda_request"] == pytest.approx(0.0010, rel=0.05)  # 5 per query
    assert per_1000["lambda_duration"] == pytest.approx(0.32 * 0.0000166667 * 1000, rel=0.05)
    express = per_1000["stepfunctions_express_request"] + per_1000["stepfunctions_express_duration"]
    assert express == pytest.approx(0.0014, rel=0.05)
    assert per_1000["dynamodb_read"] + per_1000["dynamodb_write"] == pytest.approx(0.0010, rel=0.05)
    assert per_1000["s3_get"] == pytest.approx(0.0004, rel=0.05)


def test_a_deployment_can_use_its_own_price_table(tmp_path: Path) -> None:
    table = json.loads(json.dumps(price_table()))
    table["region"], table["version"] = "eu-west-1", "2026-01"
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(table), encoding="utf-8")
    assert price_table(str(path))["region"] == "eu-west-1"
