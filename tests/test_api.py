"""The HTTP API: ``GET /healthz`` and ``POST /v1/knowledge-search``, in-process and behind a real ``ragstep serve``.

A search answers with the same JSON as ``ragstep search --json``; bad input is a 4xx with a JSON body
``{"error": ..., "message": ...}`` whose message is one line naming the problem.
"""

from __future__ import annotations

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

from ragstep import __version__
from ragstep.context import Context
from ragstep.entry.cli.main import main
from ragstep.entry.http.app import create_app
from ragstep.models import KnowledgeBase, SearchResult, TraceEvent
from ragstep.stages.ingest.products import ingest_file

SHARED = Path(__file__).resolve().parents[1] / "shared"
SEARCH = "/v1/knowledge-search"

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
    with TestClient(create_app(ctx)) as client:
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
    assert list(data) == ["query", "request_id", "results", "trace"]
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
    assert response.json() == {
        "error": "not_found",
        "message": "unknown knowledge base 'nope' (known: docs); create it with `kb create`",
    }


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
        (_body(bogus=1), "bogus: Extra inputs are not permitted"),
        (_body(overrides={"bogus_knob": 1}), "overrides.bogus_knob: Extra inputs are not permitted"),
        (_body(overrides={"rerank_top_k": 0}), "overrides.rerank_top_k: Input should be greater than or equal to 1"),
        (
            json.dumps({"query": "espresso"}).encode(),
            "name at least one knowledge base (knowledge_base_ids) or knowledge item (knowledge_ids)",
        ),
        (json.dumps({"knowledge_base_ids": ["docs"]}).encode(), "query: Field required"),
        (b'{"query": "espresso", "knowledge_base_ids": ["docs"]', "request body is not valid JSON"),
        (b"", "Field required"),
        (b'["espresso"]', "Input should be a valid dictionary or object to extract fields from"),
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


# -- a real server -------------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
    assert "Traceback" not in log.read_text()
