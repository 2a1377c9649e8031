"""Who is calling: API keys to tenants and scopes, rate limits and quotas, and one usage record per request.

The :class:`Gate` (one per app, ``app.state.gate``) is what :mod:`ragstep.entry.http.deps` asks for every request:

* **Credentials**: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``, checked by
  :func:`ragstep.app.keys.verify_key` (constant-time hash comparison). A resolved key is reused for
  ``RAGSTEP_KEY_CACHE_SECONDS`` (a revocation bites within that time; the hash is compared on every request).
* **Open local mode**: while no key exists (and ``RAGSTEP_AUTH`` is not ``required``) every request is the default
  tenant's, with every scope: the single-user install. ``ragstep serve`` allows that only on a loopback address.
  Once a key exists, the server requires one from then on (checked again every key-cache period while open).
* **Limits**: a token bucket per key (requests per second and burst; the key's own or the settings'), then the
  tenant's daily and monthly request and token quotas and its monthly budget in USD
  (:class:`ragstep.app.usage.QuotaBook`); over either is 429 with ``Retry-After``.
* **Metering**: :class:`Metering`, a pure ASGI middleware, writes one :class:`UsageRecord` per authenticated request
  after the last byte of its answer was sent (so never delaying a stream), from what the route reported in
  :class:`Meter`. On Lambda (``Gate(flush_usage=True)``: both the API function and the streaming chat function) the
  record is written before the answer's final, empty body message is handed on instead: an environment may be frozen
  and discarded as soon as the invocation's response ends, so a record still queued then could be lost.
"""

from __future__ import annotations

import math
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragstep.app.keys import presented_key, split_key, verify_key
from ragstep.app.tenants import tenant_of
from ragstep.app.usage import QuotaBook, UsageRecorder
from ragstep.context import Clients, Context
from ragstep.entry.http.errors import Handler, error_response
from ragstep.errors import RateLimitedError, UnauthorizedError
from ragstep.models import DEFAULT_TENANT
from ragstep.models.tenancy import KEY_MARK, PREFIX_HEX, ApiKey, Tenant, UsageRecord
from ragstep.scopes import SCOPES

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ragstep.models.cost import CostReceipt
    from ragstep.models.state import PipelineState

MISSING_KEY = (
    "this server requires an API key: send `Authorization: Bearer <key>` or `X-API-Key: <key>` "
    "(`ragstep keys create` makes one)"
)


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller of one request: a tenant and, unless the server is in open local mode, the key it presented."""

    tenant_id: str
    key: ApiKey | None = None

    @property
    def scopes(self) -> tuple[str, ...]:
        return tuple(self.key.scopes) if self.key is not None else SCOPES

    @property
    def key_prefix(self) -> str:
        return self.key.prefix if self.key is not None else ""

    @property
    def allowed_kbs(self) -> tuple[str, ...] | None:
        return tuple(self.key.knowledge_bases) if self.key is not None and self.key.knowledge_bases else None


@dataclass
class Meter:
    """What a route reports for its usage record (``deps.meter(request)``); counts add up over a request."""

    pipeline: str = ""
    results: int = 0
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: The request's estimated cost in USD: the totals of the cost receipts it made.
    cost_usd: float = 0.0
    #: The request's context, once its limits admitted it (:func:`ragstep.entry.http.access.context_for`): what
    #: :meth:`charge` prices a pipeline's state as.
    context: Context | None = None

    def add_tokens(self, model: str, prompt_tokens: int, completion_tokens: int) -> None:
        self.model = model or self.model
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens

    def add_cost(self, receipt: CostReceipt | None) -> None:
        """Count a receipt the route made (e.g. a search response's ``usage.cost``)."""
        if receipt is not None:
            self.cost_usd = round(self.cost_usd + receipt.total_usd, 10)

    def charge(self, state: PipelineState) -> CostReceipt | None:
        """The cost receipt of a finished ``state`` (:func:`ragstep.app.cost.cost_of`), counted; None before the
        request has a context."""
        if self.context is None:
            return None
        from ragstep.app.cost import cost_of

        receipt = cost_of(state, self.context)
        self.add_cost(receipt)
        return receipt


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class RateLimiter:
    """Token buckets per key prefix: ``rate`` tokens per second refill up to ``burst``; a request takes one."""

    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, prefix: str, rate: float, burst: int) -> None:
        if rate <= 0:
            return
        now = self.clock()
        with self._lock:
            bucket = self._buckets.setdefault(prefix, _Bucket(float(burst), now))
            bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
            if bucket.tokens < 1.0:
                wait = math.ceil((1.0 - bucket.tokens) / rate)
                raise RateLimitedError(f"API key {prefix} is over its rate limit ({rate:g}/s, burst {burst})", wait)
            bucket.tokens -= 1.0


