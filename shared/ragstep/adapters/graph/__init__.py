"""Knowledge-graph stores (the :class:`~ragstep.ports.GraphStore` port), chosen by ``RAGSTEP_GRAPH_BACKEND``:
``sqlite`` (a file per tenant), ``dynamodb`` or ``neo4j`` (tenant-scoped keys or labels). Importing this package
costs only the standard library."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from ragstep.ports import GraphStore
    from ragstep.settings import Settings

BACKENDS = ("sqlite", "dynamodb", "neo4j")


def make_graph(settings: Settings, tenant_id: str, tenant_dir: Path) -> GraphStore:
    """The knowledge graphs of one tenant (``tenant_dir``: its embedded backends' folder)."""
    backend = settings.graph_backend
    if backend == "dynamodb":
        from ragstep.adapters.graph.dynamodb import DynamoGraphStore

        return DynamoGraphStore(settings.graph_table, tenant_id=tenant_id)
    if backend == "neo4j":
        from ragstep.adapters.graph.neo4j import Neo4jGraphStore

        password = settings.neo4j_password.get_secret_value() if settings.neo4j_password else ""
        return Neo4jGraphStore(
            settings.neo4j_url, settings.neo4j_username, password, database=settings.neo4j_database, tenant_id=tenant_id
        )
    if backend == "sqlite":
        from ragstep.adapters.graph.sqlite import SqliteGraphStore

        return SqliteGraphStore(tenant_dir / "graph.sqlite")
    raise InputError(f"graph backend {backend!r} is not available in this build; use one of {', '.join(BACKENDS)}")
