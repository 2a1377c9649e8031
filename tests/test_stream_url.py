"""The streaming chat function as deployed: template.yaml's ChatStreamFunction, its Handler ``functions/api/run.sh``
started the way the AWS Lambda Web Adapter starts it (the command with the function's environment, the app on its
port, the readiness path polled), then a chat streamed through it with the official ``openai`` SDK."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route

from ragstep.app.keys import create_key, split_key
from ragstep.bench.coldstart_chat import ADAPTER_ENV, function_env, run_sh, start_function
from ragstep.context import Clients
from ragstep.entry.aws import runtime
from ragstep.entry.aws.stream_url import LambdaApp, port
from ragstep.models import KnowledgeBase
from ragstep.settings import Settings
from support.api_server import seed_docs
from support.llm_server import LLMServer, Reply, sse, streamed
from test_asl import load_template

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures("plain_environment")

WORDS = [f"word{i} " for i in range(6)]
DELAY_S = 0.15


def function() -> dict[str, Any]:
    resource: dict[str, Any] = load_template()["Resources"]["ChatStreamFunction"]
    return resource


def test_the_template_serves_the_app_through_the_adapter_behind_a_streaming_url() -> None:
    props = function()["Properties"]
    env = props["Environment"]["Variables"]
    assert props["Handler"] == "run.sh" and props["CodeUri"].rstrip("/") == "functions/api"
    assert (Path(props["CodeUri"]) / "run.sh") == run_sh().relative_to(run_sh().parents[2])
    assert os.access(run_sh(), os.X_OK), "the adapter executes run.sh: it must be executable"
    url = props["FunctionUrlConfig"]
    assert {k: url[k] for k in ("AuthType", "InvokeMode")} == {"AuthType": "NONE", "InvokeMode": "RESPONSE_STREAM"}
    assert "LambdaAdapterLayer" in str(props["Layers"][0])
    # The settings the local runs below use are the deployed ones; the app checks our API keys itself.
    assert {k: env[k] for k in ADAPTER_ENV} == ADAPTER_ENV
    assert env["RAGSTEP_AUTH"] == "required"
    assert env["RAGSTEP_USAGE_BACKEND"] == "dynamodb" and env["RAGSTEP_KEYS_BACKEND"] == "dynamodb"


def prepared(data_dir: Path, docs: Path) -> tuple[KnowledgeBase, str]:
    clients = Clients(Settings(data_dir=data_dir))
    kb = seed_docs(clients.context(), docs)
    return kb, create_key(clients.keys, "default", ["chat"]).secret


@pytest.mark.slow
def test_a_chat_streams_frame_by_frame_through_the_function_and_its_usage_survives_a_kill(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    kb, key = prepared(data_dir, tmp_path / "docs")
    reply = Reply(chunks=[sse(w) for w in WORDS] + streamed(""), chunk_delay_s=DELAY_S)
    with LLMServer(reply, Reply(chunks=streamed("quick"))) as llm:
        env = function_env(data_dir) | {
            "RAGSTEP_CHAT_PROVIDER": "openai",
            "RAGSTEP_CHAT_MODEL": "m",
            "RAGSTEP_CHAT_BASE_URL": llm.url,
            "RAGSTEP_CHAT_MAX_RETRIES": "0",
        }
        with start_function(env) as fn:
            refused = httpx.post(f"{fn.base}/v1/chat/completions", json={}, timeout=10)
            sdk = openai.OpenAI(base_url=f"{fn.base}/v1", api_key=key, max_retries=0, timeout=20)
            stream = sdk.chat.completions.create(
                model="ragstep",
                messages=[{"role": "user", "content": "When do cold starts happen?"}],
                stream=True,
                extra_body={"knowledge_base_ids": ["docs"], "reference": True},
            )
            arrivals: list[tuple[float, str, int]] = []
            chunks = []
            for chunk in stream:
                chunks.append(chunk)
                if chunk.choices and chunk.choices[0].delta.content:
                    arrivals.append((time.monotonic(), chunk.choices[0].delta.content, llm.chunks_written))
            # The adapter reads each response to its end, and then the invocation is over: Lambda may freeze the
            # environment and discard it without warning. So the end of an answer waits for its usage record to be
            # stored: with the usage database locked, the [DONE] frame arrives but the body does not end until the
            # lock is gone; then the process is killed at once and both records are there.
            body = {"model": "ragstep", "stream": True, "messages": [{"role": "user", "content": "Cold starts?"}]}
            body["knowledge_base_ids"] = ["docs"]
            saw_done, ended = threading.Event(), threading.Event()

            def adapter() -> None:
                headers = {"X-API-Key": key}
                url = f"{fn.base}/v1/chat/completions"
                with httpx.stream("POST", url, json=body, headers=headers, timeout=20) as raw:
                    received = b""
                    for piece in raw.iter_raw():
                        received += piece
                        if received.endswith(b"data: [DONE]\n\n"):
                            saw_done.set()
                ended.set()

            lock = sqlite3.connect(data_dir / "usage.sqlite", isolation_level=None)
            lock.execute("BEGIN IMMEDIATE")
            reader = threading.Thread(target=adapter)
            reader.start()
            try:
                assert saw_done.wait(10)
                assert not ended.wait(0.5), "the answer ended before its usage record was stored"
            finally:
                lock.execute("ROLLBACK")
                lock.close()
            assert ended.wait(10)
            reader.join()
            fn.process.send_signal(signal.SIGKILL)
            fn.process.wait(timeout=10)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"  # OpenAI's shape
    assert [text for _, text, _ in arrivals] == WORDS
    # Incremental: the first word reached the client while the model was still writing, and the words arrived
    # spread over the model's pauses rather than in one buffered piece.
    assert arrivals[0][2] < len(reply.chunks)
    assert arrivals[-1][0] - arrivals[0][0] >= (len(WORDS) - 1) * DELAY_S * 0.6
    delta = chunks[-1].choices[0].delta.model_extra or {}
    assert delta["reference"][0]["knowledge_filename"] == "lambda.md"
    records = Clients(Settings(data_dir=data_dir)).usage.between("default", 0, time.time() + 1)
    assert [(r.route, r.status, r.key_prefix) for r in records] == [
        ("/v1/chat/completions", 200, split_key(key)[0])
    ] * 2
    assert llm.requests[0].json["model"] == "m" and kb.name == "docs"


def test_the_app_follows_the_environments_clients(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rebuilt set of clients (a rotated secret) gets a new app; the same clients keep theirs."""
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(tmp_path / "data"))
    runtime.reset()
    try:
        lambda_app = LambdaApp()
        first = lambda_app.app()
        assert lambda_app.app() is first and first.state.clients is runtime.get_clients()
        assert first.state.gate.flush_usage
        runtime.reset()
        assert lambda_app.app() is not first
    finally:
        runtime.reset()


def test_the_function_serves_chat_sessions_search_and_health_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What README "Streaming chat on AWS" and template.yaml say the Function URL is for; knowledge bases,
    documents, keys, OpenViking and webhooks are the HTTP API's (and declaring their routes would slow every cold
    start)."""
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(tmp_path / "data"))
    runtime.reset()
    try:
        paths = {route.path for route in LambdaApp().app().routes if isinstance(route, Route)}
    finally:
        runtime.reset()
    assert paths == {
        "/openapi.json",
        "/healthz",
        "/v1/knowledge-search",
        "/v1/chat/completions",
        "/v1/models",
        "/v1/models/{model:path}",
        "/v1/knowledge-chat",
        "/v1/knowledge-chat/{session_id}",
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/messages",
        "/v1/sessions/{session_id}/stop",
    }


def test_the_port_comes_from_the_adapters_settings() -> None:
    assert port({"AWS_LWA_PORT": "9000", "PORT": "7000"}) == 9000
    assert port({"PORT": "7000"}) == 7000 and port({}) == 8080
    with pytest.raises(SystemExit, match="not 'http'"):
        port({"AWS_LWA_PORT": "http"})
    with pytest.raises(SystemExit, match="1-65535"):
        port({"AWS_LWA_PORT": "70000"})
