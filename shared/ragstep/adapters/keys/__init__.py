"""Tenants and API keys: :class:`ragstep.ports.KeyStore` in SQLite (embedded) or DynamoDB (AWS)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from ragstep.ports import KeyStore
    from ragstep.settings import Settings


def make_key_store(settings: Settings, data_dir: Path) -> KeyStore:
    """The server's tenants and API keys (``RAGSTEP_KEYS_BACKEND``): a key resolves *to* a tenant, so this store is
    no tenant's own (``data_dir``: the data dir itself, never a tenant's folder)."""
    if settings.keys_backend == "dynamodb":
        from ragstep.adapters.keys.dynamodb import DynamoKeyStore

        return DynamoKeyStore(settings.keys_table)
    from ragstep.adapters.keys.sqlite import SqliteKeyStore

    return SqliteKeyStore(data_dir / "keys.sqlite")
