"""Knowledge bases and knowledge items in one DynamoDB table: the AWS :class:`ragstep.ports.CatalogStore`.

Single-table design (the template's ``CatalogTable``: ``pk`` HASH, ``sk`` RANGE, both strings, no index)::

    pk                  sk                        what                       attributes
    KB#<kb_id>          KB                        the knowledge base         id, name, created_at, doc
    KBNAME#<name>       KBNAME                    its name, held unique      kb_id, doc
    KBLIST              <created_at>#<kb_id>      its entry in the listing   kb_id, doc
    KB#<kb_id>          K#<knowledge_id>          a knowledge item           id, kb_id, created_at, doc
    K#<knowledge_id>    K                         lookup of the item by id   id, kb_id, created_at, doc
    KB#<kb_id>          J#<job_id>                an ingestion job           id, kb_id, knowledge_id, doc[, expires_at]
    JOB#<job_id>        JOB                       lookup of the job by id    id, kb_id, doc[, expires_at]

A finished job's two items carry ``expires_at`` (epoch seconds, ``job_retention_s`` after it finished), the table's
TTL attribute: DynamoDB deletes them some time later. No other item has it. ``replace_job`` conditions both puts on
the stored ``doc`` being the one the caller read (a compare-and-set: two executions cannot claim one queued job).

Tenants: the default tenant's keys are exactly the above (tables written before tenants existed need no
migration). Another tenant's partition keys are prefixed with ``<tenant>#`` (``acme#KB#<kb_id>``, ``acme#KBLIST``...)
and its items carry a ``tenant_id`` attribute, which every read checks too (:func:`ragstep.adapters._dynamodb.owned`).

``doc`` is the whole model as JSON (as the SQLite store keeps it), so a new model field needs no migration; the
other attributes are the keys and what is handy in the console. ``<created_at>`` is
:func:`.sortable_float`, whose string order is the numeric order.

Why items rather than a GSI: every read here is strongly consistent (a GSI is only eventually consistent), and each
copy is written in the same transaction as the item it mirrors.

* ``create_kb`` writes the three knowledge base items in one TransactWriteItems, each with
  ``attribute_not_exists(pk)``: a taken id or name cancels it and raises :class:`ConflictError`, even when two
  creates race.
* ``list_kbs`` is one Query of the ``KBLIST`` partition, which comes back sorted by created_at then id. One
  partition serves about 3,000 reads per second: plenty for a catalog of knowledge bases.
* ``put_knowledge`` writes the item and its lookup in one transaction that also holds a ConditionCheck on the
  knowledge base item, so an item cannot be added to a missing (or just deleted) knowledge base:
  :class:`NotFoundError`, as in the SQLite store. Re-putting an id under another knowledge base moves it.
* ``list_knowledge`` is a Query of ``KB#<kb_id>`` (``sk`` beginning ``K#``), sorted by created_at then id.
* ``delete_kb`` deletes the knowledge base items and up to 48 knowledge items (with their lookups) in one
  transaction (TransactWriteItems takes 100 actions). Larger knowledge bases lose their remaining items afterwards
  in BatchWriteItem calls of 25, which are not one transaction: if that part fails, the knowledge base is already
  gone (so nothing can be added to it) and calling ``delete_kb`` again removes the rest.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ragstep.adapters._dynamodb import (
    MAX_PARTITION_KEY_BYTES,
    MAX_SORT_KEY_BYTES,
    TENANT_ATTRIBUTE,
    TRANSACT_ITEMS,
    DynamoTable,
    checked_tenant,
    key_size_error,
    number,
    owned,
    sortable_float,
    tenant_attributes,
    tenant_key,
    tenant_prefix_bytes,
)
from ragstep.adapters.catalog._dynamodb_jobs import KB_SK, DynamoJobItems
from ragstep.adapters.catalog._dynamodb_jobs import item_key as _key
from ragstep.adapters.catalog._names import check_kb_name
from ragstep.errors import ConflictError, InputError, NotFoundError, StorageError
from ragstep.models import DEFAULT_TENANT, Knowledge, KnowledgeBase

CATALOG_TABLE_SETTING = "RAGSTEP_CATALOG_TABLE"
LIST_PK = "KBLIST"
NAME_SK = "KBNAME"
LOOKUP_SK = "K"
# Attempts of a transaction that lost a race (TransactionConflict, or a lookup that changed under it).
_ATTEMPTS = 6
_NEW = "attribute_not_exists(pk)"


def _knowledge_sk(knowledge_id: str) -> str:
    return f"K#{knowledge_id}"


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, 0.02 * 2**attempt))


class DynamoCatalogStore(DynamoJobItems):
    """Knowledge bases and their knowledge items in DynamoDB table ``table_name`` (layout: module docstring).

    ``tenant_id`` scopes every key (module docstring); ``client`` is a boto3 DynamoDB client to use instead of
    creating one.
    """

    def __init__(
        self,
        table_name: str,
        client: Any = None,
        *,
        region_name: str | None = None,
        tenant_id: str = DEFAULT_TENANT,
        job_retention_s: float | None = None,
    ) -> None:
        self.table = DynamoTable(table_name, CATALOG_TABLE_SETTING, client, region_name)
        # A finished job's items carry ``expires_at`` this long after it finished and the table's TTL deletes them:
        # on AWS no long-lived worker is there to prune them (``ragstep jobs prune`` still can). None: kept.
        self.job_retention_s = job_retention_s
        self.tenant_id = checked_tenant(tenant_id)
        self._tenant_attributes = tenant_attributes(self.tenant_id)
        # Partition key bytes left for a knowledge base id after the tenant prefix and "KB#".
        self._max_kb_id_bytes = MAX_PARTITION_KEY_BYTES - 3 - tenant_prefix_bytes(self.tenant_id)

    # -- this tenant's keys ------------------------------------------------------------------------------------

    def _kb_pk(self, kb_id: str) -> str:
        return tenant_key(self.tenant_id, f"KB#{kb_id}")

    def _name_pk(self, name: str) -> str:
        return tenant_key(self.tenant_id, f"KBNAME#{name}")

    def _lookup_pk(self, knowledge_id: str) -> str:
        return tenant_key(self.tenant_id, f"K#{knowledge_id}")

    @property
    def _list_pk(self) -> str:
        return tenant_key(self.tenant_id, LIST_PK)

    def _mine(self, items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """This tenant's items of a Query (the Query must project ``tenant_id``)."""
        return (item for item in items if owned(item, self.tenant_id))

    @property
    def table_name(self) -> str:
        return self.table.name

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        if len(pk.encode("utf-8", "surrogatepass")) > MAX_PARTITION_KEY_BYTES:
            return None  # nothing can be stored under a key DynamoDB refuses
        response = self.table.call("get_item", Key=_key(pk, sk), ConsistentRead=True)
        item = response.get("Item")
        return item if owned(item, self.tenant_id) else None

    def _give_up(self, action: str) -> StorageError:
        return StorageError(
            f"DynamoDB table {self.table.name!r}: {action} kept colliding with concurrent writes ({_ATTEMPTS} "
            "attempts); retry"
        )

    # -- knowledge bases -------------------------------------------------------------------------------------

    def create_kb(self, kb: KnowledgeBase) -> KnowledgeBase:
        """Store a new knowledge base. :class:`ConflictError` if its id or (case-sensitive) name is taken."""
        check_kb_name(kb.name)
        if not kb.id:
            raise InputError("knowledge base id is empty")
        if problem := key_size_error("knowledge base id", kb.id, self._max_kb_id_bytes):
            raise problem
        doc = {"S": kb.model_dump_json()}
        kb_id = {"S": kb.id}
        kb_item = {
            **_key(self._kb_pk(kb.id), KB_SK),
            "id": kb_id,
            "name": {"S": kb.name},
            "created_at": {"N": number(kb.created_at, "created_at")},
            "doc": doc,
            **self._tenant_attributes,
        }
        name_item = {**_key(self._name_pk(kb.name), NAME_SK), "kb_id": kb_id, "doc": doc, **self._tenant_attributes}
        list_item = {
            **_key(self._list_pk, f"{sortable_float(kb.created_at)}#{kb.id}"),
            "kb_id": kb_id,
            "doc": doc,
            **self._tenant_attributes,
        }
        for attempt in range(_ATTEMPTS):
            reasons = self.table.transact(
                [{"Put": {"Item": item, "ConditionExpression": _NEW}} for item in (kb_item, name_item, list_item)],
                "create knowledge base",
            )
            if reasons is None:
                return kb
            if reasons[0] == "ConditionalCheckFailed":
                raise ConflictError(f"a knowledge base with id {kb.id!r} already exists; choose another id")
            if reasons[1] == "ConditionalCheckFailed":
                raise ConflictError(f"a knowledge base with name {kb.name!r} already exists; choose another name")
            if reasons[2] == "ConditionalCheckFailed":  # only a half-deleted twin leaves this behind
                raise ConflictError(f"a knowledge base with id {kb.id!r} is still being deleted; retry")
            _backoff(attempt)  # TransactionConflict: a concurrent transaction touched one of the items
        raise self._give_up("create knowledge base")

    def get_kb(self, id_or_name: str) -> KnowledgeBase | None:
        """By id first, then by name (an id wins over another knowledge base's name equal to it)."""
        item = self._get(self._kb_pk(id_or_name), KB_SK) or self._get(self._name_pk(id_or_name), NAME_SK)
        return KnowledgeBase.model_validate_json(item["doc"]["S"]) if item else None

    def list_kbs(self) -> list[KnowledgeBase]:
        """All knowledge bases, oldest first (ties by id)."""
        items = self.table.query(
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": self._list_pk}},
            ProjectionExpression=f"doc, {TENANT_ATTRIBUTE}",
        )
        return [KnowledgeBase.model_validate_json(item["doc"]["S"]) for item in self._mine(items)]

    def _knowledge_keys(self, kb_id: str) -> list[tuple[str, str]]:
        """(sk, knowledge id) of every knowledge item stored under the knowledge base."""
        items = self.table.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :k)",
            ExpressionAttributeValues={":pk": {"S": self._kb_pk(kb_id)}, ":k": {"S": "K#"}},
            ProjectionExpression=f"sk, {TENANT_ATTRIBUTE}",
        )
        return [(item["sk"]["S"], item["sk"]["S"][2:]) for item in self._mine(items)]

    def delete_kb(self, kb_id: str) -> None:
        """Delete the knowledge base and all its knowledge items; a missing id is a no-op.

        One transaction when the knowledge base has at most 48 items; otherwise the rest follow in batches (see
        the module docstring). Runs to the end even when the knowledge base item is already gone, so calling it
        again finishes a deletion that failed part-way.
        """
        if key_size_error("knowledge base id", kb_id, self._max_kb_id_bytes):
            return
        pk = self._kb_pk(kb_id)
        for attempt in range(_ATTEMPTS):
            kb_item = self._get(pk, KB_SK)
            actions: list[dict[str, Any]] = []
            if kb_item is not None:
                kb = KnowledgeBase.model_validate_json(kb_item["doc"]["S"])
                # The knowledge base item must still be the one read: a concurrent delete + re-create would
                # otherwise lose its name and listing items.
                actions.append(
                    {
                        "Delete": {
                            "Key": _key(pk, KB_SK),
                            "ConditionExpression": "doc = :doc",
                            "ExpressionAttributeValues": {":doc": kb_item["doc"]},
                        }
                    }
                )
                actions.append({"Delete": {"Key": _key(self._name_pk(kb.name), NAME_SK)}})
                actions.append({"Delete": {"Key": _key(self._list_pk, f"{sortable_float(kb.created_at)}#{kb.id}")}})
            knowledge = self._knowledge_keys(kb_id)
            in_transaction = (TRANSACT_ITEMS - len(actions)) // 2
            for sk, knowledge_id in knowledge[:in_transaction]:
                actions.append({"Delete": {"Key": _key(pk, sk)}})
                actions.append(self._lookup_delete(knowledge_id, kb_id))
            if not actions:
                return
            reasons = self.table.transact(actions, "delete knowledge base")
            if reasons is None:
                break
            _backoff(attempt)  # a concurrent write to one of these items; read again
        else:
            raise self._give_up("delete knowledge base")
        # Items beyond one transaction (and any put that committed before the knowledge base item went). No put
        # can commit after it: put_knowledge checks the knowledge base item in its own transaction.
        rest = self._knowledge_keys(kb_id)
        if rest:
            self.table.batch_delete([_key(pk, sk) for sk, _ in rest])
            for _, knowledge_id in rest:
                self._delete_lookup_if_owned(knowledge_id, kb_id)
        # Its ingestion jobs: no job can be added any more (put_job checks the knowledge base item too).
        self._delete_job_items(self.list_jobs(kb_id))

    def update_kb(self, kb: KnowledgeBase) -> KnowledgeBase:
        """Replace the knowledge base of ``kb.id`` and its name and listing copies in one transaction; a new name
        is held unique as ``create_kb`` holds it."""
        check_kb_name(kb.name)
        for attempt in range(_ATTEMPTS):
            current = self._get(self._kb_pk(kb.id), KB_SK)
            if current is None:
                raise NotFoundError(f"unknown knowledge base {kb.id!r}")
            old = KnowledgeBase.model_validate_json(current["doc"]["S"])
            doc = {"S": kb.model_dump_json()}
            kb_item = {**current, "name": {"S": kb.name}, "doc": doc}
            name_item = {
                **_key(self._name_pk(kb.name), NAME_SK),
                "kb_id": {"S": kb.id},
                "doc": doc,
                **self._tenant_attributes,
            }
            list_item = {
                **_key(self._list_pk, f"{sortable_float(old.created_at)}#{kb.id}"),
                "kb_id": {"S": kb.id},
                "doc": doc,
                **self._tenant_attributes,
            }
            renamed = old.name != kb.name
            actions: list[dict[str, Any]] = [
                {
                    "Put": {
                        "Item": kb_item,
                        "ConditionExpression": "doc = :doc",  # unchanged since read
                        "ExpressionAttributeValues": {":doc": current["doc"]},
                    }
                },
                {"Put": {"Item": name_item, **({"ConditionExpression": _NEW} if renamed else {})}},
                {"Put": {"Item": list_item}},
            ]
            if renamed:
                actions.append({"Delete": {"Key": _key(self._name_pk(old.name), NAME_SK)}})
            reasons = self.table.transact(actions, "update knowledge base")
            if reasons is None:
                return kb
            if renamed and reasons[1] == "ConditionalCheckFailed":
                raise ConflictError(f"a knowledge base with name {kb.name!r} already exists; choose another name")
            _backoff(attempt)  # changed under us: read again
        raise self._give_up("update knowledge base")

    def _lookup_delete(self, knowledge_id: str, kb_id: str) -> dict[str, Any]:
        """Delete the lookup item unless it now belongs to an item moved to another knowledge base."""
        return {
            "Delete": {
                "Key": _key(self._lookup_pk(knowledge_id), LOOKUP_SK),
                "ConditionExpression": "attribute_not_exists(pk) OR kb_id = :kb",
                "ExpressionAttributeValues": {":kb": {"S": kb_id}},
            }
        }

    def _delete_lookup_if_owned(self, knowledge_id: str, kb_id: str) -> None:
        from botocore.exceptions import ClientError

        op = self._lookup_delete(knowledge_id, kb_id)["Delete"]

        def run() -> None:
            try:
                self.table.client.delete_item(TableName=self.table.name, **op)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise

        self.table.guarded("delete knowledge lookup", run)

    def _check_item_keys(self, what: str, item_id: str, kb_id: str, missing: str) -> None:
        """An item's own id must fit a sort key; a knowledge base id too long to be a key names no knowledge base."""
        if not item_id:
            raise InputError(f"{what} is empty")
        if problem := key_size_error(what, item_id, MAX_SORT_KEY_BYTES - 2):
            raise problem
        if key_size_error("knowledge base id", kb_id, self._max_kb_id_bytes):
            raise NotFoundError(missing)

    # -- knowledge items -------------------------------------------------------------------------------------

    def put_knowledge(self, item: Knowledge) -> None:
        """Insert or replace. :class:`NotFoundError` if its knowledge base does not exist (checked atomically)."""
        kb_id = item.knowledge_base_id
        missing = f"knowledge base {kb_id!r} not found; create it before adding knowledge"
        self._check_item_keys("knowledge id", item.id, kb_id, missing)
        attributes = {
            "id": {"S": item.id},
            "kb_id": {"S": kb_id},
            "created_at": {"N": number(item.created_at, "created_at")},
            "doc": {"S": item.model_dump_json()},
            **self._tenant_attributes,
        }
        for attempt in range(_ATTEMPTS):
            previous = self._get(self._lookup_pk(item.id), LOOKUP_SK)
            old_kb = previous["kb_id"]["S"] if previous else None
            lookup_put: dict[str, Any] = {"Item": {**_key(self._lookup_pk(item.id), LOOKUP_SK), **attributes}}
            if old_kb is None:
                lookup_put["ConditionExpression"] = _NEW
            else:  # unchanged since it was read, so the move below deletes the right copy
                lookup_put["ConditionExpression"] = "kb_id = :old"
                lookup_put["ExpressionAttributeValues"] = {":old": {"S": old_kb}}
            actions: list[dict[str, Any]] = [
                {
                    "ConditionCheck": {
                        "Key": _key(self._kb_pk(kb_id), KB_SK),
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
                {"Put": {"Item": {**_key(self._kb_pk(kb_id), _knowledge_sk(item.id)), **attributes}}},
                {"Put": lookup_put},
            ]
            if old_kb is not None and old_kb != kb_id:
                actions.append({"Delete": {"Key": _key(self._kb_pk(old_kb), _knowledge_sk(item.id))}})
            reasons = self.table.transact(actions, "put knowledge")
            if reasons is None:
                return
            if reasons[0] == "ConditionalCheckFailed":
                raise NotFoundError(f"knowledge base {kb_id!r} not found; create it before adding knowledge")
            _backoff(attempt)  # the lookup changed under us, or TransactionConflict: read again
        raise self._give_up("put knowledge")

    def replace_knowledge(self, expected: Knowledge, item: Knowledge) -> bool:
        """Both copies (the knowledge base's item and the lookup) are put only while each still holds ``expected``'s
        document, in one transaction: a record deleted or changed meanwhile is not written back."""
        if expected.id != item.id or expected.knowledge_base_id != item.knowledge_base_id:
            raise InputError("replace_knowledge replaces a record with a new version of itself: the ids differ")
        kb_id = item.knowledge_base_id
        self._check_item_keys("knowledge id", item.id, kb_id, f"knowledge base {kb_id!r} not found")
        attributes = {
            "id": {"S": item.id},
            "kb_id": {"S": kb_id},
            "created_at": {"N": number(item.created_at, "created_at")},
            "doc": {"S": item.model_dump_json()},
            **self._tenant_attributes,
        }
        guard = {
            "ConditionExpression": "doc = :expected",
            "ExpressionAttributeValues": {":expected": {"S": expected.model_dump_json()}},
        }
        actions = [
            {"Put": {"Item": {**_key(self._kb_pk(kb_id), _knowledge_sk(item.id)), **attributes}, **guard}},
            {"Put": {"Item": {**_key(self._lookup_pk(item.id), LOOKUP_SK), **attributes}, **guard}},
        ]
        reasons = self.table.transact(actions, "replace knowledge")
        if reasons is None:
            return True
        if "ConditionalCheckFailed" in reasons:
            return False
        raise self._give_up("replace knowledge")

    def get_knowledge(self, knowledge_id: str) -> Knowledge | None:
        item = self._get(self._lookup_pk(knowledge_id), LOOKUP_SK)
        return Knowledge.model_validate_json(item["doc"]["S"]) if item else None

    def list_knowledge(self, kb_id: str) -> list[Knowledge]:
        """The knowledge base's items ordered by ``created_at``, then id."""
        if key_size_error("knowledge base id", kb_id, self._max_kb_id_bytes):
            return []
        items = self.table.query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :k)",
            ExpressionAttributeValues={":pk": {"S": self._kb_pk(kb_id)}, ":k": {"S": "K#"}},
            ProjectionExpression=f"doc, {TENANT_ATTRIBUTE}",
        )
        knowledge = [Knowledge.model_validate_json(item["doc"]["S"]) for item in self._mine(items)]
        knowledge.sort(key=lambda k: (k.created_at, k.id))  # code-point order is SQLite's UTF-8 byte order
        return knowledge

    def delete_knowledge(self, knowledge_id: str) -> None:
        """A missing id is a no-op."""
        for attempt in range(_ATTEMPTS):
            lookup = self._get(self._lookup_pk(knowledge_id), LOOKUP_SK)
            if lookup is None:
                return
            kb_id = lookup["kb_id"]["S"]
            reasons = self.table.transact(
                [
                    {"Delete": {"Key": _key(self._kb_pk(kb_id), _knowledge_sk(knowledge_id))}},
                    {
                        "Delete": {
                            "Key": _key(self._lookup_pk(knowledge_id), LOOKUP_SK),
                            "ConditionExpression": "kb_id = :kb",
                            "ExpressionAttributeValues": {":kb": {"S": kb_id}},
                        }
                    },
                ],
                "delete knowledge",
            )
            if reasons is None:
                return
            _backoff(attempt)  # moved or deleted concurrently: read again
        raise self._give_up("delete knowledge")
