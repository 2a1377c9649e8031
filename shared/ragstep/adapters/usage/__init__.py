"""Usage records: :class:`ragstep.ports.UsageStore` in SQLite (embedded) or DynamoDB (AWS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from ragstep.ports import UsageStore
    from ragstep.settings import Settings


def make_usage_store(settings: Settings, data_dir: Path) -> UsageStore:
    """One usage record per API request, of every tenant (``RAGSTEP_USAGE_BACKEND``; ``data_dir``: the data dir
    itself)."""
    if settings.usage_backend == "dynamodb":
        from ragstep.adapters.usage.dynamodb import DynamoUsageStore

        return DynamoUsageStore(settings.usage_table, ttl_seconds=settings.usage_ttl_seconds or None)
    from ragstep.adapters.usage.sqlite import SqliteUsageStore

    return SqliteUsageStore(data_dir / "usage.sqlite")
