"""Chat history in a SQLite file: the embedded :class:`ragstep.ports.HistoryStore` (DynamoDB on AWS).

Also home of :class:`SqliteDatabase`, the connection discipline shared with :mod:`.sqlite_catalog`: one
connection per thread, WAL, a busy timeout, and every SQLite failure turned into a one-line
:class:`StorageError`.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import TypeAdapter

from ragstep.errors import InputError, StorageError
from ragstep.models import SearchResult, Turn

# How long a writer waits for another connection's write lock before giving up (SQLITE_BUSY).
BUSY_TIMEOUT_MS = 30_000
_HINT_WRITABLE = "pass --data-dir to a writable folder"


def _storage_error(path: Path, exc: sqlite3.Error) -> StorageError:
    """One line that names the file and says what to do, instead of a sqlite3 traceback."""
    text = str(exc)
    if "not a database" in text or "malformed" in text:
        hint = "move the file away or pass --data-dir to another folder"
    elif "locked" in text or "busy" in text:
        hint = "another process kept the database busy; retry"
    elif "unable to open" in text or "readonly" in text or "disk I/O" in text:
        hint = _HINT_WRITABLE
    elif "full" in text:
        hint = "free some disk space"
    else:
        hint = "check the data dir"
    return StorageError(f"cannot use database {path}: {text}; {hint}")


class SqliteDatabase:
    """One SQLite file opened lazily, one connection per thread.

    sqlite3 connections must not be used from two threads at once, so each thread gets its own (kept in a
    ``threading.local`` owned by this object, created on first use). WAL lets readers run while one writer
    writes; the busy timeout makes concurrent writers queue instead of failing.
    """

    def __init__(self, path: Path, schema: str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot open data dir {self.path.parent}: {exc.strerror or exc}; {_HINT_WRITABLE}"
            ) from exc
        if self.path.is_dir():
            raise StorageError(f"cannot open database {self.path}: it is a directory; pass a file path")
        self._local = threading.local()
        # Create the schema now so a bad path fails at construction, not on the first request.
        try:
            self.connection().executescript(schema)
        except sqlite3.Error as exc:
            raise _storage_error(self.path, exc) from exc

    def connection(self) -> sqlite3.Connection:
        """The calling thread's connection, opened on first use."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                # isolation_level=None: no implicit transactions; writes BEGIN IMMEDIATE explicitly (write()).
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
                conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")  # before WAL: switching needs a lock
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")  # a committed turn or catalog row survives power loss
            except sqlite3.Error as exc:
                raise _storage_error(self.path, exc) from exc
            self._local.conn = conn
        return conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        try:
            yield self.connection()
        except sqlite3.Error as exc:
            raise _storage_error(self.path, exc) from exc

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back if the body raises.

        IMMEDIATE takes the write lock up front: a deferred transaction that reads and then writes can fail
        with SQLITE_BUSY at once (no busy wait) when another connection wrote in between.
        """
        conn = self.connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _storage_error(self.path, exc) from exc
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise _storage_error(self.path, exc) from exc
            raise

    def close(self) -> None:
        """Close the calling thread's connection (other threads' close when those threads end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    turn_id TEXT NOT NULL,
    query TEXT NOT NULL,
    answer TEXT NOT NULL,
    references_json TEXT NOT NULL,
    expires_at REAL,
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
        self._ttl = ttl_seconds
        self._clock = clock

    @property
    def path(self) -> Path:
        return self._db.path

    def append(self, turn: Turn) -> None:
        expires_at = turn.created_at + self._ttl if self._ttl is not None else None
        with self._db.write() as conn:
            # REPLACE, not INSERT: a retried stage appends the same turn again and must not duplicate it.
            conn.execute(
                "INSERT OR REPLACE INTO turns VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    turn.session_id,
                    turn.created_at,
                    turn.turn_id,
                    turn.query,
                    turn.answer,
                    _REFERENCES.dump_json(turn.references).decode(),
                    expires_at,
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
                "SELECT session_id, created_at, turn_id, query, answer, references_json FROM turns "
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
            )
            for sid, created, tid, query, answer, refs in reversed(rows)
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
