"""Who calls and what it may do, for any of the HTTP apps: the request's principal, its usage meter, and the context
its API key's scope for the route allows (:data:`ROUTE_SCOPES`).

Framework-free (Starlette's :class:`~starlette.requests.Request`, which FastAPI re-exports): the FastAPI app reaches
these through :mod:`ragstep.entry.http.deps`'s dependencies, the streaming chat function's Starlette app
(:mod:`ragstep.entry.http.chat_app`) calls them directly, so both decide the tenant, scope and limits the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request

from ragstep.context import Clients, Context
from ragstep.entry.http.auth import Gate, Meter, Principal
from ragstep.errors import ForbiddenError
from ragstep.models.tenancy import Scope

#: The scope each route needs, by path template prefix (whole segments) and method (None: any method). The first
#: match wins; a path no entry matches needs ``manage``.
ROUTE_SCOPES: tuple[tuple[str, frozenset[str] | None, Scope], ...] = (
    ("/v1/knowledge-search", None, "search"),
    ("/v1/find", None, "search"),
    ("/v1/search", None, "search"),
    ("/v1/remember", None, "chat"),  # reads a chat session, writes its memories
    ("/v1/chat", None, "chat"),
    ("/v1/knowledge-chat", None, "chat"),
    ("/v1/models", None, "chat"),
    ("/v1/sessions", None, "chat"),
    ("/v1/knowledge-bases", frozenset({"GET", "HEAD"}), "search"),
    ("/v1/knowledge-bases", None, "ingest"),
    ("/v1/documents", frozenset({"GET", "HEAD"}), "search"),
    ("/v1/documents", None, "ingest"),
    ("/v1/knowledge", frozenset({"GET", "HEAD"}), "search"),
    ("/v1/knowledge", None, "ingest"),
    ("/v1/ingest", None, "ingest"),
    ("/v1/ingestion-jobs", frozenset({"GET", "HEAD"}), "search"),
    ("/v1/usage", None, "usage"),
    ("/v1/admin", None, "manage"),
)
_UNLISTED: Scope = "manage"


def clients_of(request: Request) -> Clients:
    """The clients :func:`ragstep.entry.http.app.create_app` was built with (one set per process)."""
    clients: Clients = request.app.state.clients
    return clients


def gate_of(request: Request) -> Gate:
    gate: Gate = request.app.state.gate
    return gate


def route_scope(method: str, path: str) -> Scope:
    """The scope :data:`ROUTE_SCOPES` gives ``method path`` (a path template such as ``/v1/sessions/{id}``)."""
    for prefix, methods, scope in ROUTE_SCOPES:
        if (path == prefix or path.startswith(prefix + "/")) and (methods is None or method in methods):
            return scope
    return _UNLISTED


def principal(request: Request) -> Principal:
    """Who calls: authenticated once per request (the result is kept on ``request.state``)."""
    found: Principal | None = getattr(request.state, "principal", None)
    if found is None:
        found = gate_of(request).authenticate(request.headers)
        request.state.principal = found
    return found


def meter(request: Request) -> Meter:
    """The request's usage counts, for the route to fill in (see the module docstring)."""
    found: Meter | None = getattr(request.state, "meter", None)
    if found is None:
        found = request.state.meter = Meter()
    return found


def context_for(request: Request, scope: Scope | None) -> Context:
    """The request's context once its key has ``scope`` (None: the one :data:`ROUTE_SCOPES` gives the route's path
    template, ``scope["route"].path``) and its limits admitted it (once per request)."""
    caller = principal(request)
    if scope is None:
        route = request.scope.get("route")
        scope = route_scope(request.method, str(getattr(route, "path", request.url.path)))
    if scope not in caller.scopes:
        has = ", ".join(caller.scopes)
        raise ForbiddenError(f"API key {caller.key_prefix} lacks the {scope!r} scope this route needs (it has: {has})")
    if not getattr(request.state, "admitted", False):
        gate_of(request).admit(caller)  # once per request, however many dependencies ask
        request.state.admitted = True
    usage = meter(request)
    ctx = clients_of(request).context(caller.tenant_id, caller.allowed_kbs)
    usage.context = ctx  # what the route's cost receipts are priced as (Meter.charge)
    return ctx


def request_context(request: Request) -> Context:
    """The context of this request's tenant, after the key's scope for this route (:data:`ROUTE_SCOPES`) and its
    limits were checked."""
    return context_for(request, None)


def require_scope(scope: Scope) -> Callable[[Request], Context]:
    """A dependency: the request's context, when its key has ``scope``."""

    def scoped_context(request: Request) -> Context:
        return context_for(request, scope)

    return scoped_context
