"""Tenants and API keys in a DynamoDB table: the AWS :class:`ragstep.ports.KeyStore`.

Table layout (the template's ``KeysTable``)::

    pk (S, HASH) = "tenant#<tenant id>" | "key#<prefix>"
    kind (S: tenant | key) | tenant_id (S) | doc (S, the model as JSON)

A request reads one key item by its primary key (a strongly consistent GetItem); listings are admin operations and
scan the table (it holds a few items per tenant). The table holds hashes of keys, never a key.
"""

from __future__ import annotations

from typing import Any

from ragstep.adapters._dynamodb import DynamoTable
from ragstep.errors import ConflictError
from ragstep.models.tenancy import ApiKey, Tenant

KEYS_TABLE_SETTING = "RAGSTEP_KEYS_TABLE"


class DynamoKeyStore:
    def __init__(self, table_name: str, client: Any = None) -> None:
        self._table = DynamoTable(table_name, KEYS_TABLE_SETTING, client=client)

    def _put_new(self, pk: str, kind: str, tenant_id: str, doc: str, taken: str) -> None:
        from botocore.exceptions import ClientError

        item = {"pk": {"S": pk}, "kind": {"S": kind}, "tenant_id": {"S": tenant_id}, "doc": {"S": doc}}
        table = self._table

        def put() -> None:
            try:
                table.client.put_item(TableName=table.name, Item=item, ConditionExpression="attribute_not_exists(pk)")
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                    raise ConflictError(taken) from None
                raise

        table.guarded("put an item into", put)

    def _get(self, pk: str) -> str | None:
        item = self._table.call("get_item", Key={"pk": {"S": pk}}, ConsistentRead=True).get("Item")
        return str(item["doc"]["S"]) if item else None

    def _scan(self, kind: str, tenant_id: str | None = None, limit: int | None = None) -> list[str]:
        params: dict[str, Any] = {
            "FilterExpression": "kind = :kind",
            "ExpressionAttributeValues": {":kind": {"S": kind}},
            "ConsistentRead": True,
        }
        if tenant_id is not None:
            params["FilterExpression"] += " AND tenant_id = :tenant"
            params["ExpressionAttributeValues"][":tenant"] = {"S": tenant_id}
        docs: list[str] = []
        while True:
            page = self._table.call("scan", **params)
            docs.extend(item["doc"]["S"] for item in page.get("Items", ()))
            if "LastEvaluatedKey" not in page or (limit is not None and len(docs) >= limit):
                return docs
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def put_tenant(self, tenant: Tenant) -> Tenant:
        taken = f"tenant {tenant.id!r} already exists; choose another id"
        self._put_new(f"tenant#{tenant.id}", "tenant", tenant.id, tenant.model_dump_json(), taken)
        return tenant

    def get_tenant(self, tenant_id: str) -> Tenant | None:
        doc = self._get(f"tenant#{tenant_id}")
        return Tenant.model_validate_json(doc) if doc else None

    def list_tenants(self) -> list[Tenant]:
        tenants = [Tenant.model_validate_json(doc) for doc in self._scan("tenant")]
        return sorted(tenants, key=lambda t: (t.created_at, t.id))

    def put_key(self, key: ApiKey) -> None:
        taken = f"a key with prefix {key.prefix!r} already exists"
        self._put_new(f"key#{key.prefix}", "key", key.tenant_id, key.model_dump_json(), taken)

    def get_key(self, prefix: str) -> ApiKey | None:
        doc = self._get(f"key#{prefix}")
        return ApiKey.model_validate_json(doc) if doc else None

    def list_keys(self, tenant_id: str | None = None) -> list[ApiKey]:
        keys = [ApiKey.model_validate_json(doc) for doc in self._scan("key", tenant_id)]
        return sorted(keys, key=lambda k: (k.created_at, k.prefix))

    def revoke_key(self, prefix: str, when: float) -> ApiKey | None:
        key = self.get_key(prefix)
        if key is None or key.revoked_at is not None:
            return key
        key = key.model_copy(update={"revoked_at": when})
        self._table.call(
            "update_item",
            Key={"pk": {"S": f"key#{prefix}"}},
            UpdateExpression="SET doc = :doc",
            ExpressionAttributeValues={":doc": {"S": key.model_dump_json()}},
        )
        return key

    def has_keys(self) -> bool:
        return bool(self._scan("key", limit=1))
