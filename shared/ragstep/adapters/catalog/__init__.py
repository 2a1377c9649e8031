"""Catalogs behind :class:`ragstep.ports.CatalogStore` (knowledge bases, documents, ingestion jobs), chosen by
``RAGSTEP_CATALOG_BACKEND``: ``sqlite`` (a file per tenant) or ``dynamodb`` (one table, tenant-prefixed keys).
Importing this package costs only the standard library."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from ragstep.ports import CatalogStore
    from ragstep.settings import Settings

BACKENDS = ("sqlite", "dynamodb")


def make_catalog(settings: Settings, tenant_id: str, tenant_dir: Path) -> CatalogStore:
    """The catalog of one tenant (``tenant_dir``: its embedded backends' folder)."""
    backend = settings.catalog_backend
    if backend == "sqlite":
        from ragstep.adapters.catalog.sqlite import SqliteCatalogStore

        return SqliteCatalogStore(tenant_dir / "catalog.sqlite")
    if backend == "dynamodb":
        from ragstep.adapters.catalog.dynamodb import DynamoCatalogStore

        # The stack's region (AWS_REGION); RAGSTEP_AWS_REGION is Bedrock's and may differ.
        days = settings.job_retention_days
        return DynamoCatalogStore(
            settings.catalog_table, tenant_id=tenant_id, job_retention_s=days * 86400.0 if days else None
        )
    raise InputError(f"catalog backend {backend!r} is not available in this build; use one of {', '.join(BACKENDS)}")
