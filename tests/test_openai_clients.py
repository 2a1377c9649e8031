"""OpenAI clients that send nothing but ``model`` and ``messages``, against ``ragstep serve``'s app on a real port:
LangChain's ``ChatOpenAI``, ``litellm`` and the official ``openai`` SDK. Knowledge bases chosen through ``model``
(``ragstep/<kb>``) or the server's default set, OpenAI-shaped errors on every status of the OpenAI routes,
``finish_reason`` ``length`` when the answer was cut, usage for every answerer (estimated, and marked, for the
extractive one), ``max_tokens`` honoured by it, and the sources appended as Markdown for clients that show only text.
"""

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
from ragstep.entry.http.errors import ERROR_HANDLERS, OpenAIErrors
from ragstep.entry.http.sources import without_sources
from ragstep.models import KnowledgeBase
from ragstep.retrieval.tokens import count_tokens
from support.api_server import APPS, Served, serve
from support.llm_server import LLMServer, Reply, completion, sse, streamed

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures("plain_environment")

QUESTION = "When do cold starts happen?"
#: The sentence of lambda.md that answers QUESTION (the answerer may quote more of the passage around it).
ANSWER = "Cold starts happen when a new execution environment starts."


def answers(text: str) -> bool:
    """``text`` answers QUESTION from lambda.md, cited ``[1]``, before any sources block."""
    answer = without_sources(text)
    return ANSWER in answer and "[1]" in answer


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def scripted(server: LLMServer) -> dict[str, Any]:
    return {"chat_provider": "openai", "chat_model": "m", "chat_base_url": server.url, "chat_max_retries": 0}


def add_kb(app: Served, name: str, tmp_path: Path, text: str) -> KnowledgeBase:
    kb = KnowledgeBase(id=uuid.uuid4().hex, name=name, embedding_model="none", created_at=time.time())
    app.ctx.catalog.create_kb(kb)
    path = tmp_path / f"{name}.md"
    path.write_text(text, encoding="utf-8")
    assert ingest_file(path, kb, app.ctx).status == "indexed"
    return kb


# -- LangChain: the model names the knowledge base, the text carries the sources ----------------------------------


def test_langchain_chat_openai_gets_an_answer_with_its_sources(tmp_path: Path) -> None:
    chat_openai = pytest.importorskip("langchain_openai").ChatOpenAI
    with serve(tmp_path) as app:  # the server's defaults: nothing set for LangChain
        model_id = next(m.id for m in app.sdk().models.list() if m.id.endswith("/docs"))
        llm = chat_openai(base_url=f"{app.base}/v1", model=model_id, api_key=app.key, max_retries=0, timeout=20)
        said = llm.invoke(QUESTION)
        streamed_text = "".join(str(chunk.content) for chunk in llm.stream(QUESTION))
    assert model_id == "ragstep/docs"
    text = str(said.content)
    assert answers(text) and text != without_sources(text)
    # The source's line quotes what the answer took from it, not the passage's first sentence.
    assert f'**Sources**\n\n- [1] lambda.md: "{ANSWER}' in text, text
    assert streamed_text == text
    assert app.stored_turns() == []


def test_the_sources_quote_a_pdf_passage_without_its_page_markers(tmp_path: Path) -> None:
    # What a PDF's passage holds (ragstep.parsers.pdf.PAGE_MARKER): hidden in rendered Markdown, clutter in text.
    chat_openai = pytest.importorskip("langchain_openai").ChatOpenAI
    with serve(tmp_path) as app:
        add_kb(app, "manual", tmp_path, "Libtasn1 manual.\n\n<!-- page 2 -->\n\nThe header file is libtasn1.h.\n")
        llm = chat_openai(base_url=f"{app.base}/v1", model="ragstep/manual", api_key=app.key, max_retries=0)
        text = str(llm.invoke("Which header file does libtasn1 use?").content)
    assert '- [1] manual.md: "The header file is libtasn1.h."' in text and "<!--" not in text, text


