"""Usage: one record per API request, written after the answer; reports grouped by day, month, key or model, or
read from the per-day and per-month counters the stores keep (:func:`counted_report`); daily and monthly quotas.

* :class:`UsageRecorder` takes records from the request path without waiting (a queue) and writes them in batches
  on its own thread, so a usage write never delays an answer or a stream; :meth:`UsageRecorder.close` (the server's
  shutdown) writes what is queued.
* :class:`QuotaBook` counts each tenant's requests, tokens and estimated cost (the cost receipts' totals, USD) of
  the current UTC day and month in this process,
  starting from the usage store's counters for the day and month when it first sees the tenant. Several processes
  (Lambda instances) each count their own share on top of the stored counters, so a quota may be overrun by the
  requests in flight in other processes: a budget guard, not an exact meter. A monthly budget in USD is checked like
  the quotas, when a request arrives: the request that crosses it is still answered (its cost is known only once it
  ran), every later one that month is refused.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from ragstep.errors import InputError, RateLimitedError
from ragstep.models.tenancy import GroupBy, Tenant, UsagePeriod, UsageRecord, UsageReport, UsageRow
from ragstep.ports import UsageStore

log = logging.getLogger("ragstep.usage")
_N = TypeVar("_N", int, float)
DAY = 86400
_BATCH = 100
#: The longest report range: a report reads every record of it.
MAX_REPORT_SECONDS = 400 * DAY


def day_of(instant: float) -> str:
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%d")


def day_start(instant: float) -> float:
    return float(int(instant // DAY) * DAY)


def _group(record: UsageRecord, group_by: GroupBy) -> str:
    if group_by == "day":
        return day_of(record.started_at)
    if group_by == "month":
        return month_of(record.started_at)
    if group_by == "key":
        return record.key_prefix or "-"
    return record.model or "-"


def _add(row: UsageRow, record: UsageRecord) -> None:
    row.requests += 1
    row.errors += record.status >= 400
    row.results += record.results
    row.prompt_tokens += record.prompt_tokens
    row.completion_tokens += record.completion_tokens
    row.duration_ms = round(row.duration_ms + record.duration_ms, 3)
    row.cost_usd = round(row.cost_usd + record.cost_usd, 10)


def summarize(
    records: Iterable[UsageRecord], tenant_id: str, start: float, end: float, group_by: GroupBy
) -> UsageReport:
    """The records summed per group (sorted by group) and in total."""
    rows: dict[str, UsageRow] = {}
    total = UsageRow(group="total")
    for record in records:
        key = _group(record, group_by)
        _add(rows.setdefault(key, UsageRow(group=key)), record)
        _add(total, record)
    ordered = [rows[k] for k in sorted(rows)]
    return UsageReport(tenant_id=tenant_id, start=start, end=end, group_by=group_by, rows=ordered, total=total)


def usage_report(
    store: UsageStore, tenant_id: str, start: float | None, end: float | None, group_by: GroupBy = "day"
) -> UsageReport:
    """``tenant_id``'s usage in ``[start, end)`` (default: the last 30 days up to now)."""
    end = time.time() if end is None else end
    start = end - 30 * DAY if start is None else start
    if start >= end:
        raise InputError("the report's start must be before its end")
    if end - start > MAX_REPORT_SECONDS:
        raise InputError(f"a report covers at most {MAX_REPORT_SECONDS // DAY} days; narrow from/to")
    return summarize(store.between(tenant_id, start, end), tenant_id, start, end, group_by)


#: The longest report from the counters: each period is one counter, so even years are one small read.
MAX_COUNTED_SECONDS = 10 * 366 * DAY


def counted_report(
    store: UsageStore, tenant_id: str, period: UsagePeriod, start: float | None, end: float | None
) -> UsageReport:
    """``tenant_id``'s usage per UTC day or month from the stored counters, which outlive the raw records: every
    whole day or month that overlaps ``[start, end)`` (default: the last 30 days, or the last 12 months including
    this one). Not split by key or model: the counters are per tenant."""
    end = time.time() if end is None else end
    if start is None:
        start = end - 30 * DAY if period == "day" else _months_back(end, 11)
    if start >= end:
        raise InputError("the report's start must be before its end")
    if end - start > MAX_COUNTED_SECONDS:
        raise InputError(f"a report covers at most {MAX_COUNTED_SECONDS // (366 * DAY)} years; narrow from/to")
    key = day_of if period == "day" else month_of
    last = end - 1e-3  # the period of the range's last instant: `end` itself is outside it
    rows = store.totals(tenant_id, period, key(start), key(last))
    total = UsageRow(group="total")
    for row in rows:
        for name in ("requests", "errors", "results", "prompt_tokens", "completion_tokens"):
            setattr(total, name, getattr(total, name) + getattr(row, name))
        total.duration_ms = round(total.duration_ms + row.duration_ms, 3)
        total.cost_usd = round(total.cost_usd + row.cost_usd, 10)
    return UsageReport(tenant_id=tenant_id, start=start, end=end, group_by=period, rows=rows, total=total)


def _months_back(instant: float, months: int) -> float:
    """The start (00:00 UTC on the 1st) of the month ``months`` before ``instant``'s."""
    moment = datetime.fromtimestamp(instant, UTC)
    index = moment.year * 12 + moment.month - 1 - months
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC).timestamp()


def parse_instant(text: str) -> float:
    """``from``/``to``: epoch seconds, a date (midnight UTC) or an ISO 8601 time."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        instant = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(
            f"{text!r} is not a time: give epoch seconds, a date (2026-11-01) or an ISO 8601 time"
        ) from None
    return (instant if instant.tzinfo else instant.replace(tzinfo=UTC)).timestamp()


@dataclass
class _Counts:
    """A tenant's requests, tokens and cost of one UTC day or month (``period``: ``2026-11-23`` or ``2026-11``)."""

    period: str
    requests: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


