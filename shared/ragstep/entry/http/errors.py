"""Every error of the HTTP API is ``{error, message}``: a stable code and one line saying what to fix.

The message is written for whoever called, who may be anyone: it never names another knowledge base (the use
cases already say only what was asked for) and never carries an AWS resource ARN or account id, which a failing
adapter or the state machine may put in its message for the server's log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ragstep.errors import RagstepError

if TYPE_CHECKING:
    from starlette.applications import Starlette

#: An exception handler, as Starlette's ``exception_handlers`` (and FastAPI's ``add_exception_handler``) take it.
Handler = Callable[[Request, Any], Awaitable[Response]]

log = logging.getLogger("ragstep.http")

# An ARN runs to the next space, quote or bracket; a trailing ':' or '.' is the sentence's, not the ARN's.
_ARN = re.compile(r"\barn:aws[\w-]*:[^\s'\"()\[\]{},;]*[^\s'\"()\[\]{},;:.]")
# Twelve digits standing alone (not inside a hex id or a longer number): an AWS account id.
_ACCOUNT = re.compile(r"(?<![\w-])\d{12}(?![\w-])")
_STATUS_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


class ErrorBody(BaseModel):
    """What every 4xx and 5xx answer carries."""

    error: str = Field(description="a stable code: invalid_input, not_found, payload_too_large, ...")
    message: str = Field(description="one line that says what is wrong and what to change")


#: Where the OpenAPI document defines :class:`ErrorBody`. The app declares one response with ``model=ErrorBody``
#: (``/healthz``'s 500, served by every app), which puts the schema there.
ERROR_BODY_SCHEMA_REF = "#/components/schemas/ErrorBody"


def error_doc(description: str) -> dict[str, Any]:
    """One route's OpenAPI ``responses`` entry for an error status: ``description``, body :class:`ErrorBody`.

    The same document entry as ``{"model": ErrorBody, "description": ...}``, without its cost: FastAPI builds a
    pydantic TypeAdapter for every route's every response declared with a model (~0.2 ms of CPU each, ~17 ms of the
    streaming chat function's cold start for its 12 routes), only to write this reference into ``/openapi.json``.
    """
    return {"description": description, "content": {"application/json": {"schema": {"$ref": ERROR_BODY_SCHEMA_REF}}}}


def redact(message: str) -> str:
    """``message`` without AWS ARNs and account ids."""
    return _ACCOUNT.sub("<account>", _ARN.sub("<arn>", message))


def error_response(status: int, error: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    body = ErrorBody(error=error, message=redact(" ".join(message.split())))
    return JSONResponse(status_code=status, content=body.model_dump(), headers=headers)


class InvalidRequest(Exception):
    """Parameters or a body that break their rules: pydantic's error dicts, located as FastAPI locates them
    (``("body", *field)``, ``("query", name)``). The Starlette app raises it where FastAPI raises its
    ``RequestValidationError``; both answer with :func:`first_error`'s line."""

    def __init__(self, errors: Sequence[Mapping[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = list(errors)


def first_error(errors: Sequence[Mapping[str, Any]]) -> str:
    """The 422 message for validation errors: the first one, as ``field.path: rule``."""
    err = errors[0] if errors else {}
    where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "__root__"))
    msg = str(err.get("msg", "invalid request")).removeprefix("Value error, ")
    if err.get("type") == "json_invalid":
        return "request body is not valid JSON"
    return f"{where}: {msg}" if where else msg


async def _ragstep_error(_: Request, exc: RagstepError) -> JSONResponse:
    if exc.http_status >= 500:
        log.warning("%s: %s", exc.code, exc.message)  # the full message stays in the server's log
    return error_response(exc.http_status, exc.code, exc.message)


async def _invalid_request(_: Request, exc: InvalidRequest) -> JSONResponse:
    return error_response(422, "invalid_input", first_error(exc.errors))


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    # FastAPI answers a body it cannot decode with a bare 400 ("error parsing the body"); say what is wrong.
    if isinstance(exc.__cause__, UnicodeDecodeError):
        return error_response(422, "invalid_input", "request body is not valid UTF-8; send JSON encoded as UTF-8")
    code = _STATUS_CODES.get(exc.status_code, "invalid_input" if exc.status_code < 500 else "internal_error")
    message = f"{request.method} {request.url.path}: {exc.detail}"
    return error_response(exc.status_code, code, message, headers=getattr(exc, "headers", None))


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    # Starlette logs the traceback after this answer is sent; the caller learns only where to look.
    message = f"{request.method} {request.url.path}: internal error ({type(exc).__name__}); see the server log"
    return error_response(500, "internal_error", message)


#: The handlers every app of the API installs (the more specific auth ones: :mod:`ragstep.entry.http.auth`).
ERROR_HANDLERS: dict[Any, Handler] = {
    RagstepError: _ragstep_error,
    InvalidRequest: _invalid_request,
    StarletteHTTPException: _http_error,
    Exception: _internal_error,
}


def install_error_handlers(app: Starlette) -> None:
    """:data:`ERROR_HANDLERS` on a FastAPI app, and its request validation errors as :func:`first_error` says them
    (imported here: the Starlette app of the streaming chat function must not import FastAPI)."""
    from fastapi.exceptions import RequestValidationError

    async def _validation_error(_: Request, exc: Any) -> JSONResponse:  # a RequestValidationError
        return error_response(422, "invalid_input", first_error(exc.errors()))

    for kind, handler in ERROR_HANDLERS.items():
        app.add_exception_handler(kind, handler)
    app.add_exception_handler(RequestValidationError, _validation_error)
