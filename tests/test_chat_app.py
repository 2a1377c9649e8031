"""The streaming chat function's Starlette app (:mod:`ragstep.entry.http.chat_app`) against its reference, the FastAPI
app with the same routers: the same routes, the same query rules, and byte for byte the same answers to the requests
a client gets wrong (and to the ones that need no model), both served by uvicorn on 127.0.0.1 over one data dir."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from ragstep.app.keys import create_key
from ragstep.context import Clients
from ragstep.entry.http.app import CHAT_ROUTERS, create_app
from ragstep.entry.http.chat_app import create_chat_app, is_json
from ragstep.entry.http.conversations import MessagesQuery, SessionsQuery
from ragstep.settings import Settings
from support.api_server import api_server

pytestmark = pytest.mark.usefixtures("plain_environment")


def fastapi_routes(clients: Clients) -> set[tuple[str, str]]:
    app = create_app(clients, routers=CHAT_ROUTERS)
    documented = {(m.upper(), path) for path, ops in app.openapi()["paths"].items() for m in ops}
    return documented | {("GET", "/openapi.json"), ("HEAD", "/openapi.json")}


def test_the_starlette_app_serves_exactly_the_fastapi_apps_chat_routes(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path))
    app = create_chat_app(clients)
    served = {(m, r.path_format) for r in app.routes if isinstance(r, Route) for m in r.methods or ()}
    assert served == fastapi_routes(clients)
    assert len(served) == 15  # thirteen routes and the document (GET and HEAD)


@pytest.mark.parametrize(
    ("path", "model"), [("/v1/sessions", SessionsQuery), ("/v1/sessions/{session_id}/messages", MessagesQuery)]
)
def test_the_query_rules_are_the_documented_ones(tmp_path: Path, path: str, model: Any) -> None:
    """The FastAPI route declares its query as ``Query`` parameters; the Starlette app validates the same names with
    a model: their JSON schemas (type, default, bounds) must agree."""
    spec = create_app(Clients(Settings(data_dir=tmp_path)), routers=CHAT_ROUTERS).openapi()
    documented = {p["name"]: p["schema"] for p in spec["paths"][path]["get"]["parameters"] if p["in"] == "query"}
    ours = model.model_json_schema()["properties"]
    assert set(ours) == set(documented)

    # Titles and descriptions are the document's; a null default is left out of it (the parameter is optional).
    def rules(schema: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in schema.items() if k not in ("title", "description") and (k, v) != ("default", None)}

    assert {name: rules(s) for name, s in ours.items()} == {name: rules(s) for name, s in documented.items()}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, False), ("", False), ("application/json", True), ("Application/JSON; charset=utf-8", True),
        ("application/merge-patch+json", True), ("text/json", False), ("application/jsonx", False),
        ("json", False), ("application/json/x", False), ("text/plain", False),
    ],
)  # fmt: skip
def test_json_bodies_are_recognised_by_content_type_as_fastapi_does(value: str | None, expected: bool) -> None:
    assert is_json(value) is expected


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both apps over one data dir (keys required: one key exists), small body limit; a chat key and a search key."""
    data = tmp_path_factory.mktemp("both")
    clients = Clients(Settings(data_dir=data, max_request_bytes=16384))
    chat = create_key(clients.keys, "default", ["chat"]).secret
    search = create_key(clients.keys, "default", ["search"]).secret
    reference_app = partial(create_app, routers=CHAT_ROUTERS)
    with api_server(clients, reference_app) as reference, api_server(clients, "starlette") as lean:
        yield {"fastapi": reference, "starlette": lean, "chat": chat, "search": search}


