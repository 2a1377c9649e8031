"""``/v1/sessions`` and WeKnora's ``/v1/knowledge-chat`` against a real uvicorn server on 127.0.0.1, and the SSE
parser on both stream shapes cut at every byte."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragstep.app.ingest import ingest_file
from ragstep.app.keys import create_key
from ragstep.app.sessions import open_session
from ragstep.entry.http.sse import SSEFrame, SSEParser, data_frame, event_frame
from ragstep.models import KnowledgeBase
from support.api_server import APPS, Served, serve
from support.llm_server import LLMServer, Reply, sse, streamed

pytestmark = pytest.mark.usefixtures("plain_environment")

QUESTION = "When do cold starts happen?"


def chat_stream(app: Served, path: str, body: dict[str, Any]) -> tuple[httpx.Headers, list[dict[str, Any]]]:
    """The ``event: message`` frames of one knowledge-chat answer, decoded."""
    parser = SSEParser()
    with httpx.stream("POST", f"{app.base}{path}", json=body, headers=app.headers, timeout=20) as raw:
        assert raw.status_code == 200, raw.read()
        frames = [frame for chunk in raw.iter_bytes() for frame in parser.feed(chunk)]
    assert {f.event for f in frames} == {"message"}
    return raw.headers, [json.loads(f.data) for f in frames]


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    """The response types in order, consecutive repeats (the deltas) collapsed."""
    out: list[str] = []
    for frame in frames:
        if not out or out[-1] != frame["response_type"]:
            out.append(frame["response_type"])
    return out


# -- sessions --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", APPS)
def test_create_list_read_page_and_delete_sessions(tmp_path: Path, kind: str) -> None:
    with serve(tmp_path, app=kind) as app:
        created = app.post("/v1/sessions")
        assert created.status_code == 201
        sid = created.json()["session_id"]
        assert app.get(f"/v1/sessions/{sid}").json()["turns"] == 0
        for question in ("When do cold starts happen?", "What keeps environments warm?", "北京是哪个国家的首都？"):
            _, frames = chat_stream(
                app, f"/v1/knowledge-chat/{sid}", {"query": question, "knowledge_base_ids": ["docs"]}
            )
            assert frames[-1]["response_type"] == "complete"
        others = [app.post("/v1/sessions").json()["session_id"] for _ in range(2)]

        one = app.get(f"/v1/sessions/{sid}").json()
        first_page = app.get("/v1/sessions", params={"page": 1, "page_size": 2}).json()
        second_page = app.get("/v1/sessions", params={"page": 2, "page_size": 2}).json()
        newest = app.get(f"/v1/sessions/{sid}/messages", params={"limit": 2}).json()
        older = app.get(f"/v1/sessions/{sid}/messages", params={"limit": 2, "before": newest["next_before"]}).json()
        deleted = httpx.delete(f"{app.base}/v1/sessions/{sid}", headers=app.headers)
        gone = app.get(f"/v1/sessions/{sid}")
        stored = app.stored_turns()
    assert one["turns"] == 3 and one["first_query"] == "When do cold starts happen?"
    assert [s["session_id"] for s in first_page["sessions"]] == others[::-1] and first_page["has_more"]
    assert [s["session_id"] for s in second_page["sessions"]] == [sid] and not second_page["has_more"]
    assert [t["query"] for t in newest["turns"]] == ["北京是哪个国家的首都？", "What keeps environments warm?"]
    assert [t["query"] for t in older["turns"]] == ["When do cold starts happen?"] and older["next_before"] is None
    assert newest["turns"][0]["answer"] and newest["turns"][0]["references"]
    assert deleted.status_code == 200 and deleted.json() == {"session_id": sid, "deleted_turns": 4}
    assert gone.status_code == 404 and "unknown session" in gone.json()["message"]
    assert stored == []


@pytest.mark.parametrize("kind", APPS)
def test_unknown_foreign_and_bad_session_requests(tmp_path: Path, kind: str) -> None:
    with serve(tmp_path, app=kind) as app:
        theirs = open_session(app.ctx.clients.context("globex")).session_id
        answers = {
            "foreign": app.get(f"/v1/sessions/{theirs}"),
            "foreign messages": app.get(f"/v1/sessions/{theirs}/messages"),
            "foreign stop": app.post(f"/v1/sessions/{theirs}/stop"),
            "foreign chat": app.post(f"/v1/knowledge-chat/{theirs}", json={"query": QUESTION}),
            "unknown delete": httpx.delete(f"{app.base}/v1/sessions/nope", headers=app.headers),
            "page size": app.get("/v1/sessions", params={"page_size": 1000}),
        }
    for name in ("foreign", "foreign messages", "foreign stop", "foreign chat", "unknown delete"):
        assert answers[name].status_code == 404, name
        assert "unknown session" in answers[name].json()["message"], name
    assert answers["page size"].status_code == 422 and "page_size" in answers["page size"].json()["message"]


# -- knowledge chat ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", APPS)
def test_knowledge_chat_streams_weknoras_frames_in_order(tmp_path: Path, kind: str) -> None:
    with serve(tmp_path, app=kind) as app:
        sid = app.post("/v1/sessions").json()["session_id"]
        headers, frames = chat_stream(
            app, f"/v1/knowledge-chat/{sid}", {"query": QUESTION, "knowledge_base_ids": ["docs"]}
        )
        (turn,) = app.stored_turns()
    assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    assert kinds(frames) == ["agent_query", "references", "answer", "complete"]
    assert len({f["id"] for f in frames}) == 1
    query, refs, complete = frames[0], frames[1], frames[-1]
    assert query["done"] and query["content"] == QUESTION and query["session_id"] == sid
    assert refs["knowledge_references"][0]["knowledge_filename"] == "lambda.md" and not refs["done"]
    answer = "".join(f["content"] for f in frames if f["response_type"] == "answer")
    assert answer.startswith("Cold starts happen when a new execution environment starts. [1]")
    assert not any(f["done"] for f in frames[1:-1])
    assert complete["done"] and complete["data"]["model"] == "extractive" and not complete["data"]["interrupted"]
    assert "chat_completion_stream" in {t["stage"] for t in complete["data"]["trace"]}
    assert turn.answer == answer and turn.session_id == sid


def test_reasoning_is_streamed_as_thinking_and_a_failure_as_an_error_frame(tmp_path: Path) -> None:
    reasoned = Reply(chunks=[sse(reasoning="checking the passages"), *streamed("When an environment starts [1].")])
    with LLMServer(reasoned, Reply(chunks=[sse("half ")], cut=True)) as llm:
        settings: dict[str, Any] = {"chat_provider": "openai", "chat_model": "m", "chat_base_url": llm.url}
        with serve(tmp_path, **settings, chat_max_retries=0, chat_enable_rewrite=False) as app:
            sid = app.post("/v1/sessions").json()["session_id"]
            body = {"query": QUESTION, "knowledge_base_ids": ["docs"]}
            _, good = chat_stream(app, f"/v1/knowledge-chat/{sid}", body)
            _, bad = chat_stream(app, f"/v1/knowledge-chat/{sid}", body)
            stored = app.stored_turns()
    assert kinds(good) == ["agent_query", "references", "thinking", "answer", "complete"]
    assert good[-1]["data"]["model"] == "openai:m"
    assert bad[-1]["response_type"] == "error" and bad[-1]["done"] and "openai:m" in bad[-1]["content"]
    assert bad[-1]["data"] == {"error": "provider_error"}
    assert len(stored) == 1  # the failed answer left no turn


@pytest.mark.parametrize("kind", APPS)
def test_stateless_knowledge_chat_uses_the_given_history_and_writes_nothing(tmp_path: Path, kind: str) -> None:
    with LLMServer() as llm:
        settings = {"chat_provider": "openai", "chat_model": "m", "chat_base_url": llm.url, "chat_max_retries": 0}
        with serve(tmp_path, app=kind, **settings) as app:
            llm.add(
                Reply(body={"choices": [{"message": {"content": "When do AWS Lambda cold starts happen?"}}]}),
                Reply(chunks=streamed("When an environment starts [1].")),
            )
            history = [{"query": "What is AWS Lambda?", "answer": "<think>hm</think>A serverless runtime [1]."}]
            body = {"query": "When do its cold starts happen?", "knowledge_base_ids": ["docs"], "history": history}
            _, frames = chat_stream(app, "/v1/knowledge-chat", body)
            refused = app.post("/v1/knowledge-chat", json={**body, "session_id": "x"})
            sessions = app.get("/v1/sessions").json()["sessions"]
    assert kinds(frames) == ["agent_query", "references", "answer", "complete"]
    assert "session_id" not in frames[0]
    rewrite = json.dumps(llm.requests[0].json, ensure_ascii=False)
    assert "What is AWS Lambda?" in rewrite and "<think>" not in rewrite  # the rewrite saw the history, cleaned
    sent = llm.requests[1].json["messages"]
    assert sent[1:3] == [
        {"role": "user", "content": "What is AWS Lambda?"},
        {"role": "assistant", "content": "A serverless runtime."},  # its marker cited that turn's passage
    ]
    assert refused.status_code == 422 and "session_id" in refused.json()["message"]
    assert sessions == []


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        # The same status and words as search's (422 "query: ..."; chat said 400).
        ({"query": "   "}, 422, "query: query is empty; pass the question to search for"),
        ({"query": "x" * 5000}, 422, "query: query has 5000 characters; the limit is"),
        ({"query": "q?", "pipeline": "knowledge_search"}, 400, "unknown chat pipeline"),
        ({"query": "q?", "overrides": {"top_kk": 3}}, 422, "top_kk"),
        ({"query": "q?", "chat": {"temperature": 9}}, 422, "temperature"),
        # The same status and words as search's (both 422 once; chat said 400).
        ({"query": "q?", "knowledge_base_ids": []}, 422, "name at least one knowledge base"),
    ],
)
@pytest.mark.parametrize("kind", APPS)
def test_bad_knowledge_chat_requests_are_4xx_and_write_nothing(
    tmp_path: Path, body: dict[str, Any], status: int, message: str, kind: str
) -> None:
    with serve(tmp_path, app=kind) as app:
        sid = app.post("/v1/sessions").json()["session_id"]
        found = app.post(f"/v1/knowledge-chat/{sid}", json={"knowledge_base_ids": ["docs"], **body})
        malformed = app.post(
            f"/v1/knowledge-chat/{sid}", content=b"{nope", headers={"content-type": "application/json"}
        )
        stored = app.stored_turns()
    assert found.status_code == status, found.text
    assert message in found.json()["message"]
    assert malformed.status_code == 422 and "not valid JSON" in malformed.json()["message"]
    assert stored == []


@pytest.mark.parametrize("kind", APPS)
def test_an_empty_query_is_the_same_error_on_search_and_both_chats(tmp_path: Path, kind: str) -> None:
    """``/v1/knowledge-search`` answered 422 "query: query is empty; ..." and ``/v1/knowledge-chat`` 400 "query is
    empty; ...": one question, two statuses and two messages for a client to handle."""
    body = {"query": " \t ", "knowledge_base_ids": ["docs"]}
    with serve(tmp_path, app=kind) as app:
        key = create_key(app.ctx.clients.keys, "default", ["search", "chat"]).secret
        both = {"Authorization": f"Bearer {key}"}
        sid = app.post("/v1/sessions").json()["session_id"]
        answers = [
            app.post("/v1/knowledge-search", json=body, headers=both),
            app.post("/v1/knowledge-chat", json=body),
            app.post(f"/v1/knowledge-chat/{sid}", json=body),
        ]
        stored = app.stored_turns()
    assert [a.status_code for a in answers] == [422, 422, 422], [a.text for a in answers]
    expected = {"error": "invalid_input", "message": "query: query is empty; pass the question to search for"}
    assert [a.json() for a in answers] == [expected] * 3
    assert all(a.headers["content-type"] == "application/json" for a in answers)
    assert stored == []