def test_the_sources_quote_the_sentence_each_source_is_cited_for(tmp_path: Path) -> None:
    """Per cited source, the sentence the answer took from it: the words before a marker when the passage holds them
    (its full stop added), the passage's most similar sentence for a paraphrase, the passage's start when neither."""
    runbook = "The on-call rota changes every Monday. Pages go to the secondary after 15 minutes without an ack."
    with LLMServer() as llm, serve(tmp_path, openai_append_sources=True, **scripted(llm)) as app:
        add_kb(app, "ops", tmp_path, runbook)
        asked = {"model": "ragstep/ops", "messages": [user("When are pages escalated?")]}
        for said in (
            "Pages go to the secondary after 15 minutes without an ack [1].",  # a verbatim quote
            "They are escalated to the secondary once 15 minutes pass with no ack [1].",  # a paraphrase
            "Ask the team lead [1].",  # nothing of the passage
        ):
            llm.add(Reply(chunks=streamed(said)))
        quoted, paraphrased, unlike = (app.sdk().chat.completions.create(**asked) for _ in range(3))
    escalation = '- [1] ops.md: "Pages go to the secondary after 15 minutes without an ack."'
    assert quoted.choices[0].message.content.endswith(escalation)
    assert paraphrased.choices[0].message.content.endswith(escalation)
    assert unlike.choices[0].message.content.endswith(f'- [1] ops.md: "{runbook}"')  # short: whole
    assert quoted.object == "chat.completion" and quoted.choices[0].finish_reason == "stop"


def test_the_sources_sent_back_as_history_never_reach_the_model(tmp_path: Path) -> None:
    chat_openai = pytest.importorskip("langchain_openai").ChatOpenAI
    with LLMServer() as llm, serve(tmp_path, openai_append_sources=True, **scripted(llm)) as app:
        llm.add(Reply(chunks=streamed("AWS Lambda runs code without servers [1].")))
        client = chat_openai(base_url=f"{app.base}/v1", model="ragstep/docs", api_key=app.key, max_retries=0)
        first = client.invoke("What is AWS Lambda?")
        llm.add(
            Reply(body=completion("When do AWS Lambda cold starts happen?")),  # the rewrite
            Reply(chunks=streamed("When a new environment starts [1].")),
        )
        client.invoke([("user", "What is AWS Lambda?"), ("assistant", first.content), ("user", "When do they start?")])
    shown = str(first.content)
    assert shown.startswith("AWS Lambda runs code without servers [1].\n\n**Sources**\n\n- [1] lambda.md")
    assert without_sources(shown) == "AWS Lambda runs code without servers [1]."
    for request in llm.requests[1:]:
        assert "**Sources**" not in json.dumps(request.json, ensure_ascii=False)


def test_append_sources_per_request_lists_only_what_the_answer_cites(tmp_path: Path) -> None:
    with LLMServer() as llm, serve(tmp_path, **scripted(llm)) as app:
        asked = {"model": "ragstep/docs", "messages": [user(QUESTION)]}
        llm.add(Reply(chunks=streamed("When a new environment starts [1].")))
        cited = app.sdk().chat.completions.create(**asked, extra_body={"append_sources": True})
        llm.add(Reply(chunks=streamed("NO_MATCH")))
        declined = app.sdk().chat.completions.create(
            **asked, extra_body={"append_sources": True, "chat": {"fallback_strategy": "fixed"}}
        )
        llm.add(Reply(chunks=streamed("When a new environment starts [1].")))
        plain = app.sdk().chat.completions.create(**asked)
        llm.add(Reply(chunks=streamed("When a new environment starts [1].")))
        referenced = app.sdk().chat.completions.create(**asked, extra_body={"reference": True})
    assert cited.choices[0].message.content.startswith("When a new environment starts [1].\n\n**Sources**\n\n- [1] ")
    assert "**Sources**" not in declined.choices[0].message.content  # a declined answer has no sources
    # the server's default: on for a client that did not ask for `reference`
    assert plain.choices[0].message.content == cited.choices[0].message.content
    # ... and off for one that reads the sources as data
    assert referenced.choices[0].message.content == "When a new environment starts [1]."