class Gate:
    """Authentication, limits and metering of one app (module docstring)."""

    def __init__(self, clients: Clients, clock: Callable[[], float] = time.time, *, flush_usage: bool = False) -> None:
        self.clients = clients
        #: Write each request's usage record before its answer's last message is handed on (see :class:`Metering`).
        self.flush_usage = flush_usage
        self.settings = clients.settings
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[ApiKey, float]] = {}
        self._tenants: dict[str, tuple[Tenant, float]] = {}
        self._required = self.settings.auth == "required"
        self._checked_at = -math.inf
        self.limiter = RateLimiter()

    # The usage store is opened on first use, not when the app is built: a server that never meters a request (every
    # request refused, or only /healthz) never touches it.

    @cached_property
    def quotas(self) -> QuotaBook:
        return QuotaBook(self.clients.usage, self._clock)

    @cached_property
    def recorder(self) -> UsageRecorder:
        return UsageRecorder(self.clients.usage, on_record=self.quotas.charge_tokens)

    def required(self, *, now_if_keyed: bool = False) -> bool:
        """Whether requests need a key: always once a key exists (sticky), re-checked while none does -- at once
        when ``now_if_keyed`` (the request presents one of ours)."""
        if self._required:
            return True
        now = self._clock()
        if now_if_keyed or now - self._checked_at >= self.settings.key_cache_seconds:
            self._checked_at = now
            self._required = self.clients.keys.has_keys()
        return self._required

    def _stored_key(self, prefix: str) -> ApiKey | None:
        now = self._clock()
        cached = self._keys.get(prefix)
        if cached is not None and now - cached[1] < self.settings.key_cache_seconds:
            return cached[0]
        key = self.clients.keys.get_key(prefix)
        if key is not None:
            with self._lock:
                self._keys[prefix] = (key, now)
        return key

    def authenticate(self, headers: Mapping[str, str]) -> Principal:
        text = presented_key(headers)
        # A key of ours, while none existed at the last check: the first key was made since (`ragstep keys create`
        # beside a running server). Served in open mode, its request would act as the default tenant, and what it
        # creates would land in the default tenant's stores, not its own.
        if not self.required(now_if_keyed=text is not None and text.startswith(f"{KEY_MARK}_")):
            # Open local mode: no key exists, so none could be checked. Clients that always send one (the openai SDK
            # insists on an api_key) are served like any other caller here: as the default tenant.
            return Principal(DEFAULT_TENANT)
        if text is None:
            raise UnauthorizedError(MISSING_KEY)
        prefix, _ = split_key(text)
        key = verify_key(self.clients.keys, text, self._clock(), key=self._stored_key(prefix))
        return Principal(key.tenant_id, key)

    def _tenant(self, tenant_id: str) -> Tenant:
        now = self._clock()
        cached = self._tenants.get(tenant_id)
        if cached is None or now - cached[1] >= self.settings.key_cache_seconds:
            cached = (tenant_of(self.clients.keys, tenant_id), now)
            with self._lock:
                self._tenants[tenant_id] = cached
        return cached[0]

    def admit(self, principal: Principal) -> None:
        """Rate limit, then daily and monthly quotas and the monthly budget; :class:`RateLimitedError` when over
        either."""
        settings = self.settings
        key = principal.key
        if key is not None:
            rate = key.rate_per_second if key.rate_per_second is not None else settings.rate_limit_per_second
            self.limiter.take(key.prefix, rate, key.burst or settings.rate_limit_burst)
        elif not (
            settings.daily_request_quota
            or settings.daily_token_quota
            or settings.monthly_request_quota
            or settings.monthly_token_quota
            or settings.monthly_budget_usd
        ):
            return  # open local mode without quotas: nothing to count, no store to read
        self.quotas.admit(
            self._tenant(principal.tenant_id),
            settings.daily_request_quota,
            settings.daily_token_quota,
            settings.monthly_request_quota,
            settings.monthly_token_quota,
            settings.monthly_budget_usd,
        )

    def close(self) -> None:
        if "recorder" in self.__dict__:
            self.recorder.close()

    @asynccontextmanager
    async def lifespan(self, _: Any) -> AsyncIterator[None]:
        """The app's lifespan: on shutdown, the queued usage records are written."""
        try:
            yield
        finally:
            self.close()


