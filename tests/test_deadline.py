"""Request deadlines (ragstep.deadline): every provider and OpenSearch call gives up when the caller's time is up.

The far end is a real HTTP server on 127.0.0.1 that answers slowly (or with a retryable error); the clients are the
real adapters over httpx or opensearch-py. Each test checks the error and how many attempts reached the server; the
only timing checks are generous bounds (the slow answers take ten times longer than the deadline allows).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from ragstep import deadline
from ragstep.adapters.chat.openai import OpenAIChatModel
from ragstep.adapters.embedders.openai import OpenAIEmbedder
from ragstep.adapters.index.opensearch import OpenSearchIndex
from ragstep.adapters.rerankers.http import HttpReranker
from ragstep.adapters.web._client import WebClient
from ragstep.app.ingest import expand_paths, ingest_file
from ragstep.context import Clients
from ragstep.entry.aws import runtime
from ragstep.entry.aws.stream_url import invocation_deadline
from ragstep.errors import ProviderError, StorageError
from ragstep.models import KnowledgeBase
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.settings import Settings
from support.scripted_http import ScriptedHTTPServer, ScriptedResponse

ROOT = Path(__file__).resolve().parents[1]
#: Far longer than any deadline below: an attempt that waited for it would show in the elapsed time.
SLOW_S = 20.0
#: The generous bound: a call under a 1-2 s deadline must be back well before the slow answer.
BOUND_S = 8.0


class LambdaContext:
    """What the handlers read of the Python runtime's context object, with a chosen remaining time."""

    function_name = "ragstep-test"
    function_version = "$LATEST"
    memory_limit_in_mb = 1024
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ragstep-test"
    aws_request_id = "c6af9ac6-7b61-11e6-9a41-93e8deadbeef"
    log_group_name = "/aws/lambda/ragstep-test"
    log_stream_name = "2026/11/24/[$LATEST]0123456789abcdef"

    def __init__(self, remaining_ms: int) -> None:
        self._ends = time.monotonic() + remaining_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._ends - time.monotonic()) * 1000))


@pytest.fixture
def slow() -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer(fallback=ScriptedResponse(200, {}, delay_s=SLOW_S)) as server:
        yield server


def within(seconds: float) -> AbstractContextManager[float | None]:
    return deadline.deadline_at(time.monotonic() + seconds)


# -- the HTTP providers ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["embedder", "reranker"])
def test_a_slow_provider_is_given_up_at_the_deadline_after_one_attempt(slow: ScriptedHTTPServer, kind: str) -> None:
    """Configured for 30 s per attempt and four retries: the deadline, 1.5 s away, is what stops the call."""
    embedder = OpenAIEmbedder("m", base_url=slow.url, timeout_s=30, max_retries=4)
    reranker = HttpReranker("m", url=slow.url + "/rerank", timeout_s=30, max_retries=4)
    started = time.monotonic()
    with within(1.5), pytest.raises(ProviderError) as caught:
        if kind == "embedder":
            embedder.embed(["hello"])
        else:
            reranker.rerank("q", ["d"])
    assert time.monotonic() - started < BOUND_S
    assert "gave up after 1 attempt: the request's deadline" in caught.value.message
    assert "timed out after" in caught.value.message
    assert len(slow.requests) == 1


def test_no_retry_starts_whose_backoff_would_outlive_the_deadline() -> None:
    """A 503 asking for a 5 s pause, 2 s before the deadline: the error comes now, not after the pause."""
    busy = ScriptedResponse(503, {"error": "overloaded"}, headers={"Retry-After": "5"})
    with ScriptedHTTPServer(fallback=busy) as server, within(2.0), pytest.raises(ProviderError) as caught:
        OpenAIEmbedder("m", base_url=server.url, max_retries=4).embed(["hello"])
    assert "gave up after 1 attempt" in caught.value.message and "HTTP 503" in caught.value.message
    assert len(server.requests) == 1


