"""Usage metering: one record per request (after its answer, a stream's included), reports by day, key and model
over HTTP and the CLI, the background writer, and the DynamoDB store on moto."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from conftest import run_cli
from ragstep.adapters.usage.sqlite import SqliteUsageStore
from ragstep.app.ingest import ingest_file
from ragstep.app.keys import create_key
from ragstep.app.tenants import create_tenant
from ragstep.app.usage import DAY, QuotaBook, UsageRecorder, parse_instant, summarize, usage_report
from ragstep.context import Clients
from ragstep.entry.http.app import create_app
from ragstep.entry.http.auth import Gate
from ragstep.errors import InputError, RateLimitedError
from ragstep.models import KnowledgeBase
from ragstep.models.tenancy import Tenant, UsageRecord
from ragstep.ports import UsageStore
from ragstep.settings import Settings
from support.llm_server import LLMServer, Reply, streamed

USAGE_TABLE = "ragstep-test-usage"
T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC


def served_app(client: TestClient) -> FastAPI:
    app = client.app
    assert isinstance(app, FastAPI)
    return app


def gate(client: TestClient) -> Gate:
    """The app's gate (its usage writer, its auth state)."""
    found: Gate = served_app(client).state.gate
    return found


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    """No RAGSTEP_* from the developer's shell."""


def record(tenant: str = "acme", at: float = T0, **kw: Any) -> UsageRecord:
    values: dict[str, Any] = {"method": "POST", "route": "/v1/knowledge-search", "status": 200, "duration_ms": 2.0}
    values.update(kw)
    return UsageRecord(id=uuid.uuid4().hex, tenant_id=tenant, started_at=at, **values)


# -- reports -------------------------------------------------------------------------------------------------------


def test_a_report_groups_by_day_key_and_model() -> None:
    records = [
        record(key_prefix="aaaa0001", results=3),
        record(at=T0 + 60, key_prefix="aaaa0001", model="openai:gpt", prompt_tokens=10, completion_tokens=5),
        record(at=T0 + DAY, key_prefix="bbbb0002", status=404),
        record(at=T0 + DAY, model="openai:gpt", prompt_tokens=1, completion_tokens=1),
    ]
    by_day = summarize(records, "acme", T0, T0 + 2 * DAY, "day")
    assert [(r.group, r.requests, r.errors) for r in by_day.rows] == [("2027-01-15", 2, 0), ("2027-01-16", 2, 1)]
    assert by_day.total.requests == 4 and by_day.total.results == 3
    assert (by_day.total.prompt_tokens, by_day.total.completion_tokens) == (11, 6)
    by_key = summarize(records, "acme", T0, T0 + 2 * DAY, "key")
    assert [(r.group, r.requests) for r in by_key.rows] == [("-", 1), ("aaaa0001", 2), ("bbbb0002", 1)]
    by_model = summarize(records, "acme", T0, T0 + 2 * DAY, "model")
    assert [(r.group, r.prompt_tokens) for r in by_model.rows] == [("-", 0), ("openai:gpt", 11)]


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> UsageStore:
    if request.param == "sqlite":
        return SqliteUsageStore(tmp_path / "usage.sqlite")
    request.getfixturevalue("aws")
    import boto3

    from ragstep.adapters.usage.dynamodb import DynamoUsageStore

    boto3.client("dynamodb").create_table(
        TableName=USAGE_TABLE,
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "tenant_id", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "tenant_id", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
    )
    return DynamoUsageStore(USAGE_TABLE, ttl_seconds=86400)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pytest.importorskip("moto")
    from moto import mock_aws

    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_CONFIG_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


