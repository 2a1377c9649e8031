"""Usage records in one SQLite file (``<data dir>/usage.sqlite``): the embedded :class:`ragstep.ports.UsageStore`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ragstep.adapters._sqlite import SqliteDatabase
from ragstep.models.tenancy import UsageRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    started_at REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_by_tenant ON usage (tenant_id, started_at);
"""


class SqliteUsageStore:
    def __init__(self, path: Path) -> None:
        self._db = SqliteDatabase(path, _SCHEMA)

    def add(self, records: Sequence[UsageRecord]) -> None:
        if not records:
            return
        with self._db.write() as conn:  # one transaction per batch: the writer flushes many records at once
            conn.executemany(
                "INSERT OR REPLACE INTO usage (id, tenant_id, started_at, doc) VALUES (?, ?, ?, ?)",
                [(r.id, r.tenant_id, r.started_at, r.model_dump_json()) for r in records],
            )

    def between(self, tenant_id: str, start: float, end: float) -> list[UsageRecord]:
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT doc FROM usage WHERE tenant_id = ? AND started_at >= ? AND started_at < ? "
                "ORDER BY started_at, id",
                (tenant_id, start, end),
            ).fetchall()
        return [UsageRecord.model_validate_json(doc) for (doc,) in rows]