def test_without_a_deadline_the_configured_timeout_and_retries_apply(slow: ScriptedHTTPServer) -> None:
    assert deadline.current() is None  # as locally: nothing sets one
    with pytest.raises(ProviderError) as caught:
        OpenAIEmbedder("m", base_url=slow.url, timeout_s=0.3, max_retries=1, backoff_base_s=0.01).embed(["x"])
    assert caught.value.message.endswith("failed after 2 attempts: timed out after 0.3s (ReadTimeout)")
    assert len(slow.requests) == 2


def test_a_passed_deadline_sends_nothing(slow: ScriptedHTTPServer) -> None:
    with within(0.1), pytest.raises(ProviderError) as caught:
        OpenAIEmbedder("m", base_url=slow.url).embed(["x"])
    assert "gave up before any attempt" in caught.value.message
    assert slow.requests == []


def test_the_chat_model_stops_at_the_deadline(slow: ScriptedHTTPServer) -> None:
    model = OpenAIChatModel(slow.url, "gpt-test", timeout_s=60, max_retries=3)
    started = time.monotonic()
    with within(1.5), pytest.raises(ProviderError) as caught:
        model.complete([ChatMessage(role="user", content="hi")], ChatOptions())
    assert time.monotonic() - started < BOUND_S
    assert "gave up after 1 attempt: the request's deadline" in caught.value.message
    assert len(slow.requests) == 1


def test_web_search_waits_no_longer_than_the_deadline(slow: ScriptedHTTPServer) -> None:
    client = WebClient("web search engine test", timeout_s=30)
    started = time.monotonic()
    with within(1.5), pytest.raises(ProviderError) as caught:
        client.get_json(slow.url + "/search", {"q": "tides", "key": "secret-key"})
    assert time.monotonic() - started < BOUND_S
    assert "timed out after 1." in caught.value.message and "secret-key" not in caught.value.message
    assert len(slow.requests) == 1


# -- OpenSearch --------------------------------------------------------------------------------------------------------


def test_opensearch_requests_stop_at_the_deadline(slow: ScriptedHTTPServer) -> None:
    pytest.importorskip("opensearchpy")  # imported now: a first import can take much of a 1.5 s budget
    index = OpenSearchIndex(slow.url, index="t", auth="none", timeout_s=30, max_retries=4)
    started = time.monotonic()
    with within(1.5), pytest.raises(StorageError) as caught:
        index.fetch(["c1"])
    assert time.monotonic() - started < BOUND_S
    assert "gave up after 1 attempt: the request's deadline" in caught.value.message
    assert len(slow.requests) == 1


# -- where deadlines come from -----------------------------------------------------------------------------------------


def test_a_nested_deadline_can_only_shorten_the_time() -> None:
    with within(5.0) as outer:
        with deadline.deadline_at(time.monotonic() + 60) as inner:
            assert inner == outer
        with within(1.0) as inner:
            assert inner is not None and outer is not None and inner < outer
        with deadline.deadline_at(None) as kept:
            assert kept == outer
    assert deadline.current() is None


def test_a_lambda_handler_runs_under_its_invocations_deadline_and_so_do_its_pool_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    clients = Clients(Settings(data_dir=tmp_path))
    seen: dict[str, Any] = {}

    def fn(event: Any, context: Any) -> dict[str, Any]:
        seen["remaining"] = deadline.remaining_s()
        seen["context"] = clients.context().deadline
        seen["thread"] = clients.executor.submit(deadline.current).result()
        return {}

    runtime.with_lambda_context(fn)({}, LambdaContext(remaining_ms=10_000))
    # 10 s left less the handler's own margin (1.5 s).
    assert 7.0 < seen["remaining"] <= 8.5
    assert seen["thread"] == seen["context"] is not None
    assert deadline.current() is None  # the invocation's deadline ended with it


