"""The embedded storage adapters: the shared contracts, plus what only local files show (re-open, paths)."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from contracts import (
    BlobStoreContract,
    CatalogStoreContract,
    FakeClock,
    HistoryStoreContract,
    make_kb,
    make_knowledge,
    make_turn,
    run_in_threads,
)
from ragstep.adapters._sqlite import SqliteDatabase
from ragstep.adapters.blobs import local as local_blobs
from ragstep.adapters.blobs.local import TMP_PREFIX, LocalBlobStore
from ragstep.adapters.catalog.sqlite import SqliteCatalogStore
from ragstep.adapters.history.sqlite import SqliteHistoryStore
from ragstep.errors import ConflictError, InputError, StorageError
from ragstep.ports import BlobStore, CatalogStore, HistoryStore


def _blocked_path(tmp_path: Path) -> Path:
    """A path no one can create, root included: its parent is a regular file (chmod does not stop root)."""
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    return blocker / "sub"


def _assert_clear(exc: StorageError, *parts: str) -> None:
    assert "\n" not in exc.message
    for part in parts:
        assert part in exc.message


# -- blobs ---------------------------------------------------------------------------------------------------


class TestLocalBlobStore(BlobStoreContract):
    @pytest.fixture
    def blob_store(self, tmp_path: Path) -> LocalBlobStore:
        return LocalBlobStore(tmp_path / "blobs")

    def test_is_a_blob_store(self, blob_store: LocalBlobStore) -> None:
        assert isinstance(blob_store, BlobStore)

    def test_uri_points_at_the_file(self, blob_store: LocalBlobStore) -> None:
        uri = blob_store.put("dir/a b.txt", b"hello")
        assert uri.startswith("file://")
        assert Path(unquote(urlparse(uri).path)).read_bytes() == b"hello"

    def test_creates_a_missing_root(self, tmp_path: Path) -> None:
        store = LocalBlobStore(tmp_path / "x" / "y" / "z")
        store.put("k", b"v")
        assert (tmp_path / "x" / "y" / "z" / "k").read_bytes() == b"v"

    def test_unusable_root_is_a_storage_error(self, tmp_path: Path) -> None:
        bad = _blocked_path(tmp_path)
        with pytest.raises(StorageError) as info:
            LocalBlobStore(bad)
        _assert_clear(info.value, str(bad), "--data-dir")

    def test_leftover_temp_files_are_hidden(self, blob_store: LocalBlobStore) -> None:
        blob_store.put("a/real.txt", b"x")
        (blob_store.root / "a" / f"{TMP_PREFIX}crashed").write_bytes(b"half")  # a crash mid-put
        (blob_store.root / f"{TMP_PREFIX}top").write_bytes(b"half")
        assert blob_store.list() == ["a/real.txt"]
        assert blob_store.list("a/") == ["a/real.txt"]

    def test_reserved_temp_prefix_is_not_a_key(self, blob_store: LocalBlobStore) -> None:
        with pytest.raises(InputError, match=TMP_PREFIX):
            blob_store.put(f"a/{TMP_PREFIX}x", b"x")

    def test_failed_write_keeps_the_old_blob(self, blob_store: LocalBlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
        blob_store.put("doc.json", b"old")

        def disk_full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(local_blobs.os, "fsync", disk_full)
        with pytest.raises(StorageError, match="No space left"):
            blob_store.put("doc.json", b"new and longer")
        monkeypatch.undo()
        assert blob_store.get("doc.json") == b"old"
        assert os.listdir(blob_store.root) == ["doc.json"]  # the temp file was removed

    def test_scratch_blobs_skip_fsync_and_stay_atomic(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Keys under a scratch prefix (the ingest stages' hand-overs) are renamed into place without fsync: a
        failing fsync (the fault injected here) fails a durable write, never a scratch one."""
        store = LocalBlobStore(tmp_path / "blobs", scratch_prefixes=("ingest/",))
        store.put("ingest/k1/h1/chunks.jsonl", b"old")
        calls: list[int] = []

        def failing_fsync(fd: int) -> None:
            calls.append(fd)
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(local_blobs.os, "fsync", failing_fsync)
        store.put("ingest/k1/h1/chunks.jsonl", b"new")
        assert store.get("ingest/k1/h1/chunks.jsonl") == b"new" and calls == []
        with pytest.raises(StorageError, match="Input/output error"):
            store.put("sources/kb/k1/h1.md", b"an original")
        assert calls, "a durable write syncs"
        assert store.list() == ["ingest/k1/h1/chunks.jsonl"]

    def test_services_treat_ingest_products_as_scratch(self, tmp_path: Path) -> None:
        from ragstep.context import Clients
        from ragstep.models.blob_keys import INGEST_PREFIX, SCRATCH_PREFIXES
        from ragstep.settings import Settings

        blobs = Clients(Settings(data_dir=tmp_path)).context().blobs
        assert isinstance(blobs, LocalBlobStore) and blobs.scratch_prefixes == SCRATCH_PREFIXES
        assert INGEST_PREFIX in SCRATCH_PREFIXES  # one run's products

    def test_blob_and_folder_with_one_name_conflict(self, blob_store: LocalBlobStore) -> None:
        blob_store.put("a", b"file")
        with pytest.raises(ConflictError, match="'a'"):
            blob_store.put("a/b/c", b"under a file")
        blob_store.put("x/y", b"in a folder")
        with pytest.raises(ConflictError, match="x/"):
            blob_store.put("x", b"over a folder")
        assert not blob_store.exists("x")
        blob_store.delete("x")  # a folder is not a blob: no-op
        assert blob_store.get("x/y") == b"in a folder"

    def test_delete_removes_emptied_folders(self, blob_store: LocalBlobStore) -> None:
        blob_store.put("a/b/c", b"1")
        blob_store.put("a/keep", b"2")
        blob_store.delete("a/b/c")
        assert not (blob_store.root / "a" / "b").exists()
        assert (blob_store.root / "a").is_dir()
        blob_store.delete("a/keep")
        assert os.listdir(blob_store.root) == []
        blob_store.put("a", b"now a blob")  # possible again, as on S3
        assert blob_store.get("a") == b"now a blob"

    def test_readers_never_see_a_partial_overwrite(self, blob_store: LocalBlobStore) -> None:
        versions = (b"A" * 1_000_000, b"B" * 1_500_000)
        blob_store.put("big.bin", versions[0])
        done = threading.Event()

        def write() -> None:
            try:
                for i in range(30):
                    blob_store.put("big.bin", versions[i % 2])
            finally:
                done.set()

        writer = threading.Thread(target=write)
        writer.start()

        def read(_: int) -> int:
            reads = 0
            while not done.is_set():
                assert blob_store.get("big.bin") in versions
                reads += 1
            return reads

        try:
            assert sum(run_in_threads(read, 4)) > 0
        finally:
            writer.join()
        assert blob_store.list() == ["big.bin"]


