"""Tenants: create and list them (the CLI's ``ragstep tenants`` and the admin routes).

The ``default`` tenant always exists without being created: it is the single-user install's, the one every
request serves when no key is configured.
"""

from __future__ import annotations

import time

from pydantic import ValidationError

from ragstep.errors import ConflictError, InputError
from ragstep.models import DEFAULT_TENANT
from ragstep.models.tenancy import Tenant
from ragstep.ports import KeyStore


def create_tenant(
    store: KeyStore,
    tenant_id: str,
    *,
    name: str = "",
    daily_requests: int | None = None,
    daily_tokens: int | None = None,
    monthly_requests: int | None = None,
    monthly_tokens: int | None = None,
    monthly_budget_usd: float | None = None,
    now: float | None = None,
) -> Tenant:
    if tenant_id == DEFAULT_TENANT:
        raise ConflictError(f"tenant {DEFAULT_TENANT!r} always exists; choose another id")
    try:
        tenant = Tenant(
            id=tenant_id,
            name=name,
            created_at=time.time() if now is None else now,
            daily_requests=daily_requests,
            daily_tokens=daily_tokens,
            monthly_requests=monthly_requests,
            monthly_tokens=monthly_tokens,
            monthly_budget_usd=monthly_budget_usd,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{where}: {str(err['msg']).removeprefix('Value error, ')}") from None
    return store.put_tenant(tenant)


def tenant_of(store: KeyStore, tenant_id: str) -> Tenant:
    """The stored tenant, or the implicit ``default`` (and any tenant of a key whose record is gone) with the
    server's quotas."""
    return store.get_tenant(tenant_id) or Tenant(id=tenant_id, created_at=0.0)


def list_tenants(store: KeyStore) -> list[Tenant]:
    """Every tenant, the implicit ``default`` first."""
    stored = store.list_tenants()
    default = [] if any(t.id == DEFAULT_TENANT for t in stored) else [Tenant(id=DEFAULT_TENANT, created_at=0.0)]
    return default + stored
