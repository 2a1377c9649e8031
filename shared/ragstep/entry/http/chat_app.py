"""The streaming chat function's app on Starlette alone: the routes of ``create_app(routers=CHAT_ROUTERS)`` (chat,
sessions, knowledge search, ``/healthz``) without importing FastAPI.

Why it exists: the function's cold start (issue #14). Importing FastAPI was about a quarter of a new execution
environment's time to its first token (its OpenAPI models, its telemetry, declaring routes: ``ragstep bench coldstart
--function chat``), all to serve a dozen routes whose work is framework-free anyway. Starlette, FastAPI's base, is
imported in either case.

FastAPI's app (:func:`ragstep.entry.http.app.create_app`) is the reference for the API's contract: its
``/openapi.json`` documents it, and ``ragstep serve`` and the API function serve it. This app answers as that one
does -- same paths and methods, status codes, bodies, headers and frames, the same
:class:`~ragstep.entry.http.auth.Gate` (scopes by :data:`~ragstep.entry.http.access.ROUTE_SCOPES`, limits, usage
records), the same error handlers -- by calling the same functions (:mod:`~ragstep.entry.http.operations`,
:mod:`~ragstep.entry.http.completions`, :mod:`~ragstep.entry.http.conversations`) and by reading a request in
FastAPI's order: the body's JSON first, then the caller's key and scope, then the parameters and the body against
their models. tests/test_chat_app.py holds the two to the same routes and the same answers to bad input;
``GET /openapi.json`` is FastAPI's own document, from a FastAPI app of these routes built on the first request for it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Send
from starlette.types import Scope as ASGIScope

from ragstep.app.sessions import get_session, open_session
from ragstep.context import Clients, Context
from ragstep.entry.http import conversations as conv
from ragstep.entry.http import operations
from ragstep.entry.http.access import context_for, meter
from ragstep.entry.http.auth import AUTH_ERROR_HANDLERS, Gate, Meter, Metering
from ragstep.entry.http.completions import ChatCompletionRequest, complete
from ragstep.entry.http.errors import ERROR_HANDLERS, InvalidRequest, OpenAIErrors
from ragstep.entry.http.limits import BodyLimit
from ragstep.entry.http.model_ids import model_list, model_object
from ragstep.models import SearchRequest
from ragstep.models.tenancy import Scope

_MISSING = object()


@dataclass(frozen=True)
class Call:
    """What a route's operation gets: the caller's context (None for ``/healthz``), its usage meter, the path
    parameters, and the validated query and body."""

    ctx: Any
    meter: Meter
    path: dict[str, Any]
    query: Any
    body: Any


#: A route's work: a response of its own (an event stream), or a model or dict to answer as JSON.
Operation = Callable[[Call], Any]


class ApiRoute(Route):
    """A route as FastAPI's ``APIRoute`` is matched: exactly the methods declared (Starlette adds HEAD to a GET
    route), and the route in the request's scope, where the scope check and the usage record read its path
    template."""

    def __init__(self, path: str, method: str, endpoint: Callable[[Request], Any]) -> None:
        super().__init__(path, endpoint, methods=[method])
        self.methods = {method}

    def matches(self, scope: ASGIScope) -> tuple[Match, ASGIScope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


def is_json(content_type: str | None) -> bool:
    """Whether FastAPI reads a body of this ``Content-Type`` as JSON: ``application/json`` or ``application/*+json``
    (parameters aside); a body without the header is not (its strict content type). The header is split as
    ``email.message`` does for FastAPI, without importing it."""
    if not content_type:
        return False
    kind = content_type.partition(";")[0].strip().lower()
    main, _, sub = kind.partition("/") if kind.count("/") == 1 else ("text", "", "plain")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


async def read_body(request: Request) -> Any:
    """The body as FastAPI hands it to validation: the parsed JSON, the raw bytes (not JSON by its content type), or
    :data:`_MISSING` (empty). Malformed JSON is a 422, a body that cannot be decoded a 400 (both as FastAPI)."""
    try:
        data = await request.body()
        if not data:
            return _MISSING
        return json.loads(data) if is_json(request.headers.get("content-type")) else data
    except json.JSONDecodeError as exc:
        raise InvalidRequest([{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}]) from exc
    except HTTPException:
        raise
    except Exception as exc:
        raise HTTPException(status_code=400, detail="There was an error parsing the body") from exc


def validated(model: type[BaseModel] | None, value: Any, where: str, errors: list[dict[str, Any]]) -> Any:
    """``value`` as ``model`` (as FastAPI validates a body or query: python mode, from attributes), or None with
    its errors added to ``errors``, located under ``where`` (``body``, ``query``)."""
    if model is None:
        return None
    if value is _MISSING:
        errors.append({"type": "missing", "loc": (where,), "msg": "Field required", "input": None})
        return None
    try:
        return model.model_validate(value, from_attributes=True)
    except ValidationError as exc:
        from ragstep.models.unknown_fields import explain_unknown_fields

        found = explain_unknown_fields(exc.errors(include_url=False), model)
        errors.extend({**e, "loc": (where, *e["loc"])} for e in found)
        return None


def json_response(result: BaseModel | dict[str, Any], status: int) -> Response:
    # FastAPI's serialisation of a declared return type: pydantic's JSON, by alias.
    content = result.model_dump_json(by_alias=True).encode() if isinstance(result, BaseModel) else to_json(result)
    return Response(content, status_code=status, media_type="application/json")


def route(
    method: str,
    path: str,
    operation: Operation,
    *,
    scope: Scope | None = "chat",
    public: bool = False,
    body: type[BaseModel] | None = None,
    query: type[BaseModel] | None = None,
    status: int = 200,
) -> ApiRoute:
    """``method path`` answered by ``operation``: for the caller whose key has ``scope`` (None: the scope
    :data:`~ragstep.entry.http.access.ROUTE_SCOPES` gives the path), or anyone when ``public``."""

    def serve(request: Request, raw: Any) -> Response:
        ctx: Context | None = None if public else context_for(request, scope)
        errors: list[dict[str, Any]] = []
        params = validated(query, dict(request.query_params), "query", errors)
        parsed = validated(body, raw, "body", errors)
        if errors:
            raise InvalidRequest(errors)
        usage = meter(request)
        result = operation(Call(ctx=ctx, meter=usage, path=request.path_params, query=params, body=parsed))
        return result if isinstance(result, Response) else json_response(result, status)

    async def endpoint(request: Request) -> Response:
        raw = await read_body(request) if body is not None else None
        # One worker thread for the blocking part (the key's lookup, the use case, a stream's first event); the
        # request's context (its deadline) goes with it.
        return await run_in_threadpool(serve, request, raw)

    return ApiRoute(path, method, endpoint)


class OpenAPIDocument:
    """``GET /openapi.json``: FastAPI's document of the same routes, answered by a FastAPI app of them built on the
    first request for it (the function's start never imports FastAPI; this request may)."""

    def __init__(self, clients: Clients) -> None:
        self._clients = clients
        self._app: Any = None
        self._lock = threading.Lock()

    def _reference(self) -> Any:
        with self._lock:
            if self._app is None:
                from ragstep.entry.http.app import CHAT_ROUTERS, create_app

                self._app = create_app(self._clients, routers=CHAT_ROUTERS)
            return self._app

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        app = await run_in_threadpool(self._reference)
        await app(scope, receive, send)


def chat_routes() -> list[BaseRoute]:
    """The routes of ``create_app(routers=CHAT_ROUTERS)``, in its order (which decides a 405's ``Allow``)."""
    by_id = "/v1/sessions/{session_id}"
    return [
        route("GET", "/healthz", lambda c: operations.health(), public=True),
        route("POST", "/v1/knowledge-search", lambda c: operations.search(c.body, c.ctx, c.meter), scope=None,
              body=SearchRequest),
        route("POST", "/v1/chat/completions", lambda c: complete(c.body, c.ctx, c.meter), body=ChatCompletionRequest),
        route("GET", "/v1/models", lambda c: model_list(c.ctx)),
        route("GET", "/v1/models/{model:path}", lambda c: model_object(c.path["model"], c.ctx)),
        route("POST", "/v1/sessions", lambda c: open_session(c.ctx), status=201),
        route("GET", "/v1/sessions", lambda c: conv.session_page(c.ctx, c.query.page, c.query.page_size),
              query=conv.SessionsQuery),
        route("GET", by_id, lambda c: get_session(c.ctx, c.path["session_id"])),
        route("DELETE", by_id, lambda c: conv.removed(c.ctx, c.path["session_id"])),
        route("GET", f"{by_id}/messages",
              lambda c: conv.turn_page(c.ctx, c.path["session_id"], c.query.before, c.query.limit),
              query=conv.MessagesQuery),
        route("POST", f"{by_id}/stop", lambda c: conv.stopped(c.ctx, c.path["session_id"])),
        route("POST", "/v1/knowledge-chat/{session_id}",
              lambda c: conv.session_chat(c.path["session_id"], c.body, c.ctx, c.meter), body=conv.KnowledgeChatBody),
        route("POST", "/v1/knowledge-chat", lambda c: conv.stateless_chat(c.body, c.ctx, c.meter),
              body=conv.StatelessChatBody),
    ]  # fmt: skip


def create_chat_app(clients: Clients | None = None, *, flush_usage: bool = False) -> Starlette:
    """What ``create_app(clients, flush_usage=flush_usage, routers=CHAT_ROUTERS)`` serves, on Starlette."""
    clients = clients or Clients()
    gate = Gate(clients, flush_usage=flush_usage)
    routes = [Route("/openapi.json", OpenAPIDocument(clients), methods=["GET"]), *chat_routes()]
    app = Starlette(
        routes=routes,
        # In FastAPI's order: the OpenAI routes' error shape around everything, the usage record, then the body
        # limit, then the handlers.
        middleware=[
            Middleware(OpenAIErrors),
            Middleware(Metering, gate=gate),
            Middleware(BodyLimit, limit=clients.settings.max_request_bytes),
        ],
        exception_handlers={**ERROR_HANDLERS, **AUTH_ERROR_HANDLERS},
        lifespan=gate.lifespan,
    )
    app.state.clients = clients
    app.state.gate = gate
    return app