def test_the_answers_notes_reach_clients_that_show_only_text(tmp_path: Path) -> None:
    chat_openai = pytest.importorskip("langchain_openai").ChatOpenAI
    skipped = "the data files among the sources were not analysed: data analysis needs a generative chat model"
    question = "What is the total amount by region?"
    with serve(tmp_path, openai_append_sources=True) as app:
        kb = KnowledgeBase(id=uuid.uuid4().hex, name="sales", embedding_model="none", created_at=time.time())
        app.ctx.catalog.create_kb(kb)
        (tmp_path / "sales.csv").write_text("region,amount\nnorth,120\nsouth,80\n", encoding="utf-8")
        assert ingest_file(tmp_path / "sales.csv", kb, app.ctx).status == "indexed"
        sales, docs = (
            chat_openai(base_url=f"{app.base}/v1", model=f"ragstep/{name}", api_key=app.key, max_retries=0, timeout=20)
            for name in ("sales", "docs")
        )
        said = str(sales.invoke(question).content)
        streamed_text = "".join(str(chunk.content) for chunk in sales.stream(question))
        # A follow-up searched with the previous question's words says so.
        first = str(docs.invoke("What is AWS Lambda?").content)
        history = [("user", "What is AWS Lambda?"), ("assistant", first), ("user", "And its cold starts?")]
        then = str(docs.invoke(history).content)
        fields = app.sdk().chat.completions.create(
            model="ragstep/sales", messages=[user(question)], extra_body={"reference": True, "append_sources": False}
        )
    assert f"\n\n*(note: {skipped} (set RAGSTEP_CHAT_PROVIDER))*" in said and streamed_text == said
    assert "*(note: searched as a follow-up of the previous question, with: " in then
    # Sent back as history, the notes are taken off with the sources.
    assert without_sources(said) == said.split("\n\n*(note: ")[0] and "note:" not in without_sources(then)
    # A client that reads ragstep's fields gets the notes as a list, and the text without them.
    notes = (fields.choices[0].message.model_extra or {}).get("notes")
    assert notes and notes[0].startswith(skipped) and "note:" not in fields.choices[0].message.content


# -- litellm: streaming, with the sources in the text ---------------------------------------------------------------


