"""The HTTP API: ``GET /healthz`` and ``POST /v1/knowledge-search``, in-process and behind a real ``ragstep serve``.

A search answers with the same JSON as ``ragstep search --json``; bad input is a 4xx with a JSON body
``{"error": ..., "message": ...}`` whose message is one line naming the problem.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from ragstep import __version__
from ragstep.app.ingest import ingest_file
from ragstep.context import Clients, Context
from ragstep.entry.cli.main import main
from ragstep.entry.http.app import create_app
from ragstep.entry.http.errors import is_openai_path, redact
from ragstep.models import KnowledgeBase, SearchResult, TraceEvent
from ragstep.models.search import RetrievalOverrides

SHARED = Path(__file__).resolve().parents[1] / "shared"
SEARCH = "/v1/knowledge-search"
# An unknown key names what its object accepts (pydantic said "Extra inputs are not permitted", naming neither).
UNKNOWN_BOGUS = (
    "bogus: unknown field; the request accepts query, session_id, knowledge_base_ids, knowledge_ids, tag_ids,"
    " overrides, user, profile, budget_ms, cost_budget_usd"
)

DOCS = {
    "coffee.md": "# Espresso\n\nEspresso is brewed by forcing hot water through finely ground coffee beans.\n",
    "garden.txt": "Tomatoes need full sun, plenty of water and well drained soil in a vegetable garden.\n",
    "熊猫.md": "# 大熊猫\n\n大熊猫生活在四川的竹林里，主要以竹子为食。\n",
    "高铁.md": "# 高速铁路\n\n高速铁路连接北京和上海，列车的时速可以达到三百五十公里。\n",
}


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("RAGSTEP_"):
            monkeypatch.delenv(key)


def write_docs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def kb(ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path) -> KnowledgeBase:
    """Knowledge base "docs" with :data:`DOCS` ingested."""
    kb = make_kb("docs")
    for path in sorted(write_docs(tmp_path / "docs").iterdir()):
        assert ingest_file(path, kb, ctx).status == "indexed"
    return kb


@pytest.fixture
def client(ctx: Context, kb: KnowledgeBase) -> Iterator[TestClient]:
    with TestClient(create_app(ctx.clients)) as client:
        yield client


def search(client: TestClient, query: str, kbs: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    response = client.post(SEARCH, json={"query": query, "knowledge_base_ids": kbs or ["docs"], **extra})
    assert response.status_code == 200, response.text
    return response.json()


def filenames(data: dict[str, Any]) -> list[str]:
    return [r["knowledge_filename"] for r in data["results"]]


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": __version__}


def test_search_shape(client: TestClient, kb: KnowledgeBase) -> None:
    data = search(client, "  espresso coffee  ")
    assert list(data) == ["query", "request_id", "results", "trace", "profile", "usage"]
    assert data["profile"] == "standard" and data["usage"]["cost"]["estimate"] is True
    cost = data["usage"]["cost"]
    assert abs(cost["total_usd"] - sum(line["usd"] for line in cost["lines"])) < 1e-9
    assert data["query"] == "espresso coffee"
    assert len(data["request_id"]) == 32
    first = data["results"][0]
    assert (first["knowledge_filename"], first["knowledge_base_id"]) == ("coffee.md", kb.id)
    for result in data["results"]:
        assert SearchResult.model_validate(result).model_dump(mode="json") == result
    for event in data["trace"]:
        assert TraceEvent.model_validate(event).model_dump(mode="json") == event
    assert [t["stage"] for t in data["trace"]][-1] == "filter_top_k"


def test_search_matches_the_cli_json(client: TestClient, ctx: Context, capsys: pytest.CaptureFixture[str]) -> None:
    for query in ("espresso coffee", "大熊猫吃竹子"):
        http = search(client, query)
        capsys.readouterr()
        assert main(["search", query, "--kb", "docs", "--json", "--data-dir", str(ctx.settings.data_dir)]) == 0
        cli = json.loads(capsys.readouterr().out)
        assert list(cli) == list(http)
        assert cli["results"] == http["results"]
        assert [(t["stage"], t["action"], t["counts"]) for t in cli["trace"]] == [
            (t["stage"], t["action"], t["counts"]) for t in http["trace"]
        ]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("How is espresso brewed?", "coffee.md"),
        ("tomatoes need sun and watering", "garden.txt"),
        ("大熊猫吃什么？", "熊猫.md"),
        ("北京到上海的高速铁路", "高铁.md"),
    ],
)
def test_search_ranks_the_right_document_first(client: TestClient, query: str, expected: str) -> None:
    assert filenames(search(client, query))[0] == expected


def test_kb_by_name_or_id(client: TestClient, kb: KnowledgeBase) -> None:
    by_name = search(client, "大熊猫", ["docs"])
    by_id = search(client, "大熊猫", [kb.id])
    assert filenames(by_name) == filenames(by_id) == ["熊猫.md"]
    assert by_name["results"] == by_id["results"]


def test_overrides_and_knowledge_scoping(client: TestClient) -> None:
    wide = search(client, "water", overrides={"keyword_threshold": 0})
    assert set(filenames(wide)) == {"coffee.md", "garden.txt"}
    assert len(search(client, "water", overrides={"keyword_threshold": 0, "rerank_top_k": 1})["results"]) == 1

    garden_id = next(r["knowledge_id"] for r in wide["results"] if r["knowledge_filename"] == "garden.txt")
    response = client.post(SEARCH, json={"query": "water", "knowledge_ids": [garden_id]})
    assert response.status_code == 200
    assert filenames(response.json()) == ["garden.txt"]


def test_unknown_kb_is_404(client: TestClient) -> None:
    response = client.post(SEARCH, json={"query": "espresso", "knowledge_base_ids": ["nope"]})
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    # Only what was asked for: the caller may be anyone, the other knowledge bases' names are not theirs to learn.
    assert response.json() == {"error": "not_found", "message": "unknown knowledge base 'nope'"}


def _body(query: Any = "espresso", **fields: Any) -> bytes:
    return json.dumps({"query": query, "knowledge_base_ids": ["docs"], **fields}).encode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_body(""), "query: query is empty; pass the question to search for"),
        (_body(" \t\n "), "query: query is empty; pass the question to search for"),
        (_body("a" * 4001), "query: query has 4001 characters; the limit is 4000"),
        (_body("espresso\x07"), "query: query contains the control character U+0007; remove it"),
        (_body("espresso\u200b"), "query: query contains the control character U+200B; remove it"),
        (_body(42), "query: Input should be a valid string"),
        (_body(bogus=1), UNKNOWN_BOGUS),
        (
            _body(overrides={"rerank_topk": 1}),
            "overrides.rerank_topk: unknown field (did you mean rerank_top_k?); overrides accepts "
            + ", ".join(RetrievalOverrides.model_fields),
        ),
        (_body(overrides={"rerank_top_k": 0}), "overrides.rerank_top_k: Input should be greater than or equal to 1"),
        (
            json.dumps({"query": "espresso"}).encode(),
            "name at least one knowledge base (knowledge_base_ids) or knowledge item (knowledge_ids),"
            " or turn web search on (overrides.web_search)",
        ),
        (json.dumps({"knowledge_base_ids": ["docs"]}).encode(), "query: Field required"),
        (b'{"query": "espresso", "knowledge_base_ids": ["docs"]', "request body is not valid JSON"),
        (b"", "request body is empty; send a JSON object with Content-Type: application/json"),
        (b'["espresso"]', "request body is not a JSON object; send one with Content-Type: application/json"),
        # Raw bytes that are not UTF-8, and a JSON-escaped lone surrogate (what such bytes become when decoded loosely).
        (
            b'{"query": "caf\xff", "knowledge_base_ids": ["docs"]}',
            "request body is not valid UTF-8; send JSON encoded as UTF-8",
        ),
        (
            b'{"query": "caf\\udcff", "knowledge_base_ids": ["docs"]}',
            "query: query is not valid UTF-8; re-encode it as UTF-8",
        ),
    ],
    ids=[
        "empty",
        "whitespace",
        "4001-chars",
        "control-char",
        "format-char",
        "not-a-string",
        "unknown-field",
        "unknown-override",
        "bad-override",
        "missing-knowledge_base_ids",
        "missing-query",
        "invalid-json",
        "empty-body",
        "not-an-object",
        "invalid-utf8-bytes",
        "lone-surrogate",
    ],
)
def test_bad_input_is_422_with_one_line(client: TestClient, body: bytes, message: str) -> None:
    response = client.post(SEARCH, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": "invalid_input", "message": message}
    assert "\n" not in response.json()["message"]
    # Nothing indexed was lost.
    assert filenames(search(client, "espresso coffee"))[0] == "coffee.md"


def test_query_at_the_limit_is_accepted(client: TestClient) -> None:
    assert filenames(search(client, ("espresso " * 500)[:4000]))[0] == "coffee.md"


def test_unknown_route_and_method_are_json(client: TestClient) -> None:
    missing = client.get("/v1/nothing")
    assert (missing.status_code, missing.json()) == (
        404,
        {"error": "not_found", "message": "GET /v1/nothing: Not Found"},
    )
    wrong = client.get(SEARCH)
    assert (wrong.status_code, wrong.json()["error"]) == (405, "method_not_allowed")
    assert wrong.headers["allow"] == "POST"


@pytest.mark.parametrize("field", ["knowledge_base_ids", "knowledge_ids", "tag_ids"])
def test_ids_that_are_not_utf8_are_a_client_error(client: TestClient, field: str) -> None:
    body = {"query": "coffee", "knowledge_base_ids": ["docs"], field: ["BAD"]}
    # JSON may carry a lone surrogate as an escape; it can never be stored, so it must be a 4xx, not a 500.
    raw = json.dumps(body).replace("BAD", r"do\udcffcs")
    response = client.post(SEARCH, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_input"
    assert "not valid UTF-8" in response.json()["message"]


# -- limits --------------------------------------------------------------------------------------------------------

LIMIT = 1024 * 1024


def test_body_over_the_declared_limit_is_413(client: TestClient) -> None:
    body = _body(tag_ids=["x" * LIMIT])
    response = client.post(SEARCH, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json() == {
        "error": "payload_too_large",
        "message": f"request body has {len(body)} bytes; the limit is {LIMIT} bytes: send a smaller request",
    }
    # Just under the limit is read and judged on its content.
    under = _body(bogus="x" * (LIMIT - 200))
    assert len(under) <= LIMIT
    response = client.post(SEARCH, content=under, headers={"content-type": "application/json"})
    assert (response.status_code, response.json()["message"]) == (422, UNKNOWN_BOGUS)


def test_chunked_body_over_the_limit_is_413(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"query": "espresso", "knowledge_base_ids": ["docs"], "tag_ids": ["'
        for _ in range(20):
            yield b"x" * 65536
        yield b'"]}'

    # A generator body goes without Content-Length (chunked): the limit is counted as the body streams in.
    response = client.post(SEARCH, content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json() == {
        "error": "payload_too_large",
        "message": f"request body is over the limit; the limit is {LIMIT} bytes: send a smaller request",
    }


def test_a_body_over_the_limit_is_not_read(ctx: Context) -> None:
    """Straight through the ASGI interface: a client that would send forever is cut off after the limit."""
    app = create_app(ctx.clients)
    chunk = b"x" * 65536
    pulled = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": SEARCH,
        "raw_path": SEARCH.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }
    asyncio.run(app(scope, receive, send))
    assert pulled == LIMIT // len(chunk) + 1
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["error"] == "payload_too_large"


def test_the_limit_is_a_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTEP_MAX_REQUEST_BYTES", "20000")
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(tmp_path / "data"))
    with TestClient(create_app()) as client:
        response = client.post(SEARCH, content=_body(tag_ids=["x" * 20000]))
    assert response.status_code == 413
    assert response.json()["message"].endswith("the limit is 20000 bytes: send a smaller request")
    monkeypatch.setenv("RAGSTEP_MAX_REQUEST_BYTES", "1000")
    with pytest.raises(ValidationError, match="max_request_bytes"):
        create_app()


def test_an_app_serves_only_the_routers_it_is_given(ctx: Context, kb: KnowledgeBase) -> None:
    """``routers`` picks parts of the API (the streaming chat function serves chat, sessions and search only): the
    full API is the default, ``/healthz`` is always there, and a name that is not a part is refused, naming those
    that are."""
    full = set(create_app(ctx.clients).openapi()["paths"])
    assert {"/v1/knowledge-bases", "/v1/chat/completions", "/v1/sessions", SEARCH} <= full
    app = create_app(ctx.clients, routers=("search",))
    assert set(app.openapi()["paths"]) == {"/healthz", SEARCH}
    with TestClient(app) as client:
        found = client.post(SEARCH, json={"query": "espresso coffee", "knowledge_base_ids": ["docs"]})
        assert found.status_code == 200, found.text
        assert filenames(found.json())[0] == "coffee.md"
        assert client.get("/healthz").json() == {"status": "ok", "version": __version__}
        assert client.get("/v1/knowledge-bases").status_code == 404
    with pytest.raises(ValueError, match=r"unknown routers \['chats'\]; choose from admin, search, knowledge, "):
        create_app(ctx.clients, routers=("chat", "chats"))


# -- what error bodies never say -----------------------------------------------------------------------------------


def test_error_bodies_carry_no_arn_or_account_id(
    ctx: Context, kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state machine cannot be started: whatever the log is told, the body names no ARN and no account."""
    from moto import mock_aws

    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)
    arn = "arn:aws:states:eu-west-1:123456789012:stateMachine:ragstep-knowledge-search"
    settings = ctx.settings.model_copy(update={"executor": "stepfunctions", "state_machine_arn": arn})
    with mock_aws(), TestClient(create_app(Clients(settings))) as client:
        response = client.post(SEARCH, json={"query": "espresso", "knowledge_base_ids": ["docs"]})
    assert response.status_code == 502
    body = response.json()
    assert body["error"] == "pipeline_failed"
    assert body["message"].startswith("cannot start the knowledge_search state machine ")
    assert "123456789012" not in response.text and "arn:aws" not in response.text


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        (
            "cannot start arn:aws:states:us-east-1:123456789012:stateMachine:x: AccessDenied",
            "cannot start <arn>: AccessDenied",
        ),
        ("table (arn:aws-cn:dynamodb:cn-north-1:123456789012:table/t) is gone", "table (<arn>) is gone"),
        ("account 123456789012 may not read it.", "account <account> may not read it."),
        # a knowledge id is hex: a run of twelve digits inside it is no account id
        ("unknown knowledge item 'ab123456789012cd'", "unknown knowledge item 'ab123456789012cd'"),
        ("query has 4001 characters; the limit is 4000", "query has 4001 characters; the limit is 4000"),
    ],
)
def test_redact(message: str, shown: str) -> None:
    assert redact(message) == shown