def test_a_store_returns_one_tenants_records_in_a_range(store: UsageStore) -> None:
    inside = [record(at=T0 + i) for i in range(30)]  # more than one DynamoDB batch
    store.add([*inside, record(at=T0 - 1), record(at=T0 + 30), record(tenant="globex", at=T0 + 1)])
    found = store.between("acme", T0, T0 + 30)
    assert [r.id for r in found] == [r.id for r in inside]  # [start, end), oldest first
    assert [r.tenant_id for r in store.between("globex", 0, T0 + DAY)] == ["globex"]
    assert store.between("initech", 0, T0 + DAY) == []
    report = usage_report(store, "acme", T0, T0 + 31, "day")
    assert report.total.requests == 31


def test_report_ranges_and_times_are_checked() -> None:
    assert parse_instant("1800000000") == T0
    assert parse_instant("2027-01-15T08:00:00Z") == T0
    assert parse_instant("2027-01-15") == T0 - 8 * 3600
    with pytest.raises(InputError, match="not a time"):
        parse_instant("yesterday")


def test_report_rejects_bad_ranges(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "usage.sqlite")
    with pytest.raises(InputError, match="start must be before its end"):
        usage_report(store, "acme", T0, T0)
    with pytest.raises(InputError, match="at most 400 days"):
        usage_report(store, "acme", T0 - 500 * DAY, T0)


# -- the writer and the quota book ---------------------------------------------------------------------------------


def test_the_recorder_writes_in_the_background_and_everything_on_close(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "usage.sqlite")
    seen: list[UsageRecord] = []
    recorder = UsageRecorder(store, on_record=seen.append)
    records = [record(at=T0 + i) for i in range(250)]
    for r in records:
        recorder.submit(r)
    recorder.close()
    assert len(store.between("acme", 0, T0 + DAY)) == 250 and len(seen) == 250
    late = record(at=T0 + 500)
    recorder.submit(late)  # after shutdown: written at once, not lost
    assert store.between("acme", T0 + 500, T0 + 501) == [late]


def test_the_quota_book_starts_from_the_stored_day(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "usage.sqlite")
    store.add([record(at=T0 - 10), record(at=T0 - 5, prompt_tokens=40), record(at=T0 - DAY)])  # 2 today
    now = [T0]
    book = QuotaBook(store, clock=lambda: now[0])
    tenant = Tenant(id="acme", created_at=0, daily_requests=3)
    book.admit(tenant, 0, 0)
    with pytest.raises(RateLimitedError) as err:
        book.admit(tenant, 0, 0)
    assert err.value.retry_after == int(DAY - T0 % DAY) + 1
    book.admit(Tenant(id="acme", created_at=0), 0, 0)  # no quota: nothing counted or refused
    now[0] = T0 + DAY  # a new UTC day
    book.admit(tenant, 0, 0)
    tokens = Tenant(id="globex", created_at=0, daily_tokens=50)
    book.admit(tokens, 0, 0)
    book.charge_tokens(record(tenant="globex", at=now[0], prompt_tokens=30, completion_tokens=25))
    with pytest.raises(RateLimitedError, match="token quota"):
        book.admit(tokens, 0, 0)


# -- over HTTP -----------------------------------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Clients, TestClient, dict[str, str]]]:
    with LLMServer(
        fallback=Reply(
            chunks=streamed("Rockets ", "fly.", usage={"prompt_tokens": 21, "completion_tokens": 4, "total_tokens": 25})
        )
    ) as llm:
        settings = Settings(
            data_dir=tmp_path / "data",
            key_cache_seconds=0,
            chat_provider="openai",
            chat_model="gpt-test",
            chat_base_url=llm.url,
            chat_api_key="sk-test",
            chat_enable_rewrite=False,
        )
        clients = Clients(settings)
        create_tenant(clients.keys, "acme")
        ctx = clients.context("acme")
        kb = ctx.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="docs", created_at=time.time()))
        path = tmp_path / "rockets.md"
        path.write_text("# Rockets\n\nAcme rockets burn liquid oxygen.\n", encoding="utf-8")
        assert ingest_file(path, kb, ctx).status == "indexed"
        keys = {
            "search": create_key(clients.keys, "acme", ["search", "chat"]).secret,
            "usage": create_key(clients.keys, "acme", ["usage"]).secret,
        }
        with TestClient(create_app(clients)) as client:
            yield clients, client, keys


