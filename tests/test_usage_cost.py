"""Cost in usage: each usage record carries its request's cost receipt total, the stores sum it per day and month
(SQLite, with the migration of an older file, and DynamoDB on moto), ``GET /v1/usage`` and ``ragstep usage`` show
it by day, key and model, the OpenAI-compatible ``usage`` carries the receipt, and a tenant's monthly budget in USD
refuses requests with 429 once spent -- over a real server."""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import run_cli
from ragstep.adapters.usage.sqlite import SqliteUsageStore
from ragstep.app.keys import create_key
from ragstep.app.usage import QuotaBook, counted_report, summarize
from ragstep.context import Clients
from ragstep.entry.http.app import create_app
from ragstep.errors import RateLimitedError
from ragstep.models.tenancy import Tenant
from ragstep.ports import UsageStore
from ragstep.settings import Settings
from support.api_server import api_server, seed_docs
from support.llm_server import LLMServer, Reply, streamed
from test_usage import T0, aws, record, store

__all__ = ["aws", "store"]  # the fixtures of the record tests: each store (SQLite, DynamoDB on moto)
LATER = 1_801_000_000.0  # 2027-01-26: the month of T0, another day
MARCH = 1_804_000_000.0


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    """No RAGSTEP_* from the developer's shell."""


def test_reports_and_counters_sum_the_cost(store: UsageStore) -> None:
    store.add(
        [
            record(at=T0, key_prefix="aaaa0001", cost_usd=0.0000125),
            record(at=T0 + 60, key_prefix="bbbb0002", model="openai:gpt-4o-mini", cost_usd=0.00031),
            record(at=LATER, key_prefix="aaaa0001", model="openai:gpt-4o-mini", cost_usd=0.0002),
            record(at=MARCH, cost_usd=1.5),
        ]
    )
    records = store.between("acme", 0, MARCH + 1)
    assert [r.cost_usd for r in records] == [0.0000125, 0.00031, 0.0002, 1.5]
    by_model = summarize(records, "acme", 0, MARCH + 1, "model")
    assert {r.group: r.cost_usd for r in by_model.rows} == pytest.approx(
        {"-": 1.5000125, "openai:gpt-4o-mini": 0.00051}
    )
    by_key = summarize(records, "acme", 0, MARCH + 1, "key")
    assert {r.group: r.cost_usd for r in by_key.rows} == pytest.approx(
        {"-": 1.5, "aaaa0001": 0.0002125, "bbbb0002": 0.00031}
    )
    assert by_key.total.cost_usd == pytest.approx(1.5005225)
    days = store.totals("acme", "day", "2027-01-15", "2027-01-26")
    assert [(r.group, r.cost_usd) for r in days] == [("2027-01-15", pytest.approx(0.0003225)), ("2027-01-26", 0.0002)]
    months = counted_report(store, "acme", "month", T0 - 86400 * 20, MARCH + 1)
    assert [(r.group, r.cost_usd) for r in months.rows] == [("2027-01", pytest.approx(0.0005225)), ("2027-03", 1.5)]
    assert months.total.cost_usd == pytest.approx(1.5005225)
    store.add([records[0]])  # written again (a batch retried): counted once
    assert store.totals("acme", "day", "2027-01-15", "2027-01-15")[0].cost_usd == pytest.approx(0.0003225)


