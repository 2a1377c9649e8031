"""Chat histories behind :class:`ragstep.ports.HistoryStore`, chosen by ``RAGSTEP_HISTORY_BACKEND``: ``sqlite`` (a
file per tenant) or ``dynamodb`` (one table, tenant-prefixed keys, optional TTL). Importing this package costs only
the standard library."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from ragstep.ports import HistoryStore
    from ragstep.settings import Settings

BACKENDS = ("sqlite", "dynamodb")


def make_history(settings: Settings, tenant_id: str, tenant_dir: Path) -> HistoryStore:
    """The chat history of one tenant (``tenant_dir``: its embedded backends' folder)."""
    backend = settings.history_backend
    if backend == "sqlite":
        from ragstep.adapters.history.sqlite import SqliteHistoryStore

        return SqliteHistoryStore(tenant_dir / "history.sqlite")
    if backend == "dynamodb":
        from ragstep.adapters.history.dynamodb import DynamoHistoryStore

        ttl = settings.history_ttl_seconds or None
        return DynamoHistoryStore(settings.history_table, ttl_seconds=ttl, tenant_id=tenant_id)
    raise InputError(f"history backend {backend!r} is not available in this build; use one of {', '.join(BACKENDS)}")
