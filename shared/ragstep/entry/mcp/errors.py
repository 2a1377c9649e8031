"""One line, naming the field, for an MCP message the SDK refuses, in place of its pydantic dump.

The SDK validates a message twice: its envelope in the transport (``jsonrpc``, ``id``, ``method``: a miss answered
with the whole multi-line report of a four-way union, each line with a pydantic URL) and the method's ``params`` in
the server (answered ``Invalid request parameters`` with nothing saying which). A client's developer needs the field
and what is wrong with it, as the API's other errors say it. A params error keeps the SDK's code (-32602, Invalid
params); an envelope error gets JSON-RPC's Invalid Request (-32600), which is what it is (the SDK said -32602).
"""

from __future__ import annotations

from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, jsonrpc_message_adapter
from pydantic import ValidationError

__all__ = ["envelope_problem", "first_problem", "one_line_params_errors", "params_problem"]

# The union member a message means, from the keys it has (the SDK tries all four and reports every failure).
_RESPONSE_KEYS = ("result", "error")


def _first(exc: ValidationError, member: str | None = None, prefix: str = "") -> str:
    """``field: what is wrong`` of the first error (of the union ``member`` when given), the field under
    ``prefix``."""
    errors = exc.errors(include_url=False)
    if member is not None:
        errors = [e for e in errors if e["loc"][:1] == (member,)] or errors
    loc = list(errors[0]["loc"])
    if loc[:1] == [member] or (prefix and loc[:1] == [prefix]):
        loc = loc[1:]
    where = ".".join(str(part) for part in ([prefix] if prefix else []) + loc)
    message = str(errors[0]["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def first_problem(exc: ValidationError, member: str | None = None) -> str:
    """``field: what is wrong`` of the first error of ``exc`` (of the union ``member`` when given)."""
    return _first(exc, member)


def _member(raw: dict[str, Any]) -> str:
    if "result" in raw:
        return "JSONRPCResponse"
    if "error" in raw:
        return "JSONRPCError"
    return "JSONRPCRequest" if "id" in raw else "JSONRPCNotification"


def envelope_problem(raw: object) -> str | None:
    """Why the parsed body ``raw`` is not a JSON-RPC message, in one line naming the field; None when it is one."""
    if not isinstance(raw, dict):
        return f"a JSON-RPC message is a JSON object, not {type(raw).__name__}"
    try:
        jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except ValidationError as exc:
        return f"invalid JSON-RPC message: {_first(exc, _member(raw))}"
    return None


def params_problem(method: str, exc: ValidationError) -> str:
    """The SDK's refusal of a method's ``params``, in one line naming the field."""
    return f"invalid params of {method}: {_first(exc, prefix='params')}"


#: What the SDK says for params that do not validate and, raised as it is, for a request before ``initialize`` on a
#: connection of the 2025 protocol (stdio): the only bare INVALID_PARAMS its request chain raises.
_SDK_BARE_MESSAGE = "Invalid request parameters"


async def one_line_params_errors(ctx: Any, call_next: Any) -> Any:
    """Server middleware: a method's params that do not validate are INVALID_PARAMS with the field in the message,
    and a request sent before ``initialize`` says so (the SDK answers both with a bare ``Invalid request
    parameters``)."""
    try:
        return await call_next(ctx)
    except ValidationError as exc:
        raise MCPError(code=INVALID_PARAMS, message=params_problem(ctx.method, exc)) from None
    except MCPError as exc:
        if exc.code == INVALID_PARAMS and exc.message == _SDK_BARE_MESSAGE:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"{ctx.method} before initialize: open the connection with initialize first",
            ) from None
        raise
