"""The response cache behind :class:`ragstep.ports.ResponseCache`, chosen by ``RAGSTEP_CACHE_BACKEND``: ``sqlite``
(a file per tenant in the data dir), ``dynamodb`` (one table, tenant-prefixed keys, TTL attribute) or ``none``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from ragstep.ports import ResponseCache
    from ragstep.settings import Settings

BACKENDS = ("sqlite", "dynamodb", "none")


def make_cache(settings: Settings, tenant_id: str, tenant_dir: Path) -> ResponseCache | None:
    backend = settings.cache_backend
    if backend == "none":
        return None
    if backend == "sqlite":
        from ragstep.adapters.cache.sqlite import SqliteResponseCache

        return SqliteResponseCache(tenant_dir / "cache.sqlite")
    if backend == "dynamodb":
        from ragstep.adapters.cache.dynamodb import DynamoResponseCache

        return DynamoResponseCache(settings.cache_table, tenant_id=tenant_id)
    raise InputError(f"cache backend {backend!r} is not available; use one of {', '.join(BACKENDS)}")
