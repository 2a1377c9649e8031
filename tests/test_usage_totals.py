"""Per-tenant day and month counters next to the raw usage records (SQLite and DynamoDB on moto), monthly quotas,
``GET /v1/usage?period=month`` and ``ragstep usage --month``."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from conftest import run_cli
from ragstep.adapters.usage.sqlite import SqliteUsageStore
from ragstep.app.usage import DAY, QuotaBook, counted_report, month_of
from ragstep.context import Clients
from ragstep.entry.http.app import create_app
from ragstep.errors import RateLimitedError
from ragstep.models.tenancy import Tenant
from ragstep.ports import UsageStore
from ragstep.settings import Settings
from test_usage import T0, aws, record, store

__all__ = ["aws", "store"]  # the fixtures of the record tests: each store (SQLite, DynamoDB on moto)
LATER = 1_801_000_000.0  # 2027-01-26 21:46 UTC: the month of T0 (2027-01-15 08:00), another day
MARCH = 1_804_000_000.0  # 2027-03-02 15:06 UTC
FEBRUARY_1 = datetime(2027, 2, 1, tzinfo=UTC).timestamp()
MARCH_1 = datetime(2027, 3, 1, tzinfo=UTC).timestamp()


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    """No RAGSTEP_* from the developer's shell."""


def test_the_counters_sum_each_tenants_days_and_months(store: UsageStore) -> None:
    batch = [
        record(at=T0, prompt_tokens=10, completion_tokens=5, results=3),
        record(at=T0 + 60, status=500, duration_ms=4.5),
        record(at=LATER, prompt_tokens=1),
        record(at=MARCH),
        record(tenant="globex", at=T0, prompt_tokens=100),
    ]
    store.add(batch)
    store.add(batch[:1])  # the same record again (a retried batch) is not counted twice where ids tell
    days = store.totals("acme", "day", "2027-01-01", "2027-03-31")
    assert [(r.group, r.requests, r.errors) for r in days] == [
        ("2027-01-15", 2, 1),
        ("2027-01-26", 1, 0),
        ("2027-03-02", 1, 0),
    ]
    months = store.totals("acme", "month", "2027-01", "2027-12")
    assert [(r.group, r.requests, r.prompt_tokens, r.completion_tokens, r.results) for r in months] == [
        ("2027-01", 3, 11, 5, 3),
        ("2027-03", 1, 0, 0, 0),
    ]
    assert months[0].duration_ms == pytest.approx(2.0 + 4.5 + 2.0)
    assert [(r.group, r.prompt_tokens) for r in store.totals("globex", "month", "2027-01", "2027-01")] == [
        ("2027-01", 100)
    ]
    assert store.totals("acme", "month", "2027-02", "2027-02") == []
    assert store.totals("nobody", "day", "2000-01-01", "2100-12-31") == []
    # The counters never show up among the records.
    assert len(store.between("acme", 0, MARCH + 1)) == 4


def test_the_sqlite_counters_are_filled_from_records_written_before_them(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite"
    SqliteUsageStore(path).add([record(at=T0), record(at=LATER)])
    with sqlite3.connect(path) as conn:  # a file from before the counters: records only
        conn.execute("DELETE FROM usage_totals")
    assert [(r.group, r.requests) for r in SqliteUsageStore(path).totals("acme", "month", "2027-01", "2027-01")] == [
        ("2027-01", 2)
    ]


def test_a_counted_report_covers_whole_periods(store: UsageStore) -> None:
    store.add([record(at=T0), record(at=LATER), record(at=MARCH)])
    report = counted_report(store, "acme", "month", T0 + 1, MARCH_1)  # [from, to): March is outside
    assert report.group_by == "month" and [(r.group, r.requests) for r in report.rows] == [("2027-01", 2)]
    assert report.total.requests == 2
    default = counted_report(store, "acme", "month", None, MARCH + DAY)  # the last 12 months
    assert [r.group for r in default.rows] == ["2027-01", "2027-03"]
    assert [r.group for r in counted_report(store, "acme", "day", None, LATER + 60).rows] == [
        "2027-01-15",
        "2027-01-26",
    ]


def test_a_monthly_quota_holds_across_days_and_restarts(tmp_path: Path) -> None:
    store = SqliteUsageStore(tmp_path / "usage.sqlite")
    store.add([record(at=T0), record(at=T0 + 1)])  # two requests earlier this month
    tenant = Tenant(id="acme", created_at=0.0, monthly_requests=3)
    now = [LATER]
    book = QuotaBook(store, clock=lambda: now[0])
    book.admit(tenant, 0, 0)  # the third of the month, another day: the daily count is 0
    store.add([record(at=LATER)])  # its record, as the usage writer stores it
    with pytest.raises(RateLimitedError) as refused:
        book.admit(tenant, 0, 0)
    assert "monthly request quota (3)" in refused.value.message
    assert refused.value.retry_after == int(FEBRUARY_1 - LATER) + 1
    # A new process (another Lambda instance) starts from the stored counters.
    with pytest.raises(RateLimitedError):
        QuotaBook(store, clock=lambda: LATER).admit(tenant, 0, 0, monthly_requests_quota=99)  # the tenant's own wins
    QuotaBook(store, clock=lambda: MARCH).admit(tenant, 0, 0)  # a new month
    server_default = Tenant(id="acme", created_at=0.0)
    with pytest.raises(RateLimitedError, match="monthly token quota"):
        store.add([record(at=LATER, prompt_tokens=50)])
        QuotaBook(store, clock=lambda: LATER).admit(server_default, 0, 0, 0, monthly_tokens_quota=50)


def test_usage_by_month_over_http_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "data"
    clients = Clients(Settings(data_dir=data_dir))
    with TestClient(create_app(clients, flush_usage=True)) as client:  # open local mode: the default tenant
        for _ in range(3):
            assert client.get("/v1/sessions").status_code == 200
        by_month = client.get("/v1/usage", params={"period": "month"})
        mixed = client.get("/v1/usage", params={"period": "month", "group_by": "key"})
    assert by_month.status_code == 200, by_month.text
    body = by_month.json()
    this_month = month_of(time.time())
    assert body["group_by"] == "month" and [r["group"] for r in body["rows"]] == [this_month]
    assert body["rows"][0]["requests"] == body["total"]["requests"] == 3  # the report itself is recorded after it
    assert mixed.status_code == 400 and "not split by key" in mixed.json()["message"]

    code, out, _ = run_cli(capsys, "usage", "--month", "--json", "--data-dir", str(data_dir))
    assert code == 0 and json.loads(out)["rows"][0]["group"] == this_month
    assert json.loads(out)["rows"][0]["requests"] == 5  # and the two report requests (the refused one too)
    code, out, _ = run_cli(capsys, "usage", "--daily", "--data-dir", str(data_dir))
    assert code == 0 and "by day" in out
    code, _, err = run_cli(capsys, "usage", "--month", "--group-by", "key", "--data-dir", str(data_dir))
    assert code == 2 and "drop --group-by" in err
