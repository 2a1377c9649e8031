"""The HTTP API (FastAPI). Locally ``ragstep serve`` runs it with uvicorn; on Lambda, Mangum adapts it."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ragstep import __version__
from ragstep.app.search import knowledge_search, search_response
from ragstep.context import Clients, Context
from ragstep.errors import RagstepError
from ragstep.models import SearchRequest


def _first_error(exc: RequestValidationError) -> str:
    err = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "__root__"))
    msg = str(err.get("msg", "invalid request")).removeprefix("Value error, ")
    if err.get("type") == "json_invalid":
        return "request body is not valid JSON"
    return f"{where}: {msg}" if where else msg


def create_app(ctx: Context | None = None) -> FastAPI:
    ctx = ctx or Clients().context()
    app = FastAPI(title="ragstep", version=__version__)

    @app.exception_handler(RagstepError)
    async def _ragstep_error(_: Request, exc: RagstepError) -> JSONResponse:
        return JSONResponse(status_code=exc.http_status, content=exc.to_dict())

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"error": "invalid_input", "message": _first_error(exc)})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # FastAPI answers a body it cannot decode with a bare 400 ("error parsing the body"); say what is wrong.
        if isinstance(exc.__cause__, UnicodeDecodeError):
            message = "request body is not valid UTF-8; send JSON encoded as UTF-8"
            return JSONResponse(status_code=422, content={"error": "invalid_input", "message": message})
        if exc.status_code < 500:
            code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_input")
            return JSONResponse(
                status_code=exc.status_code,
                content={"error": code, "message": f"{request.method} {request.url.path}: {exc.detail}"},
                headers=getattr(exc, "headers", None),
            )
        return await http_exception_handler(request, exc)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.post("/v1/knowledge-search")
    def search(request: SearchRequest) -> dict[str, Any]:
        """Same JSON as ``ragstep search --json``: ``{query, request_id, results, trace}``."""
        return search_response(knowledge_search(request, ctx))

    return app
