"""The five chat pipelines end to end (extractive default and a scripted OpenAI-compatible server), saving turns,
interruption, sessions and bad input."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.adapters.history.dynamodb import DynamoHistoryStore
from ragstep.adapters.history.sqlite import SqliteHistoryStore
from ragstep.app.chat import chat_response, delete_session, run_chat, stream_chat
from ragstep.app.ingest import ingest_file
from ragstep.app.sessions import list_sessions, session_turns
from ragstep.context import Clients, Context
from ragstep.errors import InputError, NotFoundError, ProviderError
from ragstep.models import ChatRequest, KnowledgeBase, StreamEvent, Turn, Usage
from ragstep.pipeline.definitions import CHAT_PIPELINES, DEPLOYED_PIPELINES, PIPELINES
from ragstep.pipeline.executor import run_pipeline
from ragstep.settings import Settings
from support.llm_server import LLMServer, Reply, completion, sse, streamed

DOCS = {
    "lambda.md": "AWS Lambda runs code without servers. Cold starts happen when a new execution environment starts. "
    "Provisioned concurrency keeps environments warm.",
    "bm25.md": "BM25 ranks documents by term frequency and inverse document frequency.",
    "北京.md": "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
}


def make_ctx(tmp_path: Path, **settings: Any) -> Context:
    return Clients(Settings(data_dir=tmp_path / "data", **settings)).context()


def add_docs(ctx: Context, tmp_path: Path) -> KnowledgeBase:
    kb = KnowledgeBase(id=uuid.uuid4().hex, name="docs", embedding_model="none", created_at=time.time())
    ctx.catalog.create_kb(kb)
    folder = tmp_path / "docs"
    folder.mkdir(exist_ok=True)
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
        assert ingest_file(folder / name, kb, ctx).status == "indexed"
    return kb


@pytest.fixture
def docs(ctx: Context, tmp_path: Path) -> KnowledgeBase:
    return add_docs(ctx, tmp_path)


def ask(kb: KnowledgeBase, query: str, **kw: Any) -> ChatRequest:
    return ChatRequest(query=query, knowledge_base_ids=[kb.id], **kw)


def collect(gen: Any) -> tuple[list[StreamEvent], Any]:
    events: list[StreamEvent] = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value


def answer_of(events: list[StreamEvent]) -> str:
    return "".join(e.data["delta"] for e in events if e.event == "answer")


# -- declarations --------------------------------------------------------------------------------------------------


def test_the_chat_pipelines_stream_in_process_only() -> None:
    assert set(CHAT_PIPELINES) == {
        "chat",
        "chat_stream",
        "chat_history_stream",
        "rag",
        "rag_stream",
        "viking_stream",
        "viking",
    }
    assert PIPELINES["rag_stream"].stage_names() == [
        "load_history",
        "rewrite_query",
        "extract_entities",
        "chunk_search",
        "entity_search",
        "chunk_rerank",
        "chunk_merge",
        "filter_top_k",
        "data_analysis",
        "into_chat_message",
        "chat_completion_stream",
    ]
    assert PIPELINES["rag"].stage_names()[-2:] == ["into_chat_message", "chat_completion"]
    # the streaming ones stay in-process
    assert set(CHAT_PIPELINES) & set(DEPLOYED_PIPELINES) == {"rag", "chat", "viking"}
    assert {"knowledge_search", "ingest"} <= set(DEPLOYED_PIPELINES)


# -- extractive (the embedded default) -----------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", ["rag_stream", "rag"])
def test_rag_pipelines_answer_from_the_context_with_the_extractive_default(
    ctx: Context, docs: KnowledgeBase, pipeline: str
) -> None:
    events, state = collect(stream_chat(ask(docs, "When do cold starts happen?", pipeline=pipeline), ctx))
    # The answering sentence, quoted with its short paragraph, cited [1].
    assert "Cold starts happen when a new execution environment starts." in state.chat.answer
    assert state.chat.answer.endswith("[1]") and "[2]" not in state.chat.answer
    assert state.chat.model == "extractive"
    refs = chat_response(state)["references"]
    assert refs[0]["knowledge_filename"] == "lambda.md"
    if pipeline == "rag_stream":
        assert next(e.event for e in events) == "references" and events[-1].event == "done"
        assert answer_of(events) == state.chat.answer
    else:
        assert events == []  # rag does not stream
    turns = ctx.history.recent(state.request.session_id)
    assert len(turns) == 1 and turns[0].answer == state.chat.answer and turns[0].model == "extractive"
    assert turns[0].references[0].id == refs[0]["id"] and turns[0].request_id == state.request_id


def test_a_chinese_question_gets_a_chinese_answer(ctx: Context, docs: KnowledgeBase) -> None:
    state = run_chat(ask(docs, "北京是哪个国家的首都？"), ctx)
    assert state.chat.language == "zh" and "首都" in state.chat.answer and "[1]" in state.chat.answer


@pytest.mark.parametrize("pipeline", ["chat", "chat_stream", "chat_history_stream"])
def test_chat_pipelines_without_retrieval_run_with_the_extractive_default(
    ctx: Context, docs: KnowledgeBase, pipeline: str
) -> None:
    state = run_chat(ask(docs, "Hello there?", pipeline=pipeline), ctx)
    assert state.chat.answer == "There are no retrieved passages to answer from."
    assert not state.final_results and state.chat.model == "extractive"


def test_the_state_survives_the_transport_between_stages(ctx: Context, docs: KnowledgeBase) -> None:
    from ragstep.app.chat import new_chat_state

    state = new_chat_state(ask(docs, "When do cold starts happen?", pipeline="rag"), ctx)
    direct = run_pipeline("rag", state, ctx)
    checked = run_pipeline("rag", state, ctx, check_transport=True)
    assert checked.chat.answer == direct.chat.answer and checked.chat.passages == direct.chat.passages


# -- a scripted OpenAI-compatible server -----------------------------------------------------------------------------


def test_rag_stream_with_history_rewrites_retrieves_and_answers(tmp_path: Path) -> None:
    with LLMServer() as server:
        ctx = make_ctx(tmp_path, chat_provider="openai", chat_model="m", chat_base_url=server.url, chat_max_retries=0)
        kb = add_docs(ctx, tmp_path)
        usage = {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}
        server.add(Reply(chunks=streamed("AWS Lambda ", "runs code [1].", usage=usage)))
        first = run_chat(ask(kb, "What is AWS Lambda?"), ctx)
        server.add(
            Reply(body=completion("When do AWS Lambda cold starts happen?")),
            Reply(chunks=[sse("<think>checking</think>"), *streamed("When a new environment starts [1].")]),
        )
        events, second = collect(
            stream_chat(ask(kb, "When do its cold starts happen?", session_id=first.request.session_id), ctx)
        )
    assert first.chat.answer == "AWS Lambda runs code [1]." and first.chat.usage == Usage(**usage)
    assert second.rewritten_query == "When do AWS Lambda cold starts happen?"
    assert second.chat.answer == "When a new environment starts [1]."
    assert "".join(e.data["delta"] for e in events if e.event == "reasoning") == "checking"
    final_messages = server.requests[2].json["messages"]
    assert [m["role"] for m in final_messages] == ["system", "user", "assistant", "user"]
    # The earlier answer without its marker: [1] was a passage of that turn, and a model copies markers it sees.
    assert final_messages[1:3] == [
        {"role": "user", "content": "What is AWS Lambda?"},
        {"role": "assistant", "content": "AWS Lambda runs code."},
    ]
    # The final message carries the original question and the retrieved context.
    assert "When do its cold starts happen?" in final_messages[3]["content"]
    assert "[1] AWS Lambda runs code without servers." in final_messages[3]["content"]
    turns = ctx.history.recent(first.request.session_id)
    assert [t.query for t in turns] == ["What is AWS Lambda?", "When do its cold starts happen?"]
    assert turns[1].rewritten_query == "When do AWS Lambda cold starts happen?" and turns[1].model == "openai:m"
    assert turns[0].usage.total_tokens == 55 and not turns[1].interrupted


def test_a_reader_that_leaves_stops_the_model_and_leaves_an_interrupted_turn(tmp_path: Path) -> None:
    chunks = [sse(f"word{i} ") for i in range(400)] + streamed("")
    with LLMServer(Reply(chunks=chunks, chunk_delay_s=0.005)) as server:
        ctx = make_ctx(tmp_path, chat_provider="openai", chat_model="m", chat_base_url=server.url, chat_max_retries=0)
        kb = add_docs(ctx, tmp_path)
        gen = stream_chat(ask(kb, "When do cold starts happen?"), ctx)
        shown = []
        for event in gen:
            if event.event == "answer":
                shown.append(event.data["delta"])
                if len(shown) == 3:
                    break
        gen.close()
        assert server.hung_up.wait(5), "the model kept streaming after the reader left"
    (session,) = list_sessions(ctx)
    (turn,) = ctx.history.recent(session.session_id)
    assert turn.interrupted and turn.answer == "word0 word1 word2 " and turn.model == "openai:m"
    assert turn.references and turn.query == "When do cold starts happen?"


def test_a_provider_failure_leaves_no_turn(tmp_path: Path) -> None:
    with LLMServer(Reply(chunks=[sse("half ")], cut=True)) as server:
        ctx = make_ctx(tmp_path, chat_provider="openai", chat_model="m", chat_base_url=server.url, chat_max_retries=0)
        kb = add_docs(ctx, tmp_path)
        with pytest.raises(ProviderError, match=r"openai:m: the answer stream broke off"):
            run_chat(ask(kb, "When do cold starts happen?"), ctx)
    assert list_sessions(ctx) == []


def test_an_unreachable_model_is_a_clear_error(tmp_path: Path) -> None:
    with LLMServer() as server:
        url = server.url
    ctx = make_ctx(tmp_path, chat_provider="openai", chat_model="m", chat_base_url=url, chat_max_retries=0)
    kb = add_docs(ctx, tmp_path)
    with pytest.raises(ProviderError) as err:
        run_chat(ask(kb, "When do cold starts happen?"), ctx)
    assert "openai:m" in err.value.message and url not in err.value.message and "unreachable" in err.value.message


# -- sessions and bad input --------------------------------------------------------------------------------------


def test_sessions_list_show_delete(ctx: Context, docs: KnowledgeBase) -> None:
    first = run_chat(ask(docs, "When do cold starts happen?"), ctx)
    sid = first.request.session_id
    run_chat(ask(docs, "What is BM25?", session_id=sid), ctx)
    other = run_chat(ask(docs, "北京？"), ctx)
    summaries = list_sessions(ctx)
    assert [s.session_id for s in summaries] == [other.request.session_id, sid]
    assert summaries[1].turns == 2 and summaries[1].first_query == "When do cold starts happen?"
    assert [t.query for t in session_turns(ctx, sid)] == ["When do cold starts happen?", "What is BM25?"]
    assert delete_session(ctx, sid) == 2
    with pytest.raises(NotFoundError, match="unknown session"):
        session_turns(ctx, sid)


def test_an_unknown_session_or_another_tenants_is_refused(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path / "data"))
    acme, globex = clients.context("acme"), clients.context("globex")
    kb = add_docs(acme, tmp_path)
    state = run_chat(ask(kb, "When do cold starts happen?"), acme)
    with pytest.raises(NotFoundError, match="unknown session 'nope'"):
        run_chat(ask(kb, "again?", session_id="nope"), acme)
    with pytest.raises(NotFoundError, match="unknown session"):
        session_turns(globex, state.request.session_id)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("query", "message"),
    [("   ", "query is empty"), ("x" * 5000, "the limit is"), ("<script>x</script>?", "script markup")],
)
def test_bad_questions_are_clear_errors_and_write_nothing(
    ctx: Context, docs: KnowledgeBase, query: str, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        run_chat(ChatRequest.model_construct(query=query, knowledge_base_ids=[docs.id], **_defaults()), ctx)
    assert list_sessions(ctx) == []


def _defaults() -> dict[str, Any]:
    request = ChatRequest(query="x")
    return {name: getattr(request, name) for name in ("knowledge_ids", "session_id", "pipeline", "overrides", "chat")}


def test_unknown_pipelines_and_chat_settings_are_refused(ctx: Context, docs: KnowledgeBase) -> None:
    with pytest.raises(InputError, match="unknown chat pipeline 'knowledge_search'"):
        run_chat(ask(docs, "q?", pipeline="knowledge_search"), ctx)
    with pytest.raises(InputError, match="max_roundz"):
        run_chat(ask(docs, "q?", chat={"max_roundz": 2}), ctx)
    with pytest.raises(InputError, match="temperature"):
        run_chat(ask(docs, "q?", chat={"temperature": 9}), ctx)


# -- history stores ------------------------------------------------------------------------------------------------


def full_turn(session: str, created: float) -> Turn:
    return Turn(
        session_id=session,
        created_at=created,
        query="q",
        answer="a",
        request_id="r1",
        rewritten_query="rq",
        model="openai:m",
        usage=Usage(prompt_tokens=3, completion_tokens=4, total_tokens=7),
        interrupted=True,
    )


def test_sqlite_round_trips_the_chat_fields_and_upgrades_old_files(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "history.sqlite"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE turns (session_id TEXT NOT NULL, created_at REAL NOT NULL, turn_id TEXT NOT NULL, "
        "query TEXT NOT NULL, answer TEXT NOT NULL, references_json TEXT NOT NULL, expires_at REAL, "
        "PRIMARY KEY (session_id, created_at, turn_id)) WITHOUT ROWID;"
        "INSERT INTO turns VALUES ('old', 1.0, 't0', 'old q', 'old a', '[]', NULL);"
    )
    old.commit()
    old.close()
    store = SqliteHistoryStore(path)
    store.append(full_turn("s", 2.0))
    (turn,) = store.recent("s")
    assert turn == full_turn("s", 2.0).model_copy(update={"turn_id": turn.turn_id})
    (legacy,) = store.recent("old")
    assert legacy.answer == "old a" and legacy.model == "" and not legacy.interrupted
    assert [s.session_id for s in store.sessions()] == ["s", "old"]


@pytest.fixture
def moto_history(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], DynamoHistoryStore]]:
    pytest.importorskip("moto")
    from moto import mock_aws

    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        import boto3

        client = boto3.client("dynamodb", region_name="eu-west-1")
        client.create_table(
            TableName="history",
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "session_id", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "session_id", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
        )
        yield lambda tenant: DynamoHistoryStore("history", client=client, tenant_id=tenant)


def test_dynamodb_round_trips_the_chat_fields_and_lists_only_the_tenants_sessions(
    moto_history: Callable[[str], DynamoHistoryStore],
) -> None:
    acme, default = moto_history("acme"), moto_history("default")
    acme.append(full_turn("s1", 10.0))
    acme.append(full_turn("s1", 11.0).model_copy(update={"query": "second", "turn_id": "t2"}))
    acme.append(full_turn("s2", 12.0))
    default.append(full_turn("mine", 13.0))
    turns = acme.recent("s1")
    assert [t.query for t in turns] == ["q", "second"]
    assert turns[0] == full_turn("s1", 10.0).model_copy(update={"turn_id": turns[0].turn_id})
    summaries = acme.sessions()
    assert [(s.session_id, s.turns, s.first_query) for s in summaries] == [("s2", 1, "q"), ("s1", 2, "q")]
    assert [s.session_id for s in default.sessions()] == ["mine"]


def test_the_dynamodb_backend_serves_a_whole_chat(
    moto_history: Callable[[str], DynamoHistoryStore], tmp_path: Path
) -> None:
    ctx = make_ctx(tmp_path, history_backend="dynamodb", history_table="history")
    kb = add_docs(ctx, tmp_path)
    first = run_chat(ask(kb, "When do cold starts happen?"), ctx)
    second = run_chat(ask(kb, "And BM25?", session_id=first.request.session_id), ctx)
    assert [r.query for r in second.chat.history] == ["When do cold starts happen?"]
    stored = moto_history("default").recent(first.request.session_id)  # type: ignore[arg-type]
    assert [t.answer for t in stored] == [first.chat.answer, second.chat.answer]
