"""The serverless default index on AWS: each knowledge base's embedded index, kept in S3 as immutable generations.

Functions sharing nothing but S3 (the ingest machine's ``ingest_index``, the search functions, the API) see one index:

* **A knowledge base is one** :class:`~ragstep.adapters.index.local.LocalSearchIndex` **folder per generation**
  (``_s3generations``: ``tenants/<tenant>/index/<kb>/gen-<n>-<token>/`` plus the pointer ``current.json``). Its files
  are shipped as the local index writes them (SQLite plus its saved snapshot), so a reader maps the snapshot instead
  of rebuilding it, and searches exactly as the local index does.
* **Writes** (replace, delete, enable/disable) copy the current generation, apply the change with the local index,
  upload the result as a new generation and swap the pointer with a conditional PutObject (``If-Match``). A writer
  that loses the race deletes its upload, reads the new pointer and applies its change again on the new generation,
  with jittered backoff, until ``index_s3_write_timeout_s``: concurrent ingests of one knowledge base are
  serialised and no document is lost. Within one process, writes of a knowledge base queue on a lock instead.
* **Reads** load a knowledge base's current generation into the data dir once per container, then check the pointer
  (``If-None-Match``: one request, no body when unchanged) at most every ``index_s3_refresh_s`` seconds and reload
  only when it changed. The copy it replaced is deleted at the next check that finds the pointer unchanged (calls
  still reading it finish first), so /tmp holds one copy, two during a swap.
* **Pruning**: a replaced generation is deleted ``index_s3_prune_grace_s`` after its replacement (a reader of the old
  pointer is still downloading it); a reader that finds a file gone reads the pointer again. **Limits**: a write over
  ``index_s3_max_bytes`` is refused naming OpenSearch; over ``index_s3_warn_bytes`` :meth:`capacity_warning` says so.

Calls that name chunks or knowledge items but no knowledge base (fetch, vectors, chunks_at, delete ...) look in the
knowledge bases this container has loaded; only ids none of those holds send them to the tenant's other knowledge
bases, loaded one at a time until the ids are found (deletes and enable/disable check every one that could hold them).
The query stages that read by id (rerank, merge, citations) name the request's knowledge bases through
:meth:`S3SnapshotIndex.scoped` (:func:`~ragstep.index_capabilities.scoped_reads`): they look in those only.
"""

from __future__ import annotations

import contextlib
import copy
import random
import re
import shutil
import sqlite3
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from ragstep.adapters._aws import LazyAwsClient
from ragstep.adapters.index._replace import checked_replacement
from ragstep.adapters.index._s3generations import GenerationGone, GenerationStore, Pointer, shipped_files
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.errors import ConflictError, InputError, StorageError
from ragstep.models import Chunk
from ragstep.ports import Hit, IndexStats, SearchFilter
from ragstep.retrieval import ivf
from ragstep.retrieval.bm25 import joint

if TYPE_CHECKING:
    import numpy as np

    from ragstep.settings import Settings

T = TypeVar("T")
_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")
# The columns of the local index's chunks table that by-id calls look up.
_Column = Literal["id", "knowledge_id"]
_LOAD_ATTEMPTS = 5
MOVE_TO_OPENSEARCH = (
    "move it to OpenSearch: deploy with the template parameter OpenSearchEndpoint (an OpenSearch Service domain or "
    "Serverless collection) or CreateOpenSearchDomain=true (RAGSTEP_INDEX_BACKEND=opensearch), then ingest its "
    "documents again"
)


@dataclass(frozen=True)
class _Loaded:
    """What this container holds of one knowledge base: its pointer and local index (None: no generation yet)."""

    pointer: Pointer | None
    index: LocalSearchIndex | None
    checked: float


