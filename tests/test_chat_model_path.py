"""The model path against a scripted model server on 127.0.0.1 that misbehaves as real ones do (issue 31, items 3-4;
issue 33, item 4): no model call without passages, citations the same in the stream and the final answer, a progress
line and own-line errors in the CLI, a heartbeat in event streams, provider error bodies kept from users, follow-ups
resolved without a model, and the notes that say which stage a question needed did not run."""

from __future__ import annotations

import argparse
import io
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from conftest import run_cli
from ragstep.app.chat import chat_response, run_chat, stream_chat
from ragstep.app.ingest import ingest_file
from ragstep.context import Clients, Context
from ragstep.entry.cli.chat import WAITING, ask, report
from ragstep.entry.http.sse import HEARTBEAT, SSEParser, SSEResponse, data_frame
from ragstep.errors import ProviderError
from ragstep.models import ChatRequest, KnowledgeBase, StreamEvent
from ragstep.settings import Settings
from ragstep.stages.chat.prompts import EMPTY_RESPONSE
from support.api_server import api_server, serve
from support.llm_server import (
    INTERNAL_URL,
    LLMServer,
    Reply,
    completion,
    echo_prompt,
    hang,
    quote_credentials,
    sse,
    streamed,
)

pytestmark = pytest.mark.usefixtures("plain_environment")

KEY = "sk-live-ragstep-test-9f8e7d6c5b4a"
DOCS = {
    "lambda.md": "AWS Lambda runs code without servers. Cold starts happen when a new execution environment starts. "
    "Provisioned concurrency keeps environments warm.",
    "bm25.md": "BM25 ranks documents by term frequency and inverse document frequency.",
}


def make_ctx(tmp_path: Path, docs: dict[str, str] = DOCS, **settings: Any) -> tuple[Context, KnowledgeBase]:
    ctx = Clients(Settings(data_dir=tmp_path / "data", **settings)).context()
    kb = KnowledgeBase(id=uuid.uuid4().hex, name="docs", embedding_model="none", created_at=time.time())
    ctx.catalog.create_kb(kb)
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
        assert ingest_file(folder / name, kb, ctx).status == "indexed"
    return ctx, kb


def model_settings(server: LLMServer, **extra: Any) -> dict[str, Any]:
    return {
        "chat_provider": "openai",
        "chat_model": "m",
        "chat_base_url": server.url,
        "chat_max_retries": 0,
        "chat_api_key": KEY,
        **extra,
    }


def collect(gen: Any) -> tuple[list[StreamEvent], Any]:
    events: list[StreamEvent] = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value


def answer_of(events: list[StreamEvent]) -> str:
    return "".join(e.data["delta"] for e in events if e.event == "answer")


class Terminal(io.StringIO):
    """What the CLI writes to a terminal's stderr (``isatty`` says so)."""

    def isatty(self) -> bool:
        return True


def cli_args(kb: KnowledgeBase, pipeline: str = "rag_stream") -> argparse.Namespace:
    return argparse.Namespace(kb=[kb.id], pipeline=pipeline, set=None, web=False, trace=False)


# -- no passage, no model call --------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", ["rag_stream", "rag"])
def test_nothing_retrieved_means_no_model_call_and_the_shipped_empty_response(tmp_path: Path, pipeline: str) -> None:
    with LLMServer(fallback=Reply(body=completion("We have a population of Mars."))) as server:
        ctx, kb = make_ctx(tmp_path, **model_settings(server))
        question = ChatRequest(query="What is the population of Mars?", knowledge_base_ids=[kb.id], pipeline=pipeline)
        events, state = collect(stream_chat(question, ctx))
        zh = run_chat(question.model_copy(update={"query": "火星上有多少人口？"}), ctx)
    assert server.requests == []
    assert state.chat.answer == EMPTY_RESPONSE["en"] and zh.chat.answer == EMPTY_RESPONSE["zh"]
    if pipeline == "rag_stream":
        assert answer_of(events) == EMPTY_RESPONSE["en"]


# -- citations: the stream is the answer --------------------------------------------------------------------------


