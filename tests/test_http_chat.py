"""``POST /v1/chat/completions`` through the official ``openai`` SDK (and raw httpx) against a real uvicorn server on
127.0.0.1: extractive default and a scripted OpenAI-compatible model server, streaming and not, references through
``extra_body=``, the usage chunk, errors before and after the stream started, a client that goes away, and stop."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragstep.app.keys import create_key
from ragstep.app.sessions import open_session
from ragstep.entry.http.sse import SSEFrame, SSEParser
from support.api_server import APPS, serve
from support.llm_server import LLMServer, Reply, sse, streamed

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures("plain_environment")

QUESTION = "When do cold starts happen?"


def scripted(server: LLMServer) -> dict[str, Any]:
    return {"chat_provider": "openai", "chat_model": "m", "chat_base_url": server.url, "chat_max_retries": 0}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def frames_of(response: httpx.Response) -> list[SSEFrame]:
    parser = SSEParser()
    return [frame for chunk in response.iter_bytes() for frame in parser.feed(chunk)]


# -- the extractive default ------------------------------------------------------------------------------------------


def test_non_streaming_with_references_through_extra_body(tmp_path: Path) -> None:
    with serve(tmp_path) as app:
        completion = app.sdk().chat.completions.create(
            model="ragstep",
            messages=[user(QUESTION)],
            extra_body={"knowledge_base_ids": [app.kb.id], "reference": True},
        )
        plain = app.sdk().chat.completions.create(
            model="ragstep", messages=[user(QUESTION)], extra_body={"knowledge_base_ids": ["docs"]}
        )
    message = completion.choices[0].message
    assert completion.object == "chat.completion" and completion.model == "ragstep"
    assert message.role == "assistant" and completion.choices[0].finish_reason == "stop"
    assert message.content.startswith("Cold starts happen when a new execution environment starts. [1]")
    assert message.reference[0]["knowledge_filename"] == "lambda.md"
    # A client that did not ask for `reference` sees only text, so by default the sources come in it.
    assert plain.choices[0].message.content.startswith(message.content + "\n\n**Sources**")
    assert "reference" not in (plain.choices[0].message.model_extra or {})
    assert app.stored_turns() == []  # no session: stateless, nothing written


def test_the_nested_extra_body_form_is_read_too(tmp_path: Path) -> None:
    with serve(tmp_path) as app:
        body = {
            "model": "ragstep",
            "messages": [user(QUESTION)],
            "extra_body": {"knowledge_base_ids": ["docs"], "reference": True},
        }
        found = app.post("/v1/chat/completions", json=body)
    assert found.status_code == 200, found.text
    assert found.json()["choices"][0]["message"]["reference"][0]["knowledge_filename"] == "lambda.md"


@pytest.mark.parametrize("kind", APPS)
def test_streaming_frames_with_the_sdk_and_on_the_wire(tmp_path: Path, kind: str) -> None:
    with serve(tmp_path, app=kind) as app:
        stream = app.sdk().chat.completions.create(
            model="ragstep",
            messages=[user(QUESTION)],
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"knowledge_base_ids": [app.kb.id], "reference": True},
        )
        chunks = list(stream)
        body = {"model": "ragstep", "messages": [user(QUESTION)], "stream": True, "knowledge_base_ids": ["docs"]}
        with httpx.stream("POST", f"{app.base}/v1/chat/completions", json=body, headers=app.headers) as raw:
            headers = raw.headers
            frames = frames_of(raw)
    assert {c.id for c in chunks} == {chunks[0].id} and {c.created for c in chunks} == {chunks[0].created}
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c for c in chunks[1:] if c.choices and c.choices[0].delta.content]
    answer = "".join(c.choices[0].delta.content for c in content)
    assert answer.startswith("Cold starts happen when a new execution environment starts. [1]")
    final, usage = chunks[-2], chunks[-1]
    assert final.choices[0].finish_reason == "stop"
    delta = final.choices[0].delta.model_extra
    assert delta["final_content"] == answer and delta["reference"][0]["knowledge_filename"] == "lambda.md"
    assert usage.choices == [] and usage.usage is not None
    # extractive: no model tokens; ragstep's estimate, marked as one
    assert usage.usage.total_tokens == usage.usage.prompt_tokens + usage.usage.completion_tokens > 0
    assert (usage.usage.model_extra or {}).get("estimated") is True
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache" and headers["x-accel-buffering"] == "no"
    assert frames[-1].data == "[DONE]" and all(f.event is None for f in frames)
    chunk_objects = [json.loads(f.data) for f in frames[:-1]]
    assert {c["object"] for c in chunk_objects} == {"chat.completion.chunk"}
    assert "reference" not in chunk_objects[-1]["choices"][0]["delta"]  # not asked for
    assert "usage" not in chunk_objects[-1]  # not asked for


def test_a_pipeline_that_does_not_stream_streams_its_answer_in_one_chunk(tmp_path: Path) -> None:
    with serve(tmp_path, openai_append_sources=False) as app:
        chunks = list(
            app.sdk().chat.completions.create(
                model="rag", messages=[user(QUESTION)], stream=True, extra_body={"knowledge_base_ids": ["docs"]}
            )
        )
    contents = [c.choices[0].delta.content for c in chunks[1:] if c.choices and c.choices[0].delta.content]
    assert len(contents) == 1 and contents[0].startswith("Cold starts happen when a new execution environment starts.")
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.parametrize("kind", APPS)
def test_models_lists_the_profiles(tmp_path: Path, kind: str) -> None:
    with serve(tmp_path, app=kind) as app:
        ids = [m.id for m in app.sdk().models.list()]
    assert ids[0] == "ragstep" and {"rag_stream", "rag", "chat"} <= set(ids)


# -- a scripted model server -----------------------------------------------------------------------------------------


def test_history_from_the_messages_reaches_the_model_and_nothing_is_written(tmp_path: Path) -> None:
    usage = {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}
    with LLMServer() as llm, serve(tmp_path, openai_append_sources=False, **scripted(llm)) as app:
        llm.add(
            Reply(body={"choices": [{"message": {"content": "When do AWS Lambda cold starts happen?"}}]}),
            Reply(chunks=streamed("When a new ", "environment starts [1].", usage=usage)),
        )
        stream = app.sdk().chat.completions.create(
            model="ragstep",
            messages=[
                {"role": "system", "content": "Answer briefly."},
                user("What is AWS Lambda?"),
                {"role": "assistant", "content": "A serverless runtime [1]."},
                user("When do its cold starts happen?"),
            ],
            stream=True,
            stream_options={"include_usage": True},
            temperature=0.1,
            max_tokens=64,
            user="someone",
            extra_body={"knowledge_base_ids": ["docs"]},
        )
        chunks = list(stream)
    answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert answer == "When a new environment starts [1]."
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 55
    final = llm.requests[-1].json
    assert [m["role"] for m in final["messages"]] == ["system", "user", "assistant", "user"]
    assert final["messages"][0]["content"].startswith("Answer briefly.")  # the system message is the system prompt
    # An earlier answer's markers pointed at that turn's passages: the model sees it without them.
    earlier = [user("What is AWS Lambda?"), {"role": "assistant", "content": "A serverless runtime."}]
    assert final["messages"][1:3] == earlier
    assert final["temperature"] == 0.1 and final["max_tokens"] == 64
    assert app.stored_turns() == []


@pytest.mark.parametrize("kind", APPS)
def test_an_error_after_the_stream_started_raises_the_sdks_error(tmp_path: Path, kind: str) -> None:
    with LLMServer(Reply(chunks=[sse("half ")], cut=True)) as llm, serve(tmp_path, app=kind, **scripted(llm)) as app:
        session = app.post("/v1/sessions").json()["session_id"]
        stream = app.sdk().chat.completions.create(
            model="ragstep",
            messages=[user(QUESTION)],
            stream=True,
            extra_body={"knowledge_base_ids": ["docs"], "session_id": session},
        )
        seen = []
        with pytest.raises(openai.APIError) as err:
            for chunk in stream:
                seen.append(chunk)
    assert err.value.body["code"] == "provider_error" and "openai:m" in err.value.message
    assert "openai:m" not in "".join(c.choices[0].delta.content or "" for c in seen if c.choices)  # not in the text
    assert app.stored_turns() == []  # a failed answer leaves no turn


def test_a_session_keeps_the_conversation(tmp_path: Path) -> None:
    with LLMServer() as llm, serve(tmp_path, openai_append_sources=False, **scripted(llm)) as app:
        session = app.post("/v1/sessions").json()["session_id"]
        llm.add(Reply(chunks=streamed("AWS Lambda runs code [1].")))
        first = app.sdk().chat.completions.create(
            model="ragstep",
            messages=[user("What is AWS Lambda?")],
            extra_body={"knowledge_base_ids": ["docs"], "session_id": session},
        )
        llm.add(
            Reply(body={"choices": [{"message": {"content": "When do AWS Lambda cold starts happen?"}}]}),
            Reply(chunks=streamed("When an environment starts [1].")),
        )
        second = list(
            app.sdk().chat.completions.create(
                model="ragstep",
                messages=[user("When do its cold starts happen?")],
                stream=True,
                extra_body={"knowledge_base_ids": ["docs"], "session_id": session},
            )
        )
    assert first.choices[0].message.content == "AWS Lambda runs code [1]."
    assert "".join(c.choices[0].delta.content or "" for c in second if c.choices) == "When an environment starts [1]."
    sent = llm.requests[-1].json["messages"]
    assert sent[1:3] == [user("What is AWS Lambda?"), {"role": "assistant", "content": "AWS Lambda runs code."}]
    turns = app.stored_turns()
    assert [t.query for t in turns] == ["What is AWS Lambda?", "When do its cold starts happen?"]
    assert not any(t.interrupted for t in turns)


def slow_words(count: int = 400) -> Reply:
    return Reply(chunks=[sse(f"word{i} ") for i in range(count)] + streamed(""), chunk_delay_s=0.01)


@pytest.mark.parametrize("kind", APPS)
def test_a_client_that_goes_away_stops_the_model_and_the_partial_answer_is_saved(tmp_path: Path, kind: str) -> None:
    with LLMServer(slow_words()) as llm, serve(tmp_path, app=kind, **scripted(llm)) as app:
        session = app.post("/v1/sessions").json()["session_id"]
        body = {
            "model": "ragstep",
            "messages": [user(QUESTION)],
            "stream": True,
            "knowledge_base_ids": ["docs"],
            "session_id": session,
        }
        shown = []
        parser = SSEParser()
        with httpx.stream("POST", f"{app.base}/v1/chat/completions", json=body, headers=app.headers) as raw:
            for chunk in raw.iter_raw():
                for frame in parser.feed(chunk):
                    shown.append(json.loads(frame.data)["choices"][0]["delta"].get("content", ""))
                if len(shown) >= 4:
                    break
        assert llm.hung_up.wait(5), "the model kept streaming after the client left"
        deadline = time.monotonic() + 5
        while not app.stored_turns() and time.monotonic() < deadline:
            time.sleep(0.02)
    (turn,) = app.stored_turns()
    assert turn.interrupted and turn.query == QUESTION and turn.references
    assert turn.answer.startswith("".join(shown)) and turn.answer.startswith("word0 word1 word2 ")
    assert llm.chunks_written < 400


@pytest.mark.parametrize("kind", APPS)
def test_stop_ends_the_running_answer_and_saves_it_interrupted(tmp_path: Path, kind: str) -> None:
    with LLMServer(slow_words()) as llm, serve(tmp_path, app=kind, **scripted(llm)) as app:
        session = app.post("/v1/sessions").json()["session_id"]
        assert app.post(f"/v1/sessions/{session}/stop").status_code == 409  # nothing running yet
        stream = app.sdk().chat.completions.create(
            model="ragstep",
            messages=[user(QUESTION)],
            stream=True,
            extra_body={"knowledge_base_ids": ["docs"], "session_id": session, "reference": True},
        )
        chunks = []
        stopped: list[httpx.Response] = []
        for chunk in stream:
            chunks.append(chunk)
            if len(chunks) == 4:
                threading.Thread(target=lambda: stopped.append(app.post(f"/v1/sessions/{session}/stop"))).start()
        assert llm.hung_up.wait(5), "the model kept streaming after the stop"
    assert stopped[0].status_code == 200 and stopped[0].json() == {"session_id": session, "stopped": 1}
    final = chunks[-1].choices[0]
    assert final.finish_reason == "stop" and final.delta.model_extra["interrupted"] is True
    shown = "".join(c.choices[0].delta.content or "" for c in chunks)
    (turn,) = app.stored_turns()
    assert turn.interrupted and turn.answer == shown == final.delta.model_extra["final_content"]
    assert 3 <= len(shown.split()) < 400


# -- bad input -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"model": "ragstep", "messages": [', 422, "not valid JSON"),
        ({"model": "ragstep", "messages": [user("hi"), {"role": "assistant", "content": "x"}]}, 400, "last message"),
        ({"model": "ragstep", "messages": [user("   ")]}, 400, "query is empty"),
        ({"model": "ragstep", "messages": [user("x" * 5000)]}, 400, "the limit is"),
        ({"model": "gpt-4o", "messages": [user("hi")]}, 400, "ragstep, rag_stream"),
        ({"model": "ragstep", "messages": []}, 422, "messages"),
        ({"model": "ragstep", "messages": [user("hi")], "session_id": "nope"}, 404, "unknown session 'nope'"),
        (
            {"model": "ragstep", "messages": [user("a"), {"role": "assistant", "content": "b"}, user("c")]}
            | {"session_id": "SESSION"},
            400,
            "not both",
        ),
        (
            {"model": "ragstep", "messages": [user("hi")], "reference": True, "extra_body": {"reference": False}},
            400,
            "reference is given at the top level and in extra_body",
        ),
        ({"model": "ragstep", "messages": [user("hi")], "extra_body": {"referense": True}}, 422, "referense"),
        ({"model": "ragstep", "messages": [{"role": "tool", "content": "x"}, user("hi")]}, 400, "role 'tool'"),
        ({"model": "ragstep", "messages": [user("hi")], "n": 2}, 400, "n=1"),
        ({"model": "ragstep", "messages": [user("hi")], "temperature": 9}, 422, "temperature"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", APPS)
def test_bad_requests_are_4xx_that_say_what_to_fix_and_write_nothing(
    tmp_path: Path, body: Any, status: int, message: str, stream: bool, kind: str
) -> None:
    with serve(tmp_path, app=kind) as app:
        session = app.post("/v1/sessions").json()["session_id"]
        if isinstance(body, dict):
            body = json.dumps({**body, "stream": stream, "knowledge_base_ids": ["docs"]}).replace("SESSION", session)
        found = httpx.post(
            f"{app.base}/v1/chat/completions",
            content=body,
            headers={**app.headers, "content-type": "application/json"},
            timeout=20,
        )
    assert found.status_code == status, found.text
    assert found.headers["content-type"] == "application/json"
    error = found.json()["error"]  # OpenAI's shape
    assert error["code"] and error["type"] and message in error["message"]
    if message == "the limit is":  # the question's own rules name the field that holds it (param was None)
        assert error["param"] == "messages"
    assert app.stored_turns() == []


def test_another_tenants_session_is_unknown(tmp_path: Path) -> None:
    with serve(tmp_path) as app:
        theirs = open_session(app.ctx.clients.context("globex")).session_id
        body = {"model": "ragstep", "messages": [user("hi")], "session_id": theirs, "knowledge_base_ids": ["docs"]}
        found = app.post("/v1/chat/completions", json=body)
    assert found.status_code == 404 and f"unknown session {theirs!r}" in found.json()["error"]["message"]


@pytest.mark.parametrize("kind", APPS)
def test_a_key_without_the_chat_scope_is_refused(tmp_path: Path, kind: str) -> None:
    with serve(tmp_path, app=kind) as app:
        search_only = create_key(app.ctx.clients.keys, "default", ["search"]).secret
        client = openai.OpenAI(base_url=f"{app.base}/v1", api_key=search_only, max_retries=0)
        with pytest.raises(openai.PermissionDeniedError) as err:
            client.chat.completions.create(model="ragstep", messages=[user(QUESTION)])
    assert "lacks the 'chat' scope" in err.value.body["message"] and err.value.code == "forbidden"