JSON = {"content-type": "application/json"}
ASKED = b'"messages": [{"role": "user", "content": "q"}]'
#: (method, path, headers, body, key): what clients get wrong, and what needs no model.
CASES: list[tuple[str, str, dict[str, str], bytes | None, str | None]] = [
    ("GET", "/healthz", {}, None, None),
    ("HEAD", "/healthz", {}, None, None),
    ("GET", "/nope", {}, None, "chat"),
    ("GET", "/v1/chat/completions", {}, None, "chat"),
    ("PUT", "/v1/sessions/abc", {}, None, "chat"),
    ("PATCH", "/v1/sessions", {}, None, None),
    ("GET", "/v1/models/", {}, None, "chat"),
    ("GET", "/v1/models", {}, None, None),
    ("GET", "/v1/models", {"authorization": "Bearer rs_nope"}, None, None),
    ("GET", "/v1/models", {}, None, "search"),
    ("GET", "/v1/models", {}, None, "chat"),
    ("GET", "/v1/models/ragstep", {}, None, "chat"),
    ("GET", "/v1/models/ragstep/nope", {}, None, "chat"),
    ("GET", "/v1/models/gpt-4o", {}, None, "search"),
    ("POST", "/v1/chat/completions", JSON, b"{}", None),
    ("POST", "/v1/chat/completions", JSON, b"{nope", None),
    ("POST", "/v1/chat/completions", JSON, b"{nope", "chat"),
    ("POST", "/v1/chat/completions", JSON, b"", "chat"),
    ("POST", "/v1/chat/completions", JSON, b"null", "chat"),
    ("POST", "/v1/chat/completions", JSON, b"[1]", "chat"),
    ("POST", "/v1/chat/completions", JSON, b'{"model": "ragstep"}', "chat"),
    ("POST", "/v1/chat/completions", JSON, b'{"model": "ragstep", "messages": []}', "chat"),
    ("POST", "/v1/chat/completions", JSON, b'{"model": "x", "messages": [{"role": "user", "content": "q"}]}', "chat"),
    ("POST", "/v1/chat/completions", JSON, b'{"model": 1, "messages": [{"content": 2}], "extra_body": 3}', "chat"),
    ("POST", "/v1/chat/completions", JSON, b"\xff\xfe{}", "chat"),
    ("POST", "/v1/chat/completions", {"content-type": "text/plain"}, b'{"model": "ragstep"}', "chat"),
    ("POST", "/v1/chat/completions", {}, b'{"model": "ragstep"}', "chat"),
    ("POST", "/v1/chat/completions", {"content-type": "application/vnd.x+json"}, b'{"model": 2}', "chat"),
    ("POST", "/v1/chat/completions", JSON, b'{"model": "' + b"x" * 20000 + b'"}', "chat"),
    ("POST", "/v1/chat/completions", JSON, b"[" * 5000, "chat"),
    # a model naming no knowledge base (none by default), an unknown one, none after the profile
    ("POST", "/v1/chat/completions", JSON, b'{"model": "ragstep", ' + ASKED + b"}", "chat"),
    ("POST", "/v1/chat/completions", JSON, b'{"model": "ragstep/nope", ' + ASKED + b"}", "chat"),
    ("POST", "/v1/chat/completions", JSON, b'{"model": "rag/", ' + ASKED + b"}", "chat"),
    ("POST", "/v1/knowledge-search", JSON, b'{"query": "q"}', "chat"),
    ("POST", "/v1/knowledge-search", JSON, b'{"query": "q", "knowledge_base_ids": ["nope"]}', "search"),
    ("POST", "/v1/knowledge-search", JSON, b'{"query": ""}', "search"),
    ("GET", "/v1/sessions?page=2&page=3&page_size=5", {}, None, "chat"),
    ("GET", "/v1/sessions?page_size=1000", {}, None, "chat"),
    ("GET", "/v1/sessions?page=abc&page_size=0", {}, None, "chat"),
    ("GET", "/v1/sessions?page_size=1000", {}, None, "search"),
    ("GET", "/v1/sessions/nope", {}, None, "chat"),
    ("DELETE", "/v1/sessions/nope", {}, None, "chat"),
    ("GET", "/v1/sessions/nope/messages?limit=0", {}, None, "chat"),
    ("GET", "/v1/sessions/nope/messages?before=soon", {}, None, "chat"),
    ("POST", "/v1/sessions/nope/stop", {}, None, "chat"),
    ("POST", "/v1/knowledge-chat/nope", JSON, b'{"query": "q", "knowledge_base_ids": ["docs"]}', "chat"),
    ("POST", "/v1/knowledge-chat/nope", JSON, b'{"query": "q", "extra": 1}', "chat"),
    ("POST", "/v1/knowledge-chat", JSON, b'{"query": "q", "history": [{"query": "a"}]}', "chat"),
    ("POST", "/v1/knowledge-chat", JSON, b'{"query": "q", "knowledge_base_ids": ["nope"]}', "chat"),
]

#: The headers that carry meaning (the date and the server's name do not).
COMPARED = ("content-type", "content-length", "allow", "www-authenticate", "retry-after", "location")


def answer(base: str, method: str, path: str, headers: dict[str, str], body: bytes | None) -> tuple[Any, ...]:
    found = httpx.request(method, base + path, headers=headers, content=body, timeout=20, follow_redirects=False)
    said = {h: found.headers.get(h) for h in COMPARED}
    if said["location"]:  # a redirect names the server's own address
        said["location"] = said["location"].removeprefix(base)
    return found.status_code, said, found.content


@pytest.mark.parametrize(("method", "path", "headers", "body", "key"), CASES)
def test_both_apps_answer_alike(
    both: dict[str, Any], method: str, path: str, headers: dict[str, str], body: bytes | None, key: str | None
) -> None:
    sent = {**headers, **({"x-api-key": both[key]} if key else {})}
    reference = answer(both["fastapi"], method, path, sent, body)
    assert answer(both["starlette"], method, path, sent, body) == reference
    status, said, content = reference
    if status >= 400 and method != "HEAD":  # the contract: {error, message}, a line that says what to fix
        found = httpx.Response(200, content=content).json()
        assert said["content-type"] == "application/json"
        if path.startswith(("/v1/chat/completions", "/v1/models")):  # OpenAI's shape there
            assert set(found) == {"error"} and set(found["error"]) == {"message", "type", "param", "code"}
        else:
            assert set(found) == {"error", "message"}


def test_both_apps_serve_the_same_openapi_document(both: dict[str, Any]) -> None:
    reference = httpx.get(both["fastapi"] + "/openapi.json", timeout=20)
    lean = httpx.get(both["starlette"] + "/openapi.json", timeout=20)
    assert reference.status_code == lean.status_code == 200
    assert lean.json() == reference.json() and "/v1/chat/completions" in lean.json()["paths"]
