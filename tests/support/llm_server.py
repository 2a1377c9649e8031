"""A real HTTP server on 127.0.0.1 that answers like an OpenAI-compatible ``/chat/completions``, from a script.

Each request consumes one :class:`Reply`: a JSON answer, or an event stream written chunk by chunk (chunked transfer
encoding, optionally with a slow first chunk, a pause between chunks, malformed lines, or a connection cut before
the end). The server records every request and whether a client hung up while it was still streaming, so tests can
check that an abandoned answer really stopped the provider's stream.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

DONE = "data: [DONE]\n\n"


def sse(
    content: str = "",
    reasoning: str = "",
    finish: str | None = None,
    usage: dict[str, int] | None = None,
    model: str = "scripted",
) -> str:
    """One ``data:`` event as OpenAI streams it."""
    delta: dict[str, Any] = {}
    if content:
        delta["content"] = content
    if reasoning:
        delta["reasoning_content"] = reasoning
    chunk: dict[str, Any] = {
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta or finish else [],
    }
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"


def streamed(*pieces: str, usage: dict[str, int] | None = None) -> list[str]:
    """A complete stream: one event per piece, a finish event with ``usage``, then ``[DONE]``."""
    return [*(sse(p) for p in pieces), sse(finish="stop", usage=usage), DONE]


def completion(content: str, usage: dict[str, int] | None = None, reasoning: str = "") -> dict[str, Any]:
    """A non-streamed answer body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    return {
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": usage or {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


@dataclass
class Reply:
    status: int = 200
    #: A JSON body (non-streamed answers and errors).
    body: Any = None
    #: Event-stream chunks, written one by one (each flushed).
    chunks: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    first_delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    #: Close the connection after the chunks without ending the chunked body (a stream cut mid-way).
    cut: bool = False


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    json: Any


class LLMServer:
    def __init__(
        self, *replies: Reply, fallback: Reply | None = None, responder: Callable[[Received], Reply] | None = None
    ) -> None:
        self._script: deque[Reply] = deque(replies)
        self.fallback = fallback
        #: Answers from the request once the script is used up (for concurrent callers, whose order is not fixed).
        self.responder = responder
        self._lock = threading.Lock()
        self.requests: list[Received] = []
        #: Set when a client disconnected before a stream was fully written.
        self.hung_up = threading.Event()
        self.chunks_written = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def add(self, *replies: Reply) -> LLMServer:
        with self._lock:
            self._script.extend(replies)
        return self

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(received)
        return self.fallback or Reply(599, {"error": "scripted LLM server: no reply left"})

    def __enter__(self) -> LLMServer:
        server = self

        class Handler(_Handler):
            owner = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    owner: LLMServer
    protocol_version = "HTTP/1.1"
    timeout = 10

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        reply = self.owner._next(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, parsed))
        if reply.first_delay_s:
            time.sleep(reply.first_delay_s)
        try:
            if not reply.chunks:
                payload = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, chunk in enumerate(reply.chunks):
                if i and reply.chunk_delay_s:
                    time.sleep(reply.chunk_delay_s)
                data = chunk.encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
                with self.owner._lock:
                    self.owner.chunks_written += 1
            if reply.cut:
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.owner.hung_up.set()
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the recorded requests are the log."""
