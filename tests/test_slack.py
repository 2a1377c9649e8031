"""The Slack app end to end: requests signed with slack_sdk's own signature code reach `ragstep slack serve`'s server
on 127.0.0.1, whose worker answers through a scripted Slack Web API (tests/support/slack_server.py) that records what
the thread would show. Plus the Lambda webhook on moto (DynamoDB idempotency, async invoke of the worker)."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from slack_sdk.signature import SignatureVerifier

from ragstep.app.channels.slack_format import knowledge_bases_for, sources_block, split_message, to_mrkdwn
from ragstep.app.channels.slack_intake import is_question
from ragstep.app.channels.slack_worker import PLACEHOLDER
from ragstep.context import Clients
from ragstep.entry.cli.slack_server import PATH, SlackDevServer
from ragstep.errors import InputError
from ragstep.models import SearchResult
from ragstep.settings import Settings
from ragstep.signing import slack_request_ok, slack_signature
from support.api_server import seed_docs
from support.llm_server import LLMServer, Reply, sse, streamed
from support.slack_server import SlackWorkspace, slack_api

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TOKEN = "xoxb-test-token"
BOT = "UBOT0001"


def signed_headers(body: bytes, secret: str = SECRET, timestamp: int | None = None) -> dict[str, str]:
    """Headers as Slack sends them, the signature computed by slack_sdk (not by the code under test)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature, "Content-Type": "application/json"}


def mention(text: str, *, event_id: str | None = None, ts: str = "1700000100.000100", **event: Any) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T0001",
        "api_app_id": "A0001",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": "T0001", "user_id": BOT, "is_bot": True}],
        "event": {
            "type": "app_mention",
            "user": "U0USER1",
            "text": f"<@{BOT}> {text}",
            "ts": ts,
            "channel": "C0001",
            **event,
        },
    }


