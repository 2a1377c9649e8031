"""Powertools idempotency records in a SQLite file: the local twin of its DynamoDBPersistenceLayer.

The one rule that makes it idempotent is the conditional put: a record is written only when its key is new, or the
stored one has expired, or it is ``INPROGRESS`` with an expired in-progress deadline (the DynamoDB layer's condition
expression, word for word). It is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` statement, so two processes or
threads racing on one key cannot both win: SQLite runs each statement atomically and reports whether it changed a row.
"""

from __future__ import annotations

import time
from pathlib import Path

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS, DataRecord

from ragstep.adapters._sqlite import SqliteDatabase

_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    expiration INTEGER,
    in_progress_expiration INTEGER,
    data TEXT NOT NULL DEFAULT '',
    validation TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idempotency_expiration ON idempotency (expiration);
"""

_PUT = """
INSERT INTO idempotency (id, status, expiration, in_progress_expiration, data, validation)
VALUES (:id, :status, :expiration, :in_progress_expiration, '', :validation)
ON CONFLICT (id) DO UPDATE SET
    status = excluded.status,
    expiration = excluded.expiration,
    in_progress_expiration = excluded.in_progress_expiration,
    data = '',
    validation = excluded.validation
WHERE idempotency.expiration < :now
   OR (idempotency.status = :inprogress AND idempotency.in_progress_expiration IS NOT NULL
       AND idempotency.in_progress_expiration < :now_ms)
"""


class SqlitePersistenceLayer(BasePersistenceLayer):
    """Idempotency records in ``path`` (one table; expired rows are swept on each write)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.db = SqliteDatabase(Path(path), _SCHEMA)

    def _get_record(self, idempotency_key: str) -> DataRecord:
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT status, expiration, in_progress_expiration, data, validation FROM idempotency WHERE id = ?",
                (idempotency_key,),
            ).fetchone()
        if row is None:
            raise IdempotencyItemNotFoundError
        status, expiration, in_progress, data, validation = row
        return DataRecord(
            idempotency_key=idempotency_key,
            status=status,
            expiry_timestamp=expiration,
            in_progress_expiry_timestamp=in_progress,
            response_data=data,
            payload_hash=validation,
        )

    def _put_record(self, data_record: DataRecord) -> None:
        now = time.time()
        with self.db.write() as conn:
            # Rows whose TTL passed long ago go, as DynamoDB's TTL sweeps them (an hour of grace: a record is
            # honoured until its expiration however late the sweep runs).
            conn.execute("DELETE FROM idempotency WHERE expiration < ?", (int(now) - 3600,))
            cursor = conn.execute(
                _PUT,
                {
                    "id": data_record.idempotency_key,
                    "status": data_record.status,
                    "expiration": data_record.expiry_timestamp,
                    "in_progress_expiration": data_record.in_progress_expiry_timestamp,
                    "validation": data_record.payload_hash if self.payload_validation_enabled else "",
                    "now": int(now),
                    "now_ms": int(now * 1000),
                    "inprogress": STATUS_CONSTANTS["INPROGRESS"],
                },
            )
            if cursor.rowcount != 1:
                raise IdempotencyItemAlreadyExistsError

    def _update_record(self, data_record: DataRecord) -> None:
        with self.db.write() as conn:
            conn.execute(
                "UPDATE idempotency SET status = ?, expiration = ?, data = ? WHERE id = ?",
                (
                    data_record.status,
                    data_record.expiry_timestamp,
                    data_record.response_data,
                    data_record.idempotency_key,
                ),
            )

    def _delete_record(self, data_record: DataRecord) -> None:
        with self.db.write() as conn:
            conn.execute("DELETE FROM idempotency WHERE id = ?", (data_record.idempotency_key,))
