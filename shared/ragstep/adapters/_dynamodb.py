"""DynamoDB plumbing shared by the DynamoDB stores (catalog, history): :class:`DynamoTable`, key encodings and
tenant scoping.

:class:`DynamoTable` is one table through a low-level client from :func:`ragstep.adapters._aws.aws_client` (created
on first use, then reused; clients are thread-safe), every AWS failure turned into a one-line :class:`StorageError`
naming the table and what to check.

Tenants share a table. The default tenant keeps the key layout ragstep has always had, so an existing table needs no
migration; every other tenant's partition keys are prefixed with ``<tenant>#`` (:func:`tenant_key`) and its items
carry a ``tenant_id`` attribute. Readers check that attribute as well (:func:`owned`): a default-tenant key crafted to
look like another tenant's prefix can then never surface that tenant's items.
"""

from __future__ import annotations

import json
import math
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from functools import partial
from typing import Any

from ragstep.adapters._aws import aws_client
from ragstep.adapters._http import one_line
from ragstep.errors import InputError, StorageError
from ragstep.models import DEFAULT_TENANT, check_tenant

#: The attribute that names the tenant of an item (absent on the default tenant's items).
TENANT_ATTRIBUTE = "tenant_id"


def checked_tenant(tenant_id: str) -> str:
    """``tenant_id`` when valid, else an :class:`InputError` saying what a tenant id may hold."""
    try:
        return check_tenant(tenant_id)
    except ValueError as exc:
        raise InputError(str(exc)) from None


def tenant_key(tenant_id: str, key: str) -> str:
    """The partition key of ``key`` in ``tenant_id``'s part of a table: unchanged for the default tenant."""
    return key if tenant_id == DEFAULT_TENANT else f"{tenant_id}#{key}"


def tenant_attributes(tenant_id: str) -> dict[str, dict[str, str]]:
    """The attributes that mark an item as ``tenant_id``'s (none for the default tenant: today's items)."""
    return {} if tenant_id == DEFAULT_TENANT else {TENANT_ATTRIBUTE: {"S": tenant_id}}


def owned(item: Mapping[str, Any] | None, tenant_id: str) -> bool:
    """Whether ``item`` belongs to ``tenant_id`` (items without the attribute are the default tenant's)."""
    if item is None:
        return False
    marked = item.get(TENANT_ATTRIBUTE)
    return (marked["S"] if marked else DEFAULT_TENANT) == tenant_id


def tenant_prefix_bytes(tenant_id: str) -> int:
    """How many bytes :func:`tenant_key` adds to a partition key (they count against DynamoDB's key limit)."""
    return 0 if tenant_id == DEFAULT_TENANT else len(tenant_id) + 1


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
                    self._client = self.guarded("connect to", lambda: aws_client("dynamodb", region=self._region))
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
                f"cannot {action} DynamoDB table {self.name!r}: {one_line(exc)}; check AWS credentials, region "
                "and network access to DynamoDB"
            ) from exc

    def error(self, action: str, exc: Any) -> StorageError:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = one_line(error.get("Message") or code)
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
                request = {self.name: pending}
                response = self.guarded("batch delete", partial(self.client.batch_write_item, RequestItems=request))
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
