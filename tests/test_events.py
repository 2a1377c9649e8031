"""Event-driven retrieval on moto (SQS, EventBridge, S3, DynamoDB): the Lambda consumer fed as Lambda's SQS event
source feeds it (batches, partial failures, redelivery, a DLQ after maxReceiveCount), replies to SQS, EventBridge
and a signed HTTPS callback, the claim check of an oversize result, and `ragstep events run FILE`."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ragstep.adapters.channels.replies import ResultReplies
from ragstep.app.channels.retrieval_events import RetrievalEvents
from ragstep.context import Clients
from ragstep.errors import InputError, ProviderError
from ragstep.models import KnowledgeBase
from ragstep.settings import Settings
from support.api_server import DOCS, seed_docs
from support.scripted_http import ScriptedHTTPServer, ScriptedResponse
from test_handlers import LambdaContext

moto = pytest.importorskip("moto")
pytestmark = pytest.mark.aws

QUERY = "When do cold starts happen in AWS Lambda?"
# The reliability bar (README: Channels): 1,000 requests, 5 % poison, 10 % delivered twice.
GOOD, DUPLICATES = 950, 100
WAVE = 100


@dataclass
class Stack:
    sqs: Any
    events: Any
    s3: Any
    requests: str
    dlq: str
    replies: str
    observed: str
    bucket: str
    clients: Clients

    def receive_all(self, url: str, parse: bool = True) -> list[Any]:
        bodies: list[Any] = []
        while batch := self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            for message in batch:
                bodies.append(json.loads(message["Body"]) if parse else message["Body"])
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return bodies

    def pump(self) -> int:
        """Deliver the request queue to the Lambda handler as the SQS event source mapping does, until it is empty;
        returns the number of invocations."""
        from ragstep.entry.aws.retrieval_events import handler

        arn = self.sqs.get_queue_attributes(QueueUrl=self.requests, AttributeNames=["QueueArn"])["Attributes"]
        invocations = 0
        while batch := self.sqs.receive_message(QueueUrl=self.requests, MaxNumberOfMessages=10).get("Messages", []):
            records = [
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": {},
                    "messageAttributes": {},
                    "md5OfBody": m["MD5OfBody"],
                    "eventSource": "aws:sqs",
                    "eventSourceARN": arn["QueueArn"],
                    "awsRegion": "us-east-1",
                }
                for m in batch
            ]
            invocations += 1
            try:
                out = handler({"Records": records}, LambdaContext("retrieval_events"))
                failed = {f["itemIdentifier"] for f in out["batchItemFailures"]}
            except Exception:  # every record failed: Lambda returns the whole batch to the queue
                failed = {m["MessageId"] for m in batch}
            for m in batch:
                if m["MessageId"] not in failed:
                    self.sqs.delete_message(QueueUrl=self.requests, ReceiptHandle=m["ReceiptHandle"])
        return invocations


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    import boto3

    from ragstep.entry.aws import retrieval_events, runtime

    for name, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "RAGSTEP_DATA_DIR": str(tmp_path / "data"),
        "RAGSTEP_IDEMPOTENCY_BACKEND": "dynamodb",
        "RAGSTEP_IDEMPOTENCY_TABLE": "idempotency",
        "RAGSTEP_BLOB_BACKEND": "s3",
        "RAGSTEP_BLOB_BUCKET": "blobs",
        "RAGSTEP_EVENTS_CALLBACK_SECRET": "callback-secret",
    }.items():
        monkeypatch.setenv(name, value)
    with moto.mock_aws():
        boto3.client("dynamodb").create_table(
            TableName="idempotency",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        )
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="blobs")
        sqs = boto3.client("sqs")
        dlq = sqs.create_queue(QueueName="requests-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        # VisibilityTimeout 0: a failed record is visible again at once (Lambda waits the queue's timeout).
        requests = sqs.create_queue(
            QueueName="requests",
            Attributes={
                "VisibilityTimeout": "0",
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "3"}),
            },
        )["QueueUrl"]
        replies = sqs.create_queue(QueueName="replies")["QueueUrl"]
        observed = sqs.create_queue(QueueName="observed")["QueueUrl"]
        events = boto3.client("events")

        def route(rule: str, detail_type: str, queue: str) -> None:
            arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            events.put_rule(Name=rule, EventPattern=json.dumps({"detail-type": [detail_type]}))
            events.put_targets(Rule=rule, Targets=[{"Id": "queue", "Arn": arn}])

        # As the template wires them: requests on the bus go to the request queue; results are watched here.
        route("requested", "ragstep.RetrievalRequested", requests)
        route("completed", "ragstep.RetrievalCompleted", observed)

        runtime.reset()
        monkeypatch.setattr(retrieval_events, "_events", None)
        clients = runtime.get_clients()
        seed_docs(clients.context(), tmp_path / "docs")
        yield Stack(sqs, events, s3, requests, dlq, replies, observed, "blobs", clients)
        runtime.reset()


def request(request_id: str, reply: dict[str, str] | None, **fields: Any) -> dict[str, Any]:
    return {"request_id": request_id, "query": QUERY, "knowledge_base_ids": ["docs"], "reply": reply, **fields}


@pytest.mark.slow
def test_thousand_requests_with_duplicates_and_poison_are_each_answered_once(stack: Stack) -> None:
    rng = random.Random(20)
    good = [request(f"req-{i:04d}", {"sqs": stack.replies}) for i in range(GOOD)]
    poison: list[str] = [
        *["not json {" for _ in range(20)],
        *[json.dumps({"query": QUERY}) for _ in range(15)],  # no request id
        *[json.dumps({"detail-type": "something.Else", "detail": {}}) for _ in range(15)],
    ]
    messages = [json.dumps(r) for r in good] + poison + [json.dumps(r) for r in rng.sample(good, DUPLICATES)]
    rng.shuffle(messages)
    answers: list[dict[str, Any]] = []
    # In waves, as traffic arrives (and because moto's SQS scans a whole queue on every call); a duplicate may land
    # in the same wave as its original or in a later one.
    for wave in range(0, len(messages), WAVE):
        for start in range(wave, min(wave + WAVE, len(messages)), 10):
            entries = [{"Id": str(i), "MessageBody": body} for i, body in enumerate(messages[start : start + 10])]
            assert not stack.sqs.send_message_batch(QueueUrl=stack.requests, Entries=entries).get("Failed")
        stack.pump()
        answers += stack.receive_all(stack.replies)

    ids = [a["detail"]["request_id"] for a in answers]
    assert len(ids) == len(set(ids)) == GOOD, "every good request answered exactly once"
    assert {a["detail"]["status"] for a in answers} == {"succeeded"}
    assert all("Cold starts" in a["detail"]["results"][0]["content"] for a in answers)
    parked = stack.receive_all(stack.dlq, parse=False)
    assert sorted(parked) == sorted(poison), "every poison message in the DLQ, nothing else"


def test_an_event_on_the_bus_is_answered_on_the_bus_and_a_failing_pipeline_answers_with_its_error(
    stack: Stack,
) -> None:
    for r in (
        request("bus-1", {"eventbridge": "default"}),
        request("bus-2", {"eventbridge": "default"}, knowledge_base_ids=["no-such-kb"]),
    ):
        stack.events.put_events(
            Entries=[{"Source": "svc.orders", "DetailType": "ragstep.RetrievalRequested", "Detail": json.dumps(r)}]
        )
    stack.pump()
    completed = {e["detail"]["request_id"]: e for e in stack.receive_all(stack.observed)}
    assert set(completed) == {"bus-1", "bus-2"}
    ok, failed = completed["bus-1"], completed["bus-2"]
    assert ok["source"] == "ragstep" and ok["detail-type"] == "ragstep.RetrievalCompleted"
    assert ok["detail"]["status"] == "succeeded" and ok["detail"]["results"]
    assert next(t["stage"] for t in ok["detail"]["trace"] if t["action"] == "run") == "chunk_search"
    cost = ok["detail"]["usage"]["cost"]  # the receipt travels with the result
    assert cost["total_usd"] > 0 and abs(sum(cost["by_stage"].values()) - cost["total_usd"]) < 1e-9
    assert failed["detail"]["status"] == "failed"
    assert failed["detail"]["error"]["type"] == "not_found" and "no-such-kb" in failed["detail"]["error"]["message"]
    assert stack.receive_all(stack.dlq) == []


def test_an_oversize_result_travels_by_claim_check(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack.clients.settings, "events_result_limit_bytes", 1024)
    stack.sqs.send_message(QueueUrl=stack.requests, MessageBody=json.dumps(request("big-1", {"sqs": stack.replies})))
    stack.pump()
    (answer,) = stack.receive_all(stack.replies)
    detail = answer["detail"]
    assert "results" not in detail and detail["status"] == "succeeded"
    ref = detail["result_ref"]
    assert ref["uri"] == f"s3://blobs/{ref['key']}" and ref["key"] == "events/results/big-1.json"
    stored = json.loads(stack.s3.get_object(Bucket="blobs", Key=ref["key"])["Body"].read())
    assert len(json.dumps(stored).encode()) > 1024 and stored["results"][0]["knowledge_filename"] == "lambda.md"


def test_a_callback_that_fails_twice_then_succeeds_gets_one_signed_result(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path / "data", events_callback_secret="callback-secret"))
    ctx = clients.context()
    ctx.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="docs", embedding_model="none", created_at=0.0))
    # The real delivery adapter with a short backoff, so the retries take milliseconds, not seconds.
    clients.__dict__["replies"] = ResultReplies(callback_secret="callback-secret", backoff_base_s=0.01)
    processor = RetrievalEvents(clients)
    with ScriptedHTTPServer(ScriptedResponse(503), ScriptedResponse(502), ScriptedResponse(200, {})) as server:
        message = request("cb-1", {"callback": f"{server.url}/hook"})
        result = processor.handle(message)
        assert processor.handle(message) == result, "a redelivery is answered from the record"
        calls = server.requests
    assert len(calls) == 3
    body = calls[-1].body
    expected = (
        "sha256="
        + hmac.new(
            b"callback-secret", calls[-1].headers["x-ragstep-timestamp"].encode() + b"." + body, hashlib.sha256
        ).hexdigest()
    )
    assert calls[-1].headers["x-ragstep-signature"] == expected
    assert json.loads(body)["detail"]["request_id"] == "cb-1"

    with ScriptedHTTPServer(fallback=ScriptedResponse(500)) as server:
        with pytest.raises(ProviderError, match="after 4 attempt"):
            processor.handle(request("cb-2", {"callback": f"{server.url}/hook"}))
        server.set_fallback(ScriptedResponse(204))
        assert processor.handle(request("cb-2", {"callback": f"{server.url}/hook"}))["detail"]["request_id"] == "cb-2"
    with pytest.raises(InputError, match="reply"):
        processor.handle(request("cb-3", {"callback": "ftp://example.com/x", "sqs": "q"}))


def test_events_run_prints_the_result_event(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragstep.entry.cli.main import main

    data = tmp_path / "data"
    assert main(["--data-dir", str(data), "kb", "create", "docs"]) == 0
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "lambda.md").write_text(DOCS["lambda.md"], encoding="utf-8")
    assert main(["--data-dir", str(data), "ingest", str(folder), "--kb", "docs"]) == 0
    capsys.readouterr()
    file = tmp_path / "request.json"
    file.write_text(json.dumps({"detail-type": "ragstep.RetrievalRequested", "detail": request("cli-1", None)}))
    assert main(["--data-dir", str(data), "events", "run", str(file)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["detail-type"] == "ragstep.RetrievalCompleted" and printed["detail"]["results"]
    file.write_text("{not json")
    assert main(["--data-dir", str(data), "events", "run", str(file)]) == 2
    assert "is not JSON" in capsys.readouterr().err
    # A misspelt key says what a request takes (pydantic said "Extra inputs are not permitted").
    file.write_text(json.dumps({**request("cli-2", None), "knowledge_bases": ["docs"]}))
    assert main(["--data-dir", str(data), "events", "run", str(file)]) == 2
    err = capsys.readouterr().err
    assert "knowledge_bases: unknown field (did you mean knowledge_base_ids?); the request accepts request_id," in err
    # The queue's Lambda test event (events/retrieval_events.json) said "request_id: Field required".
    file.write_text(json.dumps({"Records": [{"body": json.dumps(request("cli-3", None))}]}))
    assert main(["--data-dir", str(data), "events", "run", str(file)]) == 2
    assert "an SQS event (Records) holds its requests in each record's body" in capsys.readouterr().err
