"""The MCP server over stdio, answering every line it cannot read with a JSON-RPC error.

The SDK's stdio transport hands a line that is not JSON, or not a JSON-RPC message, to the server as an exception,
which the server only logs: the client never hears of it, and a client waiting on that request's id waits forever.
JSON-RPC 2.0 says such a line gets an error response: Parse error (-32700) for invalid JSON, Invalid Request
(-32600) for a JSON value that is no message, with the request's id when it can be read and null when not. The
message names the field, as over HTTP (:func:`ragstep.entry.mcp.errors.envelope_problem`).
"""

from __future__ import annotations

import contextlib
import contextvars
from types import TracebackType
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError

from ragstep.entry.mcp.errors import envelope_problem, first_problem

__all__ = ["AnsweringReadStream", "serve_stdio", "unreadable_reply"]


def _message_of(exc: ValidationError) -> dict[str, Any] | None:
    """The JSON object of a line that is no JSON-RPC message, when the SDK's report still holds it.

    The SDK tries the line as each of the four messages; a request or a notification always lacks ``result`` and
    ``error``, whose "missing" errors carry the whole object."""
    for error in exc.errors(include_url=False):
        if error["type"] == "missing" and len(error["loc"]) == 2 and isinstance(error.get("input"), dict):
            return error["input"]
    return None


def unreadable_reply(exc: Exception) -> JSONRPCError | None:
    """The JSON-RPC error answering a stdio line the SDK could not read (its exception ``exc``); None for a blank
    line, which is no message at all (a client's stray newline gets no error)."""
    if not isinstance(exc, ValidationError):
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message="unreadable line"))
    errors = exc.errors(include_url=False)
    if errors and errors[0]["type"] == "json_invalid":
        if not str(errors[0].get("input", "x")).strip():
            return None
        message = f"not JSON: {errors[0]['ctx']['error']}" if "ctx" in errors[0] else "not JSON"
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message=message))
    raw = _message_of(exc)
    if raw is None:  # a JSON value that is no object, or an object the report does not hold
        inputs = [e.get("input") for e in errors if len(e["loc"]) == 1]
        problem = envelope_problem(inputs[0]) if inputs else None
        message = problem or f"invalid JSON-RPC message: {first_problem(exc, 'JSONRPCRequest')}"
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=message))
    ident = raw.get("id")
    if isinstance(ident, bool) or not isinstance(ident, (str, int)):
        ident = None
    message = envelope_problem(raw) or "invalid JSON-RPC message"
    return JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(code=INVALID_REQUEST, message=message))


class AnsweringReadStream:
    """The transport's read stream, minus the lines it could not read: each is answered on ``write`` instead."""

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> contextvars.Context | None:
        """The sender's context of the last item, which the SDK's dispatcher reads when the stream has it."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            reply = unreadable_reply(item)
            if reply is not None:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):  # the server ends
                    await self._write.send(SessionMessage(reply))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> AnsweringReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringReadStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def serve_stdio(server: Any) -> None:
    """Run ``server`` (a low-level SDK server) on this process's stdin and stdout until stdin ends."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(AnsweringReadStream(read, write), write, server.create_initialization_options())