def test_a_model_that_ignores_the_citation_format_streams_what_the_final_answer_says(tmp_path: Path) -> None:
    reply = Reply(chunks=streamed("Cold starts happen when a new ", "execution environment starts."))
    with LLMServer(reply) as server:
        ctx, kb = make_ctx(tmp_path, **model_settings(server))
        events, state = collect(
            stream_chat(ChatRequest(query="When do cold starts happen?", knowledge_base_ids=[kb.id]), ctx)
        )
    shown = answer_of(events)
    done = next(e for e in events if e.event == "done").data
    assert shown == state.chat.answer == done["answer"] == "Cold starts happen when a new execution environment starts."
    # The citation found after the stream flags the source it matched, at the end of the sentence it supports.
    assert state.chat.citation_mode == "inserted"
    (cited,) = [r for r in state.chat.references if r.cited]
    assert cited.knowledge_filename == "lambda.md" and cited.positions == [len(shown)]
    assert chat_response(state)["answer"] == shown


def test_the_cli_prints_the_answer_once(tmp_path: Path) -> None:
    with LLMServer(Reply(chunks=streamed("Cold starts happen when a new execution environment starts."))) as server:
        ctx, kb = make_ctx(tmp_path, **model_settings(server))
        out = io.StringIO()
        state = ask(cli_args(kb), ctx, "When do cold starts happen?", None, out, io.StringIO())
    assert out.getvalue() == state.chat.answer + "\n"
    assert "with citations" not in out.getvalue()


def test_a_marker_copied_from_an_earlier_turn_is_not_kept_without_sources(tmp_path: Path) -> None:
    replies = (
        Reply(chunks=streamed("AWS Lambda runs code without servers [1].")),
        Reply(chunks=streamed("As I said, it runs code without servers [1].")),
    )
    with LLMServer(*replies) as server:
        ctx, kb = make_ctx(tmp_path, **model_settings(server, chat_enable_rewrite=False))
        first = run_chat(ChatRequest(query="What is AWS Lambda?", knowledge_base_ids=[kb.id]), ctx)
        request = ChatRequest(
            query="Say that again?",
            knowledge_base_ids=[kb.id],
            session_id=first.request.session_id,
            pipeline="chat_history_stream",
        )
        events, second = collect(stream_chat(request, ctx))
    assert first.chat.answer == "AWS Lambda runs code without servers [1]."
    assert second.chat.references == []
    assert answer_of(events) == second.chat.answer == "As I said, it runs code without servers."
    # Nor is the earlier marker shown to the model, which would copy it.
    assert "[1]" not in json.dumps(server.requests[1].json["messages"])


# -- context window, waits, errors in the CLI ----------------------------------------------------------------------


def test_a_context_size_rejection_names_the_setting_in_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.llm_server import context_overflow

    with LLMServer(fallback=context_overflow()) as server:
        make_ctx(tmp_path, **model_settings(server))
        for name, value in model_settings(server).items():
            monkeypatch.setenv(f"RAGSTEP_{name.upper()}", str(value))
        code, _, err = run_cli(
            capsys, "--data-dir", str(tmp_path / "data"), "chat", "When do cold starts happen?", "--kb", "docs"
        )
    assert code == 2 and err.count("\n") == 1
    assert "RAGSTEP_CHAT_CONTEXT_WINDOW" in err and "exceeds the available context size" not in err


def test_a_hung_model_shows_progress_on_a_terminal_and_ends_within_the_total_wait(tmp_path: Path) -> None:
    with LLMServer(fallback=hang()) as server:
        ctx, kb = make_ctx(
            tmp_path, **model_settings(server, chat_timeout_s=2.0, chat_max_retries=3, chat_max_wait_s=2.5)
        )
        err = Terminal()
        with pytest.raises(ProviderError, match=r"no answer within 2\.5s"):
            ask(cli_args(kb), ctx, "When do cold starts happen?", None, io.StringIO(), err)
        # 4 attempts of 2 s each today; the total wait leaves room for two at most.
        assert len(server.requests) <= 2
    assert f"\r{WAITING} 1s" in err.getvalue() and err.getvalue().endswith("\r\x1b[K")


