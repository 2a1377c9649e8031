"""Chat history in a DynamoDB table: the AWS :class:`ragstep.ports.HistoryStore` (SQLite plays this role locally).

The table, its client and its errors are :class:`ragstep.adapters._dynamodb.DynamoTable`'s.

Table layout (the template's ``HistoryTable``)::

    session_id (S, HASH) | sk (S, RANGE) = "<created_at, 16 hex digits>#<turn_id>"
    turn_id (S) | created_at (N) | query (S) | answer (S) | references (S, JSON) | expires_at (N, TTL)
    [meta (S, JSON): request id, rewritten query, model, usage, interrupted (Turn.META_FIELDS)]
    [references_truncated (N): how many references were dropped to fit the item size limit]
    [tenant_id (S): the tenant, on every item of a tenant other than the default one]

* Tenants: the default tenant's partition key is the session id, as it always was; another tenant's is
  ``<tenant>#<session id>`` and its items carry ``tenant_id``. Every read and delete also filters on ``tenant_id``
  (absent for the default tenant), so no session id, however crafted, reaches another tenant's turns.

* The sort key orders turns by ``created_at`` exactly (an order-preserving encoding of the float), then by
  ``turn_id``, so equal timestamps stay distinct and ordered the way :class:`.SqliteHistoryStore` orders them.
* The key is a function of the turn, so appending the same turn again (a retried stage) overwrites the one item:
  the same insert-or-replace semantics as the SQLite store.
* ``expires_at`` is the table's TTL attribute: whole epoch seconds, rounded *up* from ``created_at + ttl`` so
  DynamoDB never deletes a turn early (a turn may so outlive its exact expiry by under a second). DynamoDB deletes
  expired items lazily, up to about 48 hours late, so every read filters on ``expires_at`` as well.
* Reads are strongly consistent: the turn a request just appended is in the next request's history.
* DynamoDB items are limited to 400 KB. A turn that would exceed it keeps as many of its references (in order:
  the best first) as fit and records how many were dropped in ``references_truncated``: losing the tail of the
  references is better than losing the turn after its answer was produced. If the turn does not fit even without
  references (a query and answer of hundreds of KB), ``append`` raises :class:`InputError`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from ragstep.adapters._dynamodb import (
    _NUMBER_BYTES,
    MAX_ITEM_BYTES,
    MAX_PARTITION_KEY_BYTES,
    MAX_SORT_KEY_BYTES,
    TENANT_ATTRIBUTE,
    DynamoTable,
    checked_tenant,
    item_size,
    key_size_error,
    number,
    owned,
    sortable_float,
    tenant_attributes,
    tenant_key,
    tenant_prefix_bytes,
)
from ragstep.errors import InputError
from ragstep.models import DEFAULT_TENANT, SearchResult, SessionSummary, Turn

__all__ = ["HISTORY_TABLE_SETTING", "MAX_ITEM_BYTES", "DynamoHistoryStore", "sortable_float"]

HISTORY_TABLE_SETTING = "RAGSTEP_HISTORY_TABLE"

_REFERENCES = TypeAdapter(list[SearchResult])
_LIVE_FILTER = "(attribute_not_exists(expires_at) OR expires_at > :now)"
_DEFAULT_TENANT_FILTER = f"attribute_not_exists({TENANT_ATTRIBUTE})"
_TENANT_FILTER = f"{TENANT_ATTRIBUTE} = :tenant"
_MAX_PAGE = 1000


class DynamoHistoryStore:
    """Chat turns per session in DynamoDB table ``table_name`` (see the module docstring for the layout).

    With ``ttl_seconds`` a turn expires ``ttl_seconds`` after its ``created_at``. ``tenant_id`` scopes every key
    (module docstring). ``clock`` lets tests move time; ``client`` is a boto3 DynamoDB client to use instead of
    creating one.
    """

    def __init__(
        self,
        table_name: str,
        ttl_seconds: float | None = None,
        clock: Callable[[], float] = time.time,
        client: Any = None,
        *,
        region_name: str | None = None,
        tenant_id: str = DEFAULT_TENANT,
    ) -> None:
        if ttl_seconds is not None and not ttl_seconds > 0:
            raise InputError(f"ttl_seconds must be positive or None (no expiry), got {ttl_seconds}")
        self.table = DynamoTable(table_name, HISTORY_TABLE_SETTING, client, region_name)
        self.tenant_id = checked_tenant(tenant_id)
        # Room the tenant prefix takes from DynamoDB's partition key limit.
        self._max_session_bytes = MAX_PARTITION_KEY_BYTES - tenant_prefix_bytes(self.tenant_id)
        self._ttl = ttl_seconds
        self._clock = clock

    @property
    def table_name(self) -> str:
        return self.table.name

    @staticmethod
    def sort_key(turn: Turn) -> str:
        return f"{sortable_float(turn.created_at)}#{turn.turn_id}"

    def _item(self, turn: Turn) -> dict[str, dict[str, Any]]:
        for what, value, limit in (
            ("session_id", turn.session_id, self._max_session_bytes),
            ("turn_id", turn.turn_id, MAX_SORT_KEY_BYTES - 17),
        ):
            if problem := key_size_error(what, value, limit):
                raise problem
        item: dict[str, dict[str, Any]] = {
            "session_id": {"S": self._pk(turn.session_id)},
            "sk": {"S": self.sort_key(turn)},
            **tenant_attributes(self.tenant_id),
            "turn_id": {"S": turn.turn_id},
            "created_at": {"N": number(turn.created_at, "created_at")},
            "query": {"S": turn.query},
            "answer": {"S": turn.answer},
            "meta": {"S": turn.meta_json()},
        }
        if self._ttl is not None:
            item["expires_at"] = {"N": number(math.ceil(turn.created_at + self._ttl), "expires_at")}
        # The references as one JSON list, cut to what fits: each reference's JSON is measured once.
        base = item_size(item) + len("references") + 2 + len("references_truncated") + _NUMBER_BYTES
        if base > MAX_ITEM_BYTES:
            raise InputError(
                f"turn {turn.turn_id!r} of session {turn.session_id!r} is about {base} bytes without its references; "
                f"a DynamoDB item holds at most {MAX_ITEM_BYTES}: shorten the query or answer"
            )
        parts: list[str] = []
        room = MAX_ITEM_BYTES - base
        for ref in turn.references:
            part = _REFERENCES.dump_json([ref]).decode()[1:-1]
            cost = len(part.encode("utf-8")) + (1 if parts else 0)
            if cost > room:
                break
            parts.append(part)
            room -= cost
        item["references"] = {"S": f"[{','.join(parts)}]"}
        dropped = len(turn.references) - len(parts)
        if dropped:
            item["references_truncated"] = {"N": str(dropped)}
        return item

    def append(self, turn: Turn) -> None:
        """Store the turn (PutItem; the same turn again replaces its item)."""
        self.table.call("put_item", Item=self._item(turn))

    def _pk(self, session_id: str) -> str:
        return tenant_key(self.tenant_id, session_id)

    def _tenant_filter(self) -> tuple[str, dict[str, dict[str, str]]]:
        """The FilterExpression part (and its values) that keeps reads to this tenant's items."""
        if self.tenant_id == DEFAULT_TENANT:
            return _DEFAULT_TENANT_FILTER, {}
        return _TENANT_FILTER, {":tenant": {"S": self.tenant_id}}

    def _live_values(self, session_id: str) -> dict[str, dict[str, str]]:
        return {":s": {"S": self._pk(session_id)}, ":now": {"N": number(self._clock(), "clock")}}

    def recent(self, session_id: str, limit: int = 10) -> list[Turn]:
        """The newest ``limit`` live turns of the session, oldest first.

        Newest first with Limit, skipping expired turns (FilterExpression): DynamoDB applies Limit before the
        filter, so pages continue (growing) until ``limit`` live turns are found or the session ends.
        """
        if limit < 0:
            raise InputError(f"limit must be 0 or more, got {limit}")
        if limit == 0 or key_size_error("session_id", session_id, self._max_session_bytes):
            return []  # no turn can be stored under an invalid session id
        tenant_filter, tenant_values = self._tenant_filter()
        params: dict[str, Any] = {
            "KeyConditionExpression": "session_id = :s",
            "FilterExpression": f"{_LIVE_FILTER} AND {tenant_filter}",
            "ExpressionAttributeValues": {**self._live_values(session_id), **tenant_values},
            "ScanIndexForward": False,
            "ConsistentRead": True,
            "Limit": limit,
        }
        newest: list[dict[str, Any]] = []
        while True:
            page = self.table.call("query", **params)
            newest.extend(page.get("Items", ()))
            if len(newest) >= limit or "LastEvaluatedKey" not in page:
                break
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
            params["Limit"] = min(params["Limit"] * 2, _MAX_PAGE)
        return [self._turn(item) for item in reversed(newest[:limit])]

    def _turn(self, item: dict[str, Any]) -> Turn:
        return Turn(
            session_id=item["session_id"]["S"][tenant_prefix_bytes(self.tenant_id) :],
            turn_id=item["turn_id"]["S"],
            created_at=float(item["created_at"]["N"]),
            query=item["query"]["S"],
            answer=item.get("answer", {}).get("S", ""),
            references=_REFERENCES.validate_json(item.get("references", {}).get("S", "[]")),
            **Turn.meta_from_json(item.get("meta", {}).get("S")),
        )

    def sessions(self, limit: int = 100) -> list[SessionSummary]:
        """This tenant's sessions with live turns, most recently active first.

        A Scan of the table (the layout has no index by tenant): an operator's listing, not a request path.
        """
        tenant_filter, tenant_values = self._tenant_filter()
        found: dict[str, list[tuple[float, str]]] = {}
        params: dict[str, Any] = {
            "FilterExpression": f"{_LIVE_FILTER} AND {tenant_filter}",
            "ExpressionAttributeValues": {":now": {"N": number(self._clock(), "clock")}, **tenant_values},
            "ProjectionExpression": "session_id, created_at, #q",
            "ExpressionAttributeNames": {"#q": "query"},
        }
        items: list[dict[str, Any]] = []
        while True:
            page = self.table.call("scan", **params)
            items.extend(page.get("Items", ()))
            if "LastEvaluatedKey" not in page:
                break
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        for item in items:
            session_id = item["session_id"]["S"][tenant_prefix_bytes(self.tenant_id) :]
            found.setdefault(session_id, []).append((float(item["created_at"]["N"]), item["query"]["S"]))
        summaries = [
            SessionSummary(
                session_id=sid,
                turns=len(turns),
                first_query=min(turns)[1],
                created_at=min(turns)[0],
                updated_at=max(turns)[0],
            )
            for sid, turns in found.items()
        ]
        return sorted(summaries, key=lambda s: -s.updated_at)[:limit]

    def delete_session(self, session_id: str) -> int:
        """Delete every turn of the session (Query, then BatchWriteItem); returns how many live turns went.

        Not one transaction: a turn appended while the session is being deleted may survive.
        """
        if key_size_error("session_id", session_id, self._max_session_bytes):
            return 0
        now = self._clock()
        keys: list[dict[str, Any]] = []
        live = 0
        for item in self.table.query(
            KeyConditionExpression="session_id = :s",
            ExpressionAttributeValues={":s": {"S": self._pk(session_id)}},
            ProjectionExpression=f"session_id, sk, expires_at, {TENANT_ATTRIBUTE}",
        ):
            if not owned(item, self.tenant_id):
                continue
            keys.append({"session_id": item["session_id"], "sk": item["sk"]})
            if "expires_at" not in item or float(item["expires_at"]["N"]) > now:
                live += 1
        self.table.batch_delete(keys)
        return live
