"""Usage records in one SQLite file (``<data dir>/usage.sqlite``): the embedded :class:`ragstep.ports.UsageStore`.

Next to the raw records, ``usage_totals`` counts each tenant's requests, errors, results, tokens, time and estimated
cost per UTC day and month, updated in the same transaction as the records it counts (a record written again, by id,
is not counted twice). A file from before the counters existed has them filled from its records once, when it is
opened; one from before the cost counter (``cost_usd``) gets the column, at 0, which is what its records cost (they
carry none).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from ragstep.adapters._sqlite import SqliteDatabase
from ragstep.adapters.usage._totals import COUNTERS, fold
from ragstep.models.tenancy import UsagePeriod, UsageRecord, UsageRow

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    started_at REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_by_tenant ON usage (tenant_id, started_at);
CREATE TABLE IF NOT EXISTS usage_totals (
    tenant_id TEXT NOT NULL,
    period TEXT NOT NULL,
    start TEXT NOT NULL,
    requests INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    results INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    duration_ms REAL NOT NULL,
    cost_usd REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, period, start)
);
"""
_ADD = ", ".join(f"{c} = {c} + excluded.{c}" for c in COUNTERS)
_UPSERT = (
    f"INSERT INTO usage_totals (tenant_id, period, start, {', '.join(COUNTERS)}) "
    f"VALUES (?, ?, ?, {', '.join('?' for _ in COUNTERS)}) "
    f"ON CONFLICT (tenant_id, period, start) DO UPDATE SET {_ADD}"
)


class SqliteUsageStore:
    def __init__(self, path: Path) -> None:
        self._db = SqliteDatabase(path, _SCHEMA)
        self._add_cost_column()
        self._fill_totals()

    def _add_cost_column(self) -> None:
        """Migrate a file written before the counters had ``cost_usd`` (``CREATE TABLE IF NOT EXISTS`` keeps the
        old table as it was)."""

        def missing(conn: sqlite3.Connection) -> bool:
            return "cost_usd" not in {row[1] for row in conn.execute("PRAGMA table_info(usage_totals)")}

        with self._db.read() as conn:
            if not missing(conn):
                return
        with self._db.write() as conn:
            if missing(conn):  # another process may have migrated it meanwhile
                conn.execute("ALTER TABLE usage_totals ADD COLUMN cost_usd REAL NOT NULL DEFAULT 0")

    def _fill_totals(self) -> None:
        """Count the records of a file written before the counters existed (once: then they are never empty)."""
        with self._db.read() as conn:
            if conn.execute("SELECT 1 FROM usage_totals LIMIT 1").fetchone() is not None:
                return
            if conn.execute("SELECT 1 FROM usage LIMIT 1").fetchone() is None:
                return
        with self._db.write() as conn:
            if conn.execute("SELECT 1 FROM usage_totals LIMIT 1").fetchone() is None:
                records = [UsageRecord.model_validate_json(doc) for (doc,) in conn.execute("SELECT doc FROM usage")]
                self._count(conn, records)

    @staticmethod
    def _count(conn: sqlite3.Connection, records: Sequence[UsageRecord]) -> None:
        rows = [
            (tenant, period, start, *(getattr(row, c) for c in COUNTERS))
            for (tenant, period, start), row in fold(records).items()
        ]
        conn.executemany(_UPSERT, rows)

    def add(self, records: Sequence[UsageRecord]) -> None:
        if not records:
            return
        with self._db.write() as conn:  # one transaction per batch: the writer flushes many records at once
            new = []
            for r in records:
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO usage (id, tenant_id, started_at, doc) VALUES (?, ?, ?, ?)",
                    (r.id, r.tenant_id, r.started_at, r.model_dump_json()),
                )
                if cursor.rowcount:
                    new.append(r)
            self._count(conn, new)

    def between(self, tenant_id: str, start: float, end: float) -> list[UsageRecord]:
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT doc FROM usage WHERE tenant_id = ? AND started_at >= ? AND started_at < ? "
                "ORDER BY started_at, id",
                (tenant_id, start, end),
            ).fetchall()
        return [UsageRecord.model_validate_json(doc) for (doc,) in rows]

    def totals(self, tenant_id: str, period: UsagePeriod, first: str, last: str) -> list[UsageRow]:
        with self._db.read() as conn:
            rows = conn.execute(
                f"SELECT start, {', '.join(COUNTERS)} FROM usage_totals "
                "WHERE tenant_id = ? AND period = ? AND start >= ? AND start <= ? ORDER BY start",
                (tenant_id, period, first, last),
            ).fetchall()
        return [UsageRow(group=row[0], **dict(zip(COUNTERS, row[1:], strict=True))) for row in rows]