# -- the SSE parser ------------------------------------------------------------------------------------------------


def parse_in_pieces(stream: bytes, size: int) -> list[SSEFrame]:
    parser = SSEParser()
    return [f for i in range(0, len(stream), size) for f in parser.feed(stream[i : i + size])]


def test_the_parser_reads_both_shapes_cut_anywhere() -> None:
    openai_stream = (
        data_frame({"choices": [{"delta": {"content": "北京是首都"}}]})
        + b": keep-alive\n\n"
        + data_frame({"choices": [{"delta": {"content": "。[1]"}}]})
        + b"data: [DONE]\n\n"
    )
    weknora_stream = (
        event_frame("message", {"response_type": "answer", "content": "首都 🏛"})
        + b'event: message\r\ndata: {"response_type":\r\ndata: "complete"}\r\n\r\n'
    )
    for size in range(1, 12):  # every cut: inside a UTF-8 character, inside "\r\n", between frames
        frames = parse_in_pieces(openai_stream, size)
        assert [f.event for f in frames] == [None, None, None]
        assert json.loads(frames[0].data)["choices"][0]["delta"]["content"] == "北京是首都"
        assert frames[-1].data == "[DONE]"
        frames = parse_in_pieces(weknora_stream, size)
        assert [f.event for f in frames] == ["message", "message"]
        assert json.loads(frames[0].data)["content"] == "首都 🏛"
        assert frames[1].data == '{"response_type":\n"complete"}'


