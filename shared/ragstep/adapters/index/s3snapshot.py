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

Fusion ranks as on the local index: :meth:`S3SnapshotIndex.bm25_stats` and :meth:`S3SnapshotIndex.vector_background`
give the search stage the statistics of the searched knowledge bases taken together, each generation carrying its
centroids (:mod:`._s3fusion`). Layout: :mod:`._s3cache` (loading, reads by id), :mod:`._s3writes` (publishing),
:mod:`._s3generations` (the S3 objects), :mod:`._s3fusion` (fusion's statistics).
"""

from __future__ import annotations

import shutil
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ragstep.adapters._aws import LazyAwsClient
from ragstep.adapters.index import _s3fusion
from ragstep.adapters.index._replace import checked_replacement
from ragstep.adapters.index._s3backfill import S3VectorBackfill
from ragstep.adapters.index._s3cache import SAFE_ID, Loaded
from ragstep.adapters.index._s3generations import GenerationStore, Pointer
from ragstep.adapters.index._s3writes import MOVE_TO_OPENSEARCH, always, mb
from ragstep.errors import InputError
from ragstep.models import Chunk
from ragstep.ports import Hit, IndexStats, SearchFilter
from ragstep.retrieval import ivf
from ragstep.retrieval.bm25 import Bm25Stats

if TYPE_CHECKING:
    import numpy as np

    from ragstep.adapters.index.local import LocalSearchIndex
    from ragstep.retrieval.background import Background
    from ragstep.settings import Settings


class S3SnapshotIndex(S3VectorBackfill):  # vectors after the chunks: ._s3backfill; writes: ._s3writes
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
        self._loaded: dict[str, Loaded] = {}
        self._listed: tuple[float, list[str]] | None = None
        #: The knowledge bases by-id reads look in (a :meth:`scoped` view); None: every one of the tenant's.
        self._scope: tuple[str, ...] | None = None
        #: Each loaded generation's fusion statistics (by folder), read or computed at its first search.
        self._fusion: dict[Path, _s3fusion.GenerationStats] = {}
        #: The backgrounds made of them, by (generation folders, space, filter).
        self._backgrounds: dict[tuple[tuple[Path, ...], str, SearchFilter], Background | None] = {}

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

    # -- reads ---------------------------------------------------------------------------------------------------

    def keyword_search(self, tokens: Sequence[str], flt: SearchFilter, top_k: int, threshold: float) -> list[Hit]:
        targets = self._indexes(flt.knowledge_base_ids or self._all_kbs())
        if len(targets) == 1:
            return targets[0].keyword_search(tokens, flt, top_k, threshold)
        # Every knowledge base scores with the statistics of all of them together (ragstep.retrieval.bm25), so raw
        # BM25 scores compare across them; normalised to the best of all, as one local index holding them all would.
        stats = _s3fusion.bm25_stats(targets, tokens, flt)
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

    def bm25_stats(self, tokens: Sequence[str], flt: SearchFilter) -> Bm25Stats:
        """The BM25 statistics the keyword search over ``flt`` scores with (for fusion's ceiling, :mod:`._s3fusion`)."""
        return _s3fusion.bm25_stats(self._indexes(flt.knowledge_base_ids or self._all_kbs()), tokens, flt)

    def vector_background(self, space: str, flt: SearchFilter) -> Background | None:
        """Where a query's cosines sit among ``flt``'s vectors, as one local index holding them would say
        (:mod:`._s3fusion`)."""
        parts = self._indexes(flt.knowledge_base_ids or self._all_kbs())
        key = (tuple(index.root for index in parts), space, flt)
        if key in self._backgrounds:  # a query asks several times (threshold, fusion)
            return self._backgrounds[key]
        found = _s3fusion.vector_background([(index, self._generation_stats(index)) for index in parts], space, flt)
        with self._lock:
            if len(self._backgrounds) >= 64:  # new generations make new keys: the old ones go in time
                self._backgrounds.clear()
            self._backgrounds[key] = found
        return found

    def cosines(self, vector: np.ndarray, space: str, chunk_ids: Sequence[str]) -> dict[str, float]:
        """Exact cosines of named chunks (:class:`~ragstep.index_capabilities.CandidateScores`), found as
        :meth:`vectors` finds them."""
        return (
            self._lookup(lambda index: index.cosines(vector, space, chunk_ids), set(chunk_ids), "id")
            if chunk_ids
            else {}
        )

    def bm25_scores(self, tokens: Sequence[str], flt: SearchFilter, chunk_ids: Sequence[str]) -> dict[str, float]:
        """Raw BM25 of named chunks as :meth:`keyword_search` scores them for ``flt`` (the joint statistics of its
        knowledge bases; :class:`~ragstep.index_capabilities.CandidateScores`)."""
        parts = self._indexes(flt.knowledge_base_ids or self._all_kbs())
        return _s3fusion.bm25_scores(parts, tokens, flt, chunk_ids)

    def _generation_stats(self, index: LocalSearchIndex) -> _s3fusion.GenerationStats:
        stats = self._fusion.get(index.root)
        if stats is None:
            stats = _s3fusion.read_stats(index)
            with self._lock:
                held = {e.index.root for e in self._loaded.values() if e.index is not None}
                for root in [r for r in self._fusion if r not in held]:  # generations no longer held
                    del self._fusion[root]
                self._fusion[index.root] = stats
        return stats

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
            f"knowledge base {knowledge_base_id} holds {pointer.chunks} chunks in {mb(pointer.size)} of index files, "
            f"over RAGSTEP_INDEX_S3_WARN_BYTES ({mb(self.warn_bytes)}): every search container loads them on its "
            f"first request, and ingestion stops at RAGSTEP_INDEX_S3_MAX_BYTES ({mb(self.max_bytes)}); "
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
            kbs.pop(), lambda index: index.replace_knowledge(knowledge_id, chunks, vectors, space), publish=always
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

    def upgrade_tokens(self, knowledge_base_id: str) -> tuple[int, int]:
        """Publish the knowledge base's generation with the current tokenizer's tokens when the one in S3 holds an
        earlier tokenizer's (:class:`~ragstep.index_capabilities.TokenUpgrade`). This container's copy upgraded them
        as it loaded (:mod:`._tokens`), as every cold container does until a write publishes them; this is that
        write. Returns (chunks, rows upgraded)."""
        if not SAFE_ID.match(knowledge_base_id):
            return (0, 0)
        entry = self._current(knowledge_base_id, fresh=True)
        if entry.index is None:
            return (0, 0)
        upgraded = entry.index.tokens_upgraded or 0
        if upgraded:
            self.apply_change(knowledge_base_id, lambda index: upgraded)
        return (entry.index.stats().chunks, upgraded)

    def delete_knowledge_base(self, knowledge_base_id: str) -> int:
        if not SAFE_ID.match(knowledge_base_id):
            return 0  # no such key can exist
        with self._kb_lock(knowledge_base_id):
            pointer = self.store.pointer(knowledge_base_id)
            self.store.delete_kb(knowledge_base_id)
            self._loaded.pop(knowledge_base_id, None)
            shutil.rmtree(self.cache_dir / knowledge_base_id, ignore_errors=True)
            self._listed = None
        return pointer.chunks if isinstance(pointer, Pointer) else 0


__all__ = ["MOVE_TO_OPENSEARCH", "S3SnapshotIndex"]
