"""The writing half of the S3-snapshot index: a change applied to a copy of a knowledge base's current generation,
published as the next one by a conditional swap of its pointer, retried while other writers win
(:mod:`ragstep.adapters.index.s3snapshot` describes the whole index)."""

from __future__ import annotations

import contextlib
import random
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ragstep.adapters.index._s3cache import SAFE_ID, Column, GenerationCache, Loaded, held_ids
from ragstep.adapters.index._s3fusion import write_stats
from ragstep.adapters.index._s3generations import Pointer, shipped_files
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.errors import ConflictError, InputError, StorageError

T = TypeVar("T")
MOVE_TO_OPENSEARCH = (
    "move it to OpenSearch: deploy with the template parameter OpenSearchEndpoint (an OpenSearch Service domain or "
    "Serverless collection) or CreateOpenSearchDomain=true (RAGSTEP_INDEX_BACKEND=opensearch), then ingest its "
    "documents again"
)


class GenerationWriter(GenerationCache):
    """Publishes changes as new generations; :class:`~ragstep.adapters.index.s3snapshot.S3SnapshotIndex` sets the
    limits."""

    prune_grace_s: float
    write_timeout_s: float
    max_bytes: int

    def _holders(self, column: Column, ids: list[str]) -> list[str]:
        """The knowledge bases whose current generation holds a row with one of ``ids`` in ``column``."""
        found: list[str] = []
        for kb in dict.fromkeys([*self._loaded, *self._all_kbs()]):
            entry = self._current(kb, fresh=True)
            if entry.index is not None and held_ids(entry.index.root / "index.sqlite", column, ids):
                found.append(kb)
        return found

    def apply_change(
        self, kb_id: str, change: Callable[[LocalSearchIndex], T], publish: Callable[[T], bool] = bool
    ) -> T:
        """Apply ``change`` to a copy of the knowledge base's current generation and publish it as the next one
        (module docstring); ``publish`` of the change's result says whether anything changed (a write that changed
        nothing publishes nothing). Every write goes through here; bulk loads may call it with many changes at once.
        """
        if not SAFE_ID.match(kb_id):
            raise InputError(f"knowledge base id {kb_id!r} may only hold letters, digits, '-' and '_'")
        deadline = time.monotonic() + self.write_timeout_s
        backoff = 0.05
        with self._kb_lock(kb_id):
            while True:
                base = self._current(kb_id, fresh=True)
                work = self.cache_dir / kb_id / f".write-{uuid.uuid4().hex[:12]}"
                try:
                    outcome = self._attempt(kb_id, base, work, change, publish)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                if outcome is not None:
                    return outcome[0]
                if time.monotonic() + backoff > deadline:
                    raise ConflictError(
                        f"knowledge base {kb_id} kept changing under other writers for {self.write_timeout_s:.0f} s "
                        "(RAGSTEP_INDEX_S3_WRITE_TIMEOUT_S); retry the ingestion"
                    )
                time.sleep(backoff * (0.5 + random.random()))  # jitter: racing writers do not retry in step
                backoff = min(backoff * 2, 2.0)

    def _attempt(
        self,
        kb_id: str,
        base: Loaded,
        work: Path,
        change: Callable[[LocalSearchIndex], T],
        publish: Callable[[T], bool],
    ) -> tuple[T] | None:
        """One try: the change's result, or None when another writer published first."""
        if base.index is not None:
            shutil.copytree(base.index.root, work, ignore=shutil.ignore_patterns("*-wal", "*-shm", ".*"))
        index = self._local(work)
        result = change(index)
        if not publish(result):
            return (result,)
        index.snapshot()  # built and saved now, so readers map it instead of rebuilding it
        write_stats(index)  # what fusion reads of it, shipped with it (._s3fusion)
        _checkpoint(work / "index.sqlite")
        chunks = index.stats().chunks
        del index
        size = sum(shipped_files(work).values())
        if size > self.max_bytes:
            raise InputError(
                f"knowledge base {kb_id} would hold {chunks} chunks in {mb(size)} of index files, over the "
                f"S3-snapshot index's limit of {mb(self.max_bytes)} (RAGSTEP_INDEX_S3_MAX_BYTES: what a function's "
                f"memory and /tmp hold); {MOVE_TO_OPENSEARCH}"
            )
        old = base.pointer
        generation = (old.generation if old else 0) + 1
        folder = f"gen-{generation}-{uuid.uuid4().hex[:12]}"
        now = time.time()
        retired = {f: t for f, t in (old.retired if old else {}).items() if t + self.prune_grace_s > now}
        if old is not None:
            retired[old.folder] = now
        files = self.store.upload(kb_id, folder, work)
        published = self.store.swap(kb_id, old, Pointer("", generation, folder, files, chunks, size, retired))
        if published is None:
            self.store.delete_folder(kb_id, folder)
            return None
        final = self.cache_dir / kb_id / folder
        work.rename(final)  # this container reads what it wrote without downloading it
        self._install(kb_id, Loaded(published, self._local(final), time.monotonic()))
        with contextlib.suppress(StorageError):  # best effort: the next write of this knowledge base prunes the rest
            self.store.prune(kb_id, published, self.prune_grace_s)
        return (result,)


def always(_result: object) -> bool:
    return True


def _checkpoint(path: Path) -> None:
    """Fold SQLite's write-ahead log into the database file, so the file alone holds every committed write."""
    conn = sqlite3.connect(path)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    if busy:
        raise StorageError(f"cannot checkpoint {path}: the database is busy; retry")


def mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


__all__ = ["MOVE_TO_OPENSEARCH", "GenerationWriter", "always", "mb"]
