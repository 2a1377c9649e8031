"""The response cache: keys, TTL, tenants (SQLite and DynamoDB), and its use for rewrites and answers."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.adapters.cache.sqlite import SqliteResponseCache
from ragstep.context import Clients, Context
from ragstep.models import ChatSettings, ChatState, HistoryRound, PipelineState, SearchRequest
from ragstep.pipeline.executor import drain, run_stage, stream_stage
from ragstep.ports import ChatMessage, ChatOptions, ResponseCache
from ragstep.settings import Settings
from ragstep.stages.chat.common import answer_key, cache_key
from support.llm_server import LLMServer, Reply, completion, streamed

REGION = "eu-west-1"
TABLE = "ragstep-cache"

# -- keys --------------------------------------------------------------------------------------------------------

MSGS = [ChatMessage("system", "s"), ChatMessage("user", "q")]


def test_the_key_hashes_model_messages_and_generation_settings() -> None:
    base = cache_key("answer", "openai:m", MSGS, ChatOptions(temperature=0.3, max_tokens=100))
    assert base == cache_key("answer", "openai:m", list(MSGS), ChatOptions(temperature=0.3, max_tokens=100))
    others = {
        cache_key("rewrite", "openai:m", MSGS, ChatOptions(temperature=0.3, max_tokens=100)),
        cache_key("answer", "openai:n", MSGS, ChatOptions(temperature=0.3, max_tokens=100)),
        cache_key("answer", "openai:m", [*MSGS[:1], ChatMessage("user", "Q")], ChatOptions(0.3, 100)),
        cache_key("answer", "openai:m", [ChatMessage("user", "s"), MSGS[1]], ChatOptions(0.3, 100)),
        cache_key("answer", "openai:m", MSGS, ChatOptions(temperature=0.7, max_tokens=100)),
        cache_key("answer", "openai:m", MSGS, ChatOptions(temperature=0.3, max_tokens=101)),
        cache_key("answer", "openai:m", MSGS, ChatOptions(temperature=0.3, max_tokens=100, stop=("x",))),
    }
    assert base not in others and len(others) == 7


def test_an_answer_key_ignores_the_time_the_context_template_stamps() -> None:
    def state(stamp: str, passage: str = "p1") -> PipelineState:
        chat = ChatState(user_content=f"{stamp}\n[1] {passage}\nq", passages=[passage])
        return PipelineState(request=SearchRequest(query="q", knowledge_base_ids=["kb"]), chat=chat)

    options = ChatOptions(0.3, 100)
    first = answer_key(state("2026-01-01 10:00:00"), "m", "sys", options)
    assert first == answer_key(state("2026-01-01 10:00:07"), "m", "sys", options)
    assert first != answer_key(state("2026-01-01 10:00:00", "p2"), "m", "sys", options)


# -- the stores --------------------------------------------------------------------------------------------------


def contract(cache: ResponseCache, *, whole_seconds: bool = False) -> None:
    assert isinstance(cache, ResponseCache)
    assert cache.get("k") is None
    cache.put("k", "value ✓", 60)
    assert cache.get("k") == "value ✓"
    cache.put("k", "newer", 60)
    assert cache.get("k") == "newer"
    if not whole_seconds:  # DynamoDB's TTL is whole seconds, rounded up: a 0 s entry may live under a second
        cache.put("gone", "x", 0)  # expired as soon as written
        assert cache.get("gone") is None


def test_sqlite_store(tmp_path: Path) -> None:
    contract(SqliteResponseCache(tmp_path / "cache.sqlite"))


def test_sqlite_rows_expire_after_the_ttl_and_are_swept(tmp_path: Path) -> None:
    cache = SqliteResponseCache(tmp_path / "cache.sqlite")
    cache.put("k", "v", 86400)
    with cache.db.read() as conn:
        (expires,) = conn.execute("SELECT expires_at FROM responses WHERE key = 'k'").fetchone()
    assert expires == pytest.approx(time.time() + 86400, abs=5)
    cache.put("short", "v", 0)
    cache._swept = 0.0  # the next write sweeps
    cache.put("other", "v", 60)
    with cache.db.read() as conn:
        assert conn.execute("SELECT count(*) FROM responses WHERE key = 'short'").fetchone() == (0,)


def test_the_cache_is_per_tenant_and_can_be_off(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path))
    a, b = clients.context("tenant-a"), clients.context("tenant-b")
    assert a.cache is not None and b.cache is not None
    a.cache.put("k", "a's", 60)
    assert b.cache.get("k") is None and a.cache.get("k") == "a's"
    assert Settings().cache_ttl_seconds == 24 * 3600
    assert Clients(Settings(data_dir=tmp_path, cache_backend="none")).context().cache is None


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)
    with moto.mock_aws():
        client = boto3.session.Session().client("dynamodb", region_name=REGION)
        client.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "key", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "key", "KeyType": "HASH"}],
        )
        yield client


def test_dynamodb_store_ttl_and_tenants(tmp_path: Path, dynamodb: Any) -> None:
    from ragstep.adapters.cache.dynamodb import DynamoResponseCache

    contract(DynamoResponseCache(TABLE), whole_seconds=True)
    cache = DynamoResponseCache(TABLE, tenant_id="acme")
    before = time.time()
    cache.put("k", "acme's", 3600)
    item = dynamodb.get_item(TableName=TABLE, Key={"key": {"S": "acme#k"}})["Item"]
    assert item["tenant_id"] == {"S": "acme"}
    assert math.ceil(before + 3600) <= int(item["expires_at"]["N"]) <= math.ceil(time.time() + 3600)
    assert DynamoResponseCache(TABLE).get("acme#k") is None  # the default tenant cannot reach it by its raw key
    assert DynamoResponseCache(TABLE, tenant_id="other").get("k") is None
    # DynamoDB deletes expired items late: a read checks the expiry itself.
    dynamodb.put_item(
        TableName=TABLE, Item={"key": {"S": "stale"}, "value": {"S": "old"}, "expires_at": {"N": str(int(before) - 1)}}
    )
    assert DynamoResponseCache(TABLE).get("stale") is None
    settings = Settings(data_dir=tmp_path, cache_backend="dynamodb", cache_table=TABLE)
    assert isinstance(Clients(settings).context("acme").cache, DynamoResponseCache)


# -- in the chat stages ------------------------------------------------------------------------------------------


def llm_ctx(tmp_path: Path, server: LLMServer, **settings: Any) -> Context:
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "chat_provider": "openai",
        "chat_model": "m",
        "chat_base_url": server.url,
        "chat_max_retries": 0,
    }
    return Clients(Settings(**(values | settings))).context()


def rewrite_state() -> PipelineState:
    history = [HistoryRound(query="What is AWS Lambda?", answer="A serverless compute service.")]
    return PipelineState(
        request=SearchRequest(query="How fast does it start?", knowledge_base_ids=["kb"]),
        chat=ChatState(history=history),
    )


def test_rewrites_are_served_from_the_cache(tmp_path: Path) -> None:
    with LLMServer(Reply(body=completion("How fast does AWS Lambda start?"))) as server:
        ctx = llm_ctx(tmp_path, server)
        first = run_stage("rewrite_query", rewrite_state(), ctx)
        second = run_stage("rewrite_query", rewrite_state(), ctx)
    assert len(server.requests) == 1
    assert first.rewritten_query == second.rewritten_query == "How fast does AWS Lambda start?"
    caches = [t.detail.get("cache") for st in (first, second) for t in st.trace if t.stage == "rewrite_query"]
    assert [c for c in caches if c] == ["miss", "hit"]


def answer_state(**settings: Any) -> PipelineState:
    return PipelineState(
        request=SearchRequest(query="Hello?", knowledge_base_ids=["kb"]),
        chat=ChatState(settings=ChatSettings(**settings)),
    )


def test_answers_are_cached_only_when_enabled(tmp_path: Path) -> None:
    replies = [Reply(body=completion("Hi there.")) for _ in range(3)]
    with LLMServer(*replies) as server:
        ctx = llm_ctx(tmp_path, server)
        run_stage("chat_completion", answer_state(), ctx)
        run_stage("chat_completion", answer_state(), ctx)
        assert len(server.requests) == 2  # off by default
        miss = run_stage("chat_completion", answer_state(cache_answers=True), ctx)
        hit = run_stage("chat_completion", answer_state(cache_answers=True), ctx)
    assert len(server.requests) == 3 and hit.chat.answer == miss.chat.answer == "Hi there."
    assert [t.detail["cache"] for st in (miss, hit) for t in st.trace if t.stage == "chat_completion"] == [
        "miss",
        "hit",
    ]


def test_a_streamed_answer_is_cached_and_replayed(tmp_path: Path) -> None:
    with LLMServer(Reply(chunks=streamed("Hi ", "there."))) as server:
        ctx = llm_ctx(tmp_path, server)
        miss = drain(stream_stage("chat_completion_stream", answer_state(cache_answers=True), ctx))
        hit = drain(stream_stage("chat_completion_stream", answer_state(cache_answers=True), ctx))
    assert len(server.requests) == 1 and hit.chat.answer == miss.chat.answer == "Hi there."
    assert [t.detail.get("cache") for t in hit.trace if t.stage == "chat_completion_stream"] == ["hit"]


# -- query embeddings --------------------------------------------------------------------------------------------


def test_query_embeddings_are_cached_per_model_and_text(tmp_path: Path) -> None:
    from ragstep.adapters.embedders import OpenAIEmbedder, PrecomputedEmbedder
    from ragstep.stages.embedding_cache import query_embedding
    from support.scripted_http import ScriptedHTTPServer, ScriptedResponse

    vector = [0.6, 0.8, 0.0]
    with ScriptedHTTPServer() as server:
        server.set_fallback(ScriptedResponse(200, {"data": [{"index": 0, "embedding": vector}]}))
        ctx = Clients(Settings(data_dir=tmp_path)).context()
        embedder = OpenAIEmbedder("text-embedding-3-small", base_url=f"{server.url}/v1", timeout_s=5.0)
        first, hit1 = query_embedding(ctx, embedder, "cold starts")
        second, hit2 = query_embedding(ctx, embedder, "cold starts")
        _, hit3 = query_embedding(ctx, embedder, "warm starts")
        embedder.close()
        calls = len(server.requests)
    assert (hit1, hit2, hit3) == (False, True, False) and calls == 2
    assert second == pytest.approx(first) and first == pytest.approx(vector, abs=1e-6)
    # Another tenant has its own cache; a precomputed table is never cached (it can change under the same id).
    other = Clients(Settings(data_dir=tmp_path)).context("other")
    table = PrecomputedEmbedder("precomputed:t", {"q": [1.0, 0.0]})
    assert query_embedding(other, table, "q")[1] is False and query_embedding(other, table, "q")[1] is False
