"""What a route depends on: the process's clients and the request's context (whose data it acts on).

Every route takes its :class:`~ragstep.context.Context` from here, never from a global, so the tenant a request acts
for is decided in one place: the API key the request presents (:mod:`ragstep.entry.http.auth`), or the default
tenant when the server runs in open local mode (no key configured, loopback only).

How to write a route (the whole API for route authors)::

    from ragstep.entry.http.deps import RequestContext, ChatContext, meter

    @app.post("/v1/knowledge-search")
    def search(body: SearchRequest, ctx: RequestContext, request: Request) -> SearchResponse:
        state = knowledge_search(body, ctx)          # ctx is the caller's tenant, limited to the key's kbs
        meter(request).results = len(state.final_results)   # optional: counts for the usage record
        ...

* ``ctx: RequestContext`` checks the scope :data:`ROUTE_SCOPES` gives the route's path (method aware); a route
  the table does not know needs ``manage``, so a new route is never open by accident -- add it to the table.
* ``ctx: ChatContext`` (and ``SearchContext``, ``IngestContext``, ``ManageContext``, ``UsageContext``; each is
  ``Annotated[Context, Depends(require_scope(...))]``) names the scope itself instead.
* ``meter(request)`` returns the request's :class:`~ragstep.entry.http.auth.Meter`: set ``pipeline``, ``results``,
  and call ``add_tokens(model, prompt, completion)`` when a model reports usage (a streaming route may do it when
  its stream ends: the record is written after the last byte is sent).
* ``principal(request)``: who called (tenant, key), for the admin routes.

A key limited to some knowledge bases gets a context whose catalog hides every other one (a 404 with the same text
as an unknown knowledge base). A key without the route's scope gets 403; a missing, malformed, unknown, revoked or
expired key 401; a key over its rate limit or its tenant's daily quota 429 with ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

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


def _context(request: Request, scope: Scope | None) -> Context:
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
    meter(request)
    return clients_of(request).context(caller.tenant_id, caller.allowed_kbs)


def request_context(request: Request) -> Context:
    """The context of this request's tenant, after the key's scope for this route (:data:`ROUTE_SCOPES`) and its
    limits were checked."""
    return _context(request, None)


def require_scope(scope: Scope) -> Callable[[Request], Context]:
    """A dependency: the request's context, when its key has ``scope``."""

    def scoped_context(request: Request) -> Context:
        return _context(request, scope)

    return scoped_context


RequestContext = Annotated[Context, Depends(request_context)]
#: A context whose key has one scope, whatever the route's path.
SearchContext = Annotated[Context, Depends(require_scope("search"))]
ChatContext = Annotated[Context, Depends(require_scope("chat"))]
IngestContext = Annotated[Context, Depends(require_scope("ingest"))]
ManageContext = Annotated[Context, Depends(require_scope("manage"))]
UsageContext = Annotated[Context, Depends(require_scope("usage"))]