def test_every_request_leaves_one_record_after_its_answer(served: tuple[Clients, TestClient, dict[str, str]]) -> None:
    clients, client, keys = served
    headers = {"X-API-Key": keys["search"]}
    found = client.post(
        "/v1/knowledge-search", headers=headers, json={"query": "rockets", "knowledge_base_ids": ["docs"]}
    )
    assert found.status_code == 200
    missing = client.post("/v1/knowledge-search", headers=headers, json={"query": "x", "knowledge_base_ids": ["nope"]})
    assert missing.status_code == 404
    body = {"model": client.get("/v1/models", headers=headers).json()["data"][0]["id"], "stream": True}
    body |= {"messages": [{"role": "user", "content": "what do rockets burn?"}], "knowledge_base_ids": ["docs"]}
    with client.stream("POST", "/v1/chat/completions", headers=headers, json=body) as stream:
        assert stream.status_code == 200
        text = "".join(stream.iter_text())
    assert "fly." in text
    assert client.post("/v1/knowledge-search", json={"query": "x", "knowledge_base_ids": ["docs"]}).status_code == 401
    gate(client).recorder.flush()

    records = clients.usage.between("acme", 0, time.time() + 1)
    prefix = keys["search"].split("_")[1]
    assert [(r.route, r.status) for r in records] == [
        ("/v1/knowledge-search", 200),
        ("/v1/knowledge-search", 404),
        ("/v1/models", 200),
        ("/v1/chat/completions", 200),
    ]  # the refused request had no tenant to bill
    search, _, _, chat = records
    assert search.key_prefix == prefix and search.pipeline == "knowledge_search" and search.results >= 1
    assert search.duration_ms > 0
    assert (chat.model, chat.prompt_tokens, chat.completion_tokens) == ("openai:gpt-test", 21, 4)
    assert chat.results >= 1 and chat.pipeline

    report = client.get("/v1/usage?group_by=model", headers={"Authorization": f"Bearer {keys['usage']}"})
    assert report.status_code == 200, report.text
    rows = {r["group"]: r for r in report.json()["rows"]}
    assert rows["openai:gpt-test"]["prompt_tokens"] == 21 and report.json()["total"]["requests"] == 4
    gate(client).recorder.flush()
    since = {"group_by": "key", "from": str(time.time() - 3600)}
    by_key = client.get("/v1/usage", params=since, headers={"X-API-Key": keys["usage"]})
    assert {r["group"]: r["requests"] for r in by_key.json()["rows"]} == {prefix: 4, keys["usage"].split("_")[1]: 1}
    bad = client.get("/v1/usage?group_by=week", headers={"X-API-Key": keys["usage"]})
    assert bad.status_code == 422 and "group_by" in bad.json()["message"]
    bad = client.get("/v1/usage?from=soon", headers={"X-API-Key": keys["usage"]})
    assert bad.status_code == 400 and "not a time" in bad.json()["message"]


def test_cli_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    SqliteUsageStore(data / "usage.sqlite").add(
        [record(at=T0, key_prefix="aaaa0001"), record(at=T0 + 1, model="openai:gpt", prompt_tokens=7)]
    )
    args = ["--data-dir", str(data), "usage", "--tenant", "acme", "--from", "2027-01-01", "--to", "2027-02-01"]
    status, out, _ = run_cli(capsys, *args, "--group-by", "key", "--json")
    assert status == 0
    report = json.loads(out)
    assert [(r["group"], r["requests"]) for r in report["rows"]] == [("-", 1), ("aaaa0001", 1)]
    status, out, _ = run_cli(capsys, *args)
    assert status == 0 and "2027-01-15" in out and "total" in out
    with pytest.raises(SystemExit) as exit_:
        run_cli(capsys, *args, "--group-by", "week")
    assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err