# -- history -------------------------------------------------------------------------------------------------


class TestSqliteHistoryStore(HistoryStoreContract):
    @pytest.fixture
    def make_history_store(self, tmp_path: Path) -> Callable[..., SqliteHistoryStore]:
        def make(ttl_seconds: float | None = None, clock: Callable[[], float] | None = None) -> SqliteHistoryStore:
            if clock is None:
                return SqliteHistoryStore(tmp_path / "history.db", ttl_seconds=ttl_seconds)
            return SqliteHistoryStore(tmp_path / "history.db", ttl_seconds=ttl_seconds, clock=clock)

        return make

    def test_is_a_history_store(self, history_store: HistoryStore) -> None:
        assert isinstance(history_store, HistoryStore)

    def test_survives_reopening(self, tmp_path: Path) -> None:
        path = tmp_path / "deep" / "dir" / "history.db"
        store = SqliteHistoryStore(path)
        turns = [make_turn("s", float(t), f"q{t}", answer=f"a{t}") for t in range(3)]
        for turn in turns:
            store.append(turn)
        store.close()
        assert SqliteHistoryStore(path).recent("s") == turns

    def test_uses_wal(self, tmp_path: Path) -> None:
        SqliteHistoryStore(tmp_path / "h.db")
        assert sqlite3.connect(tmp_path / "h.db").execute("PRAGMA journal_mode").fetchone() == ("wal",)

    def test_expired_turns_are_purged_on_append(self, tmp_path: Path) -> None:
        clock = FakeClock()
        store = SqliteHistoryStore(tmp_path / "h.db", ttl_seconds=10, clock=clock)
        store.append(make_turn("s", clock.now, "old"))
        clock.advance(11)
        store.append(make_turn("s", clock.now, "new"))
        rows = sqlite3.connect(tmp_path / "h.db").execute("SELECT query FROM turns").fetchall()
        assert rows == [("new",)]

    @pytest.mark.parametrize("ttl", [0, -5, float("nan")])
    def test_ttl_must_be_positive(self, tmp_path: Path, ttl: float) -> None:
        with pytest.raises(InputError, match="ttl_seconds"):
            SqliteHistoryStore(tmp_path / "h.db", ttl_seconds=ttl)

    def test_negative_limit_is_an_input_error(self, history_store: HistoryStore) -> None:
        with pytest.raises(InputError, match="limit"):
            history_store.recent("s", limit=-1)

    def test_concurrent_writers(self, history_store: HistoryStore) -> None:
        def write(i: int) -> None:
            for t in range(20):
                history_store.append(make_turn(f"own{i}", float(t)))
                history_store.append(make_turn("shared", float(t), f"w{i}"))

        run_in_threads(write)
        assert all(len(history_store.recent(f"own{i}", limit=100)) == 20 for i in range(8))
        assert len(history_store.recent("shared", limit=1000)) == 8 * 20

    def test_unusable_dir_is_a_storage_error(self, tmp_path: Path) -> None:
        bad = _blocked_path(tmp_path)
        with pytest.raises(StorageError) as info:
            SqliteHistoryStore(bad / "history.db")
        _assert_clear(info.value, str(bad), "--data-dir")

    def test_directory_as_database_is_a_storage_error(self, tmp_path: Path) -> None:
        with pytest.raises(StorageError, match="directory"):
            SqliteHistoryStore(tmp_path)

    def test_not_a_database_is_a_storage_error(self, tmp_path: Path) -> None:
        path = tmp_path / "history.db"
        path.write_bytes(b"this is not SQLite" * 100)
        with pytest.raises(StorageError) as info:
            SqliteHistoryStore(path)
        _assert_clear(info.value, str(path), "not a database")


