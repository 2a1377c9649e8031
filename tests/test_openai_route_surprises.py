"""What an OpenAI SDK user meets on ``/v1/chat/completions`` when asking for what the route cannot do, against both
apps served by uvicorn on 127.0.0.1 (the HTTP API and the streaming chat function's app), driven by the official
``openai`` SDK:

* a knowledge base named for a pipeline that searches nothing (``chat/<kb>``, ``chat`` with ``knowledge_base_ids``)
  is a 400 naming the forms that search, not an answer that read no passage;
* ``response_format`` asking for JSON is a 400 naming the field, as ``n=2`` and ``tools`` are, not ignored;
* a follow-up's note quotes the question as the user wrote it and the words added to it as written, on the route
  and on the command line alike.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from conftest import run_cli
from support.api_server import APPS, Served, serve

QUESTION = "When do cold starts happen?"
FIRST = "What is AWS Lambda?"
FOLLOW_UP = "And its cold starts?"
#: The note of FOLLOW_UP after FIRST: its own words, then the subject's words as FIRST writes them.
NOTE = 'searched as a follow-up of the previous question, with: "And its cold starts?" + AWS Lambda'


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


@pytest.fixture(scope="module", params=list(APPS))
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp(request.param), app=request.param) as app:
        yield app


def refused(served: Served, **request: Any) -> openai.APIStatusError:
    create: Any = served.sdk().chat.completions.create
    with pytest.raises(openai.APIStatusError) as raised:
        create(messages=[user(QUESTION)], **request)
    return raised.value


# -- a knowledge base for a pipeline that searches nothing ------------------------------------------------------------


@pytest.mark.parametrize("profile", ["chat", "chat_stream", "chat_history_stream"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_knowledge_base_for_a_pipeline_that_searches_nothing_is_refused(
    served: Served, profile: str, stream: bool
) -> None:
    error = refused(served, model=f"{profile}/docs", stream=stream)
    assert (error.status_code, error.code, error.param) == (400, "invalid_input", "model")
    assert f"the pipeline {profile!r} answers with the model alone and searches no knowledge base" in error.message
    # ... and says what does search it
    assert "use 'ragstep/docs' (or rag_stream/docs, rag/docs, viking_stream/docs, viking/docs)" in error.message
    assert served.stored_turns() == []


def test_knowledge_base_ids_for_a_pipeline_that_searches_nothing_are_refused(served: Served) -> None:
    error = refused(served, model="chat", extra_body={"knowledge_base_ids": ["docs"]})
    assert (error.status_code, error.param) == (400, "knowledge_base_ids")
    assert "use 'ragstep/docs'" in error.message and "send the request without knowledge_base_ids" in error.message


def test_the_model_of_a_pipeline_that_searches_nothing_is_no_model_for_a_knowledge_base(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        served.sdk().models.retrieve("chat/docs")
    assert "searches no knowledge base" in missing.value.message
    assert served.sdk().models.retrieve("chat").id == "chat"  # alone, it is a model


def test_a_searching_pipeline_named_with_a_knowledge_base_still_answers_from_it(served: Served) -> None:
    said = served.sdk().chat.completions.create(
        model="rag/docs", messages=[user(QUESTION)], extra_body={"append_sources": False}
    )
    assert said.choices[0].message.content.startswith("Cold starts happen when a new execution environment starts.")


# -- response_format --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_object"},
        {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}},
    ],
    ids=["json_object", "json_schema"],
)
@pytest.mark.parametrize("stream", [False, True])
def test_a_json_response_format_is_refused_like_tools(
    served: Served, response_format: dict[str, Any], stream: bool
) -> None:
    error = refused(served, model="ragstep/docs", response_format=response_format, stream=stream)
    assert (error.status_code, error.code, error.param) == (400, "invalid_input", "response_format")
    assert f"response_format {response_format['type']} is not supported; " in error.message
    assert served.stored_turns() == []


def test_a_text_response_format_is_what_every_answer_is(served: Served) -> None:
    said = served.sdk().chat.completions.create(
        model="ragstep/docs", messages=[user(QUESTION)], response_format={"type": "text"}
    )
    assert said.choices[0].message.content.startswith("Cold starts happen when a new execution environment starts.")


# -- the follow-up's note ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_the_follow_ups_note_quotes_the_users_own_words(served: Served, stream: bool) -> None:
    client = served.sdk()
    first = client.chat.completions.create(model="ragstep/docs", messages=[user(FIRST)], extra_body={"reference": True})
    history = [user(FIRST), {"role": "assistant", "content": first.choices[0].message.content}, user(FOLLOW_UP)]
    asked = {"model": "ragstep/docs", "messages": history, "extra_body": {"reference": True}}
    if stream:
        last = list(client.chat.completions.create(stream=True, **asked))[-1]
        notes = (last.choices[0].delta.model_extra or {})["notes"]
    else:
        notes = (client.chat.completions.create(**asked).choices[0].message.model_extra or {})["notes"]
    assert notes == [NOTE]


def test_the_command_line_says_the_same_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve(tmp_path):  # the docs knowledge base, in tmp_path/data
        pass
    data = str(tmp_path / "data")
    code, out, err = run_cli(capsys, "--data-dir", data, "chat", FIRST, "--kb", "docs", "--json")
    assert code == 0, err
    session = json.loads(out)["session_id"]
    code, out, err = run_cli(capsys, "--data-dir", data, "chat", FOLLOW_UP, "--kb", "docs", "--session", session)
    assert code == 0, err
    assert f"(note: {NOTE})" in out
