"""The knowledge-graph store on AWS: adjacency items in one DynamoDB table (``RAGSTEP_GRAPH_TABLE``, pk/sk).

Every entity of a knowledge base is a partition, ``g#<kb id>#<normalised name>`` (``<tenant>#``-prefixed for other
tenants), holding per document that mentions it:

* a node item, sk ``n#<knowledge id>``: the display name, attributes and chunk ids as that document states them;
* an edge item per relation, sk ``e#<knowledge id>#<hash>``, with the entity at the other end (``other``) and the
  type; a relation is written under both of its ends, so one Query of a partition gives the 1-hop neighbours in
  both directions.

``gnames#<kb id>`` lists the names (for fuzzy matching), ``gdoc#<knowledge id>`` every item a document wrote (its
manifest) and ``gkb#<kb id>`` the documents that have a part of the graph (to delete a knowledge base's graph).

Replacing a document's part writes the new items (overwriting those with the same keys), then deletes the items
only the old version had. DynamoDB cannot do that in one transaction beyond 100 items; in between, readers may see
the old version's extra nodes, whose chunk ids the index no longer holds (ingest replaces the chunks first), so
entity search drops them: no answer ever cites a chunk that is gone.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from ragstep.adapters._dynamodb import BATCH_WRITE_ITEMS, DynamoTable, owned, tenant_attributes, tenant_key
from ragstep.errors import StorageError
from ragstep.models import DEFAULT_TENANT
from ragstep.models.graph import GraphExtraction, GraphNode
from ragstep.retrieval.graph_names import normalise_name

#: Names longer than this are cut for keys (a partition key holds at most 2048 bytes).
MAX_KEY_CHARS = 300
_ATTEMPTS = 8


def _h(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:20]


class DynamoGraphStore:
    def __init__(self, table: str, *, tenant_id: str = DEFAULT_TENANT, client: Any = None) -> None:
        self._table = DynamoTable(table, "RAGSTEP_GRAPH_TABLE", client=client)
        self._tenant = tenant_id
        self._attrs = tenant_attributes(tenant_id)

    # -- keys ---------------------------------------------------------------------------------------------------

    def _pk(self, key: str) -> str:
        return tenant_key(self._tenant, key)

    def _entity(self, kb_id: str, name_key: str) -> str:
        return self._pk(f"g#{kb_id}#{name_key[:MAX_KEY_CHARS]}")

    def _item(self, pk: str, sk: str, **values: str) -> dict[str, Any]:
        return {"pk": {"S": pk}, "sk": {"S": sk}, **{k: {"S": v} for k, v in values.items()}, **self._attrs}

    # -- writes -------------------------------------------------------------------------------------------------

    def replace_knowledge(self, kb_id: str, knowledge_id: str, graph: GraphExtraction) -> None:
        nodes: dict[str, tuple[str, list[str], list[str]]] = {}
        for node in graph.nodes:
            key = normalise_name(node.name)[:MAX_KEY_CHARS]
            if key:
                name, attrs, chunks = nodes.get(key, (node.name, [], []))
                nodes[key] = (name, [*attrs, *node.attributes], [*chunks, *node.chunk_ids])
        items: list[dict[str, Any]] = []
        names_pk = self._pk(f"gnames#{kb_id}")
        for key, (name, attrs, chunks) in nodes.items():
            attributes = json.dumps(list(dict.fromkeys(attrs)))
            chunk_ids = json.dumps(list(dict.fromkeys(chunks)))
            entity = self._entity(kb_id, key)
            items.append(self._item(entity, f"n#{knowledge_id}", name=name, key=key, attributes=attributes,
                                    chunk_ids=chunk_ids))  # fmt: skip
            items.append(self._item(names_pk, f"{_h(key)}#{knowledge_id}", key=key))
        for r in graph.relations:
            s, t = normalise_name(r.source)[:MAX_KEY_CHARS], normalise_name(r.target)[:MAX_KEY_CHARS]
            if s in nodes and t in nodes and s != t:
                items.append(self._item(self._entity(kb_id, s), f"e#{knowledge_id}#{_h('>', t, r.type)}",
                                        other=t, type=r.type))  # fmt: skip
                items.append(self._item(self._entity(kb_id, t), f"e#{knowledge_id}#{_h('<', s, r.type)}",
                                        other=s, type=r.type))  # fmt: skip
        doc_pk = self._pk(f"gdoc#{knowledge_id}")
        manifest = [self._item(doc_pk, _h(i["pk"]["S"], i["sk"]["S"]), ipk=i["pk"]["S"], isk=i["sk"]["S"], kb=kb_id)
                    for i in items]  # fmt: skip
        new_keys = {(m["pk"]["S"], m["sk"]["S"]) for m in manifest} | {(i["pk"]["S"], i["sk"]["S"]) for i in items}
        old = self._manifest(knowledge_id)
        # The document's items, then its manifest, then the knowledge base's list of documents: each step leaves
        # every written item findable for a later delete.
        self._write([{"PutRequest": {"Item": i}} for i in items])
        self._write([{"PutRequest": {"Item": m}} for m in manifest])
        self._write([{"PutRequest": {"Item": self._item(self._pk(f"gkb#{kb_id}"), knowledge_id)}}])
        stale = [k for k in old if (k["pk"]["S"], k["sk"]["S"]) not in new_keys]
        self._write([{"DeleteRequest": {"Key": k}} for k in stale])

    def _manifest(self, knowledge_id: str) -> list[dict[str, Any]]:
        """Keys of every item the document wrote, its manifest rows included."""
        keys: list[dict[str, Any]] = []
        for item in self._partition(self._pk(f"gdoc#{knowledge_id}")):
            keys.append({"pk": item["ipk"], "sk": item["isk"]})
            keys.append({"pk": item["pk"], "sk": item["sk"]})
        return keys

    def _write(self, requests: list[dict[str, Any]]) -> None:
        client = self._table.client
        name = self._table.name
        for start in range(0, len(requests), BATCH_WRITE_ITEMS):
            pending = requests[start : start + BATCH_WRITE_ITEMS]
            for attempt in range(_ATTEMPTS):
                request = {name: pending}
                write = partial(client.batch_write_item, RequestItems=request)
                response = self._table.guarded("write the graph", write)
                pending = response.get("UnprocessedItems", {}).get(name, [])
                if not pending:
                    break
                time.sleep(min(0.05 * 2**attempt, 2.0))
            else:
                raise StorageError(f"DynamoDB table {name!r} left {len(pending)} graph writes unprocessed; retry")

    def delete_knowledge(self, knowledge_ids: Sequence[str]) -> int:
        removed = 0
        for kid in knowledge_ids:
            keys = self._manifest(kid)
            kbs = {item["kb"]["S"] for item in self._partition(self._pk(f"gdoc#{kid}")) if "kb" in item}
            removed += sum(1 for k in keys if k["sk"]["S"].startswith("n#"))
            self._write([{"DeleteRequest": {"Key": k}} for k in keys])
            self._write([{"DeleteRequest": {"Key": {"pk": {"S": self._pk(f"gkb#{kb}")}, "sk": {"S": kid}}}}
                         for kb in sorted(kbs)])  # fmt: skip
        return removed

    def delete_knowledge_base(self, kb_id: str) -> int:
        docs = [item["sk"]["S"] for item in self._partition(self._pk(f"gkb#{kb_id}"))]
        return self.delete_knowledge(docs)

    # -- reads --------------------------------------------------------------------------------------------------

    def _partition(self, pk: str, prefix: str = "") -> list[dict[str, Any]]:
        values: dict[str, Any] = {":pk": {"S": pk}}
        condition = "pk = :pk"
        if prefix:
            condition += " AND begins_with(sk, :p)"
            values[":p"] = {"S": prefix}
        items = self._table.query(KeyConditionExpression=condition, ExpressionAttributeValues=values)
        return [i for i in items if owned(i, self._tenant)]

    def names(self, kb_ids: Sequence[str]) -> list[str]:
        return sorted({i["key"]["S"] for kb in kb_ids for i in self._partition(self._pk(f"gnames#{kb}"))})

    def lookup(self, kb_ids: Sequence[str], names: Sequence[str]) -> list[GraphNode]:
        out: list[GraphNode] = []
        for key in names:
            rows = [i for kb in kb_ids for i in self._partition(self._entity(kb, key), "n#")]
            if not rows:
                continue
            attrs: dict[str, None] = {}
            chunks: dict[str, None] = {}
            for row in rows:
                attrs.update(dict.fromkeys(json.loads(row["attributes"]["S"])))
                chunks.update(dict.fromkeys(json.loads(row["chunk_ids"]["S"])))
            out.append(GraphNode(name=rows[0]["name"]["S"], attributes=list(attrs), chunk_ids=list(chunks)))
        return out

    def neighbours(self, kb_ids: Sequence[str], names: Sequence[str]) -> list[str]:
        found: set[str] = set()
        for kb in kb_ids:
            for key in names:
                found.update(item["other"]["S"] for item in self._partition(self._entity(kb, key), "e#"))
        return sorted(found - set(names))
