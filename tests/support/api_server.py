"""The HTTP API served by a real uvicorn server on 127.0.0.1 (a free port), in a thread of the test process, so a
test can drive it with real clients (the ``openai`` SDK, httpx) and look at the same data dir in-process."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ragstep.app.ingest import ingest_file
from ragstep.app.keys import create_key
from ragstep.app.sessions import is_opening, list_sessions
from ragstep.context import Clients, Context
from ragstep.entry.http.app import create_app
from ragstep.entry.http.chat_app import create_chat_app
from ragstep.models import KnowledgeBase, Turn
from ragstep.settings import Settings

DOCS = {
    "lambda.md": "AWS Lambda runs code without servers. Cold starts happen when a new execution environment starts. "
    "Provisioned concurrency keeps environments warm.",
    "北京.md": "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
}


#: The apps a test can serve: the HTTP API (FastAPI), and the streaming chat function's app of its chat routes
#: (Starlette), which must answer the same.
APPS = {"fastapi": create_app, "starlette": create_chat_app}


@contextmanager
def api_server(clients: Clients, app: str | Callable[[Clients], Any] = "fastapi") -> Iterator[str]:
    """Serve ``APPS[app](clients)`` (or ``app(clients)``); yields the base URL (``http://127.0.0.1:PORT``)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    factory = APPS[app] if isinstance(app, str) else app
    config = uvicorn.Config(factory(clients), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@dataclass
class Served:
    """A running API over a data dir with the ``docs`` knowledge base, and an API key with the chat scope."""

    ctx: Context
    kb: KnowledgeBase
    base: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def sdk(self) -> Any:
        import openai

        return openai.OpenAI(base_url=f"{self.base}/v1", api_key=self.key, max_retries=0, timeout=20)

    def post(self, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return httpx.post(f"{self.base}{path}", headers={**self.headers, **(headers or {})}, timeout=20, **kw)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return httpx.get(f"{self.base}{path}", headers=self.headers, timeout=20, **kw)

    def stored_turns(self) -> list[Turn]:
        """Every question/answer turn of the default tenant (sessions' opening records left out)."""
        return [
            t
            for s in list_sessions(self.ctx)
            for t in self.ctx.history.recent(s.session_id, limit=100)
            if not is_opening(t)
        ]


def seed_docs(ctx: Context, folder: Path) -> KnowledgeBase:
    """A keyword-only knowledge base ``docs`` holding :data:`DOCS`, written into ``folder`` and ingested."""
    kb = KnowledgeBase(id=uuid.uuid4().hex, name="docs", embedding_model="none", created_at=time.time())
    ctx.catalog.create_kb(kb)
    folder.mkdir(exist_ok=True)
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
        assert ingest_file(folder / name, kb, ctx).status == "indexed"
    return kb


@contextmanager
def serve(tmp_path: Path, *, app: str = "fastapi", **settings: Any) -> Iterator[Served]:
    clients = Clients(Settings(data_dir=tmp_path / "data", **settings))
    ctx = clients.context()
    kb = seed_docs(ctx, tmp_path / "docs")
    key = create_key(clients.keys, "default", ["chat"]).secret
    with api_server(clients, app) as base:
        yield Served(ctx=ctx, kb=kb, base=base, key=key)
