"""The MCP server with the official MCP SDK's client: over stdio (a real ``ragstep mcp`` process) and over
Streamable HTTP (``/mcp`` of the API on a real port), with scoped, wrong and missing keys and bad arguments."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from tests.support.api_server import api_server, seed_docs

from ragstep.app.keys import create_key
from ragstep.context import Clients
from ragstep.models.tenancy import UsageRecord
from ragstep.settings import Settings

mcp = pytest.importorskip("mcp", reason="the mcp SDK (dev extra) drives these tests")
httpx2 = pytest.importorskip("httpx2", reason="the mcp SDK's HTTP client")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

RAGSTEP = str(Path(sys.executable).with_name("ragstep"))
READ_TOOLS = {"search", "find", "list_knowledge_bases", "list_documents", "read_passage"}


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), timeout=180))


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


@pytest.fixture
def clients(tmp_path: Path) -> Clients:
    clients = Clients(Settings(data_dir=tmp_path / "data"))
    seed_docs(clients.context(), tmp_path / "docs")
    return clients


def http_client(base: str, key: str | None) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Client(streamable_http_client(f"{base}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60)))


async def exercise(client: Client) -> dict[str, Any]:
    """Every tool once, as an agent would chain them; what each returned."""
    seen: dict[str, Any] = {}
    listed = await client.list_tools()
    seen["tools"] = {t.name: t for t in listed.tools}
    seen["kbs"] = await client.call_tool("list_knowledge_bases", {})
    seen["search"] = await client.call_tool(
        "search", {"query": "when do cold starts happen", "knowledge_bases": ["docs"], "top_k": 3}
    )
    passage = seen["search"].structured_content["results"][0]["id"]
    seen["read"] = await client.call_tool("read_passage", {"passage_id": passage, "neighbours": 1})
    seen["docs"] = await client.call_tool("list_documents", {"knowledge_base": "docs"})
    seen["find"] = await client.call_tool("find", {"query": "首都", "knowledge_bases": ["docs"]})
    seen["answer"] = await client.call_tool(
        "answer", {"question": "When do cold starts happen?", "knowledge_bases": ["docs"]}
    )
    session = seen["answer"].structured_content["session_id"]
    seen["follow_up"] = await client.call_tool(
        "answer", {"question": "And how are they avoided?", "knowledge_bases": ["docs"], "session_id": session}
    )
    seen["ingest"] = await client.call_tool(
        "ingest", {"knowledge_base": "docs", "filename": "ledger.md", "text": "The keeper logs ships in a blue ledger."}
    )
    seen["unknown_kb"] = await client.call_tool("search", {"query": "x", "knowledge_bases": ["nope"]})
    seen["bad_args"] = await client.call_tool("search", {"query": "", "knowledge_bases": ["docs"]})
    seen["bad_type"] = await client.call_tool("read_passage", {"passage_id": "x", "neighbours": "many"})
    seen["resources"] = await client.list_resources()
    seen["prompts"] = await client.list_prompts()
    return seen


def check_every_tool(seen: dict[str, Any]) -> None:
    assert set(seen["tools"]) == READ_TOOLS | {"answer", "ingest"}
    schema = seen["tools"]["search"].input_schema
    assert schema["required"] == ["query", "knowledge_bases"] and "top_k" in schema["properties"]
    assert "docs" in text_of(seen["kbs"]) and not seen["kbs"].is_error
    hits = seen["search"].structured_content["results"]
    assert hits[0]["knowledge_filename"] == "lambda.md" and "Cold starts" in hits[0]["content"]
    assert "lambda.md" in text_of(seen["search"])
    assert "Cold starts happen" in text_of(seen["read"])
    assert {"lambda.md", "北京.md"} <= {d["file"] for d in seen["docs"].structured_content["documents"]}
    assert not seen["find"].is_error
    answer = seen["answer"].structured_content
    assert answer["session_id"] and answer["references"][0]["knowledge_filename"] == "lambda.md"
    # A follow-up searched with the previous question's words says so, to the agent as to a person (and, declined,
    # why: a second note).
    note, *why = seen["follow_up"].structured_content["notes"]
    assert note.startswith("searched as a follow-up of the previous question") and note in text_of(seen["follow_up"])
    assert all(w.startswith("declined because") for w in why)
    for tool in ("search", "answer"):  # each carries its cost receipt, its parts summing to the total
        cost = seen[tool].structured_content["usage"]["cost"]
        assert cost["estimate"] and cost["total_usd"] > 0
        assert abs(sum(cost["by_stage"].values()) - cost["total_usd"]) < 1e-9
    assert not seen["ingest"].is_error and seen["ingest"].structured_content["job_id"]
    unknown = text_of(seen["unknown_kb"])
    assert seen["unknown_kb"].is_error and "unknown knowledge base 'nope'; available: docs" in unknown
    assert seen["bad_args"].is_error and "query is required" in text_of(seen["bad_args"])
    assert seen["bad_type"].is_error and "neighbours must be an integer" in text_of(seen["bad_type"])
    assert [r.name for r in seen["resources"].resources] == ["docs"]
    assert [p.name for p in seen["prompts"].prompts] == ["answer_with_citations"]
    for result in seen.values():  # no traceback ever reaches the model
        assert "Traceback" not in (text_of(result) if hasattr(result, "content") else "")


def test_stdio_server_serves_every_tool(clients: Clients) -> None:
    params = StdioServerParameters(
        command=RAGSTEP, args=["--data-dir", str(clients.settings.data_dir), "mcp"], env=dict(os.environ)
    )

    async def session() -> None:
        async with Client(params) as client:
            seen = await exercise(client)
            check_every_tool(seen)
            assert seen["ingest"].structured_content["status"] == "indexed"  # stdio ingests inside the call
            follow = await client.call_tool(
                "search", {"query": "blue ledger ships", "knowledge_bases": ["docs"], "top_k": 1}
            )
            assert follow.structured_content["results"][0]["knowledge_filename"] == "ledger.md"
            doc = await client.read_resource("ragstep://knowledge-bases/docs")
            assert "lambda.md" in doc.contents[0].text
            # Over stdio the caller is this machine's user: a file by path or file: URI, as `ragstep ingest` takes it.
            note = clients.settings.data_dir.parent / "harbour notes.md"
            note.write_text("# Harbour\n\nThe pilot boards every tanker at the outer buoy.\n", encoding="utf-8")
            by_uri = await client.call_tool("ingest", {"knowledge_base": "docs", "path": note.as_uri()})
            assert by_uri.structured_content["status"] == "indexed", text_of(by_uri)
            assert text_of(by_uri).startswith("harbour notes.md: job ")
            found = await client.call_tool("search", {"query": "pilot tanker buoy", "knowledge_bases": ["docs"]})
            assert found.structured_content["results"][0]["knowledge_filename"] == "harbour notes.md"
            relative = await client.call_tool("ingest", {"knowledge_base": "docs", "path": "harbour notes.md"})
            assert relative.is_error and "is relative" in text_of(relative)
            kernel = await client.call_tool("ingest", {"knowledge_base": "docs", "path": "file:///proc/self/environ"})
            assert kernel.is_error and "kernel interface" in text_of(kernel)
            long = await client.call_tool("search", {"query": "a" * 5000, "knowledge_bases": ["docs"]})
            assert text_of(long) == "invalid query: query has 5000 characters; the limit is 4000"  # no "Value error"
            typo = await client.call_tool("search", {"query": "pilot", "knowledge_bases": ["docs"], "topk": 1})
            assert typo.is_error and text_of(typo).startswith("unknown argument 'topk' (did you mean top_k?)")

    run(session)


def test_stdio_scope_option_hides_tools(clients: Clients) -> None:
    params = StdioServerParameters(
        command=RAGSTEP, args=["--data-dir", str(clients.settings.data_dir), "mcp", "--scope", "search"]
    )

    async def session() -> None:
        async with Client(params) as client:
            assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
            refused = await client.call_tool("ingest", {"knowledge_base": "docs", "filename": "a.md", "text": "a"})
            assert refused.is_error and "unknown tool 'ingest'" in text_of(refused)

    run(session)


def test_stdio_rejects_an_unknown_scope(tmp_path: Path) -> None:
    done = subprocess.run(
        [RAGSTEP, "--data-dir", str(tmp_path), "mcp", "--scope", "search,everything"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "unknown scope 'everything'" in done.stderr and not done.stdout


def test_stdio_on_a_data_dir_without_data_says_so(tmp_path: Path) -> None:
    """A mistyped path in the desktop client's configuration: the agent would only see "no knowledge base"."""
    typo = tmp_path / "ragstep-dta"
    said = f"no ragstep data in {typo}; create some there with `ragstep ingest FILES --kb NAME`"
    read_only = subprocess.run(
        [RAGSTEP, "--data-dir", str(typo), "mcp", "--scope", "search"], capture_output=True, text=True, timeout=60
    )
    assert read_only.returncode == 2 and not read_only.stdout and not typo.exists()
    assert read_only.stderr.startswith(f"ragstep: error: {said}") and len(read_only.stderr.splitlines()) == 1
    # With the ingest tool the server starts (the agent may add documents), and its log says why it is empty.
    full = subprocess.run(
        [RAGSTEP, "--data-dir", str(typo), "mcp"], input="", capture_output=True, text=True, timeout=60
    )
    assert full.returncode == 0 and full.stderr.startswith(f"ragstep mcp: {said}")
    assert full.stderr.rstrip().endswith("serving it empty: the ingest tool adds documents")


