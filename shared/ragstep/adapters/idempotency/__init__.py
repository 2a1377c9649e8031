"""Where "done once" is remembered: Powertools idempotency persistence layers (:class:`ragstep.ports.IdempotencyStore`).

``dynamodb`` is Powertools' own DynamoDBPersistenceLayer on the stack's IdempotencyTable (key ``id``, TTL attribute
``expiration``: Powertools' defaults); ``sqlite`` is
:class:`~ragstep.adapters.idempotency.sqlite.SqlitePersistenceLayer` for local runs. Importing this module costs
only the standard library: the Slack webhook builds its layer from environment variables without loading the
settings (pydantic).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragstep.ports import IdempotencyStore

BACKENDS = ("sqlite", "dynamodb")
DYNAMODB_TIMEOUT_S = 2.0


class LocalDeadline:
    """Stands in for the Lambda context Powertools reads an invocation's remaining time from, outside Lambda: an
    in-progress record then expires after ``budget_ms``, so a process that died mid-way blocks a retry no longer."""

    def __init__(self, budget_ms: int) -> None:
        self.budget_ms = budget_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.budget_ms


def make_idempotency_store(backend: str, *, table: str = "", path: Path | None = None) -> IdempotencyStore:
    """The persistence layer of ``backend``: a DynamoDB ``table`` or a SQLite file at ``path``."""
    from ragstep.errors import InputError

    if backend == "dynamodb":
        if not table:
            raise InputError("RAGSTEP_IDEMPOTENCY_TABLE is not set; name the DynamoDB table that remembers done work")
        from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

        from ragstep.adapters._aws import aws_client

        # Our client policy (timeouts, standard retries, the shared botocore loader): a stuck call must fail well
        # inside a Slack webhook's 3 s rather than wait for botocore's 60 s default.
        client = aws_client("dynamodb", timeout_s=DYNAMODB_TIMEOUT_S, max_retries=2)
        return DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    if backend == "sqlite":
        if path is None:
            raise InputError("the SQLite idempotency store needs a file path")
        from ragstep.adapters.idempotency.sqlite import SqlitePersistenceLayer

        return SqlitePersistenceLayer(path)
    raise InputError(f"idempotency backend {backend!r} is not available; use one of {', '.join(BACKENDS)}")
