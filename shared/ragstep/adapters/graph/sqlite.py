"""The embedded knowledge-graph store: one SQLite file per tenant (``<data dir>/graph.sqlite``).

Rows are kept per document: a node row is (knowledge base, normalised name, document) with that document's chunk
ids and attributes; a relation row is (knowledge base, source, target, type, document). A node of the graph is the
union of its rows, so replacing or deleting one document's rows -- one transaction -- never touches what other
documents say about the same entity, and no row outlives the document its chunk ids belong to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ragstep.adapters._sqlite import SqliteDatabase
from ragstep.models.graph import GraphExtraction, GraphNode
from ragstep.retrieval.graph_names import normalise_name

SCHEMA = """
CREATE TABLE IF NOT EXISTS graph_nodes (
    kb_id TEXT NOT NULL,
    key TEXT NOT NULL,
    knowledge_id TEXT NOT NULL,
    name TEXT NOT NULL,
    attributes TEXT NOT NULL,
    chunk_ids TEXT NOT NULL,
    PRIMARY KEY (kb_id, key, knowledge_id)
);
CREATE INDEX IF NOT EXISTS graph_nodes_by_knowledge ON graph_nodes (knowledge_id);
CREATE TABLE IF NOT EXISTS graph_relations (
    kb_id TEXT NOT NULL,
    source TEXT NOT NULL,
    target TEXT NOT NULL,
    type TEXT NOT NULL,
    knowledge_id TEXT NOT NULL,
    PRIMARY KEY (kb_id, source, target, type, knowledge_id)
);
CREATE INDEX IF NOT EXISTS graph_relations_by_target ON graph_relations (kb_id, target);
CREATE INDEX IF NOT EXISTS graph_relations_by_knowledge ON graph_relations (knowledge_id);
"""

# SQLite's default limit on host parameters is 999 (older builds): lists are sent in slices under it.
_SLICE = 400


def _slices(values: Sequence[str]) -> list[Sequence[str]]:
    return [values[i : i + _SLICE] for i in range(0, len(values), _SLICE)]


def _marks(n: int) -> str:
    return ",".join("?" * n)


class SqliteGraphStore:
    def __init__(self, path: Path) -> None:
        self._db = SqliteDatabase(path, SCHEMA)

    def replace_knowledge(self, kb_id: str, knowledge_id: str, graph: GraphExtraction) -> None:
        nodes: dict[str, tuple[str, list[str], list[str]]] = {}
        for node in graph.nodes:
            key = normalise_name(node.name)
            if not key:
                continue
            name, attrs, chunks = nodes.get(key, (node.name, [], []))
            nodes[key] = (name, [*attrs, *node.attributes], [*chunks, *node.chunk_ids])
        relations = {
            (s, t, r.type)
            for r in graph.relations
            if (s := normalise_name(r.source)) in nodes and (t := normalise_name(r.target)) in nodes and s != t
        }
        with self._db.write() as conn:
            conn.execute("DELETE FROM graph_nodes WHERE knowledge_id = ?", (knowledge_id,))
            conn.execute("DELETE FROM graph_relations WHERE knowledge_id = ?", (knowledge_id,))
            conn.executemany(
                "INSERT INTO graph_nodes VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (kb_id, key, knowledge_id, name, json.dumps(list(dict.fromkeys(attrs))),
                     json.dumps(list(dict.fromkeys(chunks))))
                    for key, (name, attrs, chunks) in nodes.items()
                ],
            )  # fmt: skip
            conn.executemany(
                "INSERT INTO graph_relations VALUES (?, ?, ?, ?, ?)",
                [(kb_id, s, t, kind, knowledge_id) for s, t, kind in sorted(relations)],
            )

    def delete_knowledge(self, knowledge_ids: Sequence[str]) -> int:
        removed = 0
        with self._db.write() as conn:
            for part in _slices(list(knowledge_ids)):
                marks = _marks(len(part))
                removed += conn.execute(f"DELETE FROM graph_nodes WHERE knowledge_id IN ({marks})", part).rowcount
                conn.execute(f"DELETE FROM graph_relations WHERE knowledge_id IN ({marks})", part)
        return removed

    def delete_knowledge_base(self, kb_id: str) -> int:
        with self._db.write() as conn:
            removed = conn.execute("DELETE FROM graph_nodes WHERE kb_id = ?", (kb_id,)).rowcount
            conn.execute("DELETE FROM graph_relations WHERE kb_id = ?", (kb_id,))
        return removed

    def names(self, kb_ids: Sequence[str]) -> list[str]:
        if not kb_ids:
            return []
        with self._db.read() as conn:
            rows = conn.execute(
                f"SELECT DISTINCT key FROM graph_nodes WHERE kb_id IN ({_marks(len(kb_ids))}) ORDER BY key",
                list(kb_ids),
            ).fetchall()
        return [key for (key,) in rows]

    def lookup(self, kb_ids: Sequence[str], names: Sequence[str]) -> list[GraphNode]:
        if not kb_ids or not names:
            return []
        merged: dict[str, GraphNode] = {}
        with self._db.read() as conn:
            for part in _slices(list(names)):
                rows = conn.execute(
                    f"SELECT key, name, attributes, chunk_ids FROM graph_nodes WHERE kb_id IN "
                    f"({_marks(len(kb_ids))}) AND key IN ({_marks(len(part))}) ORDER BY key, knowledge_id",
                    [*kb_ids, *part],
                ).fetchall()
                for key, name, attributes, chunk_ids in rows:
                    known = merged.get(key) or GraphNode(name=name)
                    merged[key] = GraphNode(
                        name=known.name,
                        attributes=list(dict.fromkeys([*known.attributes, *json.loads(attributes)])),
                        chunk_ids=list(dict.fromkeys([*known.chunk_ids, *json.loads(chunk_ids)])),
                    )
        return [merged[key] for key in names if key in merged]

    def neighbours(self, kb_ids: Sequence[str], names: Sequence[str]) -> list[str]:
        if not kb_ids or not names:
            return []
        found: dict[str, None] = {}
        kbs = _marks(len(kb_ids))
        with self._db.read() as conn:
            for part in _slices(list(names)):
                marks = _marks(len(part))
                rows = conn.execute(
                    f"SELECT target FROM graph_relations WHERE kb_id IN ({kbs}) AND source IN ({marks}) UNION "
                    f"SELECT source FROM graph_relations WHERE kb_id IN ({kbs}) AND target IN ({marks})",
                    [*kb_ids, *part, *kb_ids, *part],
                ).fetchall()
                found.update((name, None) for (name,) in rows)
        asked = set(names)
        return sorted(name for name in found if name not in asked)