@pytest.fixture
def keyed(clients: Clients) -> Iterator[tuple[str, dict[str, str]]]:
    store = clients.keys
    keys = {
        "all": create_key(store, "default", ["search", "chat", "ingest"]).secret,
        "search": create_key(store, "default", ["search"]).secret,
        "other-kb": create_key(store, "default", ["search", "chat"], knowledge_bases=["elsewhere"]).secret,
    }
    with api_server(clients) as base:
        yield base, keys


def test_http_serves_every_tool_to_a_full_key(keyed: tuple[str, dict[str, str]], clients: Clients) -> None:
    base, keys = keyed

    async def session() -> None:
        async with http_client(base, keys["all"]) as client:
            seen = await exercise(client)
            check_every_tool(seen)
            assert seen["ingest"].structured_content["status"] in {"queued", "running", "indexed"}
            # A caller over HTTP may be anyone with a key: the server's own disk is not theirs to read.
            by_path = await client.call_tool("ingest", {"knowledge_base": "docs", "path": "/etc/hostname"})
            assert by_path.is_error and "does not read its own disk for a caller over HTTP" in text_of(by_path)

    run(session)
    # MCP calls are metered like the other routes: one usage record per HTTP request, written after its answer.
    deadline = time.monotonic() + 60
    records: list[UsageRecord] = []
    while time.monotonic() < deadline:
        records = [r for r in clients.usage.between("default", 0, time.time() + 1) if r.route == "/mcp"]
        if len(records) >= 12:
            break
        time.sleep(0.2)
    assert len(records) >= 12 and {r.pipeline for r in records} == {"mcp"} and {r.status for r in records} == {200}