def test_progress_is_not_written_to_a_pipe_and_is_cleared_when_the_answer_starts(tmp_path: Path) -> None:
    with LLMServer(Reply(chunks=streamed("Cold starts happen."), first_delay_s=2.5)) as server:
        ctx, kb = make_ctx(tmp_path, **model_settings(server))
        piped, terminal, out = io.StringIO(), Terminal(), io.StringIO()
        ask(cli_args(kb), ctx, "When do cold starts happen?", None, out, terminal)
        server.add(Reply(chunks=streamed("Cold starts happen."), first_delay_s=1.5))
        ask(cli_args(kb), ctx, "When do cold starts happen?", None, io.StringIO(), piped)
    assert WAITING in terminal.getvalue() and terminal.getvalue().endswith("\r\x1b[K")
    assert piped.getvalue() == "" and out.getvalue() == "Cold starts happen.\n"


def test_an_error_after_part_of_the_answer_starts_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with LLMServer(Reply(chunks=[sse("Cold starts ")], cut=True)) as server:
        make_ctx(tmp_path, **model_settings(server))
        for name, value in model_settings(server).items():
            monkeypatch.setenv(f"RAGSTEP_{name.upper()}", str(value))
        code, out, err = run_cli(
            capsys, "--data-dir", str(tmp_path / "data"), "chat", "When do cold starts happen?", "--kb", "docs"
        )
    assert code == 2 and out == "Cold starts \n" and err.startswith("ragstep: error: chat model openai:m")


# -- provider error bodies never reach users ------------------------------------------------------------------------


