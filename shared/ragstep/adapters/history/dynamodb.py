"""Chat history in a DynamoDB table: the AWS :class:`ragstep.ports.HistoryStore` (SQLite plays this role locally).

Also home of :class:`DynamoTable`, the client discipline shared with :mod:`.dynamodb_catalog`: boto3 imported and
the low-level client created on first use (then reused; boto3 clients are thread-safe), standard retry mode, and
every AWS failure turned into a one-line :class:`StorageError` naming the table and what to check; and of
:func:`aws_client`, which the S3 blob store uses too.

Table layout (the template's ``HistoryTable``)::

    session_id (S, HASH) | sk (S, RANGE) = "<created_at, 16 hex digits>#<turn_id>"
    turn_id (S) | created_at (N) | query (S) | answer (S) | references (S, JSON) | expires_at (N, TTL)
    [references_truncated (N): how many references were dropped to fit the item size limit]

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

import json
import math
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from typing import Any

from pydantic import TypeAdapter

from ragstep.errors import InputError, StorageError
from ragstep.models import SearchResult, Turn

HISTORY_TABLE_SETTING = "RAGSTEP_HISTORY_TABLE"

# DynamoDB's limits.
MAX_ITEM_BYTES = 400_000  # 400 KB is 409,600 bytes; the margin covers the estimate of number sizes
MAX_PARTITION_KEY_BYTES = 2048
MAX_SORT_KEY_BYTES = 1024
BATCH_WRITE_ITEMS = 25
TRANSACT_ITEMS = 100
_NUMBER_BYTES = 21  # the most a number attribute's value takes (38 significant digits)
_BATCH_ATTEMPTS = 8
_THROTTLED = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded", "LimitExceededException"}
)
_CREDENTIALS = frozenset(
    {"UnrecognizedClientException", "InvalidSignatureException", "ExpiredTokenException", "MissingAuthenticationToken"}
)


_session_lock = threading.Lock()
_session: Any = None


def aws_client(service: str, region_name: str | None = None) -> Any:
    """A boto3 client (standard retry mode) made from one process-wide Session, created on first use.

    Clients of one Session share its loaded endpoint and service data, which spares every client after the first
    tens of milliseconds of a cold start. ``Session.client`` is not thread-safe, hence the lock; the clients are.
    """
    global _session
    import boto3
    from botocore.config import Config

    with _session_lock:
        if _session is None:
            _session = boto3.session.Session()
        config = Config(retries={"mode": "standard", "max_attempts": 5})
        return _session.client(service, region_name=region_name, config=config)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def sortable_float(value: float) -> str:
    """16 hex digits whose string order is the numeric order of ``value`` (the IEEE 754 bits, sign-flipped)."""
    (bits,) = struct.unpack(">Q", struct.pack(">d", value + 0.0))  # + 0.0 folds -0.0 into 0.0
    bits = bits ^ 0xFFFF_FFFF_FFFF_FFFF if bits >> 63 else bits | 1 << 63
    return f"{bits:016x}"


def number(value: float | int, what: str) -> str:
    """A DynamoDB number attribute value (plain decimal notation) that reads back as exactly ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{what} must be a finite number, got {value}")
    if value and not 1e-129 < abs(value) < 1e125:
        raise InputError(f"{what} {value} is outside the range DynamoDB stores (1E-130 to 1E+125)")
    text = format(Decimal(repr(value)), "f")
    return text[:-2] if text.endswith(".0") else text


def key_size_error(what: str, value: str, limit: int) -> InputError | None:
    size = len(value.encode("utf-8", "surrogatepass"))
    if not value:
        return InputError(f"{what} is empty")
    if size > limit:
        return InputError(f"{what} {value[:40]!r}... is {size} bytes of UTF-8; DynamoDB keys allow {limit}")
    return None


