"""MCP over Streamable HTTP at ``/mcp``: stateless, so it runs the same under ``ragstep serve`` and on Lambda.

Each request is served whole by a fresh transport (the SDK's stateless mode, JSON responses): nothing lives between
two requests, so any process -- another Lambda environment included -- can serve the next one, and there is no MCP
session to survive across invocations. A conversation's continuity is ragstep's own: the ``answer`` tool returns a
``session_id`` (a chat session in the history store) that the next call passes back.

Who calls is decided exactly as for the other routes: the API key (``Authorization: Bearer`` or ``X-API-Key``) gives
the tenant, the scopes and the knowledge bases, through the app's :class:`~ragstep.entry.http.auth.Gate` (rate limit
and quotas included), and the request gets one usage record like any other. A missing or wrong key is the API's 401
(``{error, message}``) before any MCP message is read; tools outside the key's scopes are not listed.
"""

from __future__ import annotations

import json
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from ragstep.entry.http.errors import error_response
from ragstep.entry.mcp.tools import Caller

_CALLER = "ragstep_mcp_caller"


def _authorise(request: Request) -> Caller:
    from ragstep.entry.http.access import clients_of, gate_of, meter, principal

    caller = principal(request)
    gate_of(request).admit(caller)
    meter(request).pipeline = "mcp"
    return Caller(clients_of(request).context(caller.tenant_id, caller.allowed_kbs), caller.scopes)


def _caller_of(ctx: Any) -> Caller:
    request = ctx.request
    caller: Caller | None = request.scope.get("state", {}).get(_CALLER) if request is not None else None
    if caller is None:  # every request passes through McpEndpoint first; this is a wiring error
        raise RuntimeError("an MCP request reached a tool without its caller")
    return caller


class McpEndpoint:
    """The ASGI app mounted at ``/mcp``: authenticate, then let the SDK serve the message."""

    #: The route's path, for the usage record (a plain Starlette route does not put itself in the scope).
    path = "/mcp"

    def __init__(self) -> None:
        self._server: Any = None

    def _mcp_server(self) -> Any:
        if self._server is None:
            from ragstep.entry.mcp.server import build_server

            self._server = build_server(_caller_of)
        return self._server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":
            # Stateless: no event stream for the server to speak first on (GET) and no session to end (DELETE). The
            # transport's spec has the server answer 405 then; left to the SDK, a GET stayed open with nothing sent,
            # holding a connection (on Lambda, an invocation) until the client gave up.
            method = scope.get("method", "")
            refused = error_response(
                405,
                "method_not_allowed",
                f"{method} {self.path}: MCP messages are sent by POST here (a stateless server: no event stream to "
                "open, no session to end)",
                headers={"Allow": "POST"},
            )
            await refused(scope, receive, send)
            return
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp_types import INVALID_REQUEST

        # Raised errors (401, 429, 503) reach the app's error handlers: the answer is the API's own error body.
        caller = await anyio.to_thread.run_sync(_authorise, Request(scope, receive))
        scope.setdefault("state", {})[_CALLER] = caller
        scope.setdefault("route", self)
        body = await Request(scope, receive).body()
        problem = _envelope_problem(body)
        if problem is not None:  # the SDK would answer this with its multi-line pydantic report
            refused = JSONResponse(
                {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": problem}}, status_code=400
            )
            await refused(scope, receive, send)
            return
        manager = StreamableHTTPSessionManager(self._mcp_server(), stateless=True, json_response=True)
        async with manager.run():
            await manager.handle_request(scope, _replay(body, receive), send)


def _envelope_problem(body: bytes) -> str | None:
    """One line naming the field when ``body`` is JSON but not a JSON-RPC message; None otherwise (a body that is
    not JSON is the SDK's to refuse: its parse error is one line already)."""
    from ragstep.entry.mcp.errors import envelope_problem

    try:
        raw = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past Python's parser (the SDK's parser refuses it)
        return None
    return envelope_problem(raw)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the SDK once the body was read here: the body, then whatever the client sends next."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
