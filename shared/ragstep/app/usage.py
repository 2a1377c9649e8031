"""Usage: one record per API request, written after the answer; reports grouped by day, key or model; daily quotas.

* :class:`UsageRecorder` takes records from the request path without waiting (a queue) and writes them in batches
  on its own thread, so a usage write never delays an answer or a stream; :meth:`UsageRecorder.close` (the server's
  shutdown) writes what is queued.
* :class:`QuotaBook` counts each tenant's requests and tokens of the current UTC day in this process, starting from
  what the usage store already holds for the day when it first sees the tenant. Several processes (Lambda
  instances) each count their own share on top of the stored records, so a quota may be overrun by the requests
  in flight in other processes between two flushes: a budget guard, not an exact meter.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from ragstep.errors import InputError, RateLimitedError
from ragstep.models.tenancy import GroupBy, Tenant, UsageRecord, UsageReport, UsageRow
from ragstep.ports import UsageStore

log = logging.getLogger("ragstep.usage")
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
class _Day:
    day: float
    requests: int = 0
    tokens: int = 0


class QuotaBook:
    """Per-tenant daily request and token counts against the tenant's quotas (module docstring)."""

    def __init__(self, store: UsageStore, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        self._days: dict[str, _Day] = {}

    def _today(self, tenant_id: str, now: float) -> _Day:
        today = day_start(now)
        counts = self._days.get(tenant_id)
        if counts is None or counts.day != today:
            stored = self._store.between(tenant_id, today, now + 1)
            counts = _Day(today, len(stored), sum(r.tokens for r in stored))
            self._days[tenant_id] = counts
        return counts

    def admit(self, tenant: Tenant, requests_quota: int, tokens_quota: int) -> None:
        """Count one request of ``tenant``, or raise :class:`RateLimitedError` when a daily quota is spent (the
        tenant's own quota when set, else the given server defaults; 0 = unlimited)."""
        max_requests = tenant.daily_requests if tenant.daily_requests is not None else requests_quota
        max_tokens = tenant.daily_tokens if tenant.daily_tokens is not None else tokens_quota
        if not max_requests and not max_tokens:
            return
        now = self._clock()
        with self._lock:
            counts = self._today(tenant.id, now)
            retry = int(counts.day + DAY - now) + 1
            if max_requests and counts.requests >= max_requests:
                raise RateLimitedError(
                    f"the daily request quota ({max_requests}) is used up; it resets at 00:00 UTC", retry
                )
            if max_tokens and counts.tokens >= max_tokens:
                raise RateLimitedError(
                    f"the daily token quota ({max_tokens}) is used up; it resets at 00:00 UTC", retry
                )
            counts.requests += 1

    def charge_tokens(self, record: UsageRecord) -> None:
        """Add a finished request's tokens to its tenant's day (the request itself was counted when admitted)."""
        if not record.tokens:
            return
        with self._lock:
            counts = self._days.get(record.tenant_id)
            if counts is not None and counts.day == day_start(record.started_at):
                counts.tokens += record.tokens


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