def test_http_lists_only_the_tools_of_the_keys_scopes(keyed: tuple[str, dict[str, str]]) -> None:
    base, keys = keyed

    async def session() -> None:
        async with http_client(base, keys["search"]) as client:
            assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
            refused = await client.call_tool("answer", {"question": "why?", "knowledge_bases": ["docs"]})
            assert refused.is_error and "unknown tool 'answer'" in text_of(refused)
        async with http_client(base, keys["other-kb"]) as client:  # a key limited to other knowledge bases
            hidden = await client.call_tool("search", {"query": "cold starts", "knowledge_bases": ["docs"]})
            assert hidden.is_error and "unknown knowledge base 'docs'" in text_of(hidden)
            kbs = await client.call_tool("list_knowledge_bases", {})
            assert "docs" not in text_of(kbs)

    run(session)


@pytest.mark.parametrize("key", [None, "rs_wrong_key"])
def test_http_refuses_a_missing_or_wrong_key(keyed: tuple[str, dict[str, str]], key: str | None) -> None:
    base, _ = keyed
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx.post(f"{base}/mcp", json=body, headers=headers, timeout=30)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized" and "Traceback" not in response.text

    async def session() -> None:
        async with http_client(base, key) as client:
            await client.list_tools()

    with pytest.raises(Exception) as failed:  # the SDK's client gives up: it never gets a tool list
        run(session)
    assert failed.value is not None


def test_http_speaks_the_initialize_handshake_of_older_clients(keyed: tuple[str, dict[str, str]]) -> None:
    """Clients of the 2025 protocol revisions open with ``initialize`` (the stateless server needs no session)."""
    base, keys = keyed
    headers = {
        "Authorization": f"Bearer {keys['search']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "an-older-client", "version": "1"},
        },
    }
    opened = httpx.post(f"{base}/mcp", json=init, headers=headers, timeout=30)
    assert opened.status_code == 200, opened.text
    result = opened.json()["result"]
    assert result["protocolVersion"] == "2025-06-18" and result["serverInfo"]["name"] == "ragstep"
    headers["MCP-Protocol-Version"] = "2025-06-18"
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "search", "arguments": {"query": "首都", "knowledge_bases": ["docs"], "top_k": 1}},
    }
    answered = httpx.post(f"{base}/mcp", json=call, headers=headers, timeout=60)
    assert answered.status_code == 200, answered.text
    content = answered.json()["result"]
    assert content["isError"] is False and "北京.md" in json.dumps(content, ensure_ascii=False)


