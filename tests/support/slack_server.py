"""A scripted Slack Web API on 127.0.0.1: answers chat.postMessage and chat.update as Slack does and records them,
so a test can read what a thread would show (a real HTTP server; only the far end is not Slack)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse


@dataclass
class SlackWorkspace:
    """What the bot posted: messages by ts, in order, and every call."""

    url: str
    server: ScriptedHTTPServer
    messages: dict[str, dict[str, str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def calls(self) -> list[RecordedRequest]:
        return self.server.requests

    def methods(self) -> list[str]:
        return [r.path.rsplit("/", 1)[-1] for r in self.calls]

    def posts(self) -> list[RecordedRequest]:
        return [r for r in self.calls if r.path.endswith("/chat.postMessage")]

    def thread(self, thread_ts: str) -> list[str]:
        """The final text of every message the bot posted in the thread, oldest first."""
        with self.lock:
            return [m["text"] for m in self.messages.values() if m.get("thread_ts") == thread_ts]


@contextmanager
def slack_api(token: str = "xoxb-test-token") -> Iterator[SlackWorkspace]:
    counter = itertools.count(1)
    with ScriptedHTTPServer() as server:
        workspace = SlackWorkspace(url=f"{server.url}/api", server=server)

        def answer(request: RecordedRequest) -> ScriptedResponse:
            if request.headers.get("authorization") != f"Bearer {token}":
                return ScriptedResponse(200, {"ok": False, "error": "invalid_auth"})
            body = request.json or {}
            with workspace.lock:
                if request.path.endswith("/chat.postMessage"):
                    ts = f"1700000000.{next(counter):06d}"
                    workspace.messages[ts] = {"text": body["text"], "thread_ts": body.get("thread_ts", "")}
                    return ScriptedResponse(200, {"ok": True, "channel": body["channel"], "ts": ts})
                if request.path.endswith("/chat.update"):
                    if body.get("ts") not in workspace.messages:
                        return ScriptedResponse(200, {"ok": False, "error": "message_not_found"})
                    workspace.messages[body["ts"]]["text"] = body["text"]
                    return ScriptedResponse(200, {"ok": True, "channel": body["channel"], "ts": body["ts"]})
            return ScriptedResponse(200, {"ok": False, "error": "unknown_method"})

        server.set_fallback(answer)
        yield workspace