@dataclass
class Bot:
    url: str
    server: SlackDevServer
    slack: SlackWorkspace
    clients: Clients

    def send(self, envelope: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
        body = json.dumps(envelope).encode()
        return httpx.post(self.url, content=body, headers={**signed_headers(body), **(headers or {})}, timeout=10)

    def drain(self) -> None:
        assert self.server.drain(30), "answers still running"


@contextmanager
def slack_bot(tmp_path: Path, **settings: Any) -> Iterator[Bot]:
    with slack_api(TOKEN) as slack:
        clients = Clients(
            Settings(
                data_dir=tmp_path / "data",
                slack_signing_secret=SECRET,
                slack_bot_token=TOKEN,
                **{"slack_knowledge_bases": "*=docs", "slack_api_url": slack.url, **settings},
            )
        )
        seed_docs(clients.context(), tmp_path / "docs")
        server = SlackDevServer(clients, ("127.0.0.1", 0))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield Bot(f"http://127.0.0.1:{server.server_address[1]}{PATH}", server, slack, clients)
        finally:
            server.shutdown()
            server.server_close()
            server.shutdown_workers()
            thread.join(5)


# -- signatures --------------------------------------------------------------------------------------------------


def test_our_signature_is_slacks() -> None:
    body, now = b'{"type":"event_callback"}', int(time.time())
    theirs = SignatureVerifier(SECRET).generate_signature(timestamp=str(now), body=body)
    assert slack_signature(SECRET, str(now), body) == theirs
    assert slack_request_ok(SECRET, str(now), body, theirs, now)
    assert not slack_request_ok(SECRET, str(now), body + b" ", theirs, now), "another body"
    assert not slack_request_ok("another-secret", str(now), body, theirs, now)
    assert not slack_request_ok(SECRET, str(now), body, theirs, now + 301), "stale"
    assert not slack_request_ok(SECRET, "not-a-number", body, theirs, now)
    assert not slack_request_ok("", str(now), body, theirs, now), "no secret configured: nothing passes"


# -- the local server -------------------------------------------------------------------------------------------


def test_url_verification_answers_the_challenge_and_forged_requests_start_nothing(tmp_path: Path) -> None:
    with slack_bot(tmp_path) as bot:
        challenge = {
            "type": "url_verification",
            "token": "x",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        }
        answer = bot.send(challenge)
        assert answer.status_code == 200 and answer.json() == {"challenge": challenge["challenge"]}

        body = json.dumps(mention("What is Lambda?")).encode()
        client = httpx.Client(timeout=10)
        forged = [
            signed_headers(body, secret="not-the-secret"),
            signed_headers(body, timestamp=int(time.time()) - 301),
            {"X-Slack-Request-Timestamp": str(int(time.time()))},
            {},
        ]
        statuses = [client.post(bot.url, content=body, headers=forged[i % len(forged)]).status_code for i in range(100)]
        bot.drain()
        assert statuses == [401] * 100
        assert bot.slack.calls == [], "a forged request reached the worker"
        with bot.clients.idempotency.db.read() as conn:  # type: ignore[attr-defined]
            assert conn.execute("SELECT COUNT(*) FROM idempotency").fetchone() == (0,)


def _raw_exchange(url: str, data: bytes, wait_s: float = 5.0) -> bytes:
    """Write ``data`` on one connection and read everything the server sends until it closes (or ``wait_s``)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    received = b""
    with socket.create_connection((parts.hostname, parts.port), timeout=wait_s) as sock:
        try:
            sock.sendall(data)
            while chunk := sock.recv(65536):
                received += chunk
        except (TimeoutError, ConnectionResetError, BrokenPipeError):
            pass
    return received


def test_hostile_requests_get_one_framed_answer_each(tmp_path: Path) -> None:
    """An oversized body holding a complete signed request is one 413 and a closed connection (once answered twice:
    the 413, then the smuggled request's 200); a body nested 100,000 deep is a 400; a timestamp of 400 nines is the
    401 every bad signature gets; an oversized chunked body is a 413 too."""
    with slack_bot(tmp_path) as bot:
        inner = json.dumps({"type": "url_verification", "challenge": "smuggled"}).encode()
        smuggled = (
            b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + b"".join(f"{k}: {v}\r\n".encode() for k, v in signed_headers(inner).items() if k != "Content-Type")
            + f"Content-Length: {len(inner)}\r\n\r\n".encode()
            + inner
        )
        outer = f"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: {1024 * 1024 + 1}\r\n\r\n".encode()
        answered = _raw_exchange(bot.url, outer + smuggled)

        deep = b"[" * 100_000 + b"]" * 100_000
        nested = httpx.post(bot.url, content=deep, headers=signed_headers(deep), timeout=10)
        body = json.dumps(mention("What is Lambda?")).encode()
        huge_ts = httpx.post(
            bot.url, content=body, headers={**signed_headers(body), "X-Slack-Request-Timestamp": "9" * 400}
        )

        def pieces() -> Iterator[bytes]:
            for _ in range(20):
                yield b"x" * 65536

        chunked = httpx.post(bot.url, content=pieces(), headers=signed_headers(b""), timeout=10)
        still_serving = bot.send({"type": "url_verification", "challenge": "after"})
        bot.drain()
    assert answered.count(b"HTTP/1.1 ") == 1 and answered.startswith(b"HTTP/1.1 413"), answered[:300]
    assert b"smuggled" not in answered
    assert nested.status_code == 400 and "nested too deep" in nested.json()["message"]
    assert huge_ts.status_code == 401
    assert chunked.status_code == 413 and chunked.json()["error"] == "payload_too_large"
    assert still_serving.json() == {"challenge": "after"}
    assert bot.slack.calls == []


def test_slack_unreachable_is_one_log_line_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{unused.getsockname()[1]}/api"
    with caplog.at_level("INFO"), slack_bot(tmp_path, slack_api_url=dead) as bot:
        assert bot.send(mention("What is Lambda?")).status_code == 200
        bot.drain()
    failures = [r for r in caplog.records if "could not answer" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info is None, [r.getMessage() for r in caplog.records]
    assert "Slack chat.postMessage" in failures[0].getMessage()
    assert not any(r.exc_info for r in caplog.records if r.name.startswith("ragstep"))


def test_a_mention_is_answered_in_its_thread_with_sources(tmp_path: Path) -> None:
    with slack_bot(tmp_path) as bot:
        started = time.monotonic()
        answer = bot.send(mention("When do cold starts happen in AWS Lambda?"))
        assert answer.status_code == 200 and time.monotonic() - started < 3
        bot.drain()
        (placeholder, *rest) = bot.slack.posts()
        assert placeholder.json["thread_ts"] == "1700000100.000100" and placeholder.json["text"] == PLACEHOLDER
        assert rest == []
        (final,) = bot.slack.thread("1700000100.000100")
        assert "Cold starts" in final and final.endswith("*Sources*\n[1] lambda")
        assert bot.slack.methods()[-1] == "chat.update"


def test_retries_and_concurrent_duplicates_produce_one_answer(tmp_path: Path) -> None:
    with slack_bot(tmp_path) as bot:
        envelope = mention("What is Lambda?", event_id="Ev0RETRIED01")
        with ThreadPoolExecutor(5) as pool:
            concurrent = list(pool.map(lambda _: bot.send(envelope).status_code, range(5)))
        retries = [
            bot.send(envelope, {"X-Slack-Retry-Num": str(n), "X-Slack-Retry-Reason": "http_timeout"}).status_code
            for n in (1, 2, 3)
        ]
        bot.drain()
        assert concurrent == [200] * 5 and retries == [200] * 3
        assert len(bot.slack.posts()) == 1, "one answer, however often Slack delivered the event"


def test_bots_itself_edits_and_other_channels_messages_are_not_answered(tmp_path: Path) -> None:
    with slack_bot(tmp_path) as bot:
        ignored = [
            mention("hi", bot_id="B0001"),
            mention("hi", user=BOT),
            mention("hi", subtype="message_changed"),
            {**mention("hi"), "event": {**mention("hi")["event"], "type": "message", "channel_type": "channel"}},
            {**mention("hi"), "event": {**mention("hi")["event"], "type": "reaction_added"}},
        ]
        assert [bot.send(e).status_code for e in ignored] == [200] * len(ignored)
        dm = mention("What is Lambda?", ts="1700000200.000200")
        dm["event"].update(type="message", channel_type="im", channel="D0001", text="What is Lambda?")
        assert bot.send(dm).status_code == 200
        bot.drain()
        assert [p.json["channel"] for p in bot.slack.posts()] == ["D0001"], "only the direct message is answered"


def test_a_thread_is_a_session_and_errors_end_as_a_message(tmp_path: Path) -> None:
    with slack_bot(tmp_path) as bot:
        bot.send(mention("What is Lambda?", ts="1700000300.000300"))
        bot.drain()
        bot.send(mention("And cold starts?", ts="1700000301.000100", thread_ts="1700000300.000300"))
        bot.drain()
        ctx = bot.clients.context()
        turns = [t for t in ctx.history.recent("slack-T0001-C0001-1700000300.000300") if t.query]
        assert [t.query for t in turns] == ["What is Lambda?", "And cold starts?"]
        assert len(bot.slack.thread("1700000300.000300")) == 2

    with slack_bot(tmp_path / "other", slack_knowledge_bases="C0001=no-such-kb") as bot:
        bot.send(mention("What is Lambda?", ts="1700000400.000400"))
        bot.drain()
        (reply,) = bot.slack.thread("1700000400.000400")
        assert reply.startswith(":warning:") and "no-such-kb" in reply


def test_a_streamed_answer_is_edited_at_most_once_an_interval(tmp_path: Path) -> None:
    words = [sse(f"word{i} ") for i in range(30)]
    with LLMServer() as llm:
        llm.add(Reply(chunks=[*words, *streamed("[1].")], chunk_delay_s=0.05))
        chat = {
            "chat_provider": "openai",
            "chat_model": "m",
            "chat_base_url": llm.url,
            "chat_max_retries": 0,
            "chat_enable_rewrite": False,
            "slack_update_interval_s": 0.5,
        }
        with slack_bot(tmp_path, **chat) as bot:
            bot.send(mention("What is Lambda?", ts="1700000500.000500"))
            bot.drain()
            updates = [c for c in bot.slack.calls if c.path.endswith("/chat.update")]
            # ~1.5 s of streaming: 2-3 partial edits at 0.5 s intervals, and the final one.
            assert 2 <= len(updates) <= 5, [u.json["text"] for u in updates]
            assert all(u.json["text"].endswith(" …") for u in updates[:-1])
            (final,) = bot.slack.thread("1700000500.000500")
            assert final.startswith("word0 word1") and "word29" in final and "*Sources*" in final


# -- formatting --------------------------------------------------------------------------------------------------


def test_long_answers_are_split_within_slacks_limit() -> None:
    paragraph = "Lambda " * 300
    parts = split_message("\n\n".join([paragraph] * 5), limit=3900)
    assert len(parts) > 1 and all(0 < len(p) <= 3900 for p in parts)
    assert "".join(parts).replace(" ", "").replace("\n", "") == ("Lambda" * 1500)
    assert split_message("x" * 8000, limit=3900) == ["x" * 3900, "x" * 3900, "x" * 200]


def test_mrkdwn_sources_and_channel_mapping() -> None:
    assert to_mrkdwn("**Cold** starts <fast> & [docs](https://aws.amazon.com/lambda)") == (
        "*Cold* starts &lt;fast&gt; &amp; <https://aws.amazon.com/lambda|docs>"
    )
    refs = [
        SearchResult(
            id="1",
            content="",
            knowledge_id="k1",
            knowledge_base_id="b",
            knowledge_title="Lambda",
            metadata={"url": "https://example.com/lambda"},
        ),
        SearchResult(id="2", content="", knowledge_id="k2", knowledge_base_id="b", knowledge_filename="北京.md"),
    ]
    assert sources_block(refs) == "*Sources*\n[1] <https://example.com/lambda|Lambda>\n[2] 北京.md"
    mapping = "C1=a,b; T1=c; *=d"
    assert knowledge_bases_for(mapping, "C1", "T1") == ["a", "b"]
    assert knowledge_bases_for(mapping, "C2", "T1") == ["c"]
    assert knowledge_bases_for(mapping, "C2", "T2") == ["d"]
    assert knowledge_bases_for("", "C2", "T2") == []
    with pytest.raises(InputError, match="RAGSTEP_SLACK_KNOWLEDGE_BASES"):
        knowledge_bases_for("C1", "C1", "T1")
    assert not is_question({"event": {"type": "app_mention", "user": "U1", "text": "  ", "channel": "C", "ts": "1"}})


# -- on AWS (moto) ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.aws  # moto's first use of four services: ~10 s of imports on this machine
def test_the_lambda_webhook_dedupes_on_dynamodb_and_invokes_the_worker_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moto = pytest.importorskip("moto")
    import boto3

    from ragstep.entry.aws import runtime, slack
    from test_handlers import LambdaContext

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with moto.mock_aws(config={"lambda": {"use_docker": False}}):
        dynamodb = boto3.client("dynamodb")
        dynamodb.create_table(
            TableName="idempotency",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        )
        role = boto3.client("iam").create_role(
            RoleName="worker", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []})
        )["Role"]["Arn"]
        boto3.client("lambda").create_function(
            FunctionName="slack-worker",
            Runtime="python3.12",
            Role=role,
            Handler="app.handler",
            Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
        )
        boto3.client("ssm").put_parameter(Name="/stack/slack-signing", Value=SECRET, Type="SecureString")
        monkeypatch.setenv("RAGSTEP_SLACK_SIGNING_SECRET", "ssm:/stack/slack-signing")
        monkeypatch.setenv("RAGSTEP_IDEMPOTENCY_BACKEND", "dynamodb")
        monkeypatch.setenv("RAGSTEP_IDEMPOTENCY_TABLE", "idempotency")
        monkeypatch.setenv("RAGSTEP_SLACK_WORKER_FUNCTION", "slack-worker")
        runtime.reset()
        monkeypatch.setattr(slack, "_lambda", None)
        monkeypatch.setattr(slack, "_intakes", {})

        body = json.dumps(mention("What is Lambda?", event_id="Ev0LAMBDA001")).encode()

        def invoke(headers: dict[str, str], base64_body: bool = True) -> dict[str, Any]:
            event = {
                "version": "2.0",
                "routeKey": "POST /slack/events",
                "headers": {k.lower(): v for k, v in headers.items()},
                "body": base64.b64encode(body).decode() if base64_body else body.decode(),
                "isBase64Encoded": base64_body,
            }
            return slack.webhook_handler(event, LambdaContext("slack-webhook"))

        assert invoke(signed_headers(body, secret="forged"))["statusCode"] == 401
        assert dynamodb.scan(TableName="idempotency")["Count"] == 0
        first = invoke(signed_headers(body))
        assert first["statusCode"] == 200 and json.loads(first["body"])["ok"] is True
        again = [invoke({**signed_headers(body), "X-Slack-Retry-Num": str(n)}, base64_body=n % 2 == 0) for n in (1, 2)]
        assert [r["statusCode"] for r in again] == [200, 200]
        (record,) = dynamodb.scan(TableName="idempotency")["Items"]
        assert record["status"]["S"] == "COMPLETED" and int(record["expiration"]["N"]) > time.time() + 360
