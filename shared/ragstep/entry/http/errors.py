"""Every error of the HTTP API is ``{error, message}``: a stable code and one line saying what to fix -- except on
the OpenAI-compatible routes (:data:`OPENAI_PATHS`), whose every error is OpenAI's ``{"error": {"message", "type",
"param", "code"}}`` (:class:`OpenAIErrors`), so that the ``openai`` SDKs and the libraries built on them show the
message and set ``code``/``type``/``param``; ``code`` is the same stable code.

The message is written for whoever called, who may be anyone: it never names another knowledge base (the use
cases already say only what was asked for) and never carries an AWS resource ARN or account id, which a failing
adapter or the state machine may put in its message for the server's log.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragstep.errors import InputError, RagstepError
from ragstep.models.unknown_fields import explain_unknown_fields

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
    pydantic TypeAdapter for every route's every response declared with a model (CPU in every cold start of the
    streaming chat function, per route and status), only to write this reference into ``/openapi.json``.
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


#: pydantic's error types for a body that is not an object at all (a JSON array or string, or bytes sent without a
#: JSON content type), which its own message ("Input should be a valid dictionary or object ...") does not say.
_NOT_AN_OBJECT = frozenset({"model_attributes_type", "model_type", "dict_type"})


def first_error(errors: Sequence[Mapping[str, Any]]) -> str:
    """The 422 message for validation errors: the first one, as ``field.path: rule``; a body that is missing or not
    a JSON object is said as such (pydantic's words name no field, so they would not say which part is wrong)."""
    err = errors[0] if errors else {}
    loc = tuple(err.get("loc", ()))
    where = ".".join(str(p) for p in loc if p not in ("body", "__root__"))
    msg = str(err.get("msg", "invalid request")).removeprefix("Value error, ")
    if err.get("type") == "json_invalid":
        return "request body is not valid JSON"
    if loc == ("body",) and err.get("type") == "missing":
        return "request body is empty; send a JSON object with Content-Type: application/json"
    if loc == ("body",) and err.get("type") in _NOT_AN_OBJECT:
        return "request body is not a JSON object; send one with Content-Type: application/json"
    if msg.startswith("Expected UploadFile"):  # FastAPI's words name a Python class: a text field where a file goes
        return f"{where}: not a file; send each file as a form part with a file name (curl -F 'files=@report.pdf')"
    return f"{where}: {msg}" if where else msg


class FieldError(InputError):
    """Bad input in one field of the request, named for OpenAI's ``param`` (``model``, ``messages``); a 404 when
    ``not_found`` (the field names something that does not exist)."""

    def __init__(self, message: str, param: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.param = param
        if not_found:
            self.http_status, self.code = 404, "not_found"


async def _ragstep_error(request: Request, exc: RagstepError) -> JSONResponse:
    if isinstance(exc, FieldError):
        request.state.error_param = exc.param
    if exc.http_status >= 500:
        log.warning("%s: %s", exc.code, exc.message)  # the full message stays in the server's log
    return error_response(exc.http_status, exc.code, exc.message)


def error_param(request: Request, errors: Sequence[Mapping[str, Any]]) -> None:
    """Keep the field the first validation error names on the request, for OpenAI's ``param``."""
    err = errors[0] if errors else {}
    # A JSON syntax error's location is the character it stopped at, not a field.
    loc = () if err.get("type") == "json_invalid" else err.get("loc", ())
    where = [str(p) for p in loc if p not in ("body", "query", "__root__")]
    request.state.error_param = ".".join(where) or None


async def _invalid_request(request: Request, exc: InvalidRequest) -> JSONResponse:
    error_param(request, exc.errors)
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
    # No exception class either: which one failed is the server's business (and a hint to whoever probes it).
    message = f"{request.method} {request.url.path}: internal error; see the server log"
    if is_openai_path(request.url.path):  # this handler answers outside every middleware, OpenAIErrors included
        return JSONResponse(status_code=500, content={"error": openai_error(500, "internal_error", message)})
    return error_response(500, "internal_error", message)


#: The handlers every app of the API installs (the more specific auth ones: :mod:`ragstep.entry.http.auth`).
ERROR_HANDLERS: dict[Any, Handler] = {
    RagstepError: _ragstep_error,
    InvalidRequest: _invalid_request,
    StarletteHTTPException: _http_error,
    Exception: _internal_error,
}


def _body_model(request: Request) -> type[BaseModel] | None:
    """The model a FastAPI route validates its body with (the one the body's errors are located in)."""
    field = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def install_error_handlers(app: Starlette) -> None:
    """:data:`ERROR_HANDLERS` on a FastAPI app, and its request validation errors as :func:`first_error` says them
    (imported here: the Starlette app of the streaming chat function must not import FastAPI)."""
    from fastapi.exceptions import RequestValidationError

    async def _validation_error(request: Request, exc: Any) -> JSONResponse:  # a RequestValidationError
        errors = explain_unknown_fields(exc.errors(), _body_model(request), root=("body",))
        error_param(request, errors)
        return error_response(422, "invalid_input", first_error(errors))

    for kind, handler in ERROR_HANDLERS.items():
        app.add_exception_handler(kind, handler)
    app.add_exception_handler(RequestValidationError, _validation_error)


# -- the OpenAI-compatible routes ----------------------------------------------------------------------------------

#: The routes whose errors are OpenAI's shape (the route, and anything under it: a path the API does not serve there
#: is still asked by an OpenAI client).
OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")


def is_openai_path(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in OPENAI_PATHS)


def openai_type(status: int) -> str:
    """OpenAI's error ``type`` for an HTTP status."""
    if status >= 500:
        return "server_error"
    return {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}.get(
        status, "invalid_request_error"
    )


class OpenAIError(BaseModel):
    message: str = Field(description="one line that says what is wrong and what to change")
    type: str = Field(description="invalid_request_error, authentication_error, permission_error, ...")
    param: str | None = Field(None, description="the request field at fault, when one is")
    code: str = Field(description="ragstep's stable code: invalid_input, not_found, unauthorized, ...")


class OpenAIErrorBody(BaseModel):
    """What every 4xx and 5xx answer of the OpenAI-compatible routes carries (OpenAI's own error shape)."""

    error: OpenAIError


def openai_error(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """The ``error`` object of OpenAI's shape (also an event stream's error frame)."""
    said = redact(" ".join(message.split()))
    return OpenAIError(message=said, type=openai_type(status), param=param, code=code).model_dump()


def _reshaped(status: int, body: bytes, param: str | None) -> bytes | None:
    """An ``{error, message}`` body as OpenAI's shape (None: not one of ours, left as it is)."""
    try:
        said = json.loads(body)
    except ValueError:
        return None
    if not (isinstance(said, dict) and isinstance(said.get("error"), str) and isinstance(said.get("message"), str)):
        return None
    return json.dumps({"error": openai_error(status, said["error"], said["message"], param)}).encode()


class OpenAIErrors:
    """A pure ASGI middleware: on :data:`OPENAI_PATHS`, an error answer's ``{error, message}`` body is rewritten in
    OpenAI's shape. It sits outside everything that may answer an error (the body limit, the key check, the
    handlers), so no error of these routes escapes it; success answers (event streams included) pass untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_openai_path(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        held: Message | None = None
        parts: list[bytes] = []

        async def reshaping_send(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start" and int(message["status"]) >= 400:
                held = message
                return
            if held is None or message["type"] != "http.response.body":
                await send(message)
                return
            parts.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            status = int(held["status"])
            param = (scope.get("state") or {}).get("error_param")
            body = b"".join(parts)
            body = _reshaped(status, body, param) or body
            headers = [(k, v) for k, v in held.get("headers", []) if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**held, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, reshaping_send)
