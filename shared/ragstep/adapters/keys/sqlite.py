"""Tenants and API keys in one SQLite file (``<data dir>/keys.sqlite``): the embedded :class:`ragstep.ports.KeyStore`.

Rows keep the whole model as JSON (``doc``) next to the columns looked up on, so a new field needs no migration.
The file holds hashes of keys, never a key: reading it does not let anyone call the API.
"""

from __future__ import annotations

from pathlib import Path

from ragstep.adapters._sqlite import SqliteDatabase
from ragstep.errors import ConflictError
from ragstep.models.tenancy import ApiKey, Tenant

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    prefix TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS api_keys_by_tenant ON api_keys (tenant_id, created_at);
"""


class SqliteKeyStore:
    def __init__(self, path: Path) -> None:
        self._db = SqliteDatabase(path, _SCHEMA)

    @property
    def path(self) -> Path:
        return self._db.path

    def put_tenant(self, tenant: Tenant) -> Tenant:
        with self._db.write() as conn:
            if conn.execute("SELECT 1 FROM tenants WHERE id = ?", (tenant.id,)).fetchone():
                raise ConflictError(f"tenant {tenant.id!r} already exists; choose another id")
            conn.execute(
                "INSERT INTO tenants (id, created_at, doc) VALUES (?, ?, ?)",
                (tenant.id, tenant.created_at, tenant.model_dump_json()),
            )
        return tenant

    def get_tenant(self, tenant_id: str) -> Tenant | None:
        with self._db.read() as conn:
            row = conn.execute("SELECT doc FROM tenants WHERE id = ?", (tenant_id,)).fetchone()
        return Tenant.model_validate_json(row[0]) if row else None

    def list_tenants(self) -> list[Tenant]:
        with self._db.read() as conn:
            rows = conn.execute("SELECT doc FROM tenants ORDER BY created_at, id").fetchall()
        return [Tenant.model_validate_json(doc) for (doc,) in rows]

    def put_key(self, key: ApiKey) -> None:
        with self._db.write() as conn:
            if conn.execute("SELECT 1 FROM api_keys WHERE prefix = ?", (key.prefix,)).fetchone():
                raise ConflictError(f"a key with prefix {key.prefix!r} already exists")
            conn.execute(
                "INSERT INTO api_keys (prefix, tenant_id, created_at, doc) VALUES (?, ?, ?, ?)",
                (key.prefix, key.tenant_id, key.created_at, key.model_dump_json()),
            )

    def get_key(self, prefix: str) -> ApiKey | None:
        with self._db.read() as conn:
            row = conn.execute("SELECT doc FROM api_keys WHERE prefix = ?", (prefix,)).fetchone()
        return ApiKey.model_validate_json(row[0]) if row else None

    def list_keys(self, tenant_id: str | None = None) -> list[ApiKey]:
        with self._db.read() as conn:
            if tenant_id is None:
                rows = conn.execute("SELECT doc FROM api_keys ORDER BY created_at, prefix").fetchall()
            else:
                rows = conn.execute(
                    "SELECT doc FROM api_keys WHERE tenant_id = ? ORDER BY created_at, prefix", (tenant_id,)
                ).fetchall()
        return [ApiKey.model_validate_json(doc) for (doc,) in rows]

    def revoke_key(self, prefix: str, when: float) -> ApiKey | None:
        with self._db.write() as conn:
            row = conn.execute("SELECT doc FROM api_keys WHERE prefix = ?", (prefix,)).fetchone()
            if row is None:
                return None
            key = ApiKey.model_validate_json(row[0])
            if key.revoked_at is None:  # revoking twice keeps the first time
                key = key.model_copy(update={"revoked_at": when})
                conn.execute("UPDATE api_keys SET doc = ? WHERE prefix = ?", (key.model_dump_json(), prefix))
        return key

    def has_keys(self) -> bool:
        with self._db.read() as conn:
            return conn.execute("SELECT 1 FROM api_keys LIMIT 1").fetchone() is not None
