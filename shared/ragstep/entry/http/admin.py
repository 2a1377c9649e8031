"""Tenants, keys and usage over HTTP: ``/v1/admin/*`` (scope ``manage``) and ``GET /v1/usage`` (scope ``usage``).

A ``manage`` key of the admin tenant (``RAGSTEP_ADMIN_TENANT``, ``default`` unless set) without limits (no
knowledge-base list, no expiry, no rate limit of its own or the settings') administers every tenant and every key.

Every other ``manage`` key is bounded by itself (:class:`ragstep.app.keys.Reach`): it can neither make nor revoke a
key wider than itself in any dimension -- scopes, knowledge bases, expiry, rate limit and burst (403 naming the
dimension). A limit is never dropped by leaving it out: a key made without ``expires``, ``rate_per_second`` or
``burst`` takes its maker's, and one made without ``knowledge_bases`` by a key limited to some is refused (the list
decides what the new key sees, so it is asked for, not guessed). A key limited to knowledge
bases acts on its own tenant only (its list names that tenant's knowledge bases), and so does every ``manage`` key
of any other tenant; another tenant's key is unknown to it (404, like a wrong prefix). Keys it makes do not share its
rate-limit bucket: the tenant's quotas bound what they do together.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from ragstep.app.keys import Reach, create_key, parse_expiry, revoke_key, wider_in
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
    monthly_budget_usd: float | None = Field(default=None, ge=0, description="estimated USD per UTC month (0: none)")


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
    rate_per_second: float | None = Field(default=None, description="None: the server's RAGSTEP_RATE_LIMIT_*")
    burst: int | None = None

    @classmethod
    def of(cls, key: ApiKey) -> KeyInfo:
        return cls.model_validate(key.model_dump(exclude={"key_hash"}))


class CreatedKeyBody(KeyInfo):
    key: str = Field(description="the API key itself: shown this once, stored only as a hash")


def _is_admin(request: Request, caller: Principal) -> bool:
    """The admin tenant's caller, unless its key is limited to knowledge bases (which are its tenant's)."""
    limited = caller.key is not None and bool(caller.key.knowledge_bases)
    return caller.tenant_id == clients_of(request).settings.admin_tenant and not limited


def _reach(request: Request, key: ApiKey) -> Reach:
    settings = clients_of(request).settings
    return Reach.of(key, settings.rate_limit_per_second, settings.rate_limit_burst)


def _bound(request: Request, caller: Principal) -> Reach | None:
    """What bounds the keys the caller makes or revokes: its own reach; None in open local mode and for an
    unlimited key of the admin tenant."""
    if caller.key is None:
        return None
    reach = _reach(request, caller.key)
    return None if _is_admin(request, caller) and reach.unlimited else reach


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
        monthly_budget_usd=body.monthly_budget_usd,
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
    expires_at = parse_expiry(body.expires) if body.expires else None
    rate, burst = body.rate_per_second, body.burst
    bound = _bound(request, caller)
    if bound is not None and caller.key is not None:
        # An expiry or rate limit left out is the maker's own, so a limit is never dropped by omission.
        expires_at = caller.key.expires_at if expires_at is None else expires_at
        rate = caller.key.rate_per_second if rate is None else rate
        burst = caller.key.burst if burst is None else burst
        settings = clients_of(request).settings
        wanted = Reach(
            scopes=frozenset(body.scopes),
            knowledge_bases=frozenset(body.knowledge_bases),
            expires_at=expires_at,
            rate_per_second=rate if rate is not None else settings.rate_limit_per_second,
            burst=burst or settings.rate_limit_burst,
        )
        if why := wider_in(wanted, bound):
            raise ForbiddenError(
                f"this API key is limited, and a key it makes may not reach further; it would have {why}"
            )
    made = create_key(
        clients_of(request).keys,
        tenant_id,
        body.scopes,
        name=body.name,
        knowledge_bases=body.knowledge_bases,
        expires_at=expires_at,
        rate_per_second=rate,
        burst=burst,
    )
    return CreatedKeyBody(**KeyInfo.of(made.key).model_dump(), key=made.secret)


@router.delete("/v1/admin/keys/{prefix}")
def delete_key(prefix: str, request: Request, _: ManageContext) -> KeyInfo:
    """Revoke a key (the caller's tenant's; any tenant's for the admin tenant). A limited key revokes only keys no
    wider than itself."""
    caller = principal(request)
    tenant_id = None if _is_admin(request, caller) else caller.tenant_id
    store = clients_of(request).keys
    bound = _bound(request, caller)
    target = store.get_key(prefix) if bound is not None else None
    mine = target is not None and tenant_id in (None, target.tenant_id)
    if bound is not None and target is not None and mine and (why := wider_in(_reach(request, target), bound)):
        raise ForbiddenError(
            f"key {prefix} reaches further than this API key ({why}); it may revoke only keys no wider than itself"
        )
    return KeyInfo.of(revoke_key(store, prefix, tenant_id))


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


class ReplayBody(BaseModel):
    from_step: str | None = Field(default=None, description="replay from this step (default: the start)")
    retrieval: dict[str, Any] = Field(default_factory=dict, description="retrieval settings to change")
    chat: dict[str, Any] = Field(default_factory=dict, description="chat settings to change")


class ReplayMove(BaseModel):
    id: str
    file: str
    before: int | None
    after: int | None
    score_before: float | None
    score_after: float | None


class ReplayResult(BaseModel):
    request_id: str
    pipeline: str
    from_step: str
    overrides: dict[str, Any]
    changed: bool
    gained: list[ReplayMove]
    lost: list[ReplayMove]
    moved: list[ReplayMove]
    unchanged: int
    answer_before: str
    answer_after: str
    answer_diff: list[str]
    citations_before: list[str]
    citations_after: list[str]
    stage_ms: dict[str, tuple[float | None, float | None]]
    cost_before: float
    cost_after: float


@router.post("/v1/admin/replay/{request_id}")
def post_replay(request_id: str, body: ReplayBody, ctx: ManageContext) -> ReplayResult:
    """Run a recorded request again (``RAGSTEP_RECORD_RATE`` decides which are recorded), from a step and with other
    settings if asked, and say what changed: results gained, lost and moved, the answer's diff, citations, each
    stage's time and the cost (as ``ragstep replay``)."""
    import dataclasses

    from ragstep.app.replay import replay

    d = replay(ctx, request_id, from_step=body.from_step, retrieval=body.retrieval, chat=body.chat)
    return ReplayResult.model_validate(dataclasses.asdict(d) | {"changed": d.changed})
