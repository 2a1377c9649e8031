"""The adapters a stage may use, created lazily from :class:`Settings` and reused.

A Lambda execution environment builds one ``Services`` at import time of its handler and keeps it across
invocations, so clients (SQLite connections, HTTP pools, boto3 clients) are created once per cold start and only
for the adapters that stage actually touches.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError, NotFoundError, StorageError
from .models import KnowledgeBase
from .settings import Settings

if TYPE_CHECKING:
    from .ports import BlobStore, CatalogStore, Embedder, HistoryStore, Reranker, SearchIndex


class Services:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self._lock = threading.Lock()
        self._embedders: dict[str, Embedder | None] = {}

    @property
    def data_dir(self) -> Path:
        path = Path(self.settings.data_dir)
        if path.exists() and not path.is_dir():
            raise StorageError(f"data dir {path} is a file; pass --data-dir to a folder")
        return path

    @cached_property
    def index(self) -> SearchIndex:
        if self.settings.index_backend == "local":
            from .adapters.local_index import LocalSearchIndex

            return LocalSearchIndex(self.data_dir / "index")
        if self.settings.index_backend == "opensearch":
            from .adapters.opensearch_index import OpenSearchIndex

            return OpenSearchIndex.from_settings(self.settings)
        raise InputError(f"index backend {self.settings.index_backend!r} is not available in this build")

    @cached_property
    def catalog(self) -> CatalogStore:
        if self.settings.catalog_backend == "sqlite":
            from .adapters.sqlite_catalog import SqliteCatalogStore

            return SqliteCatalogStore(self.data_dir / "catalog.sqlite")
        if self.settings.catalog_backend == "dynamodb":
            from .adapters.dynamodb_catalog import DynamoCatalogStore

            # The stack's region (AWS_REGION); RAGSTEP_AWS_REGION is Bedrock's and may differ.
            return DynamoCatalogStore(self.settings.catalog_table)
        raise InputError(f"catalog backend {self.settings.catalog_backend!r} is not available in this build")

    @cached_property
    def history(self) -> HistoryStore:
        if self.settings.history_backend == "sqlite":
            from .adapters.sqlite_history import SqliteHistoryStore

            return SqliteHistoryStore(self.data_dir / "history.sqlite")
        if self.settings.history_backend == "dynamodb":
            from .adapters.dynamodb_history import DynamoHistoryStore

            return DynamoHistoryStore(
                self.settings.history_table, ttl_seconds=self.settings.history_ttl_seconds or None
            )
        raise InputError(f"history backend {self.settings.history_backend!r} is not available in this build")

    @cached_property
    def blobs(self) -> BlobStore:
        if self.settings.blob_backend == "local":
            from .adapters.local_blobs import LocalBlobStore

            # ragstep.ingest.INGEST_PREFIX, spelled out: importing ragstep.ingest (parsers, chunker) here would cost
            # every search function's cold start ~100 ms (tests/test_local_stores.py checks that the two agree).
            return LocalBlobStore(self.data_dir / "blobs", scratch_prefixes=("ingest/",))
        if self.settings.blob_backend == "s3":
            from .adapters.s3_blobs import S3BlobStore

            return S3BlobStore(
                self.settings.blob_bucket, self.settings.blob_prefix, kms_key_id=self.settings.s3_kms_key_id
            )
        raise InputError(f"blob backend {self.settings.blob_backend!r} is not available in this build")

    @cached_property
    def executor(self) -> ThreadPoolExecutor:
        """Threads for concurrent retrievers, created once per process (a request does not pay for thread start-up)."""
        return ThreadPoolExecutor(max_workers=self.settings.search_concurrency, thread_name_prefix="ragstep-search")

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
        from .adapters.rerankers import make_reranker

        return make_reranker(self.settings)

    def embedder(self, model_id: str) -> Embedder | None:
        """The embedder of one vector space ("none" -> no embedder: BM25 only); one instance per model id."""
        with self._lock:
            if model_id not in self._embedders:
                if model_id == "none":
                    self._embedders[model_id] = None
                else:
                    from .adapters.embedders import make_embedder

                    self._embedders[model_id] = make_embedder(self.settings, model_id)
            return self._embedders[model_id]

    def register_embedder(self, embedder: Embedder) -> None:
        """Use ``embedder`` for its ``model_id`` (benchmarks serve precomputed vectors this way)."""
        with self._lock:
            self._embedders[embedder.model_id] = embedder

    def default_embedding_model(self) -> str:
        """The model id new knowledge bases get: "none" or "provider:model" from the settings."""
        from .adapters.embedders import embedder_model_id

        return embedder_model_id(self.settings)

    def require_kb(self, id_or_name: str) -> KnowledgeBase:
        kb = self.catalog.get_kb(id_or_name)
        if kb is None:
            known = ", ".join(k.name for k in self.catalog.list_kbs()) or "none yet"
            raise NotFoundError(f"unknown knowledge base {id_or_name!r} (known: {known}); create it with `kb create`")
        return kb