def test_a_401_quoting_the_key_reaches_no_user_surface(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    leaks = (KEY, "9f8e7d6c5b4a", INTERNAL_URL, "10.20.30.40", "Invalid credentials")
    with LLMServer(fallback=quote_credentials()) as server:
        with serve(tmp_path / "api", **model_settings(server)) as app:
            body = {"model": "ragstep", "messages": [{"role": "user", "content": "When do cold starts happen?"}]}
            whole = app.post("/v1/chat/completions", json={**body, "knowledge_base_ids": ["docs"]})
            with httpx.stream(
                "POST",
                f"{app.base}/v1/chat/completions",
                json={**body, "knowledge_base_ids": ["docs"], "stream": True},
                headers=app.headers,
                timeout=20,
            ) as raw:
                streamed_body = raw.read().decode()
            knowledge = app.post(
                "/v1/knowledge-chat", json={"query": "When do cold starts happen?", "knowledge_base_ids": ["docs"]}
            )
        make_ctx(tmp_path / "cli", **model_settings(server))
        for name, value in model_settings(server).items():
            monkeypatch.setenv(f"RAGSTEP_{name.upper()}", str(value))
        code, _, err = run_cli(
            capsys, "--data-dir", str(tmp_path / "cli" / "data"), "chat", "When do cold starts happen?", "--kb", "docs"
        )
    assert whole.status_code == 502 and code == 2
    surfaces = {"502 body": whole.text, "SSE error": streamed_body, "knowledge-chat": knowledge.text, "CLI": err}
    for where, text in surfaces.items():
        assert "refused the credentials (HTTP 401)" in text, where
        for leak in (*leaks, server.url):
            assert leak not in text, (where, leak)
    # The operator's log has the provider's answer, with the key masked.
    assert "Invalid credentials" in caplog.text and INTERNAL_URL in caplog.text
    assert KEY not in caplog.text and "9f8e7d6c5b4a" not in caplog.text


# -- the heartbeat of event streams ---------------------------------------------------------------------------------


def test_a_slow_stream_gets_heartbeats_between_its_frames(tmp_path: Path) -> None:
    gate = threading.Event()

    def frames() -> Iterator[bytes]:
        yield data_frame({"n": 1})
        gate.wait(10)  # a model that has not started its answer
        yield data_frame({"n": 2})

    def endpoint(request: Any) -> SSEResponse:
        return SSEResponse(frames(), close=lambda: None, heartbeat_s=0.1)

    received: list[bytes] = []
    app = Starlette(routes=[Route("/s", endpoint)])
    with (
        api_server(Clients(Settings(data_dir=tmp_path)), lambda _: app) as base,
        httpx.stream("GET", f"{base}/s", timeout=20) as raw,
    ):
        for chunk in raw.iter_raw():
            received.append(chunk)
            if b"".join(received).count(HEARTBEAT) >= 2:
                gate.set()
    wire = b"".join(received)
    assert wire.startswith(data_frame({"n": 1})) and wire.endswith(data_frame({"n": 2}))
    assert wire.count(HEARTBEAT) >= 2
    # An SSE parser skips them: the events are the two frames.
    assert [f.data for f in SSEParser().feed(wire)] == ['{"n":1}', '{"n":2}']


# -- follow-ups without a model, and the notes ---------------------------------------------------------------------

LAKES = {
    "qinghai.md": "青海湖位于青海省东北部，是中国最大的内陆咸水湖。青海湖的面积约为4435平方公里，湖面海拔3196米。",
    "taihu.md": "太湖位于江苏省南部，是中国第三大淡水湖。太湖的面积约为2427平方公里，平均水深约2米，"
    "面积有多大常被问到。",
    "bzip2.md": "bzip2 compresses files with the Burrows-Wheeler block sorting algorithm. To decompress, bzip2 needs "
    "about 3700 kB of memory, or 2300 kB with the -s flag.",
    "xz.md": "How much memory does xz need? xz memory usage to decompress depends on the dictionary size: the "
    "decompressor needs memory for the dictionary, 65 MiB for preset -9.",
}


@pytest.mark.parametrize(
    ("first", "follow_up", "source"),
    [
        ("青海湖在哪里？", "它的面积有多大？", "qinghai.md"),
        ("How does bzip2 compress files?", "and how much memory does it need to decompress?", "bzip2.md"),
    ],
)
def test_a_follow_up_retrieves_what_the_conversation_is_about_without_a_model(
    tmp_path: Path, first: str, follow_up: str, source: str
) -> None:
    ctx, kb = make_ctx(tmp_path, LAKES)
    opened = run_chat(ChatRequest(query=first, knowledge_base_ids=[kb.id]), ctx)
    then = run_chat(ChatRequest(query=follow_up, knowledge_base_ids=[kb.id], session_id=opened.request.session_id), ctx)
    assert then.chat.references[0].knowledge_filename == source
    assert then.request.query == follow_up and then.rewritten_query is not None
    assert any("follow-up" in note or "追问" in note for note in chat_response(then)["notes"])


def test_the_rag_pipeline_reads_the_sessions_history_for_a_follow_up(tmp_path: Path) -> None:
    # rag has no load_history stage (its state machine reads the rounds its input carries): the session's are read
    # ahead, or the follow-up is searched alone (and 太湖's page, which holds the question's own words, comes first).
    ctx, kb = make_ctx(tmp_path, LAKES)
    opened = run_chat(ChatRequest(query="青海湖在哪里？", knowledge_base_ids=[kb.id], pipeline="rag"), ctx)
    request = ChatRequest(
        query="它的面积有多大？", knowledge_base_ids=[kb.id], session_id=opened.request.session_id, pipeline="rag"
    )
    then = run_chat(request, ctx)
    assert [r.query for r in then.chat.history] == ["青海湖在哪里？"]
    assert then.chat.references[0].knowledge_filename == "qinghai.md"
    assert chat_response(then)["notes"] == ["按上一个问题的追问检索：“它的面积有多大？”，补充了：青海湖"]


def test_a_model_that_echoes_its_rewrite_prompt_costs_the_follow_up_nothing(tmp_path: Path) -> None:
    # The rewrite is a plain completion, the answer a stream: the model echoes the one and answers the other.
    def reply(received: Any) -> Reply:
        if received.json.get("stream"):
            return Reply(chunks=streamed("About 4435 square kilometres."))
        return echo_prompt().render(received)  # type: ignore[misc]

    with LLMServer(responder=reply) as server:
        ctx, kb = make_ctx(tmp_path, LAKES, **model_settings(server))
        opened = run_chat(ChatRequest(query="青海湖在哪里？", knowledge_base_ids=[kb.id]), ctx)
        request = ChatRequest(
            query="它的面积有多大？", knowledge_base_ids=[kb.id], session_id=opened.request.session_id
        )
        then = run_chat(request, ctx)
    rewrites = [(t.action, t.reason, t.detail.get("fallback")) for t in then.trace if t.stage == "rewrite_query"]
    assert rewrites[0] == ("degrade", "rewrite_too_long", "history_terms")
    # Searched with the lake the conversation is about, as without a model (the echoed prompt was 'accepted' or
    # left the question alone before: 太湖's page, which holds the question's own words, came first).
    assert then.rewritten_query == "它的面积有多大？ 青海湖"
    assert then.chat.references[0].knowledge_filename == "qinghai.md"
    assert chat_response(then)["notes"] == [
        "模型对追问的改写未被采用（rewrite_too_long）",
        "按上一个问题的追问检索：“它的面积有多大？”，补充了：青海湖",
    ]


def test_skipped_stages_are_in_the_answers_notes(tmp_path: Path) -> None:
    docs = {"sales.csv": "region,amount\nnorth,120\nsouth,80\n", **DOCS}
    ctx, kb = make_ctx(
        tmp_path, docs, web_search_provider="searxng", web_search_searxng_url="http://127.0.0.1:9/search"
    )
    args = cli_args(kb)
    args.web = True
    out = io.StringIO()
    state = ask(args, ctx, "What is the total amount by region?", None, out, io.StringIO())
    report(args, state, out)
    notes = chat_response(state)["notes"]
    assert any("data analysis needs a generative chat model" in n for n in notes), notes
    assert any(n.startswith("web search was skipped") for n in notes), notes
    for note in notes:
        assert f"(note: {note})" in out.getvalue()


def test_a_data_file_the_answer_did_not_need_gets_no_note(tmp_path: Path) -> None:
    # The price list is among the results (every chunk of a small knowledge base is), but the answer quotes the
    # text: saying the data file was not analysed would only puzzle the reader. Declined, the note stays.
    docs = {"sales.csv": "region,amount\nnorth,120\nsouth,80\n", **DOCS}
    ctx, kb = make_ctx(tmp_path, docs)
    answered = ask(cli_args(kb), ctx, "When do cold starts happen, by region?", None, io.StringIO(), io.StringIO())
    skipped = next(t for t in answered.trace if t.stage == "data_analysis")
    assert (skipped.action, skipped.reason) == ("skip", "model_not_generative")
    assert [r.knowledge_filename for r in answered.chat.references if r.cited] == ["lambda.md"]
    assert chat_response(answered)["notes"] == []
    declined = ask(cli_args(kb), ctx, "What is the total amount by region?", None, io.StringIO(), io.StringIO())
    assert not any(r.cited for r in declined.chat.references)
    assert any("data analysis needs a generative chat model" in n for n in chat_response(declined)["notes"])


def test_an_answer_cut_at_the_length_limit_says_so_after_it(tmp_path: Path) -> None:
    with LLMServer(Reply(chunks=streamed("Cold starts happen", finish="length"))) as server:
        ctx, kb = make_ctx(tmp_path, **model_settings(server))
        out = io.StringIO()
        state = ask(cli_args(kb), ctx, "When do cold starts happen?", None, out, io.StringIO())
        report(cli_args(kb), state, out)
    note = "the answer was cut at the length limit (max_tokens; RAGSTEP_CHAT_MAX_TOKENS by default)"
    assert out.getvalue().startswith(f"Cold starts happen\n(note: {note})\n")
    assert chat_response(state)["notes"] == [note]


def test_a_client_that_leaves_a_heartbeating_stream_closes_it_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    closed = threading.Event()

    def frames() -> Iterator[bytes]:
        while True:  # a model that keeps streaming slowly
            yield data_frame({"n": 1})
            time.sleep(0.05)

    def endpoint(request: Any) -> SSEResponse:
        return SSEResponse(frames(), close=closed.set, heartbeat_s=0.02)

    app = Starlette(routes=[Route("/s", endpoint)])
    with api_server(Clients(Settings(data_dir=tmp_path)), lambda _: app) as base:
        with httpx.stream("GET", f"{base}/s", timeout=20) as raw:
            for _ in raw.iter_raw():
                break
        assert closed.wait(10), "the frames were not closed after the client left"
    assert "Exception in ASGI application" not in caplog.text and "ExceptionGroup" not in caplog.text
