"""A real HTTP server on 127.0.0.1 that answers like an OpenAI-compatible ``/chat/completions``, from a script.

Each request consumes one :class:`Reply`: a JSON answer, or an event stream written chunk by chunk (chunked transfer
encoding, optionally with a slow first chunk, a pause between chunks, malformed lines, or a connection cut before
the end). The server records every request and whether a client hung up while it was still streaming, so tests can
check that an abandoned answer really stopped the provider's stream.

It also misbehaves as real servers do (the helpers at the end): a model that echoes its prompt instead of rewriting
(:func:`echo_prompt`), ignores the citation format, stops at ``length`` (:func:`completion`/:func:`streamed` with
``finish``), hangs (:func:`hang`: it answers only when the test ends), rejects a prompt over its context window as
llama.cpp's ``llama-server`` does (:func:`context_overflow`), or answers 401 quoting the request's ``Authorization``
header and its own internal URL (:func:`quote_credentials`).
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


def streamed(*pieces: str, usage: dict[str, int] | None = None, finish: str = "stop") -> list[str]:
    """A complete stream: one event per piece, a finish event with ``usage``, then ``[DONE]``."""
    return [*(sse(p) for p in pieces), sse(finish=finish, usage=usage), DONE]


def completion(
    content: str, usage: dict[str, int] | None = None, reasoning: str = "", finish: str = "stop"
) -> dict[str, Any]:
    """A non-streamed answer body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    return {
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
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
    #: Wait, saying nothing, until the server stops (a hung model; the test's end releases it).
    hang: bool = False
    #: The reply made from the request (an echo of what was sent), instead of the fields above.
    render: Callable[[Received], Reply] | None = None


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
        #: Set when the server stops: what releases a hung reply.
        self.stopping = threading.Event()
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
        self.stopping.set()
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
        received = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, parsed)
        reply = self.owner._next(received)
        if reply.render is not None:
            reply = reply.render(received)
        if reply.hang:
            self.owner.stopping.wait(120)
            self.close_connection = True
            return
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


# -- misbehaviour, as real servers show it ------------------------------------------------------------------------


def hang() -> Reply:
    """A model that accepts the request and never answers (until the server stops)."""
    return Reply(hang=True)


def echo_prompt(stream: bool = False) -> Reply:
    """A small model that answers its instructions back instead of doing them: the first message (the system
    prompt) as the answer."""

    def render(received: Received) -> Reply:
        messages = (received.json or {}).get("messages") or [{"content": ""}]
        text = str(messages[0].get("content") or "")
        return Reply(chunks=streamed(text)) if stream else Reply(body=completion(text))

    return Reply(render=render)


def context_overflow(n_prompt: int = 3008, n_ctx: int = 2048) -> Reply:
    """llama.cpp's ``llama-server`` when the prompt does not fit its ``--ctx-size``."""
    return Reply(
        400,
        {
            "error": {
                "code": 400,
                "message": f"request ({n_prompt} tokens) exceeds the available context size ({n_ctx} tokens), "
                "try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": n_prompt,
                "n_ctx": n_ctx,
            }
        },
    )


#: The internal address a gateway names in its error bodies.
INTERNAL_URL = "http://10.20.30.40:8443/internal/llm-gateway/v1/chat/completions"


def quote_credentials(status: int = 401) -> Reply:
    """A gateway that rejects the key and quotes it back, with its own internal URL (as some proxies do)."""

    def render(received: Received) -> Reply:
        auth = received.headers.get("authorization", "")
        body = {
            "error": {
                "message": f"Invalid credentials: Authorization: {auth} rejected by {INTERNAL_URL}",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
        return Reply(status, body)

    return Reply(render=render)
