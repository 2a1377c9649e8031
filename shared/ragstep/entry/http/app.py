"""The HTTP API (FastAPI). Locally ``ragstep serve`` runs it with uvicorn; on Lambda, Mangum adapts it. The streaming
chat function serves :data:`CHAT_ROUTERS`' routes without FastAPI (:mod:`ragstep.entry.http.chat_app`, for its cold
start): this app is the reference that one must answer as.

``/openapi.json`` is the reference: every route declares its 200 body and its ``{error, message}`` error bodies.
There is no ``/docs`` or ``/redoc``: FastAPI's pages load their scripts from a CDN, which an offline machine (or a
locked-down VPC) cannot reach, and the one packaged Swagger UI on PyPI is a version that cannot render OpenAPI 3.1.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request

from ragstep import __version__
from ragstep.app.search import SearchResponse
from ragstep.context import Clients
from ragstep.entry.http import operations
from ragstep.entry.http.auth import Gate, Metering, install_auth_errors
from ragstep.entry.http.deps import RequestContext, meter
from ragstep.entry.http.errors import ErrorBody, OpenAIErrors, error_doc, install_error_handlers
from ragstep.entry.http.limits import BodyLimit
from ragstep.entry.http.operations import Health
from ragstep.models import SearchRequest

#: The parts of the API ``create_app`` can serve, in the order their routes are declared. ``search`` is
#: ``POST /v1/knowledge-search``; every other name is the router of ``ragstep.entry.http.<name>``, imported only
#: when it is included (declaring a router's routes is most of what building the app costs).
ROUTERS = ("admin", "search", "knowledge", "chat", "sessions", "viking", "webhooks", "console", "mcp")
#: What the streaming chat function's Function URL serves (README "Streaming chat on AWS"): chat, its sessions, and
#: knowledge search, which runs in-process there too.
CHAT_ROUTERS = ("search", "chat", "sessions")


#: What each error status means, for the OpenAPI document.
_SAID = {
    400: "the request cannot be served as asked (e.g. a knowledge item outside the knowledge bases named)",
    401: "no API key, or a malformed, unknown, revoked or expired one",
    403: "the API key lacks the scope this route needs",
    429: "over the key's rate limit or the tenant's daily quota (see Retry-After)",
    404: "an unknown knowledge base or knowledge item",
    413: "the request body is over RAGSTEP_MAX_REQUEST_BYTES",
    422: "the request is invalid: the message names the field and the rule",
    500: "an internal error (the server's log has the details)",
    502: "an embedding or rerank provider, or the state machine, failed",
    503: "the index, catalog or blob store cannot be used",
}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, each an :class:`ErrorBody`."""
    return {status: error_doc(_SAID[status]) for status in statuses}


def create_app(
    clients: Clients | None = None, *, flush_usage: bool = False, routers: Iterable[str] = ROUTERS
) -> FastAPI:
    """The API over ``clients`` (built from the environment's settings when not given); each request acts for the
    tenant :func:`~ragstep.entry.http.deps.request_context` resolves. ``flush_usage`` (Lambda) writes each request's
    usage record before its answer ends (:class:`~ragstep.entry.http.auth.Metering`). ``routers`` picks the parts
    of :data:`ROUTERS` served (all by default); ``/healthz`` is always served."""
    wanted = {routers} if isinstance(routers, str) else set(routers)  # one name, not its letters
    if unknown := wanted - set(ROUTERS):
        raise ValueError(f"unknown routers {sorted(unknown)}; choose from {', '.join(ROUTERS)}")
    clients = clients or Clients()
    gate = Gate(clients, flush_usage=flush_usage)
    app = FastAPI(
        title="ragstep",
        version=__version__,
        description="Knowledge search over stateless stages. Every error body is {error, message}.",
        docs_url=None,
        redoc_url=None,
        lifespan=gate.lifespan,
    )
    app.state.clients = clients
    app.state.gate = gate
    install_error_handlers(app)
    install_auth_errors(app)
    per_path = None
    if "knowledge" in wanted:  # the document uploads, with a body limit of their own
        from ragstep.entry.http.uploads import upload_limits

        per_path = upload_limits(clients.settings)
    app.add_middleware(BodyLimit, limit=clients.settings.max_request_bytes, per_path=per_path)
    app.add_middleware(Metering, gate=gate)
    if "chat" in wanted:  # outermost: every error of the OpenAI-compatible routes in OpenAI's shape
        app.add_middleware(OpenAIErrors)
    if "admin" in wanted:
        app.include_router(_router("admin"), responses=_errors(400, 401, 403, 404, 422, 429, 500, 503))

    # The one error response declared with its model: it puts ErrorBody's schema into the document, where every
    # other error response refers to it (errors.error_doc).
    @app.get("/healthz", responses={500: {"model": ErrorBody, "description": _SAID[500]}})
    def healthz() -> Health:
        """The server is up, and which version it runs."""
        return operations.health()

    if "search" in wanted:
        _include_search(app)
    for name in ("knowledge", "chat", "sessions", "viking"):
        if name in wanted:
            app.include_router(_router(name))
    if "webhooks" in wanted:
        app.include_router(_router("webhooks"), responses=_errors(400, 401, 413, 422, 500))
    if "console" in wanted:  # the web console (README "Web console"): /, /console/*, GET /v1/me
        importlib.import_module("ragstep.entry.http.console").install(app)
    if "mcp" in wanted:  # MCP over Streamable HTTP (README "MCP"); the MCP SDK loads on its first request
        from starlette.routing import Route

        from ragstep.entry.mcp.http import McpEndpoint

        # A route, not a mount: a mount would redirect /mcp to /mcp/, which a client behind a proxy may not follow.
        app.router.routes.append(
            Route("/mcp", McpEndpoint(), methods=["GET", "POST", "DELETE"], include_in_schema=False)
        )
    return app


def _router(name: str) -> Any:
    """The router of ``ragstep.entry.http.<name>``, imported now: an app without it never pays for its routes."""
    return importlib.import_module(f"ragstep.entry.http.{name}").router


def _include_search(app: FastAPI) -> None:
    @app.post("/v1/knowledge-search", responses=_errors(400, 401, 403, 404, 413, 422, 429, 500, 502, 503))
    def search(request: SearchRequest, ctx: RequestContext, http: Request) -> SearchResponse:
        """Same JSON as ``ragstep search --json``: ``{query, request_id, results, trace}``."""
        return operations.search(request, ctx, meter(http))
