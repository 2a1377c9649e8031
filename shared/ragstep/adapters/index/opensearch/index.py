"""The :class:`~ragstep.ports.SearchIndex` on OpenSearch, one tenant's view of a shared index (the design, the
replace protocol and the tenant scoping are described in :mod:`ragstep.adapters.index.opensearch`)."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np

from ragstep.adapters._http import display_url
from ragstep.adapters.index._replace import checked_replacement
from ragstep.adapters.index.opensearch.connection import Auth, Flavour, IndexMissing, log
from ragstep.adapters.index.opensearch.deletion import OpenSearchDeletion
from ragstep.adapters.index.opensearch.queries import (
    CHUNK_EXCLUDES,
    FULL_SOURCE_INCLUDES,
    LOOKUP_BATCH,
    MAX_WINDOW,
    TENANT_FIELD,
    Engine,
    batched,
    build_chunks_at_query,
    build_document,
    build_hybrid_query,
    build_keyword_query,
    build_knn_query,
    build_search_pipeline,
    build_stats_query,
    chunk_ids_query,
    delete_action,
    enable_action,
    index_action,
    knowledge_base_query,
    knowledge_query,
    new_version,
    search_pipeline_name,
    space_field,
    tenant_filter,
    vector_values,
)
from ragstep.adapters.index.opensearch.responses import (
    SearchHit,
    chunk_from_source,
    first_per_chunk,
    keyword_hits,
    newest_per_chunk,
    parse_search_response,
    parse_stats_response,
    vector_hits,
)
from ragstep.adapters.index.opensearch.statistics import FusionInputs
from ragstep.errors import ConflictError, InputError, StorageError
from ragstep.models import DEFAULT_TENANT, Chunk, check_tenant
from ragstep.ports import Hit, IndexStats, SearchFilter
from ragstep.settings import SERVER_HYBRID_ON_AOSS

if TYPE_CHECKING:
    from ragstep.settings import Settings


class OpenSearchIndex(FusionInputs, OpenSearchDeletion):  # fusion's statistics: .statistics; deletes: .deletion
    """The :class:`ragstep.ports.SearchIndex` on OpenSearch, scoped to ``tenant_id`` (see the package docstring)."""

    def __init__(
        self,
        url: str,
        *,
        index: str = "ragstep-chunks",
        flavour: Flavour = "es",
        auth: Auth = "auto",
        username: str | None = None,
        password: str | None = None,
        region: str | None = None,
        verify_certs: bool = True,
        engine: Engine = "faiss",
        timeout_s: float = 30.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 10.0,
        visibility_timeout_s: float = 120.0,
        server_hybrid: bool = False,
        tenant_id: str = DEFAULT_TENANT,
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(
            url,
            index=index,
            flavour=flavour,
            auth=auth,
            username=username,
            password=password,
            region=region,
            verify_certs=verify_certs,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
            visibility_timeout_s=visibility_timeout_s,
            engine=engine,
            client=client,
            sleep=sleep,
        )
        if server_hybrid and flavour == "aoss":
            raise InputError(SERVER_HYBRID_ON_AOSS)
        try:
            self.tenant_id = check_tenant(tenant_id)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        self.server_hybrid = server_hybrid
        # Search pipelines this instance has created (one per weight pair). Its own lock, held across the PUT so
        # concurrent first searches send one request; never self._lock, which _client() takes.
        self._pipelines: set[str] = set()
        self._pipeline_lock = threading.Lock()
        # The clause every request of this index filters on (queries.tenant_filter).
        self._tenant = tenant_filter(self.tenant_id)

    @property
    def supports_server_hybrid(self) -> bool:
        """:class:`ragstep.index_capabilities.HybridSearch` is on when ``RAGSTEP_OPENSEARCH_SERVER_HYBRID`` is."""
        return self.server_hybrid

    @classmethod
    def from_settings(cls, settings: Settings, *, tenant_id: str = DEFAULT_TENANT) -> OpenSearchIndex:
        if not settings.opensearch_url:
            raise InputError(
                "index backend 'opensearch' needs RAGSTEP_OPENSEARCH_URL (the domain endpoint or the AOSS "
                "collection endpoint, e.g. https://abc123.us-east-1.aoss.amazonaws.com)"
            )
        password = settings.opensearch_password.get_secret_value() if settings.opensearch_password else None
        return cls(
            settings.opensearch_url,
            index=settings.opensearch_index,
            flavour=settings.opensearch_flavour,
            auth=settings.opensearch_auth,
            username=settings.opensearch_username,
            password=password,
            region=settings.aws_region,
            verify_certs=settings.opensearch_verify_certs,
            engine=settings.opensearch_knn_engine,
            timeout_s=settings.opensearch_timeout_s,
            max_retries=settings.opensearch_max_retries,
            visibility_timeout_s=settings.opensearch_visibility_timeout_s,
            server_hybrid=settings.opensearch_server_hybrid,
            tenant_id=tenant_id,
        )

    # -- writes --------------------------------------------------------------------------------------------------

    def replace_knowledge(
        self,
        knowledge_id: str,
        chunks: Sequence[Chunk],
        vectors: np.ndarray | None = None,
        space: str | None = None,
    ) -> None:
        """Write the new chunks under a new version, then delete the item's other versions (not atomic: readers see
        the old chunks, or old and new, never none; see the module docstring)."""
        vecs = checked_replacement(knowledge_id, chunks, vectors, space)
        rows: list[list[float] | None] = [None] * len(chunks)
        dims: dict[str, int] = {}
        if vecs is not None and space:
            for i, row in enumerate(vecs):
                # cosinesimil rejects zero vectors; such a chunk is kept (keyword-searchable) without a vector.
                if row.any():
                    rows[i] = vector_values(row)
            dims[space] = int(vecs.shape[1])
        else:
            space = None

        self.ensure_index(dims)
        self._check_conflicts(knowledge_id, [c.id for c in chunks])
        version = new_version()
        sources = [
            build_document(c, version=version, space=space, vector=rows[i], tenant_id=self.tenant_id)
            for i, c in enumerate(chunks)
        ]
        items = self._bulk(
            [index_action(s, with_id=self.flavour == "es") for s in sources],
            what=f"indexing of knowledge {knowledge_id}",
            params=self._write_params(),
            noted=True,
        )
        failed = [(c.id, i) for c, i in zip(chunks, items, strict=True) if not i.ok]
        if failed:
            raise StorageError(
                f"OpenSearch rejected {self._describe_failures(failed)} of knowledge {knowledge_id}; its previous "
                "chunks are still searchable, retry the ingestion"
            )
        self._await_visible(
            {
                "bool": {
                    "filter": [self._tenant, {"term": {"knowledge_id": knowledge_id}}, {"term": {"version": version}}]
                }
            },
            len(chunks),
            what=f"replace of knowledge {knowledge_id}",
        )
        self._delete_matching(
            knowledge_query([knowledge_id], keep_version=version, tenant_id=self.tenant_id),
            what=f"removal of knowledge {knowledge_id}'s old chunks",
        )

    def _check_conflicts(self, knowledge_id: str, chunk_ids: Sequence[str]) -> None:
        """A chunk id owned by another knowledge item is a conflict (as in the local index), not an overwrite."""
        for batch in batched(list(chunk_ids), LOOKUP_BATCH):
            body = {
                "size": 1,
                "_source": ["chunk_id", "knowledge_id"],
                "query": {
                    "bool": {
                        "filter": [self._tenant, {"terms": {"chunk_id": list(batch)}}],
                        "must_not": [{"term": {"knowledge_id": knowledge_id}}],
                    }
                },
            }
            hits = parse_search_response(self._search(body, what="chunk id check"))
            if hits:
                raise ConflictError(
                    f"a chunk id of knowledge {knowledge_id} is already used by another knowledge item: chunk "
                    f"{hits[0].chunk_id} belongs to {hits[0].source.get('knowledge_id', '?')}"
                )

    def delete_knowledge(self, knowledge_ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(knowledge_ids))
        if not ids:
            return 0
        return sum(
            self._delete_matching(
                knowledge_query(list(batch), tenant_id=self.tenant_id), what="deletion of knowledge items"
            )
            for batch in batched(ids, LOOKUP_BATCH)
        )

    def delete_knowledge_base(self, knowledge_base_id: str) -> int:
        return self._delete_matching(
            knowledge_base_query(knowledge_base_id, tenant_id=self.tenant_id),
            what=f"deletion of knowledge base {knowledge_base_id}",
        )

    def set_enabled(self, chunk_ids: Sequence[str], enabled: bool) -> int:
        """Returns how many of the chunks exist (already in the wanted state or not, as SQLite's rowcount)."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return 0
        if self.flavour == "es":
            items = self._bulk(
                [enable_action(c, enabled, self.tenant_id) for c in ids],
                what="enable/disable",
                params=self._write_params(),
            )
            failed = [(c, i) for c, i in zip(ids, items, strict=True) if not i.ok and i.status != 404]
            if failed:
                raise StorageError(f"OpenSearch could not enable/disable {self._describe_failures(failed)}")
            return sum(1 for i in items if i.ok)
        # aoss: no update by id in vector collections -> index a changed copy under a new version, drop the old one.
        found = self._lookup(ids, full=True)
        stale = [h for h in found if bool(h.source.get("enabled", True)) != enabled]
        if stale:
            version = new_version()
            copies = [{**h.source, TENANT_FIELD: self.tenant_id, "enabled": enabled, "version": version} for h in stale]
            items = self._bulk([index_action(s, with_id=False) for s in copies], what="enable/disable")
            failed = [(h.chunk_id, i) for h, i in zip(stale, items, strict=True) if not i.ok]
            if failed:
                raise StorageError(f"OpenSearch could not enable/disable {self._describe_failures(failed)}")
            self._await_visible(
                chunk_ids_query([h.chunk_id for h in stale], version=version, tenant_id=self.tenant_id),
                len(stale),
                what="enable/disable",
            )
            deletions = self._bulk([delete_action(h.doc_id) for h in stale], what="enable/disable")
            failed = [(h.chunk_id, i) for h, i in zip(stale, deletions, strict=True) if not i.ok and i.status != 404]
            if failed:
                raise StorageError(f"OpenSearch could not remove the old copies of {self._describe_failures(failed)}")
        return len({h.chunk_id for h in found})

    # -- reads ---------------------------------------------------------------------------------------------------

    def _lookup(self, chunk_ids: Sequence[str], *, full: bool = False) -> list[SearchHit]:
        """Every document of these chunks, the newest version per chunk (``full``: vectors and tokens included)."""
        hits: list[SearchHit] = []
        factor = 2 if self.flavour == "aoss" else 1  # room for the copies a replace leaves for a moment
        for batch in batched(list(dict.fromkeys(chunk_ids)), LOOKUP_BATCH):
            body: dict[str, Any] = {
                "size": min(len(batch) * factor, MAX_WINDOW),
                "query": chunk_ids_query(batch, tenant_id=self.tenant_id),
            }
            # Full documents are indexed again (aoss set_enabled): ask for the vector fields by name, since newer
            # collections leave k-NN vectors out of a plain _source, and a copy without them loses its embedding.
            body["_source"] = {"includes": ["*", *FULL_SOURCE_INCLUDES]} if full else {"excludes": CHUNK_EXCLUDES}
            hits.extend(parse_search_response(self._search(body, what="fetch")))
        return newest_per_chunk(hits)

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        return {h.chunk_id: chunk_from_source(h.source) for h in self._lookup(chunk_ids)}

    def knowledge_chunks(self, knowledge_id: str, limit: int) -> list[Chunk]:
        if limit <= 0:
            return []
        factor = 2 if self.flavour == "aoss" else 1
        body = {
            "size": min(limit * factor, MAX_WINDOW),
            "query": {
                "bool": {
                    "filter": [self._tenant, {"term": {"knowledge_id": knowledge_id}}, {"term": {"enabled": True}}]
                }
            },
            "sort": [{"chunk_index": "asc"}, {"chunk_id": "asc"}],
            "_source": {"excludes": CHUNK_EXCLUDES},
        }
        hits = newest_per_chunk(parse_search_response(self._search(body, what="knowledge chunks")))
        return [chunk_from_source(h.source) for h in hits[:limit]]

    def chunks_at(self, wanted: Mapping[str, Sequence[int]]) -> dict[str, dict[int, Chunk]]:
        """Enabled chunks by knowledge id and chunk_index (several rows at one index: the first in id order)."""
        out: dict[str, dict[int, Chunk]] = {}
        items = list(wanted.items())
        factor = 4 if self.flavour == "aoss" else 2  # FAQ phrasings share an index; aoss may hold copies briefly
        for start in range(0, len(items), 100):
            part = dict(items[start : start + 100])
            count = sum(len({int(i) for i in v if int(i) >= 0}) for v in part.values())
            body = build_chunks_at_query(part, min(count * factor, MAX_WINDOW), tenant_id=self.tenant_id)
            if body is None:
                continue
            for h in newest_per_chunk(parse_search_response(self._search(body, what="chunks by position"))):
                chunk = chunk_from_source(h.source)
                out.setdefault(chunk.knowledge_id, {}).setdefault(chunk.chunk_index, chunk)
        return out

    def vectors(self, chunk_ids: Sequence[str], space: str) -> dict[str, np.ndarray]:
        """Stored unit vectors of these chunks in ``space`` (float32); chunks without one are left out."""
        name = space_field(space)
        ids = list(dict.fromkeys(chunk_ids))
        if not ids or self._dimension(name) is None:
            return {}
        factor = 2 if self.flavour == "aoss" else 1
        out: dict[str, np.ndarray] = {}
        for batch in batched(ids, LOOKUP_BATCH):
            body = {
                "size": min(len(batch) * factor, MAX_WINDOW),
                "query": {
                    "bool": {
                        "filter": [self._tenant, {"terms": {"chunk_id": list(batch)}}, {"exists": {"field": name}}]
                    }
                },
                "_source": ["chunk_id", "version", name],
            }
            for h in newest_per_chunk(parse_search_response(self._search(body, what="vector read"))):
                values = h.source.get(name)
                if values:
                    out[h.chunk_id] = np.asarray(values, dtype=np.float32)
        return out

    def stats(self) -> IndexStats:
        return parse_stats_response(self._search(build_stats_query(tenant_id=self.tenant_id), what="stats"))

    def keyword_search(self, tokens: Sequence[str], flt: SearchFilter, top_k: int, threshold: float) -> list[Hit]:
        if top_k <= 0 or not any(tokens):
            return []
        body = build_keyword_query(tokens, flt, min(top_k, MAX_WINDOW), tenant_id=self.tenant_id)
        return keyword_hits(parse_search_response(self._search(body, what="keyword search")), threshold)

    def _query_vector(self, vector: np.ndarray, space: str) -> tuple[str, list[float]] | None:
        """The field of ``space`` and the unit query vector; None when nothing is embedded in ``space``."""
        name = space_field(space)
        dim = self._dimension(name)
        if dim is None:
            return None
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != dim:
            raise InputError(f"query vector has {q.shape[0]} dimensions, the {space!r} space has {dim}")
        norm = float(np.linalg.norm(q))
        if not math.isfinite(norm) or norm == 0.0:
            return None
        return name, vector_values(q / norm)

    def vector_search(
        self, vector: np.ndarray, space: str, flt: SearchFilter, top_k: int, threshold: float
    ) -> list[Hit]:
        if top_k <= 0:
            return []
        target = self._query_vector(vector, space)
        if target is None:
            return []
        body = build_knn_query(target[1], target[0], flt, min(top_k, MAX_WINDOW), tenant_id=self.tenant_id)
        return vector_hits(parse_search_response(self._search(body, what="vector search")), threshold)

    # -- optional server-side hybrid --------------------------------------------------------------------------

    def pipeline_name(self, w_keyword: float = 0.3, w_vector: float = 0.7) -> str:
        """The search pipeline :meth:`hybrid_search` uses for these weights (see :func:`search_pipeline_name`)."""
        return search_pipeline_name(self.index, w_keyword, w_vector)

    def ensure_search_pipeline(self, w_keyword: float = 0.3, w_vector: float = 0.7) -> str:
        """Create the normalization-processor pipeline of these weights unless this instance already did; returns
        its name. :meth:`hybrid_search` calls it, so there is no set-up step.

        Thread-safe: concurrent first calls wait for a single ``PUT``. The ``PUT`` creates or overwrites, and the
        name is derived from the weights, so other processes writing the same pipeline write the same body. A
        failed ``PUT`` is not remembered: the next call tries again.
        """
        self._require_hybrid()
        name = self.pipeline_name(w_keyword, w_vector)
        if name in self._pipelines:
            return name
        with self._pipeline_lock:
            if name not in self._pipelines:
                self._request(
                    "PUT",
                    "/_search/pipeline/" + quote(name, safe=""),
                    what="search pipeline creation",
                    body=build_search_pipeline(w_keyword, w_vector),
                )
                self._pipelines.add(name)
        return name

    def drop_search_pipelines(self) -> None:
        """Delete the search pipelines this instance created (used by the live tests; missing ones are fine)."""
        with self._pipeline_lock:
            names, self._pipelines = sorted(self._pipelines), set()
        for name in names:
            with contextlib.suppress(IndexMissing):
                self._request(
                    "DELETE",
                    "/_search/pipeline/" + quote(name, safe=""),
                    what="search pipeline deletion",
                    missing_ok=True,
                )

    def hybrid_search(
        self,
        tokens: Sequence[str],
        vector: np.ndarray,
        space: str,
        flt: SearchFilter,
        top_k: int,
        *,
        w_keyword: float = 0.3,
        w_vector: float = 0.7,
    ) -> list[Hit]:
        """One ``hybrid`` query scored by the search pipeline of ``(w_keyword, w_vector)`` (min-max per clause, then
        the weighted mean): already fused hits, best first, with the combined score in both ``score`` and
        ``raw_score``. The pipeline is created on first use (:meth:`ensure_search_pipeline`), and created again
        if the cluster no longer has it. Needs the neural-search plugin (OpenSearch 2.10+).

        No thresholds: only the combined score comes back, and min-max normalisation is relative to each result
        set (its best hit is 1, its worst near 0), so neither ``vector_threshold`` (a cosine) nor
        ``keyword_threshold`` (BM25 relative to the best hit) can be applied to it. The candidates are the best
        ``top_k`` of the union of both clauses.

        Nothing embedded in ``space`` yet: keyword hits only (BM25 normalised to the best, no threshold). No index
        yet: nothing found.
        """
        self._require_hybrid()
        if top_k <= 0:
            return []
        target = self._query_vector(vector, space)
        if target is None:
            return self.keyword_search(tokens, flt, top_k, 0.0)
        body = build_hybrid_query(tokens, target[1], target[0], flt, min(top_k, MAX_WINDOW), tenant_id=self.tenant_id)
        name = self.ensure_search_pipeline(w_keyword, w_vector)
        try:
            try:
                resp = self._hybrid_request(body, name)
            except StorageError as exc:
                # OpenSearch answers a search through an unknown pipeline with HTTP 400 "Pipeline <name> is not
                # defined": someone deleted it (or the endpoint now points at another cluster). Create it again.
                if f"Pipeline {name} is not defined" not in exc.message:
                    raise
                log.warning("search pipeline %s vanished from %s; creating it again", name, display_url(self.url))
                with self._pipeline_lock:
                    self._pipelines.discard(name)
                resp = self._hybrid_request(body, self.ensure_search_pipeline(w_keyword, w_vector))
        except IndexMissing:
            return []  # the index went away after its mapping was read: nothing indexed, nothing found
        return [Hit(h.chunk_id, h.score, h.score) for h in first_per_chunk(parse_search_response(resp))]

    def _hybrid_request(self, body: Mapping[str, Any], pipeline: str) -> Any:
        return self._request(
            "POST",
            f"{self._path}/_search",
            what="hybrid search",
            params={"search_pipeline": pipeline},
            body=body,
            missing_ok=True,
        )

    def _require_hybrid(self) -> None:
        if self.flavour == "aoss":
            raise InputError(SERVER_HYBRID_ON_AOSS)