def item_size(item: dict[str, dict[str, Any]]) -> int:
    """An upper bound of DynamoDB's size of ``item``: attribute names plus values (numbers counted at most)."""
    total = 0
    for name, value in item.items():
        total += len(name.encode("utf-8"))
        if "S" in value:
            total += len(value["S"].encode("utf-8"))
        elif "N" in value:
            total += _NUMBER_BYTES
        else:
            total += len(json.dumps(value).encode("utf-8"))  # not used by these stores; a generous bound
    return total


class DynamoTable:
    """One DynamoDB table through a low-level client created on first use.

    ``setting`` names the environment variable that holds the table name, for the error messages.
    """

    def __init__(self, name: str, setting: str, client: Any = None, region_name: str | None = None) -> None:
        if not name:
            raise StorageError(f"no DynamoDB table configured; set {setting}")
        self.name = name
        self.setting = setting
        self._client = client
        self._region = region_name
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self.guarded("connect to", lambda: aws_client("dynamodb", self._region))
        return self._client

    def call(self, operation: str, **params: Any) -> Any:
        """``client.<operation>(TableName=..., **params)`` with errors mapped to :class:`StorageError`."""
        return self.guarded(operation, lambda: getattr(self.client, operation)(TableName=self.name, **params))

    def guarded(self, action: str, fn: Callable[[], Any]) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn()
        except ClientError as exc:
            raise self.error(action, exc) from exc
        except BotoCoreError as exc:
            raise StorageError(
                f"cannot {action} DynamoDB table {self.name!r}: {_one_line(exc)}; check AWS credentials, region "
                "and network access to DynamoDB"
            ) from exc

    def error(self, action: str, exc: Any) -> StorageError:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = _one_line(error.get("Message") or code)
        where = f"DynamoDB table {self.name!r}"
        if code == "ResourceNotFoundException":
            return StorageError(f"{where} does not exist ({action}); check {self.setting} and the region (AWS_REGION)")
        if code == "AccessDeniedException":
            return StorageError(
                f"{where}: access denied ({action}); check the function's IAM policy (DynamoDBCrudPolicy on the table)"
            )
        if code in _CREDENTIALS:
            return StorageError(f"{where}: {message} ({action}); check the AWS credentials")
        if code in _THROTTLED:
            return StorageError(f"{where} is throttling requests ({action}); retry shortly")
        return StorageError(f"{where}: {action} failed: {code}: {message}")

    def query(self, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a Query, following LastEvaluatedKey (strongly consistent)."""
        params.setdefault("ConsistentRead", True)
        while True:
            page = self.call("query", **params)
            yield from page.get("Items", ())
            if "LastEvaluatedKey" not in page:
                return
            params["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def batch_delete(self, keys: Sequence[dict[str, Any]]) -> None:
        """Delete items 25 per BatchWriteItem, retrying unprocessed ones with backoff. Not atomic."""
        for start in range(0, len(keys), BATCH_WRITE_ITEMS):
            pending = [{"DeleteRequest": {"Key": key}} for key in keys[start : start + BATCH_WRITE_ITEMS]]
            for attempt in range(_BATCH_ATTEMPTS):
                response = self.guarded(
                    "batch delete", lambda p=pending: self.client.batch_write_item(RequestItems={self.name: p})
                )
                pending = response.get("UnprocessedItems", {}).get(self.name, [])
                if not pending:
                    break
                time.sleep(min(0.05 * 2**attempt, 2.0))
            else:
                raise StorageError(
                    f"DynamoDB table {self.name!r} left {len(pending)} deletes unprocessed after "
                    f"{_BATCH_ATTEMPTS} attempts (throttled); retry"
                )

    def transact(self, items: Sequence[dict[str, Any]], action: str) -> list[str] | None:
        """Run TransactWriteItems; ``None`` on success, else the cancellation reason code of each item.

        Every item's operation gets ``TableName`` added. A cancelled transaction changed nothing.
        """
        from botocore.exceptions import ClientError

        for item in items:
            (op,) = item.values()
            op["TableName"] = self.name

        def run() -> list[str] | None:
            try:
                self.client.transact_write_items(TransactItems=list(items))
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
                    raise
                reasons = exc.response.get("CancellationReasons") or [{}] * len(items)
                return [str(r.get("Code") or "None") for r in reasons]
            return None

        return self.guarded(action, run)


_REFERENCES = TypeAdapter(list[SearchResult])
_LIVE_FILTER = "attribute_not_exists(expires_at) OR expires_at > :now"
_MAX_PAGE = 1000


class DynamoHistoryStore:
    """Chat turns per session in DynamoDB table ``table_name`` (see the module docstring for the layout).

    With ``ttl_seconds`` a turn expires ``ttl_seconds`` after its ``created_at``. ``clock`` lets tests move time;
    ``client`` is a boto3 DynamoDB client to use instead of creating one.
    """

    def __init__(
        self,
        table_name: str,
        ttl_seconds: float | None = None,
        clock: Callable[[], float] = time.time,
        client: Any = None,
        *,
        region_name: str | None = None,
    ) -> None:
        if ttl_seconds is not None and not ttl_seconds > 0:
            raise InputError(f"ttl_seconds must be positive or None (no expiry), got {ttl_seconds}")
        self.table = DynamoTable(table_name, HISTORY_TABLE_SETTING, client, region_name)
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
            ("session_id", turn.session_id, MAX_PARTITION_KEY_BYTES),
            ("turn_id", turn.turn_id, MAX_SORT_KEY_BYTES - 17),
        ):
            if problem := key_size_error(what, value, limit):
                raise problem
        item: dict[str, dict[str, Any]] = {
            "session_id": {"S": turn.session_id},
            "sk": {"S": self.sort_key(turn)},
            "turn_id": {"S": turn.turn_id},
            "created_at": {"N": number(turn.created_at, "created_at")},
            "query": {"S": turn.query},
            "answer": {"S": turn.answer},
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

    def _live_values(self, session_id: str) -> dict[str, dict[str, str]]:
        return {":s": {"S": session_id}, ":now": {"N": number(self._clock(), "clock")}}

    def recent(self, session_id: str, limit: int = 10) -> list[Turn]:
        """The newest ``limit`` live turns of the session, oldest first.

        Newest first with Limit, skipping expired turns (FilterExpression): DynamoDB applies Limit before the
        filter, so pages continue (growing) until ``limit`` live turns are found or the session ends.
        """
        if limit < 0:
            raise InputError(f"limit must be 0 or more, got {limit}")
        if limit == 0 or key_size_error("session_id", session_id, MAX_PARTITION_KEY_BYTES):
            return []  # no turn can be stored under an invalid session id
        params: dict[str, Any] = {
            "KeyConditionExpression": "session_id = :s",
            "FilterExpression": _LIVE_FILTER,
            "ExpressionAttributeValues": self._live_values(session_id),
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

    @staticmethod
    def _turn(item: dict[str, Any]) -> Turn:
        return Turn(
            session_id=item["session_id"]["S"],
            turn_id=item["turn_id"]["S"],
            created_at=float(item["created_at"]["N"]),
            query=item["query"]["S"],
            answer=item.get("answer", {}).get("S", ""),
            references=_REFERENCES.validate_json(item.get("references", {}).get("S", "[]")),
        )

    def delete_session(self, session_id: str) -> int:
        """Delete every turn of the session (Query, then BatchWriteItem); returns how many live turns went.

        Not one transaction: a turn appended while the session is being deleted may survive.
        """
        if key_size_error("session_id", session_id, MAX_PARTITION_KEY_BYTES):
            return 0
        now = self._clock()
        keys: list[dict[str, Any]] = []
        live = 0
        for item in self.table.query(
            KeyConditionExpression="session_id = :s",
            ExpressionAttributeValues={":s": {"S": session_id}},
            ProjectionExpression="session_id, sk, expires_at",
        ):
            keys.append({"session_id": item["session_id"], "sk": item["sk"]})
            if "expires_at" not in item or float(item["expires_at"]["N"]) > now:
                live += 1
        self.table.batch_delete(keys)
        return live