def test_litellm_streaming_works_and_keeps_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # litellm fetches its model price list from the internet unless told to use the copy it ships.
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    with serve(tmp_path, openai_append_sources=True) as app:
        response = litellm.completion(
            model="openai/ragstep/docs",
            api_base=f"{app.base}/v1",
            api_key=app.key,
            messages=[user(QUESTION)],
            stream=True,
            max_retries=0,
            timeout=20,
        )
        chunks = list(response)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert answers(text) and "**Sources**\n\n- [1] lambda.md" in text
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_litellm_reads_the_cost_as_the_number_it_expects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm types ``usage.cost`` as a float (OpenRouter's convention: what the request cost); a receipt there made
    every call warn (pydantic's serializer) and left the figure unread."""
    import warnings

    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    litellm = pytest.importorskip("litellm")
    with serve(tmp_path) as app, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        response = litellm.completion(
            model="openai/ragstep/docs",
            api_base=f"{app.base}/v1",
            api_key=app.key,
            messages=[user(QUESTION)],
            max_retries=0,
            timeout=20,
        )
        dumped = response.model_dump()
    assert answers(response.choices[0].message.content)
    assert [str(w.message) for w in caught if "serializ" in str(w.message)] == []
    receipt = dumped["usage"]["cost_receipt"]
    assert receipt["estimate"] is True and dumped["usage"]["cost"] == receipt["total_usd"] > 0


# -- knowledge bases through model, and the server's default set ---------------------------------------------------


@pytest.mark.parametrize("kind", APPS)
def test_models_lists_each_knowledge_base_the_key_may_use(tmp_path: Path, kind: str) -> None:
    with serve(tmp_path, app=kind) as app:
        add_kb(app, "pets", tmp_path, "Cats sleep sixteen hours a day.")
        everything = [m.id for m in app.sdk().models.list()]
        retrieved = app.sdk().models.retrieve("ragstep/docs+pets")
        with pytest.raises(openai.NotFoundError) as unknown:
            app.sdk().models.retrieve("gpt-4o")
        limited = create_key(app.ctx.clients.keys, "default", ["chat"], knowledge_bases=["pets"]).secret
        sdk = openai.OpenAI(base_url=f"{app.base}/v1", api_key=limited, max_retries=0, timeout=20)
        seen = [m.id for m in sdk.models.list()]
        with pytest.raises(openai.NotFoundError) as err:
            sdk.chat.completions.create(model="ragstep/docs", messages=[user(QUESTION)])
    assert everything[0] == "ragstep" and everything[-2:] == ["ragstep/docs", "ragstep/pets"]
    assert retrieved.id == "ragstep/docs+pets" and retrieved.created > 0
    assert unknown.value.status_code == 404 and unknown.value.param == "model"
    assert "ragstep/pets" in seen and "ragstep/docs" not in seen
    assert err.value.code == "not_found" and err.value.param == "model"
    assert "names knowledge base 'docs', which does not exist or this API key may not use" in err.value.message


def test_a_model_names_several_knowledge_bases_and_a_pipeline(tmp_path: Path) -> None:
    with serve(tmp_path) as app:
        add_kb(app, "pets", tmp_path, "Cats sleep sixteen hours a day.")
        both = app.sdk().chat.completions.create(
            model="ragstep/docs+pets",
            messages=[user("How long do cats sleep?")],
            extra_body={"reference": True},
        )
        one_call = app.sdk().chat.completions.create(model="rag/docs", messages=[user(QUESTION)])
        refused = app.post(
            "/v1/chat/completions",
            json={"model": "ragstep/docs", "messages": [user(QUESTION)], "knowledge_base_ids": ["pets"]},
        )
    assert "Cats sleep sixteen hours a day" in both.choices[0].message.content
    assert both.model == "ragstep/docs+pets"
    assert {r["knowledge_filename"] for r in both.choices[0].message.model_extra["reference"]} == {"pets.md"}
    assert answers(one_call.choices[0].message.content)
    assert refused.status_code == 400 and "name them once" in refused.json()["error"]["message"]


def test_the_server_default_knowledge_bases_answer_a_bare_model(tmp_path: Path) -> None:
    with serve(tmp_path, openai_default_knowledge_bases="nope, docs") as app:
        answered = app.sdk().chat.completions.create(model="ragstep", messages=[user(QUESTION)])
    with serve(tmp_path / "all", openai_default_knowledge_bases="*") as app:
        every = app.sdk().chat.completions.create(model="ragstep", messages=[user(QUESTION)])
    assert answers(answered.choices[0].message.content) and answers(every.choices[0].message.content)


# -- errors in OpenAI's shape ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", APPS)
def test_the_sdk_shows_ragsteps_message_on_every_error(tmp_path: Path, kind: str) -> None:
    with serve(tmp_path, app=kind, max_request_bytes=16 * 1024) as app:
        sdk = app.sdk()
        with pytest.raises(openai.BadRequestError) as no_kb:
            sdk.chat.completions.create(model="ragstep", messages=[user(QUESTION)])
        with pytest.raises(openai.BadRequestError) as unknown:
            sdk.chat.completions.create(model="gpt-4o", messages=[user(QUESTION)])
        with pytest.raises(openai.UnprocessableEntityError) as invalid:
            sdk.chat.completions.create(model="ragstep/docs", messages=[{"role": "user", "content": 3}])  # type: ignore[misc]
        with pytest.raises(openai.AuthenticationError) as unauthorized:
            openai.OpenAI(base_url=f"{app.base}/v1", api_key="rs_nope", max_retries=0).models.list()
        with pytest.raises(openai.APIStatusError) as too_large:
            sdk.chat.completions.create(model="ragstep/docs", messages=[user("x " * 10_000)])
        with pytest.raises(openai.BadRequestError) as streamed_refusal:
            sdk.chat.completions.create(model="ragstep", messages=[user(QUESTION)], stream=True)
        wrong_method = httpx.get(f"{app.base}/v1/chat/completions", headers=app.headers)
        search_error = app.post("/v1/knowledge-search", json={"query": ""})
    error = no_kb.value
    assert (error.code, error.type, error.param) == ("invalid_input", "invalid_request_error", "model")
    assert "names no knowledge base: use the model 'ragstep/<knowledge base>'" in error.message
    assert "RAGSTEP_OPENAI_DEFAULT_KNOWLEDGE_BASES" in str(error)
    assert streamed_refusal.value.body == error.body
    assert unknown.value.param == "model" and "unknown model 'gpt-4o'" in unknown.value.message
    assert invalid.value.code == "invalid_input" and invalid.value.param.startswith("messages.0.content")
    assert unauthorized.value.type == "authentication_error" and unauthorized.value.code == "unauthorized"
    assert unauthorized.value.response.headers["www-authenticate"] == "Bearer"
    assert too_large.value.status_code == 413 and too_large.value.code == "payload_too_large"
    assert "the limit is 16384 bytes" in too_large.value.message
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"
    assert set(search_error.json()) == {"error", "message"}  # the rest of the API keeps its own shape


def test_an_internal_error_on_an_openai_route_is_openais_shape_too() -> None:
    # Starlette answers an unhandled exception outside every middleware: the handler itself must say it OpenAI's way.
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.routing import Route
    from starlette.testclient import TestClient

    def broken(_: Request) -> Any:
        raise RuntimeError("a detail for the log only")

    app = Starlette(
        routes=[Route("/v1/models", broken), Route("/v1/sessions", broken)],
        middleware=[Middleware(OpenAIErrors)],
        exception_handlers=ERROR_HANDLERS,
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        models, sessions = client.get("/v1/models"), client.get("/v1/sessions")
    said = "internal error; see the server log"  # no exception class: that stays in the server's log
    assert models.status_code == 500 and models.json() == {
        "error": {"message": f"GET /v1/models: {said}", "type": "server_error", "param": None, "code": "internal_error"}
    }
    assert sessions.json() == {"error": "internal_error", "message": f"GET /v1/sessions: {said}"}


@pytest.mark.parametrize("kind", APPS)
def test_an_error_inside_the_stream_is_openais_shape(tmp_path: Path, kind: str) -> None:
    with LLMServer(Reply(chunks=[sse("half ")], cut=True)) as llm, serve(tmp_path, app=kind, **scripted(llm)) as app:
        stream = app.sdk().chat.completions.create(model="ragstep/docs", messages=[user(QUESTION)], stream=True)
        with pytest.raises(openai.APIError) as err:
            list(stream)
    assert err.value.body == {
        "message": err.value.message,
        "type": "server_error",
        "param": None,
        "code": "provider_error",
    }


# -- finish_reason, usage and max_tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_cut_at_max_tokens_finishes_with_length(tmp_path: Path, stream: bool) -> None:
    usage = {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43}
    reply = (
        Reply(chunks=streamed("Cold starts happen", usage=usage, finish="length"))
        if stream
        else Reply(body=completion("Cold starts happen", usage=usage, finish="length"))
    )
    with LLMServer(reply) as llm, serve(tmp_path, **scripted(llm)) as app:
        asked = {"model": "rag/docs" if not stream else "ragstep/docs", "messages": [user(QUESTION)], "max_tokens": 3}
        if stream:
            chunks = list(
                app.sdk().chat.completions.create(**asked, stream=True, stream_options={"include_usage": True})
            )
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            reported = chunks[-1].usage
        else:
            done = app.sdk().chat.completions.create(**asked)
            finish, reported = [done.choices[0].finish_reason], done.usage
    assert finish == ["length"]
    assert reported is not None and reported.total_tokens == 43 and "estimated" not in (reported.model_extra or {})
    assert llm.requests[-1].json["max_tokens"] == 3


@pytest.mark.parametrize("stream", [False, True])
def test_the_extractive_answerer_honours_max_tokens_and_estimates_its_usage(tmp_path: Path, stream: bool) -> None:
    with serve(tmp_path, openai_append_sources=False) as app:
        asked = {"model": "ragstep/docs", "messages": [user(QUESTION)]}
        whole = app.sdk().chat.completions.create(**asked)
        if stream:
            chunks = list(
                app.sdk().chat.completions.create(
                    **asked, max_completion_tokens=4, stream=True, stream_options={"include_usage": True}
                )
            )
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            usage = chunks[-1].usage
        else:
            cut = app.sdk().chat.completions.create(**asked, max_tokens=4)
            text, finish, usage = cut.choices[0].message.content, [cut.choices[0].finish_reason], cut.usage
    assert whole.choices[0].finish_reason == "stop" and answers(whole.choices[0].message.content)
    assert (whole.usage.model_extra or {}).get("estimated") is True and whole.usage.completion_tokens >= 10
    assert whole.usage.prompt_tokens > whole.usage.completion_tokens
    # the answer's first words, as many as ragstep's estimator counts within 4 tokens
    assert text and whole.choices[0].message.content.startswith(text) and finish == ["length"]
    assert count_tokens(text) <= 4 < count_tokens(whole.choices[0].message.content)
    assert (
        usage is not None
        and usage.completion_tokens == count_tokens(text)
        and (usage.model_extra or {}).get("estimated") is True
    )
