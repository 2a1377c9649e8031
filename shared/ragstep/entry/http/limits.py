"""A request body limit enforced before the body is read: a pure ASGI middleware.

``Content-Length`` over the limit is answered 413 at once, without a single body byte read. A body without a length
(chunked transfer) is counted as it streams in, and the request is answered 413 as soon as it goes over; the
application never holds more than the limit plus one chunk. Lambda behind API Gateway has its own limit (10 MB);
this one protects a process that also serves other requests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAYLOAD_TOO_LARGE = 413


class BodyTooLarge(Exception):
    """Raised into the application by ``receive`` when the body went over the limit (it stops reading there)."""


def too_large_body(limit: int, length: int | None = None) -> dict[str, str]:
    size = f"has {length} bytes" if length is not None else "is over the limit"
    return {
        "error": "payload_too_large",
        "message": f"request body {size}; the limit is {limit} bytes: send a smaller request",
    }


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP server refuses a malformed length itself
    return None


class BodyLimit:
    """Answer 413 ``{error: "payload_too_large", message}`` to any HTTP request whose body is over ``limit`` bytes."""

    def __init__(self, app: ASGIApp, limit: int, per_path: Mapping[re.Pattern[str], int] | None = None) -> None:
        self.app = app
        self.limit = limit
        # Routes with a limit of their own (document uploads), by a pattern the whole path must match.
        self.per_path = dict(per_path or {})

    def limit_for(self, path: str) -> int:
        return next((n for pattern, n in self.per_path.items() if pattern.fullmatch(path)), self.limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope.get("path", ""))
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _send_json(send, PAYLOAD_TOO_LARGE, too_large_body(limit, declared))
            return

        received = 0
        over = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            # Once the body went over, whatever the application answers (the framework turns a failed read into
            # a 400) is replaced by the 413 below.
            if over:
                return
            started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            # The application may let the read error through, or fail on the body it did not get: neither is news.
            if not over:
                raise
        if over and not started:
            await _send_json(send, PAYLOAD_TOO_LARGE, too_large_body(limit))


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
