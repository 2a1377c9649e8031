"""Who serves a request: process-scoped :class:`Clients` and the request-scoped :class:`Context` built from them.

``Clients`` lives as long as the process (a Lambda execution environment builds one on its first invocation and keeps
it), creates every adapter lazily on first use and reuses it, so a warm invocation pays for no connection or client.
Adapters that hold a tenant's data are created once per tenant: every read and write of a :class:`Context` goes to its
tenant's own adapters, and no code path can reach another tenant's data without building another context.

How a tenant's data is kept apart, per backend (the single-user default tenant ``default`` keeps the layout ragstep
has always had, so an existing data dir, table or bucket needs no migration):

* embedded (local index, SQLite, folder): ``<data dir>/tenants/<tenant>/`` holds its own index, catalog, history and
  blobs -- separate files, so even BM25 statistics and vector snapshots are the tenant's own;
* S3: objects under ``<prefix>tenants/<tenant>/``;
* DynamoDB: partition keys prefixed with ``<tenant>#``;
* OpenSearch: every document carries ``tenant_id`` and every query filters on it.

A ``Context`` is cheap (a frozen dataclass over the shared ``Clients``): build one per request with
:meth:`Clients.context`, from the ``tenant_id`` the entry point authenticated and carried in the state.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ragstep.errors import InputError, NotFoundError
from ragstep.models import DEFAULT_TENANT, KnowledgeBase, check_tenant
from ragstep.settings import Settings

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor  # the pools' module loads when a pool is made

    from ragstep.pipeline.budget import StageTimings
    from ragstep.ports import (
        BlobStore,
        CatalogStore,
        ChatModel,
        DataAnalysis,
        Embedder,
        GraphStore,
        HistoryStore,
        IdempotencyStore,
        KeyStore,
        MessageChannel,
        Reranker,
        ResponseCache,
        ResultDelivery,
        SearchIndex,
        UsageStore,
        WebSearchProvider,
    )

A = TypeVar("A")

__all__ = ["DEFAULT_TENANT", "Clients", "Context"]

# ragstep.stages.ingest.products.INGEST_PREFIX, spelled out: importing the ingest stages (parsers, chunker) here would
# cost every search function's cold start ~100 ms (tests/test_local_stores.py checks that the two agree).
_SCRATCH_PREFIXES = ("ingest/",)
_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")


class Clients:
    """The adapters of one process, created lazily from :class:`Settings` and reused by every request."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self._lock = threading.Lock()
        self._embedders: dict[str, Embedder | None] = {}
        self._scoped: dict[tuple[str, str], Any] = {}

    def context(self, tenant_id: str = DEFAULT_TENANT, allowed_kbs: tuple[str, ...] | None = None) -> Context:
        """The request-scoped view of these clients for one tenant (limited to the knowledge bases ``allowed_kbs``
        names, by id or name, when given: an API key's allow-list)."""
        return Context(check_tenant(tenant_id), self, allowed_kbs)

    # -- where a tenant's data lives ------------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        from ragstep.data_dir import usable_data_dir

        return usable_data_dir(Path(self.settings.data_dir))

    def tenant_dir(self, tenant_id: str) -> Path:
        """The embedded backends' folder of one tenant (the data dir itself for the default tenant)."""
        if tenant_id == DEFAULT_TENANT:
            return self.data_dir
        if not _SAFE.match(tenant_id):  # check_tenant guarantees it; a path must never depend on that alone
            raise InputError(f"tenant id {tenant_id!r} may only hold letters, digits, '-' and '_'")
        return self.data_dir / "tenants" / tenant_id

    def _per_tenant(self, kind: str, tenant_id: str, build: Callable[[], A]) -> A:
        key = (kind, tenant_id)
        adapter = self._scoped.get(key)
        if adapter is None:
            with self._lock:
                adapter = self._scoped.get(key)
                if adapter is None:
                    adapter = self._scoped[key] = build()
        return adapter

    # -- per-tenant adapters --------------------------------------------------------------------------------------

    def index(self, tenant_id: str) -> SearchIndex:
        return self._per_tenant("index", tenant_id, lambda: self._build_index(tenant_id))

    def catalog(self, tenant_id: str) -> CatalogStore:
        return self._per_tenant("catalog", tenant_id, lambda: self._build_catalog(tenant_id))

    def history(self, tenant_id: str) -> HistoryStore:
        return self._per_tenant("history", tenant_id, lambda: self._build_history(tenant_id))

    def blobs(self, tenant_id: str) -> BlobStore:
        return self._per_tenant("blobs", tenant_id, lambda: self._build_blobs(tenant_id))

    def graph(self, tenant_id: str) -> GraphStore:
        """The tenant's knowledge graphs (RAGSTEP_GRAPH_BACKEND)."""

        def build() -> GraphStore:
            settings = self.settings
            if settings.graph_backend == "dynamodb":
                from ragstep.adapters.graph.dynamodb import DynamoGraphStore

                return DynamoGraphStore(settings.graph_table, tenant_id=tenant_id)
            if settings.graph_backend == "neo4j":
                from ragstep.adapters.graph.neo4j import Neo4jGraphStore

                password = settings.neo4j_password.get_secret_value() if settings.neo4j_password else ""
                return Neo4jGraphStore(settings.neo4j_url, settings.neo4j_username, password,
                                       database=settings.neo4j_database, tenant_id=tenant_id)  # fmt: skip
            from ragstep.adapters.graph.sqlite import SqliteGraphStore

            return SqliteGraphStore(self.tenant_dir(tenant_id) / "graph.sqlite")

        return self._per_tenant("graph", tenant_id, build)

    def cache(self, tenant_id: str) -> ResponseCache | None:
        """The tenant's response cache (None with ``RAGSTEP_CACHE_BACKEND=none``)."""

        def build() -> ResponseCache | None:
            from ragstep.adapters.cache import make_cache

            return make_cache(self.settings, tenant_id, self.tenant_dir(tenant_id))

        return self._per_tenant("cache", tenant_id, build) if self.settings.cache_backend != "none" else None

    def _build_index(self, tenant_id: str) -> SearchIndex:
        backend = self.settings.index_backend
        if backend == "local":
            from ragstep.adapters.index.local import LocalSearchIndex

            return LocalSearchIndex(
                self.tenant_dir(tenant_id) / "index",
                vector_storage=self.settings.vector_storage,
                rescore_factor=self.settings.vector_rescore_factor,
                ivf_min_rows=self.settings.vector_ivf_min_rows,
            )
        if backend == "opensearch":
            from ragstep.adapters.index.opensearch import OpenSearchIndex

            return OpenSearchIndex.from_settings(self.settings, tenant_id=tenant_id)
        if backend == "s3snapshot":
            from ragstep.adapters.index.s3snapshot import S3SnapshotIndex

            return S3SnapshotIndex.from_settings(self.settings, tenant_id, self.tenant_dir(tenant_id) / "s3index")
        raise InputError(f"index backend {backend!r} is not available in this build")

    def _build_catalog(self, tenant_id: str) -> CatalogStore:
        backend = self.settings.catalog_backend
        if backend == "sqlite":
            from ragstep.adapters.catalog.sqlite import SqliteCatalogStore

            return SqliteCatalogStore(self.tenant_dir(tenant_id) / "catalog.sqlite")
        if backend == "dynamodb":
            from ragstep.adapters.catalog.dynamodb import DynamoCatalogStore

            # The stack's region (AWS_REGION); RAGSTEP_AWS_REGION is Bedrock's and may differ.
            days = self.settings.job_retention_days
            return DynamoCatalogStore(
                self.settings.catalog_table, tenant_id=tenant_id, job_retention_s=days * 86400.0 if days else None
            )
        raise InputError(f"catalog backend {backend!r} is not available in this build")

    def _build_history(self, tenant_id: str) -> HistoryStore:
        backend = self.settings.history_backend
        if backend == "sqlite":
            from ragstep.adapters.history.sqlite import SqliteHistoryStore

            return SqliteHistoryStore(self.tenant_dir(tenant_id) / "history.sqlite")
        if backend == "dynamodb":
            from ragstep.adapters.history.dynamodb import DynamoHistoryStore

            ttl = self.settings.history_ttl_seconds or None
            return DynamoHistoryStore(self.settings.history_table, ttl_seconds=ttl, tenant_id=tenant_id)
        raise InputError(f"history backend {backend!r} is not available in this build")

    def _build_blobs(self, tenant_id: str) -> BlobStore:
        backend = self.settings.blob_backend
        if backend == "local":
            from ragstep.adapters.blobs.local import LocalBlobStore

            return LocalBlobStore(self.tenant_dir(tenant_id) / "blobs", scratch_prefixes=_SCRATCH_PREFIXES)
        if backend == "s3":
            from ragstep.adapters.blobs.s3 import S3BlobStore

            prefix = self.settings.blob_prefix
            if tenant_id != DEFAULT_TENANT:
                prefix = f"{prefix.rstrip('/')}/tenants/{tenant_id}/".lstrip("/")
            return S3BlobStore(self.settings.blob_bucket, prefix, kms_key_id=self.settings.s3_kms_key_id)
        raise InputError(f"blob backend {backend!r} is not available in this build")

    # -- shared by every tenant -------------------------------------------------------------------------------------

    @cached_property
    def keys(self) -> KeyStore:
        """Tenants and API keys: the server's own store (a key resolves *to* a tenant), not any tenant's."""
        if self.settings.keys_backend == "dynamodb":
            from ragstep.adapters.keys.dynamodb import DynamoKeyStore

            return DynamoKeyStore(self.settings.keys_table)
        from ragstep.adapters.keys.sqlite import SqliteKeyStore

        return SqliteKeyStore(self.data_dir / "keys.sqlite")

    @cached_property
    def usage(self) -> UsageStore:
        """One usage record per API request, of every tenant (reports read one tenant's)."""
        if self.settings.usage_backend == "dynamodb":
            from ragstep.adapters.usage.dynamodb import DynamoUsageStore

            return DynamoUsageStore(self.settings.usage_table, ttl_seconds=self.settings.usage_ttl_seconds or None)
        from ragstep.adapters.usage.sqlite import SqliteUsageStore

        return SqliteUsageStore(self.data_dir / "usage.sqlite")

    @cached_property
    def idempotency(self) -> IdempotencyStore:
        """What channels remember as done once (Slack events, retrieval requests, webhook messages), every tenant's."""
        from ragstep.adapters.idempotency import make_idempotency_store

        return make_idempotency_store(
            self.settings.idempotency_backend,
            table=self.settings.idempotency_table,
            path=self.data_dir / "idempotency.sqlite",
        )

    @cached_property
    def replies(self) -> ResultDelivery:
        """Delivers event-driven retrieval results (EventBridge, SQS, signed HTTPS callbacks)."""
        from ragstep.adapters.channels.replies import ResultReplies

        secret = self.settings.events_callback_secret
        return ResultReplies(callback_secret=secret.get_secret_value() if secret else "")

    @cached_property
    def slack(self) -> MessageChannel:
        """Slack's Web API with the bot token (RAGSTEP_SLACK_BOT_TOKEN)."""
        from ragstep.adapters.channels.slack import SlackWebClient

        token = self.settings.slack_bot_token
        return SlackWebClient(token.get_secret_value() if token else "", api_url=self.settings.slack_api_url)

    @cached_property
    def executor(self) -> ThreadPoolExecutor:
        """Threads for concurrent retrievers, created once per process (a request does not pay for thread start-up)."""
        from ragstep.deadline import ContextThreadPool

        # Tasks run in the submitting request's contextvars context: they keep its deadline (ragstep.deadline).
        return ContextThreadPool(max_workers=self.settings.search_concurrency, thread_name_prefix="ragstep-search")

    @cached_property
    def stage_timings(self) -> StageTimings:
        """What each optional stage has taken in this process: the latency budgets' estimates."""
        from ragstep.pipeline.budget import StageTimings

        return StageTimings()

    @cached_property
    def branch_executor(self) -> ThreadPoolExecutor:
        """Threads for the branches of Parallel pipeline steps, kept apart from the retrievers' pool (a branch waits
        on that one) and reused, so a branch's thread keeps its SQLite connections from one request to the next."""
        from ragstep.deadline import ContextThreadPool

        return ContextThreadPool(max_workers=32, thread_name_prefix="ragstep-branch")

    @cached_property
    def stepfunctions(self) -> Any:
        """boto3 Step Functions client of ``RAGSTEP_EXECUTOR=stepfunctions`` (in the region of the state machine).

        A synchronous Express execution may run for up to five minutes, so reads wait that long; throttling and
        transient errors are retried (a search is read-only, so running it again is harmless).
        """
        import boto3
        from botocore.config import Config

        parts = self.settings.state_machine_arn.split(":")
        region = parts[3] if len(parts) > 3 and parts[3] else None
        config = Config(connect_timeout=5, read_timeout=310, retries={"mode": "standard", "max_attempts": 3})
        return boto3.session.Session().client("stepfunctions", region_name=region, config=config)

    @cached_property
    def reranker(self) -> Reranker:
        """The configured reranker (RAGSTEP_RERANKER; "none" = the local token/vector similarity)."""
        from ragstep.adapters.rerankers import make_reranker

        return make_reranker(self.settings)

    @cached_property
    def chat_model(self) -> ChatModel:
        """The configured chat model (RAGSTEP_CHAT_PROVIDER; "extractive" = the model-free answerer)."""
        from ragstep.adapters.chat import make_chat_model

        return make_chat_model(self.settings)

    @cached_property
    def web_search(self) -> WebSearchProvider:
        """The configured web search engine (RAGSTEP_WEB_SEARCH_PROVIDER), used by requests that turn web search on."""
        from ragstep.adapters.web import make_web_search

        return make_web_search(self.settings)

    @cached_property
    def data_analysis(self) -> DataAnalysis:
        """Opens the data-analysis sandboxes (in-memory DuckDB, one per request) under the configured limits."""
        from ragstep.adapters.analysis.duckdb import DuckDBAnalysis

        return DuckDBAnalysis.from_settings(self.settings)

    def embedder(self, model_id: str) -> Embedder | None:
        """The embedder of one vector space ("none" -> no embedder: BM25 only); one instance per model id."""
        with self._lock:
            if model_id not in self._embedders:
                if model_id == "none":
                    self._embedders[model_id] = None
                else:
                    from ragstep.adapters.embedders import make_embedder

                    self._embedders[model_id] = make_embedder(self.settings, model_id)
            return self._embedders[model_id]

    def register_embedder(self, embedder: Embedder) -> None:
        """Use ``embedder`` for its ``model_id`` (benchmarks serve precomputed vectors this way)."""
        with self._lock:
            self._embedders[embedder.model_id] = embedder

    def default_embedding_model(self) -> str:
        """The model id new knowledge bases get: "none" or "provider:model" from the settings."""
        from ragstep.adapters.embedders import embedder_model_id

        return embedder_model_id(self.settings)


