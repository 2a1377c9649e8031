"""Generic chatbot webhooks over a real uvicorn server: HMAC-signed messages (signed here with the standard
library, not with ragstep's code), sync answers, callback answers to a scripted platform on 127.0.0.1, idempotency
by message id, and forged or stale requests refused."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from ragstep.app.ingest import ingest_file
from ragstep.app.sessions import is_opening
from ragstep.context import Clients
from ragstep.models import KnowledgeBase
from ragstep.settings import Settings
from support.api_server import DOCS, api_server
from support.llm_server import LLMServer, Received, Reply, completion, streamed
from support.scripted_http import ScriptedHTTPServer, ScriptedResponse

SECRET = "teams-shared-secret"


def sign(body: bytes, secret: str = SECRET, timestamp: int | None = None) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"X-Ragstep-Timestamp": ts, "X-Ragstep-Signature": f"sha256={digest}", "Content-Type": "application/json"}


def message(message_id: str, text: str = "When do cold starts happen in AWS Lambda?") -> bytes:
    return json.dumps({"conversation_id": "conv-1", "message_id": message_id, "text": text, "user": "u1"}).encode()


def served_clients(tmp_path: Path, callback_url: str = "", **settings: Any) -> Clients:
    hooks: dict[str, Any] = {"teams": {"secret": SECRET, "mode": "sync", "knowledge_bases": ["docs"]}}
    if callback_url:
        hooks["feishu"] = {
            "secret": SECRET,
            "mode": "callback",
            "callback_url": callback_url,
            "knowledge_bases": ["docs"],
        }
    clients = Clients(Settings(data_dir=tmp_path / "data", webhook_integrations=json.dumps(hooks), **settings))
    ctx = clients.context()
    kb = KnowledgeBase(id=uuid.uuid4().hex, name="docs", embedding_model="none", created_at=time.time())
    ctx.catalog.create_kb(kb)
    (tmp_path / "lambda.md").write_text(DOCS["lambda.md"], encoding="utf-8")
    assert ingest_file(tmp_path / "lambda.md", kb, ctx).status == "indexed"
    return clients


def turns(clients: Clients, session: str) -> list[Any]:
    return [t for t in clients.context().history.recent(session, limit=50) if not is_opening(t)]


def test_sync_answers_once_per_message_and_forgeries_are_refused(tmp_path: Path) -> None:
    clients = served_clients(tmp_path)
    with api_server(clients) as base:
        url = f"{base}/v1/webhooks/teams"
        body = message("m-1")
        first = httpx.post(url, content=body, headers=sign(body), timeout=30)
        assert first.status_code == 200, first.text
        answer = first.json()
        assert "Cold starts" in answer["answer"] and answer["references"][0]["knowledge_filename"] == "lambda.md"
        again = httpx.post(url, content=body, headers=sign(body), timeout=30)
        assert again.json() == answer, "a repeated message id gets the recorded answer"

        refused = [
            httpx.post(url, content=body, headers=sign(body, secret="wrong"), timeout=10),
            httpx.post(url, content=body, headers=sign(body, timestamp=int(time.time()) - 301), timeout=10),
            httpx.post(url, content=body + b" ", headers=sign(body), timeout=10),
            httpx.post(f"{base}/v1/webhooks/unknown", content=body, headers=sign(body), timeout=10),
            httpx.post(url, content=body, timeout=10),
        ]
        assert [r.status_code for r in refused] == [401] * 5
        assert refused[0].json()["error"] and "Signature" in refused[0].json()["message"]
        bad = b'{"conversation_id": "c", "text": "hi"}'
        assert httpx.post(url, content=bad, headers=sign(bad), timeout=10).status_code == 400
    assert [t.query for t in turns(clients, "webhook-teams-conv-1")] == ["When do cold starts happen in AWS Lambda?"]


def test_callback_mode_acknowledges_then_posts_one_signed_answer(tmp_path: Path) -> None:
    with ScriptedHTTPServer(fallback=ScriptedResponse(200, {})) as platform:
        clients = served_clients(tmp_path, callback_url=f"{platform.url}/reply")
        with api_server(clients) as base:
            url = f"{base}/v1/webhooks/feishu"
            body = message("m-2")
            with ThreadPoolExecutor(3) as pool:
                acks = list(pool.map(lambda _: httpx.post(url, content=body, headers=sign(body), timeout=30), range(3)))
            assert [a.status_code for a in acks] == [202] * 3
            deadline = time.monotonic() + 20
            while not platform.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # room for a wrong second answer to arrive
        (reply,) = platform.requests
    ts = reply.headers["x-ragstep-timestamp"]
    expected = hmac.new(SECRET.encode(), ts.encode() + b"." + reply.body, hashlib.sha256).hexdigest()
    assert reply.headers["x-ragstep-signature"] == f"sha256={expected}"
    assert reply.json["message_id"] == "m-2" and "Cold starts" in reply.json["answer"]


def test_any_malformed_timestamp_is_the_same_401_for_known_and_unknown_integrations(tmp_path: Path) -> None:
    """400 nines once overflowed the skew arithmetic into a 500 for a configured integration only (an unknown one
    got 401), which told an attacker which integration names exist."""
    clients = served_clients(tmp_path)
    body = message("m-ts")
    now = str(int(time.time()))
    stamps = ["9" * 400, "-" + "9" * 400, "1e999", "+" + now, "1_" + now, now + ".5", "0x10", "", "x"]
    answers: dict[tuple[str, str], httpx.Response] = {}
    with api_server(clients) as base:
        for name in ("teams", "no-such-integration"):
            for stamp in stamps:
                headers = {**sign(body), "X-Ragstep-Timestamp": stamp}
                answers[name, stamp] = httpx.post(f"{base}/v1/webhooks/{name}", content=body, headers=headers)
    assert {(key, r.status_code) for key, r in answers.items()} == {(key, 401) for key in answers}
    assert len({r.text for r in answers.values()}) == 1


def test_a_concurrent_duplicate_of_a_sync_message_gets_409_with_retry_after(tmp_path: Path) -> None:
    def slow(received: Received) -> Reply:
        text = "Cold starts happen when a new execution environment starts [1]."
        if (received.json or {}).get("stream"):
            return Reply(chunks=streamed(text), first_delay_s=2.0)
        return Reply(body=completion(text), first_delay_s=2.0)

    with LLMServer(responder=slow) as llm:
        clients = served_clients(tmp_path, chat_provider="openai", chat_model="m", chat_base_url=llm.url)
        with api_server(clients) as base, ThreadPoolExecutor(1) as pool:
            url = f"{base}/v1/webhooks/teams"
            body = message("m-dup")
            first = pool.submit(httpx.post, url, content=body, headers=sign(body), timeout=30)
            deadline = time.monotonic() + 20
            while not llm.requests and time.monotonic() < deadline:  # the first delivery is answering
                time.sleep(0.02)
            duplicate = httpx.post(url, content=body, headers=sign(body), timeout=30)
            answered = first.result()
            later = httpx.post(url, content=body, headers=sign(body), timeout=30)
    assert duplicate.status_code == 409, duplicate.text
    assert duplicate.json()["error"] == "in_progress" and int(duplicate.headers["retry-after"]) >= 1
    assert "Error" not in duplicate.text
    assert answered.status_code == 200 and later.json() == answered.json()
    assert len(turns(clients, "webhook-teams-conv-1")) == 1
