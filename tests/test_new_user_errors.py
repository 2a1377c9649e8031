"""Bad input as a new user sends it, over the wire and on the command line: every answer says what is wrong in one
line that names the part to fix, and nothing else reaches the terminal.

Real components: the HTTP API served by uvicorn on 127.0.0.1 (both apps: FastAPI and the streaming chat function's
Starlette app) driven by the ``openai`` SDK and httpx; ``ragstep ingest`` in a child process embedding through a
scripted OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from conftest import run_cli
from ragstep.app.keys import create_key
from ragstep.context import Clients
from ragstep.models import KnowledgeBase
from ragstep.settings import Settings
from support.api_server import APPS, Served, serve
from support.scripted_http import ScriptedHTTPServer
from test_ingest_pipeline import SPACE, embeddings_answer, subprocess_env, write

USER = {"role": "user", "content": "When do cold starts happen?"}


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


@pytest.fixture(scope="module", params=list(APPS))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp(request.param), app=request.param) as app:
        yield app


# -- a body that is missing or not a JSON object ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "content_type", "message"),
    [
        (b"", "application/json", "request body is empty; send a JSON object with Content-Type: application/json"),
        (
            b'{"query": "cold starts", "knowledge_base_ids": ["docs"]}',
            "application/x-www-form-urlencoded",  # what `curl -d` sends without -H 'content-type: ...'
            "request body is not a JSON object; send one with Content-Type: application/json",
        ),
        (b'["cold starts"]', "application/json", "request body is not a JSON object; send one with Content-Type: "),
    ],
    ids=["empty", "curl-d-without-json-type", "array"],
)
def test_a_body_that_is_not_a_json_object_is_said_so(
    served: Served, content: bytes, content_type: str, message: str
) -> None:
    said = served.post("/v1/knowledge-chat", content=content, headers={"content-type": content_type})
    assert said.status_code == 422, said.text
    assert said.json()["error"] == "invalid_input"
    assert said.json()["message"].startswith(message)


# -- the OpenAI route names the field at fault (``param``), as OpenAI's does -------------------------------------------


@pytest.mark.parametrize(
    ("request_fields", "param", "words"),
    [
        ({"messages": [USER, {"role": "assistant", "content": "x"}]}, "messages", "the last message must be"),
        ({"messages": [{"role": "tool", "content": "x"}, USER]}, "messages", "role 'tool' is not supported"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}
                ]
            },
            "messages",
            "only text content",
        ),
        ({"messages": [{"role": "user", "content": "   "}]}, "messages", "query is empty"),
        ({"messages": [USER], "n": 2}, "n", "n=1"),
        ({"messages": [USER], "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "without tools"),
        ({"messages": [USER], "max_tokens": 0}, "max_tokens", "greater than or equal to 1"),
        ({"messages": [USER], "temperature": 3}, "temperature", "less than or equal to 2"),
    ],
    ids=["last-not-user", "tool-role", "image-part", "blank-question", "n", "tools", "max_tokens", "temperature"],
)
def test_the_sdk_learns_which_field_is_wrong(
    served: Served, request_fields: dict[str, Any], param: str, words: str
) -> None:
    create: Any = served.sdk().chat.completions.create
    with pytest.raises(openai.APIStatusError) as refused:
        create(model="ragstep/docs", **request_fields)
    assert refused.value.status_code in (400, 422)
    assert (refused.value.code, refused.value.param) == ("invalid_input", param)
    assert words in refused.value.message


def test_a_json_syntax_error_names_no_field(served: Served) -> None:
    said = served.post(
        "/v1/chat/completions", content=b'{"model": "ragstep/docs", ', headers={"content-type": "application/json"}
    )
    assert said.status_code == 422
    # The decoder's location is a character position, not a request field.
    assert said.json()["error"] == {
        "message": "request body is not valid JSON",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_input",
    }


# -- an unknown session, read rather than continued ----------------------------------------------------------------


def test_reading_an_unknown_session_says_where_the_sessions_are_listed(served: Served) -> None:
    for said in (served.get("/v1/sessions/nope"), served.get("/v1/sessions/nope/messages")):
        assert said.status_code == 404
        message = said.json()["message"]
        assert message.startswith("unknown session 'nope'; ") and "GET /v1/sessions" in message
        assert "start a new one" not in message  # no help to someone reading a session
    deleted = httpx.delete(f"{served.base}/v1/sessions/nope", headers=served.headers, timeout=20)
    assert deleted.status_code == 404 and "start a new one" not in deleted.json()["message"]
    # Continuing one still says how to start afresh.
    continued = served.post(
        "/v1/chat/completions", json={"model": "ragstep/docs", "messages": [USER], "session_id": "nope"}
    )
    assert (
        continued.status_code == 404 and "omit the session to start a new one" in continued.json()["error"]["message"]
    )


def test_sessions_show_of_an_unknown_session_points_at_sessions_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragstep.entry.cli.main import main

    assert main(["--data-dir", str(tmp_path / "data"), "kb", "create", "docs"]) == 0  # a data dir with data in it
    capsys.readouterr()
    for action in ("show", "delete"):
        assert main(["--data-dir", str(tmp_path / "data"), "sessions", action, "nope"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ragstep: error: unknown session 'nope'; ") and "`ragstep sessions list`" in err
        assert "start a new one" not in err


# -- ragstep ingest: only its own lines on stderr ------------------------------------------------------------------


def test_ingest_of_a_broken_pdf_and_an_empty_file_prints_only_its_own_lines(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs, "guide.md", "# Guide\n\nThe glacier carved the valley; its moraine holds boulders.\n")
    write(docs, "broken.pdf", b"%PDF-1.4 not really a PDF")  # pypdf logs "EOF marker not found" on its way out
    # Blank, and named (a folder's blank file is skipped, named it fails).
    blank = write(docs, "empty.txt", " \n")
    with ScriptedHTTPServer(fallback=embeddings_answer) as server:
        data_dir = tmp_path / "data"
        clients = Clients(Settings(data_dir=data_dir, embedding_base_url=f"{server.url}/v1"))
        clients.context().catalog.create_kb(
            KnowledgeBase(id="kb1", name="docs", embedding_model=SPACE, created_at=time.time())
        )
        env = {**subprocess_env(), "RAGSTEP_EMBEDDING_BASE_URL": f"{server.url}/v1"}
        ingest = ("ingest", str(docs), str(blank), "--kb", "docs")
        done = subprocess.run(
            [sys.executable, "-m", "ragstep", "--data-dir", str(data_dir), *ingest],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 2, done.stderr  # two files failed
    assert "broken.pdf: not a readable PDF" in done.stdout and "empty.txt: the document is empty" in done.stdout
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("ragstep: ") for line in lines), done.stderr
    # Of the three files read in the first phase, the one indexed is searchable; the two that failed are not.
    assert any(line.startswith("ragstep: ingest: 1 file searchable by keyword after ") for line in lines), lines


def test_search_with_web_search_offline_prints_the_results_and_no_log_lines(tmp_path: Path) -> None:
    write(tmp_path / "docs", "guide.md", "# Guide\n\nThe glacier carved the valley; its moraine holds boulders.\n")
    data_dir = tmp_path / "data"
    ctx = Clients(Settings(data_dir=data_dir)).context()
    kb = ctx.catalog.create_kb(KnowledgeBase(id="kb1", name="docs", embedding_model="none", created_at=time.time()))
    from ragstep.app.ingest import ingest_file

    assert ingest_file(tmp_path / "docs" / "guide.md", kb, ctx).status == "indexed"
    with socket.socket() as closed:  # a port nothing listens on: the engine is unreachable
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {
        **subprocess_env(),
        "RAGSTEP_WEB_SEARCH_DUCKDUCKGO_URL": f"http://127.0.0.1:{port}/html/",
        "RAGSTEP_WEB_SEARCH_DUCKDUCKGO_API_URL": f"http://127.0.0.1:{port}/",
    }
    search = ["search", "glacier moraine", "--kb", "docs", "--set", "web_search=true"]
    done = subprocess.run(
        [sys.executable, "-m", "ragstep", "--data-dir", str(data_dir), *search],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "guide.md" in done.stdout and "web search: DuckDuckGo is unreachable" in done.stdout  # the trace says it
    assert done.stderr == ""  # the provider's log line ("DuckDuckGo at http://... request failed: ...") is not shown


def test_a_file_named_twice_is_ingested_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    guide = write(docs, "guide.md", "# Guide\n\nThe glacier carved the valley; its moraine holds boulders.\n")
    write(docs, "notes.txt", "Sourdough rises slowly overnight.\n")
    data = str(tmp_path / "data")
    assert run_cli(capsys, "--data-dir", data, "kb", "create", "docs", "--embedding-model", "none")[0] == 0
    # The same file by two spellings, and again inside the folder named after it.
    code, out, err = run_cli(
        capsys, "--data-dir", data, "ingest", str(guide), f"{docs}/./guide.md", str(docs), "--kb", "docs", "--json"
    )
    assert code == 0, err
    rows = json.loads(out)
    assert sorted(Path(r["path"]).name for r in rows) == ["guide.md", "notes.txt"], rows
    assert [r["status"] for r in rows] == ["indexed", "indexed"]


def test_a_text_field_where_a_file_goes_says_how_to_send_a_file(tmp_path: Path) -> None:
    with serve(tmp_path) as api:  # the upload route is the HTTP API's (FastAPI) only
        ingest_key = create_key(api.ctx.clients.keys, "default", ["ingest"]).secret
        said = api.post(
            "/v1/knowledge-bases/docs/documents",
            files={"files": (None, "hello")},  # `curl -F files=hello`: a text field
            headers={"Authorization": f"Bearer {ingest_key}"},
        )
    assert said.status_code == 422, said.text
    assert said.json()["message"].startswith("files.0: not a file; send each file as a form part with a file name")
    assert "class" not in said.json()["message"]


def test_replay_list_says_when_nothing_is_recorded_and_honours_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    code, out, err = run_cli(capsys, "--data-dir", data, "replay", "--list")
    assert (code, out) == (0, "")
    assert err.startswith("ragstep: replay: no recorded requests; RAGSTEP_RECORD_RATE")
    code, out, _ = run_cli(capsys, "--data-dir", data, "replay", "--list", "--json")
    assert code == 0 and json.loads(out) == []


# -- MCP over HTTP ---------------------------------------------------------------------------------------------------


def test_get_on_the_stateless_mcp_endpoint_is_405_at_once(tmp_path: Path) -> None:
    seen: list[tuple[int, dict[str, str], bytes]] = []
    with serve(tmp_path) as api:
        for method, accept in [("GET", "text/event-stream"), ("GET", "*/*"), ("DELETE", "*/*")]:
            headers = {**api.headers, "Accept": accept}
            # Streamed: an event stream opened instead (the regression) fails on its status, not on a read timeout
            # that its keep-alive pings would keep from ever firing.
            with httpx.stream(method, f"{api.base}/mcp", headers=headers, timeout=60) as said:
                body = said.read() if said.status_code == 405 else b""
                seen.append((said.status_code, dict(said.headers), body))
    for status, headers, body in seen:
        assert status == 405 and headers["allow"] == "POST"
        assert json.loads(body)["error"] == "method_not_allowed"
        assert "MCP messages are sent by POST" in json.loads(body)["message"]
