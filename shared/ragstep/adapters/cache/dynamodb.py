"""The response cache in a DynamoDB table: the AWS :class:`ragstep.ports.ResponseCache`.

Table layout: ``key (S, HASH)`` | ``value (S)`` | ``expires_at (N, the table's TTL attribute)`` | ``tenant_id (S)``
on items of tenants other than the default one, whose keys are also prefixed ``<tenant>#``
(:func:`ragstep.adapters._dynamodb.tenant_key`). DynamoDB deletes expired items lazily (up to two days late), so a
read checks ``expires_at`` itself. A value over the item size limit is not cached (a cache miss costs a model call;
a failed answer would cost the answer).
"""

from __future__ import annotations

import math
import time
from typing import Any

from ragstep.adapters._dynamodb import (
    MAX_ITEM_BYTES,
    DynamoTable,
    checked_tenant,
    item_size,
    owned,
    tenant_attributes,
    tenant_key,
)
from ragstep.models import DEFAULT_TENANT

CACHE_TABLE_SETTING = "RAGSTEP_CACHE_TABLE"


class DynamoResponseCache:
    def __init__(self, table: str, *, tenant_id: str = DEFAULT_TENANT, client: Any = None) -> None:
        self.table = DynamoTable(table, CACHE_TABLE_SETTING, client)
        self.tenant_id = checked_tenant(tenant_id)

    def get(self, key: str) -> str | None:
        item = self.table.call(
            "get_item", Key={"key": {"S": tenant_key(self.tenant_id, key)}}, ConsistentRead=False
        ).get("Item")
        if not owned(item, self.tenant_id) or item is None:
            return None
        if float(item["expires_at"]["N"]) <= time.time():
            return None
        return str(item["value"]["S"])

    def put(self, key: str, value: str, ttl_s: int) -> None:
        item = {
            "key": {"S": tenant_key(self.tenant_id, key)},
            "value": {"S": value},
            # Whole seconds, rounded up: DynamoDB never deletes an entry before its time.
            "expires_at": {"N": str(math.ceil(time.time() + ttl_s))},
            **tenant_attributes(self.tenant_id),
        }
        if item_size(item) > MAX_ITEM_BYTES:
            return
        self.table.call("put_item", Item=item)
