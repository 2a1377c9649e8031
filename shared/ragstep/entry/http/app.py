"""The HTTP API (FastAPI). Locally ``ragstep serve`` runs it with uvicorn; on Lambda, Mangum adapts it.

``/openapi.json`` is the reference: every route declares its 200 body and its ``{error, message}`` error bodies.
There is no ``/docs`` or ``/redoc``: FastAPI's pages load their scripts from a CDN, which an offline machine (or a
locked-down VPC) cannot reach, and the one packaged Swagger UI on PyPI is a version that cannot render OpenAPI 3.1.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel

from ragstep import __version__
from ragstep.app.search import SearchResponse, knowledge_search
from ragstep.context import Clients
from ragstep.entry.http.deps import RequestContext
from ragstep.entry.http.errors import ErrorBody, install_error_handlers
from ragstep.entry.http.limits import BodyLimit
from ragstep.models import SearchRequest


class Health(BaseModel):
    status: Literal["ok"]
    version: str


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses, each an :class:`ErrorBody`."""
    said = {
        400: "the request cannot be served as asked (e.g. a knowledge item outside the knowledge bases named)",
        404: "an unknown knowledge base or knowledge item",
        413: "the request body is over RAGSTEP_MAX_REQUEST_BYTES",
        422: "the request is invalid: the message names the field and the rule",
        500: "an internal error (the server's log has the details)",
        502: "an embedding or rerank provider, or the state machine, failed",
        503: "the index, catalog or blob store cannot be used",
    }
    return {status: {"model": ErrorBody, "description": said[status]} for status in statuses}


def create_app(clients: Clients | None = None) -> FastAPI:
    """The API over ``clients`` (built from the environment's settings when not given); each request acts for the
    tenant :func:`~ragstep.entry.http.deps.request_context` resolves."""
    clients = clients or Clients()
    app = FastAPI(
        title="ragstep",
        version=__version__,
        description="Knowledge search over stateless stages. Every error body is {error, message}.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.clients = clients
    install_error_handlers(app)
    app.add_middleware(BodyLimit, limit=clients.settings.max_request_bytes)

    @app.get("/healthz", responses=_errors(500))
    def healthz() -> Health:
        """The server is up, and which version it runs."""
        return Health(status="ok", version=__version__)

    @app.post("/v1/knowledge-search", responses=_errors(400, 404, 413, 422, 500, 502, 503))
    def search(request: SearchRequest, ctx: RequestContext) -> SearchResponse:
        """Same JSON as ``ragstep search --json``: ``{query, request_id, results, trace}``."""
        return SearchResponse.of(knowledge_search(request, ctx))

    return app
