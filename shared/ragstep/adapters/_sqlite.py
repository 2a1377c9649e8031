"""SQLite plumbing shared by the embedded stores (catalog, history, local index): :class:`SqliteDatabase`.

One connection per thread, WAL, a busy timeout, synchronous commits, and every SQLite failure turned into a one-line
:class:`~ragstep.errors.StorageError` that names the file and says what to do.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ragstep.errors import StorageError

# How long a writer waits for another connection's write lock before giving up (SQLITE_BUSY).
BUSY_TIMEOUT_MS = 30_000
_HINT_WRITABLE = "pass --data-dir to a writable folder"


def storage_error(path: Path, exc: sqlite3.Error) -> StorageError:
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


def _retry_while_busy(step: Callable[[], object]) -> None:
    """Run ``step`` again while SQLite reports the database busy or locked, for up to the busy timeout.

    For the few operations where SQLite returns SQLITE_BUSY without calling the busy handler (it does so to break
    a lock-upgrade deadlock), so a second process waits like it would anywhere else instead of failing.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if ("locked" not in text and "busy" not in text) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


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
        try:
            is_dir = self.path.is_dir()
        except OSError as exc:
            raise StorageError(f"cannot open database {self.path}: {exc.strerror or exc}; {_HINT_WRITABLE}") from None
        if is_dir:
            raise StorageError(f"cannot open database {self.path}: it is a directory; pass a file path")
        self._local = threading.local()
        # Create the schema now so a bad path fails at construction, not on the first request. IMMEDIATE takes the
        # write lock through the busy handler; in autocommit, two processes creating one file at once could each
        # hold a read lock and want the write lock, and SQLite fails one of them at once instead of waiting.
        try:
            _retry_while_busy(lambda: self._run_script(f"BEGIN IMMEDIATE;\n{schema}\nCOMMIT;"))
        except sqlite3.Error as exc:
            raise storage_error(self.path, exc) from exc

    def _run_script(self, script: str) -> None:
        conn = self.connection()
        try:
            conn.executescript(script)
        except sqlite3.Error:
            if conn.in_transaction:  # a script that failed half-way leaves its transaction open
                conn.execute("ROLLBACK")
            raise

    def connection(self) -> sqlite3.Connection:
        """The calling thread's connection, opened on first use."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                # isolation_level=None: no implicit transactions; writes BEGIN IMMEDIATE explicitly (write()).
                conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
                conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")  # before WAL: switching needs a lock
                # Switching a new file to WAL can fail at once (no busy wait) while another process switches it
                # too: two `ragstep ingest` runs on a fresh data dir did (CI); retried until the busy timeout.
                _retry_while_busy(lambda: conn.execute("PRAGMA journal_mode=WAL"))
                conn.execute("PRAGMA synchronous=FULL")  # a committed turn or catalog row survives power loss
            except sqlite3.Error as exc:
                raise storage_error(self.path, exc) from exc
            self._local.conn = conn
        return conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        try:
            yield self.connection()
        except sqlite3.Error as exc:
            raise storage_error(self.path, exc) from exc

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
            raise storage_error(self.path, exc) from exc
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise storage_error(self.path, exc) from exc
            raise

    def close(self) -> None:
        """Close the calling thread's connection (other threads' close when those threads end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
