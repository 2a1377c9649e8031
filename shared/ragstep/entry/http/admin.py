"""Tenants, keys and usage over HTTP: ``/v1/admin/*`` (scope ``manage``) and ``GET /v1/usage`` (scope ``usage``).

A ``manage`` key of the admin tenant (``RAGSTEP_ADMIN_TENANT``, ``default`` unless set) administers every tenant;
a ``manage`` key of any other tenant only its own keys, and a key it makes can do no more than itself (its scopes
and knowledge bases are within the maker's). Another tenant's key is unknown to it (404, like a wrong prefix).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from ragstep.app.keys import create_key, parse_expiry, revoke_key
from ragstep.app.tenants import create_tenant, list_tenants
from ragstep.app.usage import counted_report, parse_instant, usage_report
from ragstep.entry.http.auth import Principal
from ragstep.entry.http.deps import ManageContext, UsageContext, clients_of, principal
from ragstep.errors import ForbiddenError, InputError
from ragstep.models.tenancy import ApiKey, GroupBy, Scope, Tenant, UsagePeriod, UsageReport

router = APIRouter()


class NewTenant(BaseModel):
    id: str
    name: str = ""
    daily_requests: int | None = Field(default=None, ge=0)
    daily_tokens: int | None = Field(default=None, ge=0)
    monthly_requests: int | None = Field(default=None, ge=0)
    monthly_tokens: int | None = Field(default=None, ge=0)


class NewKey(BaseModel):
    tenant_id: str | None = Field(default=None, description="the caller's tenant when omitted")
    scopes: list[Scope] = Field(min_length=1)
    name: str = ""
    knowledge_bases: list[str] = Field(default_factory=list)
    expires: str | None = Field(default=None, description="90d, 12h, 2027-01-31 or an ISO 8601 time")
    rate_per_second: float | None = Field(default=None, ge=0)
    burst: int | None = Field(default=None, ge=1)


class KeyInfo(BaseModel):
    """A key as listings show it: everything but its hash."""

    prefix: str
    tenant_id: str
    name: str
    scopes: list[Scope]
    knowledge_bases: list[str]
    created_at: float
    expires_at: float | None
    revoked_at: float | None

    @classmethod
    def of(cls, key: ApiKey) -> KeyInfo:
        return cls.model_validate(key.model_dump(exclude={"key_hash", "rate_per_second", "burst"}))


class CreatedKeyBody(KeyInfo):
    key: str = Field(description="the API key itself: shown this once, stored only as a hash")


def _is_admin(request: Request, caller: Principal) -> bool:
    return caller.tenant_id == clients_of(request).settings.admin_tenant


def _tenant_for(request: Request, caller: Principal, wanted: str | None) -> str:
    if wanted is None or wanted == caller.tenant_id:
        return caller.tenant_id
    if not _is_admin(request, caller):
        raise ForbiddenError("a key may act on its own tenant only (the admin tenant's manage keys act on any)")
    return wanted


def _admin_only(request: Request, caller: Principal) -> None:
    if not _is_admin(request, caller):
        raise ForbiddenError("tenants are managed by the admin tenant's manage keys only")


@router.get("/v1/admin/tenants")
def get_tenants(request: Request, _: ManageContext) -> list[Tenant]:
    """Every tenant (admin tenant only)."""
    _admin_only(request, principal(request))
    return list_tenants(clients_of(request).keys)


@router.post("/v1/admin/tenants", status_code=201)
def post_tenant(body: NewTenant, request: Request, _: ManageContext) -> Tenant:
    """Create a tenant (admin tenant only)."""
    _admin_only(request, principal(request))
    return create_tenant(
        clients_of(request).keys,
        body.id,
        name=body.name,
        daily_requests=body.daily_requests,
        daily_tokens=body.daily_tokens,
        monthly_requests=body.monthly_requests,
        monthly_tokens=body.monthly_tokens,
    )


@router.get("/v1/admin/keys")
def get_keys(request: Request, _: ManageContext, tenant: Annotated[str | None, Query()] = None) -> list[KeyInfo]:
    """The caller's tenant's keys (or ``tenant``'s, for the admin tenant)."""
    tenant_id = _tenant_for(request, principal(request), tenant)
    return [KeyInfo.of(k) for k in clients_of(request).keys.list_keys(tenant_id)]


@router.post("/v1/admin/keys", status_code=201)
def post_key(body: NewKey, request: Request, _: ManageContext) -> CreatedKeyBody:
    """Make a key; the answer holds the key itself, which is never shown again."""
    caller = principal(request)
    tenant_id = _tenant_for(request, caller, body.tenant_id)
    if tenant_id == caller.tenant_id and caller.key is not None and not _is_admin(request, caller):
        if not set(body.scopes) <= set(caller.scopes):
            raise ForbiddenError("a key cannot make a key with scopes it does not have itself")
        limit = caller.allowed_kbs
        if limit is not None and (not body.knowledge_bases or not set(body.knowledge_bases) <= set(limit)):
            raise ForbiddenError(f"this key is limited to {', '.join(limit)}; a key it makes must be limited too")
    made = create_key(
        clients_of(request).keys,
        tenant_id,
        body.scopes,
        name=body.name,
        knowledge_bases=body.knowledge_bases,
        expires_at=parse_expiry(body.expires) if body.expires else None,
        rate_per_second=body.rate_per_second,
        burst=body.burst,
    )
    return CreatedKeyBody(**KeyInfo.of(made.key).model_dump(), key=made.secret)


@router.delete("/v1/admin/keys/{prefix}")
def delete_key(prefix: str, request: Request, _: ManageContext) -> KeyInfo:
    """Revoke a key (the caller's tenant's; any tenant's for the admin tenant)."""
    caller = principal(request)
    scope = None if _is_admin(request, caller) else caller.tenant_id
    return KeyInfo.of(revoke_key(clients_of(request).keys, prefix, scope))


@router.get("/v1/usage")
def get_usage(
    request: Request,
    _: UsageContext,
    start: Annotated[str | None, Query(alias="from")] = None,
    end: Annotated[str | None, Query(alias="to")] = None,
    group_by: GroupBy | None = None,
    period: UsagePeriod | None = None,
    tenant: str | None = None,
) -> UsageReport:
    """The caller's tenant's usage in ``[from, to)`` (default: the last 30 days), from its requests' records grouped
    by ``group_by`` (day, the default; month, key or model). ``period=day|month`` reads the per-tenant counters
    instead, which outlive the raw records: whole UTC days or months (default: the last 30 days, or 12 months)."""
    tenant_id = _tenant_for(request, principal(request), tenant)
    clients = clients_of(request)
    first = parse_instant(start) if start else None
    last = parse_instant(end) if end else None
    if period is None:
        return usage_report(clients.usage, tenant_id, first, last, group_by or "day")
    if group_by is not None and group_by != period:
        raise InputError(
            f"period={period} reads the per-tenant counters, which are not split by {group_by}; "
            "drop group_by, or drop period to group the raw records"
        )
    return counted_report(clients.usage, tenant_id, period, first, last)