def test_an_older_sqlite_file_gets_the_cost_counter(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite"
    SqliteUsageStore(path).add([record(at=T0, prompt_tokens=7)])
    with sqlite3.connect(path) as conn:  # the counters as they were before cost_usd existed
        conn.execute("ALTER TABLE usage_totals DROP COLUMN cost_usd")
    reopened = SqliteUsageStore(path)
    assert [
        (r.requests, r.prompt_tokens, r.cost_usd) for r in reopened.totals("acme", "day", "2027-01-15", "2027-01-15")
    ] == [(1, 7, 0.0)]
    reopened.add([record(at=T0 + 1, cost_usd=0.25)])
    SqliteUsageStore(path)  # opening a migrated file again changes nothing
    row = reopened.totals("acme", "month", "2027-01", "2027-01")[0]
    assert (row.requests, row.prompt_tokens, row.cost_usd) == (2, 7, 0.25)


def test_a_monthly_budget_holds_across_restarts_and_resets_with_the_month(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "usage.sqlite")
    store.add([record(at=T0, cost_usd=0.6)])
    tenant = Tenant(id="acme", created_at=0.0, monthly_budget_usd=1.0)
    book = QuotaBook(store, clock=lambda: LATER)
    book.admit(tenant, 0, 0)  # $0.60 of $1 spent: admitted
    spent = record(at=LATER, cost_usd=0.5)
    book.charge_tokens(spent)  # what the usage writer does with each record it takes
    with pytest.raises(RateLimitedError) as refused:
        book.admit(tenant, 0, 0)
    assert "monthly budget ($1" in refused.value.message and "$1.1000" in refused.value.message
    assert refused.value.retry_after > 0
    store.add([spent])
    with pytest.raises(RateLimitedError, match="monthly budget"):  # another process starts from the stored counters
        QuotaBook(store, clock=lambda: LATER).admit(Tenant(id="acme", created_at=0.0), 0, 0, monthly_budget_usd=1.0)
    QuotaBook(store, clock=lambda: LATER).admit(tenant.model_copy(update={"monthly_budget_usd": 0.0}), 0, 0, 0, 0, 1.0)
    QuotaBook(store, clock=lambda: MARCH).admit(tenant, 0, 0)  # a new month


# -- over a real server --------------------------------------------------------------------------------------------


@dataclass
class Api:
    clients: Clients
    base: str
    key: str
    usage_key: str

    def post(self, path: str, body: Mapping[str, object], key: str | None = None) -> httpx.Response:
        return httpx.post(f"{self.base}{path}", json=body, headers={"X-API-Key": key or self.key}, timeout=30)

    def usage(self, **params: str) -> dict[str, object]:
        answer = httpx.get(f"{self.base}/v1/usage", params=params, headers={"X-API-Key": self.usage_key}, timeout=30)
        assert answer.status_code == 200, answer.text
        body: dict[str, object] = answer.json()
        return body


@contextmanager
def served(tmp_path: Path, **settings: object) -> Iterator[Api]:
    reply = Reply(chunks=streamed("Cold starts ", "happen.", usage={"prompt_tokens": 1000, "completion_tokens": 200}))
    with LLMServer(fallback=reply) as llm:
        clients = Clients(
            Settings(
                data_dir=tmp_path / "data",
                key_cache_seconds=0,
                chat_provider="openai",
                chat_model="gpt-4o-mini",
                chat_base_url=llm.url,
                chat_api_key="sk-test",
                chat_enable_rewrite=False,
                **settings,
            )
        )
        seed_docs(clients.context(), tmp_path / "docs")
        key = create_key(clients.keys, "default", ["search", "chat"]).secret
        usage_key = create_key(clients.keys, "default", ["usage"]).secret
        # flush_usage: each record is stored before its answer ends, so the next request sees it (as on Lambda).
        with api_server(clients, lambda c: create_app(c, flush_usage=True)) as base:
            yield Api(clients, base, key, usage_key)


def test_records_carry_the_receipts_and_usage_sums_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with served(tmp_path) as api:
        found = api.post("/v1/knowledge-search", {"query": "cold starts", "knowledge_base_ids": ["docs"]})
        assert found.status_code == 200, found.text
        search_cost = found.json()["usage"]["cost"]["total_usd"]
        ask = {"model": "ragstep", "messages": [{"role": "user", "content": "when do cold starts happen?"}]}
        import openai  # the official client keeps the cost and its receipt as extra fields of its usage

        sdk = openai.OpenAI(base_url=f"{api.base}/v1", api_key=api.key, max_retries=0, timeout=30)
        answered = sdk.chat.completions.create(
            model="ragstep",
            messages=[{"role": "user", "content": "when do cold starts happen?"}],
            extra_body={"knowledge_base_ids": ["docs"]},
        )
        assert answered.usage is not None and answered.usage.model_extra is not None
        receipt = answered.usage.model_extra["cost_receipt"]  # usage.cost is its total, a number, on this route
        assert answered.usage.model_extra["cost"] == receipt["total_usd"]
        assert receipt["estimate"] and math.isclose(receipt["total_usd"], sum(line["usd"] for line in receipt["lines"]))
        prompt = next(line for line in receipt["lines"] if line["item"] == "chat_prompt_tokens")
        assert prompt["quantity"] == 1000 and prompt["usd"] == pytest.approx(1000 * 0.15 / 1e6)
        stream = {**ask, "knowledge_base_ids": ["docs"], "stream": True, "stream_options": {"include_usage": True}}
        with httpx.stream(
            "POST", f"{api.base}/v1/chat/completions", json=stream, headers={"X-API-Key": api.key}, timeout=30
        ) as streamed_answer:
            frames = [line.removeprefix("data: ") for line in streamed_answer.iter_lines() if line.startswith("data: ")]
        usage_chunk = json.loads(frames[-2])
        streamed_cost = usage_chunk["usage"]["cost"]
        assert streamed_cost == usage_chunk["usage"]["cost_receipt"]["total_usd"]
        assert usage_chunk["usage"]["prompt_tokens"] == 1000 and streamed_cost > prompt["usd"]

        records = api.clients.usage.between("default", 0, time.time() + 1)
        costs = [(r.route, r.cost_usd) for r in records]
        assert costs == [
            ("/v1/knowledge-search", search_cost),
            ("/v1/chat/completions", receipt["total_usd"]),
            ("/v1/chat/completions", streamed_cost),
        ]
        by_model = api.usage(group_by="model")
        rows = {row["group"]: row["cost_usd"] for row in by_model["rows"]}  # type: ignore[attr-defined]
        assert rows == {
            "-": pytest.approx(search_cost),
            "openai:gpt-4o-mini": pytest.approx(receipt["total_usd"] + streamed_cost),
        }
        total = search_cost + receipt["total_usd"] + streamed_cost
        by_day = api.usage(group_by="day")
        assert by_day["total"]["cost_usd"] == pytest.approx(total)  # type: ignore[index]
        by_key = api.usage(group_by="key")
        keys = {row["group"]: row["cost_usd"] for row in by_key["rows"]}  # type: ignore[attr-defined]
        assert keys == {api.key.split("_")[1]: pytest.approx(total), api.usage_key.split("_")[1]: 0.0}
        month = api.usage(period="month")
        assert month["rows"][0]["cost_usd"] == pytest.approx(total)  # type: ignore[index]

    data_dir = str(tmp_path / "data")
    code, out, _ = run_cli(capsys, "usage", "--group-by", "model", "--data-dir", data_dir)
    assert code == 0 and "est. USD" in out and "openai:gpt-4o-mini" in out
    assert f"{receipt['total_usd'] + streamed_cost:.6f}" in out
    code, out, _ = run_cli(capsys, "usage", "--month", "--json", "--data-dir", data_dir)
    assert code == 0 and json.loads(out)["rows"][0]["cost_usd"] == pytest.approx(total)


def test_a_tenant_over_its_monthly_budget_gets_429(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = str(tmp_path / "data")
    code, out, _ = run_cli(
        capsys, "tenants", "create", "acme", "--monthly-budget-usd", "0.000001", "--json", "--data-dir", data_dir
    )
    assert code == 0 and json.loads(out)["monthly_budget_usd"] == 0.000001
    code, out, _ = run_cli(capsys, "tenants", "list", "--data-dir", data_dir)
    assert code == 0 and "$1e-06" in out
    with pytest.raises(SystemExit) as bad:
        run_cli(capsys, "tenants", "create", "other", "--monthly-budget-usd", "lots", "--data-dir", data_dir)
    assert bad.value.code == 2 and "amount in USD such as 25" in capsys.readouterr().err
    with served(tmp_path) as api:
        kb = seed_docs(api.clients.context("acme"), tmp_path / "acme-docs")
        acme = create_key(api.clients.keys, "acme", ["search"]).secret
        ask = {"query": "cold starts", "knowledge_base_ids": [kb.name]}
        first = api.post("/v1/knowledge-search", ask, key=acme)
        assert first.status_code == 200, first.text  # the request that crosses the budget is answered
        assert first.json()["usage"]["cost"]["total_usd"] > 0.000001
        refused = api.post("/v1/knowledge-search", ask, key=acme)
        assert refused.status_code == 429 and "monthly budget" in refused.json()["message"]
        assert int(refused.headers["Retry-After"]) > 0
        assert api.post("/v1/knowledge-search", {**ask, "knowledge_base_ids": ["docs"]}).status_code == 200  # default


def test_a_server_wide_monthly_budget(tmp_path: Path) -> None:
    with served(tmp_path, monthly_budget_usd=0.000001) as api:
        ask = {"query": "cold starts", "knowledge_base_ids": ["docs"]}
        assert api.post("/v1/knowledge-search", ask).status_code == 200
        refused = api.post("/v1/knowledge-search", ask)
        assert refused.status_code == 429 and "monthly budget ($1e-06" in refused.json()["message"]


def test_a_knowledge_chat_streams_its_receipt_and_records_it(tmp_path: Path) -> None:
    with served(tmp_path) as api:
        body = {"query": "when do cold starts happen?", "knowledge_base_ids": ["docs"]}
        with httpx.stream(
            "POST", f"{api.base}/v1/knowledge-chat", json=body, headers={"X-API-Key": api.key}, timeout=30
        ) as answer:
            assert answer.status_code == 200
            frames = [json.loads(line[5:]) for line in answer.iter_lines() if line.startswith("data:")]
        complete = frames[-1]
        assert complete["response_type"] == "complete" and complete["done"]
        cost = complete["data"]["usage"]["cost"]
        assert complete["data"]["usage"]["prompt_tokens"] == 1000 and cost["total_usd"] > 0
        assert cost["by_stage"]["chat_completion"] == pytest.approx(1000 * 0.15 / 1e6 + 200 * 0.6 / 1e6)
        (record,) = api.clients.usage.between("default", 0, time.time() + 1)
        assert (record.route, record.cost_usd) == ("/v1/knowledge-chat", cost["total_usd"])
        # A profile and both budgets travel in the body; the receipt says the budget and whether it held.
        budgeted = {**body, "profile": "quick", "budget_ms": 60_000, "cost_budget_usd": 1e-9}
        with httpx.stream(
            "POST", f"{api.base}/v1/knowledge-chat", json=budgeted, headers={"X-API-Key": api.key}, timeout=30
        ) as answer:
            assert answer.status_code == 200
            frames = [json.loads(line[5:]) for line in answer.iter_lines() if line.startswith("data:")]
        receipt = frames[-1]["data"]["usage"]["cost"]
        assert receipt["budget_usd"] == 1e-9 and receipt["over_budget"] is True
        refused = api.post("/v1/knowledge-chat", {**body, "cost_budget_usd": 0})
        assert refused.status_code == 422 and "cost_budget_usd: Input should be greater than 0" in refused.text