class S3SnapshotIndex:
    """The :class:`ragstep.ports.SearchIndex` over per-knowledge-base generations in S3 (module docstring)."""

    #: Keyword and vector hits are fused by the search stage, as with the local index.
    supports_server_hybrid = False

    def __init__(
        self,
        store: GenerationStore,
        cache_dir: Path,
        *,
        refresh_s: float = 1.0,
        prune_grace_s: float = 900.0,
        write_timeout_s: float = 240.0,
        warn_bytes: int = 350_000_000,
        max_bytes: int = 700_000_000,
        vector_storage: Literal["float32", "int8"] = "int8",
        rescore_factor: int = 4,
        ivf_min_rows: int = ivf.MIN_ROWS,
    ) -> None:
        self.store = store
        # How every generation's local index stores and scans its vectors (RAGSTEP_VECTOR_STORAGE).
        self.vector_storage: Literal["float32", "int8"] = vector_storage
        self.rescore_factor = rescore_factor
        self.ivf_min_rows = ivf_min_rows
        self.cache_dir = Path(cache_dir)
        self.refresh_s = refresh_s
        self.prune_grace_s = prune_grace_s
        self.write_timeout_s = write_timeout_s
        self.warn_bytes = warn_bytes
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._kb_locks: defaultdict[str, threading.RLock] = defaultdict(threading.RLock)
        self._loaded: dict[str, _Loaded] = {}
        self._listed: tuple[float, list[str]] | None = None
        #: The knowledge bases by-id reads look in (a :meth:`scoped` view); None: every one of the tenant's.
        self._scope: tuple[str, ...] | None = None

    @classmethod
    def from_settings(cls, settings: Settings, tenant_id: str, cache_dir: Path) -> S3SnapshotIndex:
        prefix = settings.index_s3_prefix.strip("/")
        root = f"{prefix}/tenants/{tenant_id}/index/" if prefix else f"tenants/{tenant_id}/index/"
        # 60 s reads: completing a multipart upload of a large file can take S3 (and moto) longer than the stores' 20 s.
        client = LazyAwsClient("s3", max_pool_connections=16, timeout_s=60.0)
        store = GenerationStore(
            client, settings.index_s3_bucket or settings.blob_bucket, root, kms_key_id=settings.s3_kms_key_id
        )
        return cls(
            store,
            cache_dir,
            refresh_s=settings.index_s3_refresh_s,
            prune_grace_s=settings.index_s3_prune_grace_s,
            write_timeout_s=settings.index_s3_write_timeout_s,
            warn_bytes=settings.index_s3_warn_bytes,
            max_bytes=settings.index_s3_max_bytes,
            vector_storage=settings.vector_storage,
            rescore_factor=settings.vector_rescore_factor,
            ivf_min_rows=settings.vector_ivf_min_rows,
        )

    # -- loading -------------------------------------------------------------------------------------------------

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

    def _current(self, kb_id: str, *, fresh: bool = False) -> _Loaded:
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
                    entry = _Loaded(entry.pointer, entry.index, now)
                elif got is None or isinstance(got, str) or not got.folder:
                    entry = _Loaded(None, None, now)
                else:
                    try:
                        entry = _Loaded(got, self._open(kb_id, got), now)
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

    def _install(self, kb_id: str, entry: _Loaded) -> None:
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
            listed = (time.monotonic(), [kb for kb in self.store.knowledge_bases() if _SAFE.match(kb)])
            self._listed = listed
        return listed[1]

    def scoped(self, knowledge_base_ids: Sequence[str]) -> S3SnapshotIndex:
        """A view whose by-id reads (fetch, vectors, chunks_at, knowledge_chunks) look in these knowledge bases only
        (:class:`ragstep.index_capabilities.ScopedReads`): the request names them, so a cold rerank or merge container
        loads those instead of the tenant's others one by one. It shares this index's loaded generations and locks."""
        view = copy.copy(self)
        view._scope = tuple(kb for kb in dict.fromkeys(knowledge_base_ids) if _SAFE.match(kb))
        return view

    def preload(self, kb_ids: Iterable[str]) -> None:
        """Load these knowledge bases now (a function's init phase may, so its first request does not download)."""
        self._indexes(kb_ids)

    def _indexes(self, kb_ids: Iterable[str]) -> list[LocalSearchIndex]:
        return [e.index for kb in kb_ids if _SAFE.match(kb) and (e := self._current(kb)).index is not None]

    def _lookup(
        self, read: Callable[[LocalSearchIndex], dict[str, T]], wanted: set[str], column: _Column
    ) -> dict[str, T]:
        """``read`` over the loaded knowledge bases; over the others only for the ``wanted`` ids (values of
        ``column``) that no loaded knowledge base holds. An id a loaded one holds but ``read`` left out (a chunk
        without a vector, a neighbour past a document's end) loads nothing more."""
        out: dict[str, T] = {}
        scope = self._scope
        seen = [kb for kb in list(self._loaded) if _SAFE.match(kb) and (scope is None or kb in scope)]
        loaded = [(kb, e.index) for kb in seen if (e := self._current(kb)).index is not None]
        for _, index in loaded:
            out.update(read(index))
        missing = sorted(wanted - out.keys())
        for _, index in loaded:
            if missing:
                held = _held(index.root / "index.sqlite", column, missing)
                missing = [m for m in missing if m not in held]
        if missing:
            others = self._all_kbs() if scope is None else scope
            for index in self._indexes(kb for kb in others if kb not in seen):
                out.update(read(index))
                held = _held(index.root / "index.sqlite", column, missing)
                missing = [m for m in missing if m not in held and m not in out]
                if not missing:
                    break
        return out

    # -- reads ---------------------------------------------------------------------------------------------------

    def keyword_search(self, tokens: Sequence[str], flt: SearchFilter, top_k: int, threshold: float) -> list[Hit]:
        targets = self._indexes(flt.knowledge_base_ids or self._all_kbs())
        if len(targets) == 1:
            return targets[0].keyword_search(tokens, flt, top_k, threshold)
        # Every knowledge base scores with the statistics of all of them together (ragstep.retrieval.bm25), so raw
        # BM25 scores compare across them; normalised to the best of all, as one local index holding them all would.
        stats = joint(index.bm25_stats(tokens, flt) for index in targets)
        hits = sorted(
            (h for index in targets for h in index.keyword_search(tokens, flt, top_k, 0.0, stats=stats)),
            key=lambda h: (-h.raw_score, h.chunk_id),
        )[: max(top_k, 0)]
        out: list[Hit] = []
        for hit in hits:
            score = hit.raw_score / hits[0].raw_score
            if score < threshold:
                break
            out.append(Hit(hit.chunk_id, score, hit.raw_score))
        return out

    def vector_search(
        self, vector: np.ndarray, space: str, flt: SearchFilter, top_k: int, threshold: float
    ) -> list[Hit]:
        targets = self._indexes(flt.knowledge_base_ids or self._all_kbs())
        hits = [h for index in targets for h in index.vector_search(vector, space, flt, top_k, threshold)]
        return sorted(hits, key=lambda h: (-h.score, h.chunk_id))[: max(top_k, 0)]

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        return self._lookup(lambda index: index.fetch(chunk_ids), set(chunk_ids), "id") if chunk_ids else {}

    def vectors(self, chunk_ids: Sequence[str], space: str) -> dict[str, np.ndarray]:
        return self._lookup(lambda index: index.vectors(chunk_ids, space), set(chunk_ids), "id") if chunk_ids else {}

    def chunks_at(self, wanted: Mapping[str, Sequence[int]]) -> dict[str, dict[int, Chunk]]:
        return self._lookup(lambda index: index.chunks_at(wanted), set(wanted), "knowledge_id") if wanted else {}

    def knowledge_chunks(self, knowledge_id: str, limit: int) -> list[Chunk]:
        found = self._lookup(
            lambda index: {knowledge_id: c} if (c := index.knowledge_chunks(knowledge_id, limit)) else {},
            {knowledge_id},
            "knowledge_id",
        )
        return found.get(knowledge_id, [])

    def stats(self) -> IndexStats:
        chunks = items = 0
        spaces: dict[str, int] = {}
        for index in self._indexes(self._all_kbs()):
            part = index.stats()
            chunks, items = chunks + part.chunks, items + part.knowledge_items
            for name, count in part.vector_spaces.items():
                spaces[name] = spaces.get(name, 0) + count
        return IndexStats(chunks=chunks, knowledge_items=items, vector_spaces=spaces)

    def capacity_warning(self, knowledge_base_id: str) -> str | None:
        """Why this knowledge base should move to OpenSearch soon (its files are over ``warn_bytes``), or None."""
        entry = self._loaded.get(knowledge_base_id)
        pointer = entry.pointer if entry is not None else None
        if pointer is None or pointer.size <= self.warn_bytes:
            return None
        return (
            f"knowledge base {knowledge_base_id} holds {pointer.chunks} chunks in {_mb(pointer.size)} of index files, "
            f"over RAGSTEP_INDEX_S3_WARN_BYTES ({_mb(self.warn_bytes)}): every search container loads them on its "
            f"first request, and ingestion stops at RAGSTEP_INDEX_S3_MAX_BYTES ({_mb(self.max_bytes)}); "
            + MOVE_TO_OPENSEARCH
        )

    # -- writes --------------------------------------------------------------------------------------------------

    def replace_knowledge(
        self,
        knowledge_id: str,
        chunks: Sequence[Chunk],
        vectors: np.ndarray | None = None,
        space: str | None = None,
    ) -> None:
        checked_replacement(knowledge_id, chunks, vectors, space)  # bad input fails before any S3 request
        if not chunks:
            self.delete_knowledge([knowledge_id])
            return
        kbs = {c.knowledge_base_id for c in chunks}
        if len(kbs) != 1:
            raise InputError(f"the chunks of knowledge {knowledge_id} belong to {len(kbs)} knowledge bases, not one")
        self.apply_change(
            kbs.pop(), lambda index: index.replace_knowledge(knowledge_id, chunks, vectors, space), publish=_always
        )

    def delete_knowledge(self, knowledge_ids: Sequence[str]) -> int:
        if not knowledge_ids:
            return 0
        ids = list(dict.fromkeys(knowledge_ids))
        return sum(
            self.apply_change(kb, lambda index: index.delete_knowledge(ids), publish=bool)
            for kb in self._holders("knowledge_id", ids)
        )

    def set_enabled(self, chunk_ids: Sequence[str], enabled: bool) -> int:
        if not chunk_ids:
            return 0
        ids = list(dict.fromkeys(chunk_ids))
        return sum(
            self.apply_change(kb, lambda index: index.set_enabled(ids, enabled), publish=bool)
            for kb in self._holders("id", ids)
        )

    def delete_knowledge_base(self, knowledge_base_id: str) -> int:
        if not _SAFE.match(knowledge_base_id):
            return 0  # no such key can exist
        with self._kb_lock(knowledge_base_id):
            pointer = self.store.pointer(knowledge_base_id)
            self.store.delete_kb(knowledge_base_id)
            self._loaded.pop(knowledge_base_id, None)
            shutil.rmtree(self.cache_dir / knowledge_base_id, ignore_errors=True)
            self._listed = None
        return pointer.chunks if isinstance(pointer, Pointer) else 0

    def _holders(self, column: _Column, ids: list[str]) -> list[str]:
        """The knowledge bases whose current generation holds a row with one of ``ids`` in ``column``."""
        found: list[str] = []
        for kb in dict.fromkeys([*self._loaded, *self._all_kbs()]):
            entry = self._current(kb, fresh=True)
            if entry.index is not None and _held(entry.index.root / "index.sqlite", column, ids):
                found.append(kb)
        return found

    def apply_change(
        self, kb_id: str, change: Callable[[LocalSearchIndex], T], publish: Callable[[T], bool] = bool
    ) -> T:
        """Apply ``change`` to a copy of the knowledge base's current generation and publish it as the next one
        (module docstring); ``publish`` of the change's result says whether anything changed (a write that changed
        nothing publishes nothing). Every write goes through here; bulk loads may call it with many changes at once.
        """
        if not _SAFE.match(kb_id):
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
        base: _Loaded,
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
        _checkpoint(work / "index.sqlite")
        chunks = index.stats().chunks
        del index
        size = sum(shipped_files(work).values())
        if size > self.max_bytes:
            raise InputError(
                f"knowledge base {kb_id} would hold {chunks} chunks in {_mb(size)} of index files, over the "
                f"S3-snapshot index's limit of {_mb(self.max_bytes)} (RAGSTEP_INDEX_S3_MAX_BYTES: what a function's "
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
        self._install(kb_id, _Loaded(published, self._local(final), time.monotonic()))
        with contextlib.suppress(StorageError):  # best effort: the next write of this knowledge base prunes the rest
            self.store.prune(kb_id, published, self.prune_grace_s)
        return (result,)


def _held(path: Path, column: _Column, ids: Sequence[str]) -> set[str]:
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


def _always(_result: object) -> bool:
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


def _mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


__all__ = ["MOVE_TO_OPENSEARCH", "S3SnapshotIndex"]
