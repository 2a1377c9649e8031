"""An instant chat model for the chat benchmarks: :class:`InstantLLM`, an OpenAI-compatible
``/v1/chat/completions`` on 127.0.0.1 that answers every request at once from a prepared body, so what a benchmark
measures is ragstep's own time (and a peer's, pointed at the same server).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

MODEL = "bench-instant"
#: SSE events per chunked-transfer frame the server writes (a real provider flushes about one per token; fewer,
#: larger writes keep the server's share of the shared process small).
FRAME_EVENTS = 16
#: The reasoning block each answer opens with, as a model that thinks inline streams it (tags split across events).
THINK = ("<th", "ink>", "The user", " asks", " about", " fusion", ".</thi", "nk>", "\n\n")
#: Then the answer proper (English and Chinese), citing its passage in its second token as the citation prompt asks:
#: an answer without a marker would have citations inserted by similarity, which is not what is measured here.
WORDS = ("RRF", " [1]", " fuses", " the", " keyword", " and", " vector", " results", ".", " 混合", "检索", "。")
MIN_ANSWER_TOKENS = 2


def answer_tokens(n: int) -> list[str]:
    """``n`` content events: the think block when there is room for it and a cited answer, then the answer."""
    head = list(THINK) if n >= len(THINK) + MIN_ANSWER_TOKENS else []
    return head + [WORDS[i % len(WORDS)] for i in range(n - len(head))]


def plain_answer(n: int) -> list[str]:
    """``n`` content events of a cited answer without a reasoning block (the ``--http`` comparison's answer)."""
    return [WORDS[i % len(WORDS)] for i in range(n)]


def _sse(delta: dict[str, str], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    chunk: dict[str, Any] = {
        "object": "chat.completion.chunk",
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def stream_body(tokens: Sequence[str]) -> bytes:
    """The whole chunked event stream of an answer of ``tokens``: one event each, a finish event with usage, [DONE]."""
    usage = {"prompt_tokens": 100, "completion_tokens": len(tokens), "total_tokens": 100 + len(tokens)}
    events = [_sse({"content": t}) for t in tokens] + [_sse({}, "stop", usage), b"data: [DONE]\n\n"]
    frames = []
    for i in range(0, len(events), FRAME_EVENTS):
        body = b"".join(events[i : i + FRAME_EVENTS])
        frames.append(b"%x\r\n%s\r\n" % (len(body), body))
    return b"".join(frames) + b"0\r\n\r\n"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: InstantLLM


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the chat client reuses its connection, as with a real provider

    def do_POST(self) -> None:  # the name http.server dispatches to
        received, cpu = time.perf_counter(), time.process_time()
        owner = self.server.owner  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        owner.record(received, cpu)
        if request.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(owner.body)
            return
        text = "".join(owner.tokens)
        answer = {
            "object": "chat.completion",
            "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        }
        body = json.dumps(answer, ensure_ascii=False).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # the base class's signature
        pass  # the benchmark's output is its report


class InstantLLM:
    """An OpenAI-compatible chat server on 127.0.0.1 that answers every request at once with :attr:`tokens`
    (streamed or whole); :attr:`received` holds the ``perf_counter`` at which each request arrived, and
    :attr:`received_cpu` the process's CPU time then."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self.received: list[float] = []
        self.received_cpu: list[float] = []
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.answer(tokens)

    def answer(self, tokens: Sequence[str]) -> None:
        """Answer the following requests with ``tokens``."""
        self.tokens = list(tokens)
        self.body = stream_body(self.tokens)

    def record(self, received: float, cpu: float) -> None:
        with self._lock:
            self.received.append(received)
            self.received_cpu.append(cpu)

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the server is not running; use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> InstantLLM:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="bench-instant-llm", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