def test_one_connection_per_thread(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "x.db", "")
    assert db.connection() is db.connection()
    others = run_in_threads(lambda _: id(db.connection()), 2)
    assert id(db.connection()) not in others


_SCHEMA = "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, n INTEGER NOT NULL);"


def _open_and_write(path: str, start: Any) -> str:
    start.wait()
    try:
        db = SqliteDatabase(Path(path), _SCHEMA)
        with db.write() as conn:
            conn.execute("INSERT INTO t VALUES (?, 1) ON CONFLICT (k) DO UPDATE SET n = n + 1", ("k",))
    except StorageError as exc:
        return str(exc)
    return "ok"


def test_processes_creating_one_database_at_once_all_succeed(tmp_path: Path) -> None:
    # Two `ragstep ingest` runs on a fresh data dir once failed one file with "database is locked": SQLite fails a
    # lock upgrade at once (no busy wait) when two processes both switch a new file to WAL or create its tables.
    workers, rounds = 4, 12
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(workers) as pool:
        for i in range(rounds):
            path = str(tmp_path / f"db{i}.sqlite")
            start = manager.Barrier(workers)
            assert pool.starmap(_open_and_write, [(path, start)] * workers) == ["ok"] * workers
            with sqlite3.connect(path) as raw:
                assert raw.execute("SELECT n FROM t").fetchone() == (workers,)


# -- catalog -------------------------------------------------------------------------------------------------


class TestSqliteCatalogStore(CatalogStoreContract):
    @pytest.fixture
    def catalog_store(self, tmp_path: Path) -> SqliteCatalogStore:
        return SqliteCatalogStore(tmp_path / "catalog.db")

    def test_is_a_catalog_store(self, catalog_store: CatalogStore) -> None:
        assert isinstance(catalog_store, CatalogStore)

    def test_survives_reopening(self, tmp_path: Path) -> None:
        path = tmp_path / "new" / "catalog.db"
        store = SqliteCatalogStore(path)
        kb = store.create_kb(make_kb("kb", "Docs", 1.0))
        item = make_knowledge("k", "kb", 2.0, title="t")
        store.put_knowledge(item)
        store.close()
        again = SqliteCatalogStore(path)
        assert again.get_kb("Docs") == kb
        assert again.list_knowledge("kb") == [item]
        with pytest.raises(ConflictError):
            again.create_kb(make_kb("kb2", "Docs"))

    def test_rows_written_before_a_field_existed_still_load(self, tmp_path: Path) -> None:
        store = SqliteCatalogStore(tmp_path / "c.db")
        old_doc = json.dumps({"id": "kb", "name": "Old"})  # no type, embedding_model, created_at yet
        with sqlite3.connect(tmp_path / "c.db") as raw:
            raw.execute("INSERT INTO knowledge_bases VALUES ('kb', 'Old', 0, ?)", (old_doc,))
        assert store.get_kb("Old") == make_kb("kb", "Old")

    def test_concurrent_creates_of_one_name_have_one_winner(self, catalog_store: CatalogStore) -> None:
        def create(i: int) -> bool:
            try:
                catalog_store.create_kb(make_kb(f"kb{i}", "Contested"))
            except ConflictError:
                return False
            return True

        assert sum(run_in_threads(create)) == 1
        assert len(catalog_store.list_kbs()) == 1

    def test_unusable_dir_is_a_storage_error(self, tmp_path: Path) -> None:
        bad = _blocked_path(tmp_path)
        with pytest.raises(StorageError) as info:
            SqliteCatalogStore(bad / "catalog.db")
        _assert_clear(info.value, str(bad), "--data-dir")
