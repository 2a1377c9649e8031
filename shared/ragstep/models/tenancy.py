"""Who may call the API and what they spent: tenants, API keys and usage records.

These are the server's own records, not a tenant's data: a key resolves *to* a tenant, so the key and usage stores
are one per deployment (``<data dir>/keys.sqlite``, ``<data dir>/usage.sqlite``, or a DynamoDB table each), never
inside a tenant's folder or key prefix.

An API key is ``rsk_<prefix>_<secret>``. Only the prefix (8 hex digits, not secret: it names the key in listings,
logs and usage) and the SHA-256 of the whole key are stored; the key itself is shown once, when it is made.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from ragstep.models.base import _Model, check_identifier, check_tenant, empty_list
from ragstep.scopes import Scope

KEY_MARK = "rsk"
PREFIX_HEX = 8


class Tenant(_Model):
    """A customer: owns knowledge bases, documents, sessions and usage. Quotas of None use the server's settings."""

    id: str
    name: str = ""
    created_at: float
    #: Requests per UTC day (None: RAGSTEP_DAILY_REQUEST_QUOTA; 0: unlimited).
    daily_requests: int | None = Field(default=None, ge=0)
    #: LLM tokens (prompt + completion) per UTC day (None: RAGSTEP_DAILY_TOKEN_QUOTA; 0: unlimited).
    daily_tokens: int | None = Field(default=None, ge=0)
    #: Requests and LLM tokens per UTC calendar month (None: RAGSTEP_MONTHLY_*_QUOTA; 0: unlimited).
    monthly_requests: int | None = Field(default=None, ge=0)
    monthly_tokens: int | None = Field(default=None, ge=0)
    #: Estimated spend in USD per UTC calendar month, the requests' cost receipts summed (None:
    #: RAGSTEP_MONTHLY_BUDGET_USD; 0: unlimited).
    monthly_budget_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        return check_tenant(value)


class ApiKey(_Model):
    """One stored key: everything but the secret, which only its hash stands for."""

    prefix: str = Field(pattern=rf"^[0-9a-f]{{{PREFIX_HEX}}}$")
    key_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    tenant_id: str
    name: str = ""
    scopes: list[Scope] = Field(min_length=1)
    #: Knowledge base ids or names this key may use; empty = every knowledge base of the tenant.
    knowledge_bases: list[str] = Field(default_factory=empty_list)
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    #: Per-key rate limit overrides (None: RAGSTEP_RATE_LIMIT_PER_SECOND / RAGSTEP_RATE_LIMIT_BURST).
    rate_per_second: float | None = Field(default=None, ge=0)
    burst: int | None = Field(default=None, ge=1)

    @field_validator("tenant_id")
    @classmethod
    def _valid_tenant(cls, value: str) -> str:
        return check_tenant(value)

    @field_validator("knowledge_bases")
    @classmethod
    def _valid_kbs(cls, value: list[str]) -> list[str]:
        return [check_identifier(ref) for ref in value]

    def status(self, now: float) -> Literal["active", "revoked", "expired"]:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


class UsageRecord(_Model):
    """One request, written after its answer was sent (a stream's after its last event)."""

    id: str
    tenant_id: str
    #: The key's prefix ("" for the unauthenticated local default tenant).
    key_prefix: str = ""
    method: str
    #: The route's path template (``/v1/sessions/{session_id}``), never the path itself: ids stay out of the bill.
    route: str
    status: int
    started_at: float
    duration_ms: float
    pipeline: str = ""
    #: Results the retrieval returned (search hits, or a chat answer's references).
    results: int = 0
    #: The chat model that answered ("" when none did), and the tokens it reported.
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: The request's estimated cost in USD (its cost receipt's total, ``usage.cost``; 0 for a route that makes none).
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


GroupBy = Literal["day", "month", "key", "model"]
#: The periods usage is also counted by, per tenant: kept after the raw records expire (``UsageStore.totals``).
UsagePeriod = Literal["day", "month"]


class UsageRow(_Model):
    """Usage summed over one group (a UTC day ``YYYY-MM-DD``, a month ``YYYY-MM``, a key prefix or a model)."""

    group: str
    requests: int = 0
    errors: int = 0
    results: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration_ms: float = 0.0
    #: The requests' estimated cost in USD, their cost receipts summed.
    cost_usd: float = 0.0


class UsageReport(_Model):
    """``GET /v1/usage`` and ``ragstep usage --json``: one tenant's usage between two instants, grouped."""

    tenant_id: str
    start: float
    end: float
    group_by: GroupBy
    rows: list[UsageRow]
    total: UsageRow
