"""The response cache in a SQLite file (one per tenant): the embedded :class:`ragstep.ports.ResponseCache`.

Each row stores its expiry; an expired row is never returned and expired rows are swept on later writes (at most
once a minute, so a burst of writes pays for one sweep). Writes do not wait for the disk (``synchronous=OFF`` on
this file): a cache entry lost to a power cut costs one model call, an fsync on every query costs every query.
"""

from __future__ import annotations

import time
from pathlib import Path

from ragstep.adapters._sqlite import SqliteDatabase

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS responses_expiry ON responses (expires_at);
"""
SWEEP_EVERY_S = 60.0


class SqliteResponseCache:
    def __init__(self, path: Path) -> None:
        self.db = SqliteDatabase(path, _SCHEMA)
        self._swept = 0.0

    def get(self, key: str) -> str | None:
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT value FROM responses WHERE key = ? AND expires_at > ?", (key, time.time())
            ).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, value: str, ttl_s: int) -> None:
        now = time.time()
        self.db.connection().execute("PRAGMA synchronous=OFF")
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO responses (key, value, expires_at) VALUES (?, ?, ?)", (key, value, now + ttl_s)
            )
            if now - self._swept >= SWEEP_EVERY_S:
                conn.execute("DELETE FROM responses WHERE expires_at <= ?", (now,))
                self._swept = now
