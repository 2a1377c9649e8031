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

from typing import Annotated

from fastapi import Depends

from ragstep.context import Context
from ragstep.entry.http.access import (
    ROUTE_SCOPES,
    clients_of,
    context_for,
    gate_of,
    meter,
    principal,
    request_context,
    require_scope,
    route_scope,
)

# What route modules import from here (the framework-free part lives in ragstep.entry.http.access).
__all__ = [
    "ROUTE_SCOPES", "ChatContext", "IngestContext", "ManageContext", "RequestContext", "SearchContext",
    "UsageContext", "clients_of", "context_for", "gate_of", "meter", "principal", "request_context",
    "require_scope", "route_scope",
]  # fmt: skip

RequestContext = Annotated[Context, Depends(request_context)]
#: A context whose key has one scope, whatever the route's path.
SearchContext = Annotated[Context, Depends(require_scope("search"))]
ChatContext = Annotated[Context, Depends(require_scope("chat"))]
IngestContext = Annotated[Context, Depends(require_scope("ingest"))]
ManageContext = Annotated[Context, Depends(require_scope("manage"))]
UsageContext = Annotated[Context, Depends(require_scope("usage"))]
