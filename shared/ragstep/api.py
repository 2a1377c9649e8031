"""The HTTP API (FastAPI). Locally ``ragstep serve`` runs it with uvicorn; on Lambda, Mangum adapts it."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from . import __version__
from .errors import RagstepError
from .models import SearchRequest
from .search import knowledge_search, search_response
from .services import Services


def _first_error(exc: RequestValidationError) -> str:
    err = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "__root__"))
    msg = str(err.get("msg", "invalid request")).removeprefix("Value error, ")
    if err.get("type") == "json_invalid":
        return "request body is not valid JSON"
    return f"{where}: {msg}" if where else msg


def create_app(services: Services | None = None) -> FastAPI:
    services = services or Services()
    app = FastAPI(title="ragstep", version=__version__)

    @app.exception_handler(RagstepError)
    async def _ragstep_error(_: Request, exc: RagstepError) -> JSONResponse:
        return JSONResponse(status_code=exc.http_status, content=exc.to_dict())

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"error": "invalid_input", "message": _first_error(exc)})

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.post("/v1/knowledge-search")
    def search(request: SearchRequest) -> dict[str, Any]:
        """Same JSON as ``ragstep search --json``: ``{query, request_id, results, trace}``."""
        return search_response(knowledge_search(request, services))

    return app
