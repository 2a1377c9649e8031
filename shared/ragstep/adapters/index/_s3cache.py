"""What one container holds of the S3-snapshot index: each knowledge base's current generation, loaded into the data
dir once and checked against its pointer at most every ``refresh_s`` seconds, and the reads by id over the loaded
knowledge bases (:mod:`ragstep.adapters.index.s3snapshot` describes the whole index)."""

from __future__ import annotations

import copy
import re
import shutil
import sqlite3
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Self, TypeVar

from ragstep.adapters.index._s3generations import GenerationGone, GenerationStore, Pointer
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.errors import StorageError

T = TypeVar("T")
SAFE_ID = re.compile(r"^[A-Za-z0-9_-]+$")
# The columns of the local index's chunks table that by-id calls look up.
Column = Literal["id", "knowledge_id"]
_LOAD_ATTEMPTS = 5


@dataclass(frozen=True)
class Loaded:
    """What this container holds of one knowledge base: its pointer and local index (None: no generation yet)."""

    pointer: Pointer | None
    index: LocalSearchIndex | None
    checked: float


class GenerationCache:
    """The loading half of :class:`~ragstep.adapters.index.s3snapshot.S3SnapshotIndex`, which sets these
    attributes."""

    store: GenerationStore
    cache_dir: Path
    refresh_s: float
    vector_storage: Literal["float32", "int8"]
    rescore_factor: int
    ivf_min_rows: int
    _lock: threading.Lock
    _kb_locks: defaultdict[str, threading.RLock]
    _loaded: dict[str, Loaded]
    _listed: tuple[float, list[str]] | None
    #: The knowledge bases by-id reads look in (a :meth:`scoped` view); None: every one of the tenant's.
    _scope: tuple[str, ...] | None

    def _local(self, folder: Path) -> LocalSearchIndex:
        return LocalSearchIndex(
            folder,
            vector_storage=self.vector_storage,
            rescore_factor=self.rescore_factor,
            ivf_min_rows=self.ivf_min_rows,
        )

    def _kb_lock(self, kb_id: str) -> threading.RLock:
        with self._lock:
            return self._kb_locks[kb_id]

    def _current(self, kb_id: str, *, fresh: bool = False) -> Loaded:
        """The knowledge base as this container holds it, its pointer checked within ``refresh_s`` (now: ``fresh``)."""
        entry = self._loaded.get(kb_id)
        if entry is not None and not fresh and time.monotonic() - entry.checked < self.refresh_s:
            return entry
        with self._kb_lock(kb_id):
            entry = self._loaded.get(kb_id)
            if entry is not None and not fresh and time.monotonic() - entry.checked < self.refresh_s:
                return entry  # another thread checked while this one waited
            for _ in range(_LOAD_ATTEMPTS):
                held = entry.pointer.etag if entry is not None and entry.pointer is not None else None
                got = self.store.pointer(kb_id, held)
                now = time.monotonic()
                if isinstance(got, str) and entry is not None:
                    entry = Loaded(entry.pointer, entry.index, now)
                elif got is None or isinstance(got, str) or not got.folder:
                    entry = Loaded(None, None, now)
                else:
                    try:
                        entry = Loaded(got, self._open(kb_id, got), now)
                    except GenerationGone:
                        continue  # pruned or replaced while it downloaded: the pointer has moved on
                self._install(kb_id, entry)
                return entry
        raise StorageError(f"the index of knowledge base {kb_id} changed during {_LOAD_ATTEMPTS} loads in a row; retry")

    def _open(self, kb_id: str, pointer: Pointer) -> LocalSearchIndex:
        """The pointer's generation as a local index, downloaded into the cache unless it is already there."""
        final = self.cache_dir / kb_id / pointer.folder
        if not final.is_dir():
            part = self.cache_dir / kb_id / f".load-{uuid.uuid4().hex[:12]}"
            try:
                self.store.download(kb_id, pointer, part)
                try:
                    part.rename(final)  # complete or absent: a crash mid-download leaves only a hidden folder
                except OSError:
                    if not final.is_dir():
                        raise
            except OSError as exc:
                raise StorageError(
                    f"cannot keep the index of knowledge base {kb_id} in {self.cache_dir}: {exc.strerror or exc}; "
                    "give the function more ephemeral storage (/tmp) or move the knowledge base to OpenSearch"
                ) from exc
            finally:
                shutil.rmtree(part, ignore_errors=True)
        return self._local(final)

    def _install(self, kb_id: str, entry: Loaded) -> None:
        previous = self._loaded.get(kb_id)
        self._loaded[kb_id] = entry
        keep = {e.pointer.folder for e in (entry, previous) if e is not None and e.pointer is not None}
        folder = self.cache_dir / kb_id
        if folder.is_dir():
            # Older copies go; the one just replaced stays until the next check (see the module docstring).
            for child in folder.iterdir():
                if child.name not in keep and not child.name.startswith("."):
                    shutil.rmtree(child, ignore_errors=True)

    def _all_kbs(self) -> list[str]:
        listed = self._listed
        if listed is None or time.monotonic() - listed[0] >= self.refresh_s:
            listed = (time.monotonic(), [kb for kb in self.store.knowledge_bases() if SAFE_ID.match(kb)])
            self._listed = listed
        return listed[1]

    def scoped(self, knowledge_base_ids: Sequence[str]) -> Self:
        """A view whose by-id reads (fetch, vectors, chunks_at, knowledge_chunks) look in these knowledge bases only
        (:class:`ragstep.index_capabilities.ScopedReads`): the request names them, so a cold rerank or merge container
        loads those instead of the tenant's others one by one. It shares this index's loaded generations and locks."""
        view = copy.copy(self)
        view._scope = tuple(kb for kb in dict.fromkeys(knowledge_base_ids) if SAFE_ID.match(kb))
        return view

    def preload(self, kb_ids: Iterable[str]) -> None:
        """Load these knowledge bases now (a function's init phase may, so its first request does not download)."""
        self._indexes(kb_ids)

    def _indexes(self, kb_ids: Iterable[str]) -> list[LocalSearchIndex]:
        return [e.index for kb in kb_ids if SAFE_ID.match(kb) and (e := self._current(kb)).index is not None]

    def _lookup(
        self, read: Callable[[LocalSearchIndex], dict[str, T]], wanted: set[str], column: Column
    ) -> dict[str, T]:
        """``read`` over the loaded knowledge bases; over the others only for the ``wanted`` ids (values of
        ``column``) that no loaded knowledge base holds. An id a loaded one holds but ``read`` left out (a chunk
        without a vector, a neighbour past a document's end) loads nothing more."""
        out: dict[str, T] = {}
        scope = self._scope
        seen = [kb for kb in list(self._loaded) if SAFE_ID.match(kb) and (scope is None or kb in scope)]
        loaded = [(kb, e.index) for kb in seen if (e := self._current(kb)).index is not None]
        for _, index in loaded:
            out.update(read(index))
        missing = sorted(wanted - out.keys())
        for _, index in loaded:
            if missing:
                held = held_ids(index.root / "index.sqlite", column, missing)
                missing = [m for m in missing if m not in held]
        if missing:
            others = self._all_kbs() if scope is None else scope
            for index in self._indexes(kb for kb in others if kb not in seen):
                out.update(read(index))
                held = held_ids(index.root / "index.sqlite", column, missing)
                missing = [m for m in missing if m not in held and m not in out]
                if not missing:
                    break
        return out


def held_ids(path: Path, column: Column, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` the local index database at ``path`` holds in ``column`` (disabled chunks included, which the
    index's own reads leave out)."""
    out: set[str] = set()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for start in range(0, len(ids), 500):  # under SQLite's bound-parameter limit
            part = list(ids[start : start + 500])
            sql = f"SELECT DISTINCT {column} FROM chunks WHERE {column} IN ({','.join('?' * len(part))})"
            out.update(value for (value,) in conn.execute(sql, part))
        return out
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read the index copy {path}: {exc}; delete {path.parent} and retry") from exc
    finally:
        conn.close()


__all__ = ["SAFE_ID", "Column", "GenerationCache", "Loaded", "held_ids"]