def test_the_streaming_function_reads_the_deadline_the_web_adapter_forwards() -> None:
    header = json.dumps({"request_id": "r1", "deadline": int(time.time() * 1000) + 20_000}).encode()
    scope: dict[str, Any] = {"type": "http", "headers": [(b"x-amzn-lambda-context", header)]}
    at = invocation_deadline(scope)
    assert at is not None and 17.0 < at - time.monotonic() <= 18.5
    assert invocation_deadline({"type": "http", "headers": []}) is None
    broken = {"type": "http", "headers": [(b"x-amzn-lambda-context", b"{not json")]}
    assert invocation_deadline(broken) is None


@pytest.fixture
def lambda_env(slow: ScriptedHTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A function's environment (settings from the environment only) whose reranker is the slow server."""
    for name in [k for k in os.environ if k.startswith(("RAGSTEP_", "POWERTOOLS_", "AWS_LAMBDA_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RAGSTEP_RERANKER", "http")
    monkeypatch.setenv("RAGSTEP_RERANK_URL", slow.url + "/rerank")
    monkeypatch.setenv("RAGSTEP_RERANK_MODEL", "rerank-test")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    runtime.reset()
    yield tmp_path
    runtime.reset()


def load_event(name: str) -> Any:
    return json.loads((ROOT / "events" / f"{name}.json").read_text(encoding="utf-8"))


def rerank_degraded_at_the_deadline(trace: list[dict[str, Any]]) -> bool:
    rows = [t for t in trace if t["stage"] == "chunk_rerank" and t["action"] == "degrade"]
    return bool(rows) and "the request's deadline" in rows[0]["reason"]


def test_a_rerank_stage_function_degrades_when_the_provider_outlasts_the_invocation(
    slow: ScriptedHTTPServer, lambda_env: Path
) -> None:
    """The deployed path: the chunk_rerank function, 4 s left in the invocation, a reranker that needs 20 s. The
    stage gives up on it in time and passes the results through with a ``degrade`` row, one attempt made."""
    from ragstep.entry.aws.stage import stage_handler
    from ragstep.pipeline.definitions import load_stage

    event = load_event("chunk_rerank")
    load_stage("chunk_rerank")  # a warm container: the invocation's time goes to the stage, not to imports
    started = time.monotonic()
    out = stage_handler("chunk_rerank")(event, LambdaContext(remaining_ms=4_000))
    assert time.monotonic() - started < BOUND_S
    assert rerank_degraded_at_the_deadline(out["trace"])
    assert len(out["rerank_results"]) == len(event["search_results"])  # the wire form: one [id, score] a result
    assert len(slow.requests) == 1


def test_the_api_function_answers_within_its_invocation_when_a_provider_is_slow(
    slow: ScriptedHTTPServer, lambda_env: Path
) -> None:
    """The API function (FastAPI under Mangum): the deadline reaches the pipeline the endpoint runs, through the
    event loop's task and the worker thread of the sync endpoint."""
    from ragstep.entry.aws.api import api_handler

    ctx = Clients(Settings(data_dir=lambda_env)).context()
    kb = ctx.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="demo-docs", created_at=time.time()))
    with resources.as_file(resources.files("ragstep").joinpath("data", "demo", "docs")) as folder:
        assert all(ingest_file(path, kb, ctx).status == "indexed" for path in expand_paths([folder], (".md",)))

    # A warm container: the app is built, so the 5 s go to the request (a cold one may spend them building it, and
    # then rightly sends the reranker nothing).
    assert api_handler(load_event("api_healthz"), LambdaContext(remaining_ms=30_000))["statusCode"] == 200
    started = time.monotonic()
    response = api_handler(load_event("api_search"), LambdaContext(remaining_ms=5_000))
    assert time.monotonic() - started < BOUND_S
    assert response["statusCode"] == 200, response["body"]
    body = json.loads(response["body"])
    assert body["results"] and rerank_degraded_at_the_deadline(body["trace"])
    assert len(slow.requests) == 1
