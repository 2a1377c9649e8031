"""The knowledge-graph store on a Neo4j server, through the official ``neo4j`` driver (``pip install
'ragstep[neo4j]'``; ``RAGSTEP_GRAPH_BACKEND=neo4j``, ``RAGSTEP_NEO4J_URL``, ``..._USERNAME``, ``..._PASSWORD``,
``..._DATABASE``).

Each document's part of a graph is its own ``:RagstepNode`` nodes (tenant, knowledge base, normalised name ``key``,
the document, display name, attributes, chunk ids) and the ``:RAGSTEP_REL`` relationships between them; an entity is
every node with its key. Replacing a document's part is one write transaction (delete its nodes, create the new
ones and their relationships), so readers see the old part or the new one. The statements are built by pure
functions (:func:`replace_statements` ...) so their shape is tested without a server.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ragstep.errors import InputError, StorageError
from ragstep.models.graph import GraphExtraction, GraphNode
from ragstep.retrieval.graph_names import normalise_name

Statement = tuple[str, dict[str, Any]]

SCHEMA: tuple[str, ...] = (
    "CREATE INDEX ragstep_node_key IF NOT EXISTS FOR (n:RagstepNode) ON (n.tenant, n.kb, n.key)",
    "CREATE INDEX ragstep_node_document IF NOT EXISTS FOR (n:RagstepNode) ON (n.tenant, n.knowledge_id)",
)
DELETE_DOCUMENTS = (
    "MATCH (n:RagstepNode {tenant: $tenant}) WHERE n.knowledge_id IN $knowledge_ids "
    "DETACH DELETE n RETURN count(n) AS removed"
)
DELETE_KB = "MATCH (n:RagstepNode {tenant: $tenant, kb: $kb}) DETACH DELETE n RETURN count(n) AS removed"
CREATE_NODES = (
    "UNWIND $nodes AS row CREATE (:RagstepNode {tenant: $tenant, kb: $kb, knowledge_id: $knowledge_id, "
    "key: row.key, name: row.name, attributes: row.attributes, chunk_ids: row.chunk_ids})"
)
CREATE_RELATIONS = (
    "UNWIND $relations AS r "
    "MATCH (a:RagstepNode {tenant: $tenant, kb: $kb, knowledge_id: $knowledge_id, key: r.source}), "
    "(b:RagstepNode {tenant: $tenant, kb: $kb, knowledge_id: $knowledge_id, key: r.target}) "
    "CREATE (a)-[:RAGSTEP_REL {type: r.type, knowledge_id: $knowledge_id}]->(b)"
)
NAMES = "MATCH (n:RagstepNode {tenant: $tenant}) WHERE n.kb IN $kbs RETURN DISTINCT n.key AS key ORDER BY key"
LOOKUP = (
    "MATCH (n:RagstepNode {tenant: $tenant}) WHERE n.kb IN $kbs AND n.key IN $keys "
    "RETURN n.key AS key, n.name AS name, n.attributes AS attributes, n.chunk_ids AS chunk_ids "
    "ORDER BY n.key, n.knowledge_id"
)
NEIGHBOURS = (
    "MATCH (n:RagstepNode {tenant: $tenant})-[:RAGSTEP_REL]-(m:RagstepNode) "
    "WHERE n.kb IN $kbs AND n.key IN $keys AND NOT m.key IN $keys RETURN DISTINCT m.key AS key ORDER BY key"
)


def replace_statements(tenant: str, kb_id: str, knowledge_id: str, graph: GraphExtraction) -> list[Statement]:
    """The statements of one write transaction that replaces a document's part of the graph."""
    nodes: dict[str, dict[str, Any]] = {}
    for node in graph.nodes:
        key = normalise_name(node.name)
        if not key:
            continue
        row = nodes.setdefault(key, {"key": key, "name": node.name, "attributes": [], "chunk_ids": []})
        row["attributes"] = list(dict.fromkeys([*row["attributes"], *node.attributes]))
        row["chunk_ids"] = list(dict.fromkeys([*row["chunk_ids"], *node.chunk_ids]))
    relations = sorted(
        {(s, t, r.type) for r in graph.relations
         if (s := normalise_name(r.source)) in nodes and (t := normalise_name(r.target)) in nodes and s != t}
    )  # fmt: skip
    scope = {"tenant": tenant, "kb": kb_id, "knowledge_id": knowledge_id}
    statements: list[Statement] = [(DELETE_DOCUMENTS, {"tenant": tenant, "knowledge_ids": [knowledge_id]})]
    if nodes:
        statements.append((CREATE_NODES, {**scope, "nodes": list(nodes.values())}))
    if relations:
        rows = [{"source": s, "target": t, "type": kind} for s, t, kind in relations]
        statements.append((CREATE_RELATIONS, {**scope, "relations": rows}))
    return statements


