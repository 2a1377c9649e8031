"""The per-tenant day and month counters both usage stores keep next to the raw records (``UsageStore.totals``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from ragstep.models.tenancy import UsagePeriod, UsageRecord, UsageRow

PERIODS: tuple[UsagePeriod, ...] = ("day", "month")
#: The counted fields of a :class:`UsageRow`, in the order the stores keep them.
COUNTERS = ("requests", "errors", "results", "prompt_tokens", "completion_tokens", "duration_ms", "cost_usd")
#: The counters that hold fractions (the others are whole numbers).
FRACTIONAL = frozenset({"duration_ms", "cost_usd"})


def period_of(instant: float, period: UsagePeriod) -> str:
    """The UTC day (``2026-11-23``) or month (``2026-11``) of ``instant``."""
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%d" if period == "day" else "%Y-%m")


def fold(records: Iterable[UsageRecord]) -> dict[tuple[str, UsagePeriod, str], UsageRow]:
    """The records summed per (tenant, period, day or month): what one batch adds to the counters."""
    rows: dict[tuple[str, UsagePeriod, str], UsageRow] = {}
    for record in records:
        for period in PERIODS:
            key = period_of(record.started_at, period)
            row = rows.setdefault((record.tenant_id, period, key), UsageRow(group=key))
            row.requests += 1
            row.errors += record.status >= 400
            row.results += record.results
            row.prompt_tokens += record.prompt_tokens
            row.completion_tokens += record.completion_tokens
            row.duration_ms = round(row.duration_ms + record.duration_ms, 3)
            row.cost_usd = round(row.cost_usd + record.cost_usd, 10)
    return rows