def month_of(instant: float) -> str:
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m")


def next_month_start(instant: float) -> float:
    moment = datetime.fromtimestamp(instant, UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return datetime(year, month, 1, tzinfo=UTC).timestamp()


class QuotaBook:
    """Per-tenant daily and monthly request, token and cost counts against the tenant's quotas and monthly budget
    (module docstring)."""

    def __init__(self, store: UsageStore, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, UsagePeriod], _Counts] = {}

    def _current(self, tenant_id: str, period: UsagePeriod, now: float) -> _Counts:
        """This day's or month's counts, from the store's counters the first time (and at each new period)."""
        key = day_of(now) if period == "day" else month_of(now)
        counts = self._counts.get((tenant_id, period))
        if counts is None or counts.period != key:
            stored = self._store.totals(tenant_id, period, key, key)
            counts = _Counts(
                key,
                sum(r.requests for r in stored),
                sum(r.prompt_tokens + r.completion_tokens for r in stored),
                sum(r.cost_usd for r in stored),
            )
            self._counts[(tenant_id, period)] = counts
        return counts

    def admit(
        self,
        tenant: Tenant,
        requests_quota: int,
        tokens_quota: int,
        monthly_requests_quota: int = 0,
        monthly_tokens_quota: int = 0,
        monthly_budget_usd: float = 0.0,
    ) -> None:
        """Count one request of ``tenant``, or raise :class:`RateLimitedError` when a daily or monthly quota or the
        monthly budget is spent (the tenant's own when set, else the given server defaults; 0 = unlimited)."""

        def own(value: _N | None, default: _N) -> _N:
            return value if value is not None else default

        limits: list[tuple[UsagePeriod, int, int, float]] = [
            ("day", own(tenant.daily_requests, requests_quota), own(tenant.daily_tokens, tokens_quota), 0.0),
            (
                "month",
                own(tenant.monthly_requests, monthly_requests_quota),
                own(tenant.monthly_tokens, monthly_tokens_quota),
                own(tenant.monthly_budget_usd, monthly_budget_usd),
            ),
        ]
        limits = [limit for limit in limits if limit[1] or limit[2] or limit[3]]
        if not limits:
            return
        now = self._clock()
        with self._lock:
            counted = [
                (period, self._current(tenant.id, period, now), most, tokens, budget)
                for period, most, tokens, budget in limits
            ]
            for period, counts, max_requests, max_tokens, budget in counted:
                if period == "day":
                    said, resets, retry = "daily", "00:00 UTC", int(day_start(now) + DAY - now) + 1
                else:
                    said, resets = "monthly", "the first of the month, 00:00 UTC"
                    retry = int(next_month_start(now) - now) + 1
                if max_requests and counts.requests >= max_requests:
                    raise RateLimitedError(
                        f"the {said} request quota ({max_requests}) is used up; it resets at {resets}", retry
                    )
                if max_tokens and counts.tokens >= max_tokens:
                    raise RateLimitedError(
                        f"the {said} token quota ({max_tokens}) is used up; it resets at {resets}", retry
                    )
                if budget and counts.cost_usd >= budget:
                    raise RateLimitedError(
                        f"the {said} budget (${budget:g}, estimated from the cost receipts) is spent "
                        f"(${counts.cost_usd:.4f}); it resets at {resets}",
                        retry,
                    )
            for _, counts, _, _, _ in counted:
                counts.requests += 1

    def charge_tokens(self, record: UsageRecord) -> None:
        """Add a finished request's tokens and cost to its tenant's day and month (the request itself was counted
        when admitted)."""
        if not (record.tokens or record.cost_usd):
            return
        with self._lock:
            periods: tuple[tuple[UsagePeriod, str], ...] = (
                ("day", day_of(record.started_at)),
                ("month", month_of(record.started_at)),
            )
            for period, key in periods:
                counts = self._counts.get((record.tenant_id, period))
                if counts is not None and counts.period == key:
                    counts.tokens += record.tokens
                    counts.cost_usd += record.cost_usd


class UsageRecorder:
    """Writes usage records on a background thread (module docstring). ``submit`` never blocks."""

    def __init__(self, store: UsageStore, on_record: Callable[[UsageRecord], None] | None = None) -> None:
        self._store = store
        self._on_record = on_record
        self._queue: queue.SimpleQueue[UsageRecord | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="ragstep-usage", daemon=True)
        self._started = False
        self._closed = False
        self._lock = threading.Lock()
        self._pending = 0
        self._idle = threading.Condition(self._lock)

    def submit(self, record: UsageRecord) -> None:
        if self._on_record is not None:
            self._on_record(record)
        with self._lock:
            closed = self._closed
            if not closed and not self._started:
                self._thread.start()
                self._started = True
            self._pending += 1
        if closed:  # after shutdown began (a late stream): written here rather than lost
            self._write([record])
        else:
            self._queue.put(record)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            batch = [] if first is None else [first]
            stop = first is None
            while not stop and len(batch) < _BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                else:
                    batch.append(item)
            self._write(batch)
            if stop:
                return

    def _write(self, batch: list[UsageRecord]) -> None:
        if batch:
            try:
                self._store.add(batch)
            except Exception as exc:  # a usage store outage must not take the API down; the log keeps the count
                log.error("could not write %d usage records: %s", len(batch), exc)
        with self._idle:
            self._pending -= len(batch)
            self._idle.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted record is written (True) or ``timeout`` passed (False)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued and stop the thread (a clean shutdown loses no record)."""
        with self._lock:
            started, self._closed = self._started, True
        if started:
            self._queue.put(None)
            self._thread.join(timeout)
