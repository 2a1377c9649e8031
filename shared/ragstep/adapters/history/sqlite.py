"""Chat history in a SQLite file: the embedded :class:`ragstep.ports.HistoryStore` (DynamoDB on AWS).

One connection per thread, WAL and one-line errors: :class:`ragstep.adapters._sqlite.SqliteDatabase`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pydantic import TypeAdapter

from ragstep.adapters._sqlite import SqliteDatabase
from ragstep.errors import InputError
from ragstep.models import SearchResult, SessionSummary, Turn

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    turn_id TEXT NOT NULL,
    query TEXT NOT NULL,
    answer TEXT NOT NULL,
    references_json TEXT NOT NULL,
    expires_at REAL,
    meta_json TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (session_id, created_at, turn_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS turns_expiry ON turns (expires_at) WHERE expires_at IS NOT NULL;
"""
_REFERENCES = TypeAdapter(list[SearchResult])
_LIVE = "(expires_at IS NULL OR expires_at > ?)"


class SqliteHistoryStore:
    """Chat turns per session in ``path``.

    With ``ttl_seconds`` a turn expires ``ttl_seconds`` after its ``created_at`` (the expiry is stored per
    row, as DynamoDB's TTL attribute is). Expired turns are never returned and are deleted on later appends;
    as with DynamoDB, deletion is lazy, so reads filter on the stored expiry. ``clock`` lets tests move time.
    """

    def __init__(self, path: Path, *, ttl_seconds: float | None = None, clock: Callable[[], float] = time.time) -> None:
        if ttl_seconds is not None and not ttl_seconds > 0:
            raise InputError(f"ttl_seconds must be positive or None (no expiry), got {ttl_seconds}")
        self._db = SqliteDatabase(path, _SCHEMA)
        self._add_meta_column()
        self._ttl = ttl_seconds
        self._clock = clock

    @property
    def path(self) -> Path:
        return self._db.path

    def _add_meta_column(self) -> None:
        """Files made before turns had ``meta_json`` (Turn.META_FIELDS) get the column, empty for old turns."""
        with self._db.read() as conn:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(turns)")}
        if "meta_json" not in columns:
            with self._db.write() as conn:
                conn.execute("ALTER TABLE turns ADD COLUMN meta_json TEXT NOT NULL DEFAULT '{}'")

    def append(self, turn: Turn) -> None:
        expires_at = turn.created_at + self._ttl if self._ttl is not None else None
        with self._db.write() as conn:
            # REPLACE, not INSERT: a retried stage appends the same turn again and must not duplicate it.
            conn.execute(
                "INSERT OR REPLACE INTO turns (session_id, created_at, turn_id, query, answer, references_json, "
                "expires_at, meta_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    turn.session_id,
                    turn.created_at,
                    turn.turn_id,
                    turn.query,
                    turn.answer,
                    _REFERENCES.dump_json(turn.references).decode(),
                    expires_at,
                    turn.meta_json(),
                ),
            )
            if self._ttl is not None:
                conn.execute("DELETE FROM turns WHERE expires_at <= ?", (self._clock(),))

    def recent(self, session_id: str, limit: int = 10) -> list[Turn]:
        """The newest ``limit`` live turns of the session, oldest first."""
        if limit < 0:
            raise InputError(f"limit must be 0 or more, got {limit}")
        if limit == 0:
            return []
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT session_id, created_at, turn_id, query, answer, references_json, meta_json FROM turns "
                f"WHERE session_id = ? AND {_LIVE} ORDER BY created_at DESC, turn_id DESC LIMIT ?",
                (session_id, self._clock(), limit),
            ).fetchall()
        return [
            Turn(
                session_id=sid,
                created_at=created,
                turn_id=tid,
                query=query,
                answer=answer,
                references=_REFERENCES.validate_json(refs),
                **Turn.meta_from_json(meta),
            )
            for sid, created, tid, query, answer, refs, meta in reversed(rows)
        ]

    def sessions(self, limit: int = 100) -> list[SessionSummary]:
        """The sessions with live turns, most recently active first."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT session_id, COUNT(*), MIN(created_at), MAX(created_at), "
                "(SELECT t2.query FROM turns t2 WHERE t2.session_id = t.session_id ORDER BY t2.created_at LIMIT 1) "
                f"FROM turns t WHERE {_LIVE} GROUP BY session_id ORDER BY MAX(created_at) DESC LIMIT ?",
                (self._clock(), limit),
            ).fetchall()
        return [
            SessionSummary(session_id=sid, turns=n, first_query=first or "", created_at=lo, updated_at=hi)
            for sid, n, lo, hi, first in rows
        ]

    def delete_session(self, session_id: str) -> int:
        """Delete every turn of the session; returns how many live (unexpired) turns were deleted."""
        with self._db.write() as conn:
            (live,) = conn.execute(
                f"SELECT COUNT(*) FROM turns WHERE session_id = ? AND {_LIVE}", (session_id, self._clock())
            ).fetchone()
            conn.execute("DELETE FROM turns WHERE session_id = ?", (session_id,))
        return int(live)

    def close(self) -> None:
        self._db.close()