@dataclass(frozen=True, slots=True)
class Context:
    """One request's view: its tenant's adapters, the shared model clients and the settings in force."""

    tenant_id: str
    clients: Clients
    #: The knowledge bases (ids or names) this request may use; None = all of the tenant's. Enforced by the catalog
    #: view below, so every use case and stage that looks a knowledge base up sees only these.
    allowed_kbs: tuple[str, ...] | None = None

    @property
    def settings(self) -> Settings:
        return self.clients.settings

    @property
    def index(self) -> SearchIndex:
        return self.clients.index(self.tenant_id)

    @property
    def catalog(self) -> CatalogStore:
        catalog = self.clients.catalog(self.tenant_id)
        if self.allowed_kbs is None:
            return catalog
        from ragstep.adapters.catalog.allowed import AllowedCatalog

        return AllowedCatalog(catalog, self.allowed_kbs)

    @property
    def history(self) -> HistoryStore:
        return self.clients.history(self.tenant_id)

    @property
    def blobs(self) -> BlobStore:
        return self.clients.blobs(self.tenant_id)

    @property
    def cache(self) -> ResponseCache | None:
        return self.clients.cache(self.tenant_id)

    @property
    def graph(self) -> GraphStore:
        return self.clients.graph(self.tenant_id)

    @property
    def data_dir(self) -> Path:
        """The embedded backends' folder of this tenant."""
        return self.clients.tenant_dir(self.tenant_id)

    @property
    def executor(self) -> ThreadPoolExecutor:
        return self.clients.executor

    @property
    def deadline(self) -> float | None:
        """When this request must have answered (``time.monotonic()``), None without a limit: on AWS the handler sets
        it from the Lambda context, and the network clients bound their timeouts and retries by it
        (:mod:`ragstep.deadline`)."""
        from ragstep.deadline import current

        return current()

    @property
    def reranker(self) -> Reranker:
        return self.clients.reranker

    @property
    def chat_model(self) -> ChatModel:
        return self.clients.chat_model

    @property
    def web_search(self) -> WebSearchProvider:
        return self.clients.web_search

    @property
    def data_analysis(self) -> DataAnalysis:
        return self.clients.data_analysis

    def embedder(self, model_id: str) -> Embedder | None:
        return self.clients.embedder(model_id)

    def register_embedder(self, embedder: Embedder) -> None:
        """Process-wide, like every model client: each tenant's context sees it."""
        self.clients.register_embedder(embedder)

    def default_embedding_model(self) -> str:
        return self.clients.default_embedding_model()

    def require_kb(self, id_or_name: str) -> KnowledgeBase:
        """This tenant's knowledge base by id or name. The error names no other knowledge base: a caller may be
        anyone, and another knowledge base's name is not theirs to learn (``ragstep kb list`` shows them)."""
        kb = self.catalog.get_kb(id_or_name)
        if kb is None:
            raise NotFoundError(f"unknown knowledge base {id_or_name!r}")
        return kb
