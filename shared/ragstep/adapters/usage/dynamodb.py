"""Usage records in a DynamoDB table: the AWS :class:`ragstep.ports.UsageStore`.

Table layout (the template's ``UsageTable``)::

    tenant_id (S, HASH) | sk (S, RANGE) = "<started_at, 16 hex digits>#<record id>"
    doc (S, the record as JSON) | expires_at (N, TTL)

The sort key orders a tenant's records by time (an order-preserving encoding of the float), so a report is one
Query over a key range. Raw records expire after ``ttl_seconds`` (DynamoDB's TTL).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from ragstep.adapters._dynamodb import BATCH_WRITE_ITEMS, DynamoTable, number, sortable_float
from ragstep.errors import StorageError
from ragstep.models.tenancy import UsageRecord

USAGE_TABLE_SETTING = "RAGSTEP_USAGE_TABLE"
_ATTEMPTS = 8


class DynamoUsageStore:
    def __init__(self, table_name: str, ttl_seconds: int | None = None, client: Any = None) -> None:
        self._table = DynamoTable(table_name, USAGE_TABLE_SETTING, client=client)
        self._ttl = ttl_seconds

    def _item(self, record: UsageRecord) -> dict[str, Any]:
        item: dict[str, Any] = {
            "tenant_id": {"S": record.tenant_id},
            "sk": {"S": f"{sortable_float(record.started_at)}#{record.id}"},
            "doc": {"S": record.model_dump_json()},
        }
        if self._ttl:
            item["expires_at"] = {"N": number(math.ceil(record.started_at + self._ttl), "expires_at")}
        return item

    def add(self, records: Sequence[UsageRecord]) -> None:
        table = self._table
        for start in range(0, len(records), BATCH_WRITE_ITEMS):
            pending = [{"PutRequest": {"Item": self._item(r)}} for r in records[start : start + BATCH_WRITE_ITEMS]]
            for attempt in range(_ATTEMPTS):
                response = table.guarded("write usage to", partial(self._batch_write, pending))
                pending = response.get("UnprocessedItems", {}).get(table.name, [])
                if not pending:
                    break
                time.sleep(min(0.05 * 2**attempt, 2.0))
            else:
                raise StorageError(f"DynamoDB table {table.name!r} left {len(pending)} usage records unwritten; retry")

    def _batch_write(self, requests: list[dict[str, Any]]) -> Any:
        return self._table.client.batch_write_item(RequestItems={self._table.name: requests})

    def between(self, tenant_id: str, start: float, end: float) -> list[UsageRecord]:
        items = self._table.query(
            KeyConditionExpression="tenant_id = :t AND sk BETWEEN :a AND :b",
            ExpressionAttributeValues={
                ":t": {"S": tenant_id},
                ":a": {"S": sortable_float(start)},
                ":b": {"S": sortable_float(end)},  # "<end>" sorts before "<end>#id": records at `end` are left out
            },
        )
        return [UsageRecord.model_validate_json(item["doc"]["S"]) for item in items]
