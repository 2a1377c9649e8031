"""A real HTTP server on 127.0.0.1 that answers from a script, for testing provider adapters without mocks.

Adapters are exercised through their real HTTP stacks (httpx, botocore): the only fake thing is the far end.
Each test queues the answers it wants, in order, and afterwards inspects every request that arrived::

    with ScriptedHTTPServer() as server:
        server.add(ScriptedResponse(429, {"error": "slow down"}, headers={"Retry-After": "0"}))
        server.add(lambda req: ScriptedResponse(200, {"echo": req.json}))
        ...call the adapter with base URL ``server.url``...
        assert len(server.requests) == 2

Answers are consumed one per request, first in first out. An entry may be a :class:`ScriptedResponse` or
a callable that builds one from the :class:`RecordedRequest` (for answers that depend on what was sent, e.g.
one embedding per input text). A request that finds the script empty gets ``fallback`` if set, otherwise a
599 with a JSON error, so an unexpected extra call fails loudly instead of hanging.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass(frozen=True, slots=True)
class ScriptedResponse:
    """One answer. ``body`` is sent as JSON unless it is ``bytes`` or ``str`` (sent as is)."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering (cut short when the server stops), to provoke client timeouts.
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    #: Percent-decoded path without the query string, e.g. ``/model/amazon.titan-embed-text-v2:0/invoke``.
    path: str
    #: The request target exactly as received (still percent-encoded, with the query string).
    raw_path: str
    query: dict[str, list[str]]
    #: Header names lower-cased; a repeated header keeps its last value.
    headers: dict[str, str]
    body: bytes
    #: The body parsed as JSON, or None when it is empty or not JSON.
    json: Any


Responder = ScriptedResponse | Callable[[RecordedRequest], ScriptedResponse]


class ScriptedHTTPServer:
    """A ``ThreadingHTTPServer`` on an ephemeral port, serving from a background thread while in context."""

    def __init__(self, *responses: Responder, fallback: Responder | None = None) -> None:
        self._script: deque[Responder] = deque(responses)
        self._fallback = fallback
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[RecordedRequest] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting -------------------------------------------------------------------------------------------

    def add(self, *responses: Responder) -> ScriptedHTTPServer:
        with self._lock:
            self._script.extend(responses)
        return self

    def set_fallback(self, responder: Responder | None) -> None:
        """The answer once the script is used up (e.g. "always 500" for retry-exhaustion tests)."""
        with self._lock:
            self._fallback = responder

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """Scripted answers not yet consumed."""
        with self._lock:
            return len(self._script)

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("ScriptedHTTPServer is not running; use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> ScriptedHTTPServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._stopping.clear()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll interval: shutdown() waits up to one interval, and every test pays it on exit.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.02,), name="scripted-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers sleeping in a scripted delay
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedHTTPServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- called from handler threads -------------------------------------------------------------------------

    def _answer(self, request: RecordedRequest) -> ScriptedResponse:
        with self._lock:
            self._requests.append(request)
            responder = self._script.popleft() if self._script else self._fallback
        if responder is None:
            return ScriptedResponse(
                599, {"error": f"scripted server: no response left for {request.method} {request.path}"}
            )
        return responder(request) if callable(responder) else responder


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedHTTPServer
    # HTTP/1.1 so clients reuse connections as they would against a real provider.
    protocol_version = "HTTP/1.1"
    # Idle keep-alive connections are dropped after this, so handler threads do not outlive the test for long.
    timeout = 10

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        split = urlsplit(self.path)
        request = RecordedRequest(
            method=self.command,
            path=unquote(split.path),
            raw_path=self.path,
            query=parse_qs(split.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            json=parsed,
        )
        response = self.owner._answer(request)
        if response.delay_s > 0 and self.owner._stopping.wait(response.delay_s):
            return
        if isinstance(response.body, bytes):
            payload, content_type = response.body, "application/octet-stream"
        elif isinstance(response.body, str):
            payload, content_type = response.body.encode(), "text/plain; charset=utf-8"
        else:
            payload, content_type = json.dumps(response.body).encode(), "application/json"
        try:
            self.send_response(response.status)
            headers = {"Content-Type": content_type, **response.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            # The client gave up (timeout) before the delayed answer was ready: the point of the delay.
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output clean; the recorded requests are the log."""