# -- OpenAPI -------------------------------------------------------------------------------------------------------


def test_openapi_documents_the_real_bodies(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]

    def body(path: str, method: str, status: str) -> dict[str, Any]:
        ref = spec["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        return schemas[ref.rsplit("/", 1)[1]]

    search_ok = body(SEARCH, "post", "200")
    assert list(search_ok["properties"]) == ["query", "request_id", "results", "trace", "profile", "usage"]
    assert search_ok["properties"]["results"]["items"]["$ref"].endswith("/SearchResult")
    assert search_ok["properties"]["trace"]["items"]["$ref"].endswith("/TraceEvent")
    for status in ("400", "404", "413", "422", "500", "502", "503"):
        error = body(SEARCH, "post", status)
        assert set(error["properties"]) == {"error", "message"}
        assert error["required"] == ["error", "message"]
    assert set(body("/healthz", "get", "200")["properties"]) == {"status", "version"}
    # FastAPI's own 422 schema ({detail: [...]}) is not what this API answers.
    assert "HTTPValidationError" not in schemas


@pytest.mark.parametrize("routers", [None, ("chat", "sessions", "search"), ("search",), ()])
def test_every_error_response_is_documented_as_error_body_by_reference(ctx: Context, routers: Any) -> None:
    """Each app, whatever parts it serves, documents every 4xx/5xx body as ``ErrorBody`` and defines that schema --
    OpenAI's ``OpenAIErrorBody`` on the OpenAI-compatible routes; only ``/healthz``'s 500 (and the chat route's 400,
    for OpenAI's shape) is declared with the model (the others refer to it: a model per declared response is a
    pydantic TypeAdapter FastAPI builds at start-up, ~0.2 ms each)."""
    app = create_app(ctx.clients) if routers is None else create_app(ctx.clients, routers=routers)
    spec = app.openapi()
    assert set(spec["components"]["schemas"]["ErrorBody"]["properties"]) == {"error", "message"}
    errors = 0
    for path, operations in spec["paths"].items():
        body = "OpenAIErrorBody" if is_openai_path(path) else "ErrorBody"
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith(("4", "5")):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": f"#/components/schemas/{body}"}, (method, path, status)
                    assert response["description"], (method, path, status)
                    errors += 1
    assert errors >= len(spec["paths"])
    with_model = [
        (getattr(route, "path", ""), status)
        for route in app.routes
        for status in getattr(route, "response_fields", {})
        if int(status) >= 400
    ]
    assert with_model == [("/healthz", 500)]  # the app's own routes (an included router's are not listed here)
    if "/v1/chat/completions" in spec["paths"]:
        error = spec["components"]["schemas"]["OpenAIError"]["properties"]
        assert set(error) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_no_pages_that_need_a_cdn(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert (response.status_code, response.json()["error"]) == (404, "not_found")


# -- a real server -------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines if line.lower().startswith("content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return int(lines[0].split()[1]), body


def test_real_server(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn", reason="`ragstep serve` needs uvicorn (pip install 'ragstep[serve]')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTEP_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHARED), env.get("PYTHONPATH", "")) if p)
    data = str(tmp_path / "data")
    docs = write_docs(tmp_path / "docs")
    cli = [sys.executable, "-m", "ragstep", "--data-dir", data]
    for args in (["kb", "create", "docs"], ["ingest", str(docs), "--kb", "docs"]):
        done = subprocess.run([*cli, *args], env=env, cwd=tmp_path, capture_output=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr

    port = _free_port()
    log = tmp_path / "server.log"
    base = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*cli, "serve", "--port", str(port)], env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert server.poll() is None, f"server exited early:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"server not up after 20 s:\n{log.read_text()}"
            try:
                health = httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert health.status_code == 200
        assert health.json() == {"status": "ok", "version": __version__}

        found = httpx.post(
            f"{base}{SEARCH}", json={"query": "大熊猫吃什么", "knowledge_base_ids": ["docs"]}, timeout=10
        )
        assert found.status_code == 200, found.text
        assert filenames(found.json())[0] == "熊猫.md"

        bad = httpx.post(f"{base}{SEARCH}", json={"query": " ", "knowledge_base_ids": ["docs"]}, timeout=10)
        assert (bad.status_code, bad.json()["error"]) == (422, "invalid_input")

        # A declared 10 GB body is refused from its headers alone: the answer comes without a byte of it sent.
        head = f"POST {SEARCH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {10**10}\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(head.encode() + b"\r\n")
            status, body = read_response(sock)
        assert status == 413
        assert json.loads(body)["error"] == "payload_too_large"
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize("query", ["<script>alert(1)</script> espresso", "espresso <img src=x onerror=alert(1)>"])
def test_markup_in_a_question_is_refused_alike_by_search_find_and_chat(client: TestClient, query: str) -> None:
    """Chat refused a question holding script markup (400) while search ran it and echoed it back: every route that
    takes a question answers it the same way now."""
    message = "query contains HTML or script markup (e.g. <script>, javascript:, onerror=); remove it"
    body = {"query": query, "knowledge_base_ids": ["docs"]}
    for path in (SEARCH, "/v1/knowledge-chat"):
        response = client.post(path, json=body)
        assert (response.status_code, response.json()) == (400, {"error": "invalid_input", "message": message}), path
    found = client.post("/v1/find", json={"query": query, "knowledge_bases": ["docs"]})
    assert found.status_code == 400 and found.json()["message"] == message
    # Only the DOM's event handlers count as markup: "one = two" is a question (any "on...=" was refused).
    plain = client.post(SEARCH, json={"query": "what does one = two mean in espresso", "knowledge_base_ids": ["docs"]})
    assert plain.status_code == 200
