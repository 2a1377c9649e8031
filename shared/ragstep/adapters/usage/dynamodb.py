"""Usage records in a DynamoDB table: the AWS :class:`ragstep.ports.UsageStore`.

Table layout (the template's ``UsageTable``)::

    tenant_id (S, HASH) | sk (S, RANGE) = "<started_at, 16 hex digits>#<record id>"
    doc (S, the record as JSON) | expires_at (N, TTL)

The sort key orders a tenant's records by time (an order-preserving encoding of the float), so a report is one
Query over a key range. Raw records expire after ``ttl_seconds`` (DynamoDB's TTL).

The day and month counters (``UsageStore.totals``) live in the same table, never expiring::

    tenant_id (S, HASH) | sk (S, RANGE) = "#day#2026-11-23" or "#month#2026-11"
    requests, errors, results, prompt_tokens, completion_tokens, duration_ms, cost_usd (N)

(A counter from before ``cost_usd`` existed lacks it and reads as 0, which is what its records cost: they carry none;
the first ``ADD`` creates it.)

``#`` sorts before every hex digit, so no range of record keys ever reaches a counter. Each record is written in one
transaction with the ``ADD`` to its day's and month's counters, on the condition that it is not stored yet: the
counters always match the records, and a record submitted twice is counted once. (A transaction per record rather
than a batch write: on Lambda each invocation writes its own record anyway, and ``ADD`` is not idempotent.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ragstep.adapters._dynamodb import DynamoTable, number, sortable_float
from ragstep.adapters.usage._totals import COUNTERS, FRACTIONAL, fold
from ragstep.models.tenancy import UsagePeriod, UsageRecord, UsageRow

USAGE_TABLE_SETTING = "RAGSTEP_USAGE_TABLE"


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
        for record in records:
            self._add_one(record)

    def _add_one(self, record: UsageRecord) -> None:
        """The record and its day's and month's counters in one transaction, unless the record is stored already."""
        from botocore.exceptions import ClientError

        table = self._table
        item = self._item(record)
        counted = [
            {
                "Update": {
                    "TableName": table.name,
                    "Key": {"tenant_id": {"S": record.tenant_id}, "sk": {"S": f"#{period}#{start}"}},
                    "UpdateExpression": "ADD " + ", ".join(f"{c} :{c}" for c in COUNTERS),
                    "ExpressionAttributeValues": {f":{c}": {"N": number(getattr(row, c), c)} for c in COUNTERS},
                }
            }
            for (_, period, start), row in fold([record]).items()
        ]
        put = {"Put": {"TableName": table.name, "Item": item, "ConditionExpression": "attribute_not_exists(sk)"}}

        def transact() -> None:
            try:
                table.client.transact_write_items(TransactItems=[put, *counted])
            except ClientError as exc:
                reasons = exc.response.get("CancellationReasons") or []
                if not (reasons and reasons[0].get("Code") == "ConditionalCheckFailed"):
                    raise
                # Written before (a batch submitted again): counted then.

        table.guarded("write usage to", transact)

    def totals(self, tenant_id: str, period: UsagePeriod, first: str, last: str) -> list[UsageRow]:
        items = self._table.query(
            KeyConditionExpression="tenant_id = :t AND sk BETWEEN :a AND :b",
            ExpressionAttributeValues={
                ":t": {"S": tenant_id},
                ":a": {"S": f"#{period}#{first}"},
                ":b": {"S": f"#{period}#{last}"},
            },
        )
        return [
            UsageRow(
                group=item["sk"]["S"].removeprefix(f"#{period}#"),
                **{c: _counter(item, c) for c in COUNTERS},
            )
            for item in items
        ]

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


def _counter(item: dict[str, Any], name: str) -> float | int:
    text = item[name]["N"] if name in item else "0"
    return float(text) if name in FRACTIONAL else int(text)