def test_http_names_the_field_of_a_message_the_sdk_refuses(keyed: tuple[str, dict[str, str]]) -> None:
    """The SDK's own answers were a multi-line pydantic report of a four-way union (a bad envelope) and a bare
    "Invalid request parameters" (bad params): one line naming the field instead."""
    base, keys = keyed
    headers = {
        "Authorization": f"Bearer {keys['search']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-06-18",
    }

    def error_of(body: object) -> tuple[int, dict[str, Any]]:
        response = httpx.post(f"{base}/mcp", json=body, headers=headers, timeout=30)
        return response.status_code, response.json()["error"]

    status, error = error_of({"jsonrpc": "2.0"})
    assert (status, error) == (400, {"code": -32600, "message": "invalid JSON-RPC message: method: Field required"})
    status, error = error_of({"jsonrpc": "1.0", "id": 1, "method": "tools/list"})
    assert status == 400 and error["message"] == "invalid JSON-RPC message: jsonrpc: Input should be '2.0'"
    status, error = error_of([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}])
    assert status == 400 and error["message"] == "a JSON-RPC message is a JSON object, not list"
    status, error = error_of({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"arguments": {}}})
    assert error["code"] == -32602 and error["message"] == "invalid params of tools/call: params.name: Field required"
    init = {"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}
    status, error = error_of(init)
    assert error["message"] == "invalid params of initialize: params.capabilities: Field required"


@contextlib.contextmanager
def stdio_server(data_dir: Path) -> Iterator[tuple[IO[str], IO[str], io.StringIO]]:
    """``ragstep mcp`` on stdio: its stdin and stdout, and what it wrote to stderr (read once it has stopped).
    Leaving closes stdin, which stops the server; a server that never answers is killed after two minutes, failing
    the test, not the suite."""
    server = subprocess.Popen(
        [RAGSTEP, "--data-dir", str(data_dir), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(120, server.kill)
    watchdog.start()
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    said = io.StringIO()
    try:
        yield server.stdin, server.stdout, said
    finally:
        server.stdin.close()
        said.write(server.stderr.read())
        server.wait(timeout=60)
        watchdog.cancel()


def test_stdio_says_what_is_wrong_with_a_request_before_initialize(clients: Clients) -> None:
    """A hand-written stdio client that skips the 2025 handshake got "Invalid request parameters" for a request
    with no params at all."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"arguments": {}}},
    ]
    answers = {}
    with stdio_server(clients.settings.data_dir) as (stdin, stdout, _):
        # One at a time, stdin kept open until each is answered: at end of input the server stops, answered or not.
        for line in lines:
            stdin.write(json.dumps(line) + "\n")
            stdin.flush()
            answer = json.loads(stdout.readline())
            answers[answer["id"]] = answer["error"]
    assert answers == {
        1: {"code": -32602, "message": "tools/list before initialize: open the connection with initialize first"},
        2: {"code": -32602, "message": "invalid params of tools/call: params.name: Field required"},
    }


def test_bench_mcp_times_the_same_search_over_http_and_mcp() -> None:
    from ragstep.bench.mcp_bench import render, run_mcp

    result = run_mcp(rounds=4)
    assert result["rounds"] == 4
    for name in ("http_search_p50_ms", "mcp_search_p50_ms", "sdk_client_search_p50_ms"):
        assert result[name] > 0
    assert "MCP adds" in render(result)


def test_stdio_answers_a_line_that_is_no_json_rpc_message(tmp_path: Path) -> None:
    """JSON-RPC 2.0: invalid JSON gets a Parse error, a JSON value that is no message an Invalid Request, with the id
    when it can be read (null when not). The SDK's stdio transport only logged such a line: the client waited
    forever for an answer that never came."""
    lines = [
        "not json",
        "   ",  # a blank line is no message: no answer
        json.dumps({"jsonrpc": "2.0", "id": 5}),
        json.dumps([{"jsonrpc": "2.0", "id": 6, "method": "ping"}]),
        json.dumps({"jsonrpc": "1.0", "id": "a", "method": "ping"}),
        json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}),  # the connection still serves after them
    ]
    with stdio_server(tmp_path / "data") as (stdin, stdout, stderr):
        stdin.write("".join(line + "\n" for line in lines))
        stdin.flush()
        # stdin kept open until the answers are in: at end of input the server stops, answered or not.
        answers = [json.loads(stdout.readline()) for _ in range(5)]
    assert [(a["id"], a.get("error", {}).get("code")) for a in answers] == [
        (None, -32700),
        (5, -32600),
        (None, -32600),
        ("a", -32600),
        (9, None),
    ]
    assert answers[0]["error"]["message"].startswith("not JSON: ")
    assert answers[1]["error"]["message"] == "invalid JSON-RPC message: method: Field required"
    assert answers[2]["error"]["message"] == "a JSON-RPC message is a JSON object, not list"
    assert answers[3]["error"]["message"] == "invalid JSON-RPC message: jsonrpc: Input should be '2.0'"
    assert answers[4]["result"] == {} and "Traceback" not in stderr.getvalue()