class Neo4jGraphStore:
    def __init__(self, url: str, username: str, password: str, *, database: str = "", tenant_id: str) -> None:
        if not url:
            raise InputError("RAGSTEP_GRAPH_BACKEND=neo4j needs RAGSTEP_NEO4J_URL (e.g. neo4j://host:7687)")
        self._url = url
        self._auth = (username, password) if username else None
        self._database = database or None
        self._tenant = tenant_id
        self._driver: Any = None
        self._lock = threading.Lock()

    def _connect(self) -> Any:
        """The driver, created on first use (with the indexes), then reused: it pools its connections."""
        with self._lock:
            if self._driver is None:
                try:
                    import neo4j
                except ImportError:
                    raise InputError(
                        "RAGSTEP_GRAPH_BACKEND=neo4j needs the driver: pip install 'ragstep[neo4j]'"
                    ) from None
                driver = neo4j.GraphDatabase.driver(self._url, auth=self._auth)
                self._transaction(driver, SCHEMA_STATEMENTS, write=True)
                self._driver = driver
            return self._driver

    def _transaction(self, driver: Any, statements: Sequence[Statement], *, write: bool) -> list[list[dict[str, Any]]]:
        from neo4j.exceptions import DriverError, Neo4jError

        def work(tx: Any) -> list[list[dict[str, Any]]]:
            return [[record.data() for record in tx.run(query, params)] for query, params in statements]

        try:
            with driver.session(database=self._database) as session:
                run = session.execute_write if write else session.execute_read
                return run(work)
        except (Neo4jError, DriverError) as exc:
            raise StorageError(f"Neo4j at {self._url}: {type(exc).__name__}: {exc}") from None

    def _write(self, statements: Sequence[Statement]) -> list[list[dict[str, Any]]]:
        return self._transaction(self._connect(), statements, write=True)

    def _read(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self._transaction(self._connect(), [(query, params)], write=False)[0]

    def replace_knowledge(self, kb_id: str, knowledge_id: str, graph: GraphExtraction) -> None:
        self._write(replace_statements(self._tenant, kb_id, knowledge_id, graph))

    def delete_knowledge(self, knowledge_ids: Sequence[str]) -> int:
        result = self._write([(DELETE_DOCUMENTS, {"tenant": self._tenant, "knowledge_ids": list(knowledge_ids)})])
        return int(result[0][0]["removed"]) if result and result[0] else 0

    def delete_knowledge_base(self, kb_id: str) -> int:
        result = self._write([(DELETE_KB, {"tenant": self._tenant, "kb": kb_id})])
        return int(result[0][0]["removed"]) if result and result[0] else 0

    def names(self, kb_ids: Sequence[str]) -> list[str]:
        if not kb_ids:
            return []
        return [row["key"] for row in self._read(NAMES, {"tenant": self._tenant, "kbs": list(kb_ids)})]

    def lookup(self, kb_ids: Sequence[str], names: Sequence[str]) -> list[GraphNode]:
        if not kb_ids or not names:
            return []
        rows = self._read(LOOKUP, {"tenant": self._tenant, "kbs": list(kb_ids), "keys": list(names)})
        merged: dict[str, GraphNode] = {}
        for row in rows:
            known = merged.get(row["key"]) or GraphNode(name=row["name"])
            merged[row["key"]] = GraphNode(
                name=known.name,
                attributes=list(dict.fromkeys([*known.attributes, *(row["attributes"] or [])])),
                chunk_ids=list(dict.fromkeys([*known.chunk_ids, *(row["chunk_ids"] or [])])),
            )
        return [merged[key] for key in names if key in merged]

    def neighbours(self, kb_ids: Sequence[str], names: Sequence[str]) -> list[str]:
        if not kb_ids or not names:
            return []
        rows = self._read(NEIGHBOURS, {"tenant": self._tenant, "kbs": list(kb_ids), "keys": list(names)})
        return [row["key"] for row in rows]


SCHEMA_STATEMENTS: tuple[Statement, ...] = tuple((query, {}) for query in SCHEMA)