def test_the_parser_holds_an_unfinished_frame() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: \xe5\x8c") == []  # half a character
    assert parser.feed(b"\x97\n") == []  # the line, not yet the frame
    assert parser.feed(b"\n") == [SSEFrame(event=None, data="北")]


# -- a key limited to knowledge bases ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", APPS)
def test_a_knowledge_base_limited_key_sees_only_sessions_within_its_knowledge_bases(tmp_path: Path, kind: str) -> None:
    """A session whose answers drew on a knowledge base outside a key's limit is unknown to that key everywhere a
    session id is taken: listing, reading, its messages, delete, stop, continuing it, and search's history."""
    with serve(tmp_path, app=kind) as app:
        clients = app.ctx.clients
        beta = KnowledgeBase(id=uuid.uuid4().hex, name="beta", embedding_model="none", created_at=time.time())
        app.ctx.catalog.create_kb(beta)
        (tmp_path / "beta.md").write_text("Warm pools keep beta environments ready for traffic.", encoding="utf-8")
        assert ingest_file(tmp_path / "beta.md", beta, app.ctx).status == "indexed"
        made = create_key(clients.keys, "default", ["search", "chat"], knowledge_bases=["beta"])
        limited = {"Authorization": f"Bearer {made.secret}"}

        docs_session = app.post("/v1/sessions").json()["session_id"]
        chat_stream(app, f"/v1/knowledge-chat/{docs_session}", {"query": QUESTION, "knowledge_base_ids": ["docs"]})
        beta_session = httpx.post(f"{app.base}/v1/sessions", headers=limited, timeout=20).json()["session_id"]
        with httpx.stream(
            "POST",
            f"{app.base}/v1/knowledge-chat/{beta_session}",
            json={"query": "What keeps beta environments ready?", "knowledge_base_ids": ["beta"]},
            headers=limited,
            timeout=20,
        ) as raw:
            assert raw.status_code == 200 and b"complete" in raw.read()

        def as_limited(method: str, path: str, **kw: Any) -> httpx.Response:
            return httpx.request(method, f"{app.base}{path}", headers=limited, timeout=20, **kw)

        listed = [s["session_id"] for s in as_limited("GET", "/v1/sessions").json()["sessions"]]
        hidden = {
            "read": as_limited("GET", f"/v1/sessions/{docs_session}"),
            "messages": as_limited("GET", f"/v1/sessions/{docs_session}/messages"),
            "stop": as_limited("POST", f"/v1/sessions/{docs_session}/stop"),
            "continue": as_limited(
                "POST", f"/v1/knowledge-chat/{docs_session}", json={"query": QUESTION, "knowledge_base_ids": ["beta"]}
            ),
            "delete": as_limited("DELETE", f"/v1/sessions/{docs_session}"),
        }
        if kind == "fastapi":  # the streaming chat function's app serves no search
            hidden["search"] = as_limited(
                "POST",
                "/v1/knowledge-search",
                json={"query": QUESTION, "knowledge_base_ids": ["beta"], "session_id": docs_session},
            )
            # Another tenant's session is unknown to search as to chat.
            theirs = open_session(clients.context("globex")).session_id
            hidden["another tenant's, searched"] = as_limited(
                "POST",
                "/v1/knowledge-search",
                json={"query": QUESTION, "knowledge_base_ids": ["beta"], "session_id": theirs},
            )
        own = as_limited("GET", f"/v1/sessions/{beta_session}/messages")
        everything = [s["session_id"] for s in app.get("/v1/sessions").json()["sessions"]]
        still_there = app.get(f"/v1/sessions/{docs_session}/messages").json()["turns"]
    assert listed == [beta_session]
    for name, answer in hidden.items():
        assert answer.status_code == 404, (name, answer.text)
        assert "unknown session" in answer.json()["message"], name
    assert own.status_code == 200 and [t["query"] for t in own.json()["turns"]] == [
        "What keeps beta environments ready?"
    ]
    assert set(everything) == {docs_session, beta_session}  # an unlimited key of the tenant sees both
    assert len(still_there) == 1 and still_there[0]["references"]