def _route_of(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return str(path) if path else "-"


#: An API key anywhere in a URL (``rsk_`` and its 8 hex digits are enough: the secret follows them).
_KEY_IN_URL = re.compile(rf"{KEY_MARK}_[0-9a-fA-F]{{{PREFIX_HEX}}}_[^&;/\s]*")
KEY_IN_URL = (
    "an API key was sent in the URL, which servers and proxies log: send it as `Authorization: Bearer <key>` or "
    "`X-API-Key: <key>`, and revoke this one (`ragstep keys revoke <prefix>`): it has been exposed"
)


def refuse_key_in_url(scope: Scope) -> bool:
    """Whether the request's URL holds an API key; if so the key is replaced by ``<redacted>`` in ``scope`` in
    place, so the server's access line (uvicorn writes it from this very scope) never shows it."""
    query = scope.get("query_string", b"").decode("latin-1")
    path = str(scope.get("path", ""))
    if not (_KEY_IN_URL.search(query) or _KEY_IN_URL.search(path)):
        return False
    scope["query_string"] = _KEY_IN_URL.sub("<redacted>", query).encode("latin-1")
    scope["path"] = _KEY_IN_URL.sub("<redacted>", path)
    scope["raw_path"] = scope["path"].encode("utf-8", "surrogateescape")
    return True


class Metering:
    """One usage record per request that was authenticated, submitted after its answer's last byte was sent.

    It is also the outer check of every request's URL: one that carries an API key is refused (400) before any
    route sees it, and the key is redacted from what the access log writes (:func:`refuse_key_in_url`).
    """

    def __init__(self, app: ASGIApp, gate: Gate) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if refuse_key_in_url(scope):
            await error_response(400, "invalid_input", KEY_IN_URL)(scope, receive, send)
            return
        scope.setdefault("state", {})  # created here so the routes' request.state is this very dict
        started = time.time()
        clock = time.perf_counter()
        status = 500
        done = False

        def record() -> None:
            nonlocal done
            if done:
                return
            done = True
            state = scope.get("state") or {}
            principal: Principal | None = state.get("principal")
            if principal is None:  # refused before a tenant was known, or a route without a context (healthz)
                return
            meter: Meter = state.get("meter") or Meter()
            self.gate.recorder.submit(
                UsageRecord(
                    id=uuid.uuid4().hex,
                    tenant_id=principal.tenant_id,
                    key_prefix=principal.key_prefix,
                    method=scope.get("method", ""),
                    route=_route_of(scope),
                    status=status,
                    started_at=started,
                    duration_ms=round((time.perf_counter() - clock) * 1000, 3),
                    pipeline=meter.pipeline,
                    results=meter.results,
                    model=meter.model,
                    prompt_tokens=meter.prompt_tokens,
                    completion_tokens=meter.completion_tokens,
                    cost_usd=meter.cost_usd,
                )
            )

        async def written() -> None:
            """Record, and with ``flush_usage`` wait until the store has the record (off the event loop)."""
            record()
            if self.gate.flush_usage and "recorder" in self.gate.__dict__:
                await anyio.to_thread.run_sync(self.gate.recorder.flush)

        async def metered_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            last = message["type"] == "http.response.body" and not message.get("more_body", False)
            if last and self.gate.flush_usage:
                # On Lambda the invocation ends with the answer's last byte and the environment may be frozen, and
                # later discarded, right after: a record still queued then would be lost. Every content frame has
                # been sent already; only the end of the body waits for the write.
                await written()
            await send(message)
            if last:
                record()

        try:
            await self.app(scope, receive, metered_send)
        finally:
            # An answer cut short (the client left mid-stream) is still a request.
            await written() if self.gate.flush_usage else record()


async def _unauthorized(_: Request, exc: UnauthorizedError) -> JSONResponse:
    return error_response(401, exc.code, exc.message, headers={"WWW-Authenticate": "Bearer"})


async def _limited(_: Request, exc: RateLimitedError) -> JSONResponse:
    return error_response(429, exc.code, exc.message, headers={"Retry-After": str(exc.retry_after)})


#: 401 with ``WWW-Authenticate``, 429 with ``Retry-After`` (more specific than the RagstepError handler).
AUTH_ERROR_HANDLERS: dict[Any, Handler] = {UnauthorizedError: _unauthorized, RateLimitedError: _limited}


def install_auth_errors(app: Starlette) -> None:
    """:data:`AUTH_ERROR_HANDLERS` on ``app``."""
    for kind, handler in AUTH_ERROR_HANDLERS.items():
        app.add_exception_handler(kind, handler)
