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
from collections import OrderedDict
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
        VisionModel,
        WebSearchProvider,
    )

A = TypeVar("A")

__all__ = ["DEFAULT_TENANT", "Clients", "Context"]

#: How many tenants' adapters a process keeps (least recently used dropped first). Each holds open connections and,
#: for the embedded index, memory-mapped snapshots and caches: one process serving many tenants (a warm Lambda
#: environment, a shared server) would otherwise grow without end. A dropped tenant's adapters are rebuilt on its
#: next request (as on a cold start); a request still holding one finishes with it.
MAX_TENANTS_KEPT = 64
_SAFE = re.compile(r"^[A-Za-z0-9_-]+$")


class Clients:
    """The adapters of one process, created lazily from :class:`Settings` and reused by every request."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self._lock = threading.Lock()
        self._lru_lock = threading.Lock()
        self._embedders: dict[str, Embedder | None] = {}
        # tenant -> kind -> adapter, least recently used tenant first (bounded by MAX_TENANTS_KEPT).
        self._scoped: OrderedDict[str, dict[str, Any]] = OrderedDict()

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

    def _per_tenant(self, kind: str, tenant_id: str, build: Callable[[Settings, str, Path], A]) -> A:
        """The tenant's adapter of ``kind``, built by the port's factory on first use and reused; the least recently
        used tenant's adapters are dropped beyond :data:`MAX_TENANTS_KEPT` tenants."""
        adapter = self._kept(kind, tenant_id)
        if adapter is None:
            with self._lock:  # one build at a time, so two requests never build the same adapter twice
                adapter = self._kept(kind, tenant_id)
                if adapter is None:
                    adapter = build(self.settings, tenant_id, self.tenant_dir(tenant_id))
                    with self._lru_lock:
                        self._scoped.setdefault(tenant_id, {})[kind] = adapter
                        self._scoped.move_to_end(tenant_id)
                        while len(self._scoped) > MAX_TENANTS_KEPT:
                            self._scoped.popitem(last=False)
        return adapter

    def _kept(self, kind: str, tenant_id: str) -> Any:
        """The tenant's adapter of ``kind`` if kept (now its most recently used tenant), else None. Its lock is never
        held while an adapter is built: a slow build does not hold up requests whose adapters are there."""
        with self._lru_lock:
            adapters = self._scoped.get(tenant_id)
            if adapters is None:
                return None
            self._scoped.move_to_end(tenant_id)
            return adapters.get(kind)

    # -- per-tenant adapters --------------------------------------------------------------------------------------

    def index(self, tenant_id: str) -> SearchIndex:
        """The tenant's search index (RAGSTEP_INDEX_BACKEND)."""
        from ragstep.adapters.index import make_index

        return self._per_tenant("index", tenant_id, make_index)

    def catalog(self, tenant_id: str) -> CatalogStore:
        """The tenant's catalog (RAGSTEP_CATALOG_BACKEND)."""
        from ragstep.adapters.catalog import make_catalog

        return self._per_tenant("catalog", tenant_id, make_catalog)

    def history(self, tenant_id: str) -> HistoryStore:
        """The tenant's chat history (RAGSTEP_HISTORY_BACKEND)."""
        from ragstep.adapters.history import make_history

        return self._per_tenant("history", tenant_id, make_history)

    def blobs(self, tenant_id: str) -> BlobStore:
        """The tenant's blob store (RAGSTEP_BLOB_BACKEND)."""
        from ragstep.adapters.blobs import make_blobs

        return self._per_tenant("blobs", tenant_id, make_blobs)

    def graph(self, tenant_id: str) -> GraphStore:
        """The tenant's knowledge graphs (RAGSTEP_GRAPH_BACKEND)."""
        from ragstep.adapters.graph import make_graph

        return self._per_tenant("graph", tenant_id, make_graph)

    def cache(self, tenant_id: str) -> ResponseCache | None:
        """The tenant's response cache (None with ``RAGSTEP_CACHE_BACKEND=none``)."""
        if self.settings.cache_backend == "none":
            return None
        from ragstep.adapters.cache import make_cache

        return self._per_tenant("cache", tenant_id, make_cache)

    # -- shared by every tenant -------------------------------------------------------------------------------------

    @cached_property
    def keys(self) -> KeyStore:
        """Tenants and API keys: the server's own store (a key resolves *to* a tenant), not any tenant's."""
        from ragstep.adapters.keys import make_key_store

        return make_key_store(self.settings, self.data_dir)

    @cached_property
    def usage(self) -> UsageStore:
        """One usage record per API request, of every tenant (reports read one tenant's)."""
        from ragstep.adapters.usage import make_usage_store

        return make_usage_store(self.settings, self.data_dir)

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
    def stage_costs(self) -> StageTimings:
        """What each stage has cost (USD) in this process's receipts: the cost budgets' estimates."""
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
    def vision_model(self) -> VisionModel | None:
        """The model that captions pictures (RAGSTEP_VISION_MODEL; None: no captions)."""
        from ragstep.adapters.vision import make_vision_model

        return make_vision_model(self.settings)

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
    def vision_model(self) -> VisionModel | None:
        return self.clients.vision_model

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
