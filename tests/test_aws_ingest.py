"""Ingestion on AWS, against moto: an upload to the bucket, the EventBridge rule of template.yaml, and the four ingest
Lambda handlers chained as the STANDARD state machine chains them, with the catalog in DynamoDB and every blob in S3.

moto delivers S3 "Object Created" events to EventBridge rules and matches their patterns (prefix, numeric); the rule's
target here is an SQS queue, because moto's EventBridge cannot start a state machine. The handlers are then invoked
in the order of the generated definition. The search index is the embedded one (OpenSearch has no moto).

``python tests/test_aws_ingest.py`` rewrites the sample events ``events/ingest_*.json`` from a run of the pipeline.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from ragstep.app.search import knowledge_search
from ragstep.entry.aws import runtime
from ragstep.errors import InputError, NotFoundError
from ragstep.models import IngestState, KnowledgeBase, SearchRequest
from ragstep.pipeline import get_pipeline
from test_asl import load_template
from test_aws_stores import CATALOG_SCHEMA, HISTORY_SCHEMA
from test_handlers import EVENTS, invoke

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto")
from moto import mock_aws  # noqa: E402

pytestmark = pytest.mark.aws

REGION = "eu-west-1"
# The names the sample events use: the bucket of events/ingest_parse.json and its knowledge base.
BUCKET = "ragstep-demo-blobs"
KB_ID = "4427208ea32841f6884e73e8d00e1748"
KB_NAME = "demo-docs"
SAMPLE_DOC = "serverless-deployment.md"
SAMPLE_KEY = f"uploads/{KB_NAME}/guides/{SAMPLE_DOC}"
CATALOG_TABLE = "ragstep-ingest-catalog"
HISTORY_TABLE = "ragstep-ingest-history"
INGEST_STAGES = get_pipeline("ingest").stage_names()


def demo_doc(name: str) -> bytes:
    return resources.files("ragstep").joinpath("data", "demo", "docs", name).read_bytes()


@functools.cache
def aws_session() -> Any:
    """One boto3 session for every test's stack: it reads each service's model once (tenths of a second a client),
    and moto intercepts the clients it makes whichever test created them."""
    return boto3.session.Session()


class Stack:
    """The stack's storage in moto: the bucket (events to EventBridge), the tables, and the upload rule of
    template.yaml delivering to an SQS queue."""

    def __init__(self) -> None:
        session = aws_session()
        self.s3 = session.client("s3", region_name=REGION)
        self.sqs = session.client("sqs", region_name=REGION)
        self.events = session.client("events", region_name=REGION)
        dynamodb = session.client("dynamodb", region_name=REGION)
        self.s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        bucket = load_template()["Resources"]["BlobBucket"]["Properties"]
        assert bucket["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
        self.s3.put_bucket_notification_configuration(
            Bucket=BUCKET, NotificationConfiguration={"EventBridgeConfiguration": {}}
        )
        dynamodb.create_table(TableName=CATALOG_TABLE, BillingMode="PAY_PER_REQUEST", **CATALOG_SCHEMA)
        dynamodb.create_table(TableName=HISTORY_TABLE, BillingMode="PAY_PER_REQUEST", **HISTORY_SCHEMA)
        self.queue = self.sqs.create_queue(QueueName="ingest-starts")["QueueUrl"]
        queue_arn = self.sqs.get_queue_attributes(QueueUrl=self.queue, AttributeNames=["QueueArn"])["Attributes"]
        self.events.put_rule(Name="ingest-upload", EventPattern=json.dumps(upload_pattern(BUCKET)))
        self.events.put_targets(Rule="ingest-upload", Targets=[{"Id": "sm", "Arn": queue_arn["QueueArn"]}])

    def upload(self, key: str, body: bytes) -> None:
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)

    def started(self) -> list[dict[str, Any]]:
        """The events the rule delivered since the last call (each would start one execution)."""
        out = []
        while True:
            messages = self.sqs.receive_message(QueueUrl=self.queue, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                return out
            for message in messages:
                out.append(json.loads(message["Body"]))
                self.sqs.delete_message(QueueUrl=self.queue, ReceiptHandle=message["ReceiptHandle"])


def upload_pattern(bucket: str) -> dict[str, Any]:
    """The event pattern of the ingest state machine's EventBridge rule in template.yaml, for ``bucket``."""
    machine = load_template()["Resources"]["IngestStateMachine"]["Properties"]
    (event,) = machine["Events"].values()
    assert event["Type"] == "EventBridgeRule"
    pattern = copy.deepcopy(event["Properties"]["Pattern"])
    assert pattern["detail"]["bucket"]["name"] == [{"Ref": "BlobBucket"}]
    pattern["detail"]["bucket"]["name"] = [bucket]
    return pattern


@contextlib.contextmanager
def stack_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    """A Lambda-like environment on the stack's backends (index: the embedded one under a temporary data dir)."""
    for name in [k for k in os.environ if k.startswith(("RAGSTEP_", "POWERTOOLS_", "AWS_"))]:
        monkeypatch.delenv(name)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "POWERTOOLS_SERVICE_NAME": "ragstep-test",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_NAMESPACE": "ragstep-test",
        "RAGSTEP_DATA_DIR": str(tmp_path / "data"),
        "RAGSTEP_CATALOG_BACKEND": "dynamodb",
        "RAGSTEP_CATALOG_TABLE": CATALOG_TABLE,
        "RAGSTEP_HISTORY_BACKEND": "dynamodb",
        "RAGSTEP_HISTORY_TABLE": HISTORY_TABLE,
        "RAGSTEP_BLOB_BACKEND": "s3",
        "RAGSTEP_BLOB_BUCKET": BUCKET,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        runtime.reset()
        runtime.logger().registered_handler.stream = sys.stdout
        stack = Stack()
        kb = KnowledgeBase(id=KB_ID, name=KB_NAME, created_at=time.time())
        runtime.get_clients().context().catalog.create_kb(kb)
        try:
            yield stack
        finally:
            runtime.reset()


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    with stack_environment(tmp_path, monkeypatch) as env:
        yield env


def run_ingest(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The state machine's work for one event: each ingest stage's Lambda handler on the previous one's output."""
    states = []
    payload: Any = event
    for stage in INGEST_STAGES:
        payload = invoke(stage, payload)
        states.append(payload)
    return states


def search(query: str) -> list[str]:
    request = SearchRequest(query=query, knowledge_base_ids=[KB_NAME])
    return [r.knowledge_filename for r in knowledge_search(request, runtime.get_clients().context()).final_results]


# -- uploads start executions ---------------------------------------------------------------------------------------


def test_only_files_under_uploads_start_an_execution(stack: Stack) -> None:
    stack.upload(SAMPLE_KEY, demo_doc(SAMPLE_DOC))
    stack.upload(f"uploads/{KB_NAME}/", b"")  # the console's "Create folder": an empty object
    stack.upload(f"uploads/{KB_NAME}/empty.md", b"")
    stack.upload("sources/x/y/z.md", b"# not an upload")  # ingestion's own products must not start it again
    stack.upload(f"other/{KB_NAME}/a.md", b"# elsewhere")
    (event,) = stack.started()
    assert event["source"] == "aws.s3" and event["detail-type"] == "Object Created"
    assert event["detail"]["object"]["key"] == SAMPLE_KEY
    assert event["detail"]["bucket"]["name"] == BUCKET


def test_an_upload_is_ingested_by_the_handlers_and_found_by_a_search(stack: Stack) -> None:
    key = f"uploads/{KB_NAME}/guides/cold starts.md"  # moto sends the key unencoded; decoding leaves this one alone
    stack.upload(key, demo_doc(SAMPLE_DOC))
    (event,) = stack.started()
    parsed, chunked, embedded, indexed, graphed = run_ingest(event)

    statuses = [s["status"] for s in (parsed, chunked, embedded, indexed, graphed)]
    assert statuses == ["parsed", "chunked", "embedded", "indexed", "indexed"]
    final = IngestState.model_validate(graphed)
    assert final.source.blob_key == key
    assert final.source.filename == "cold starts.md"
    assert final.source.uri == f"s3://{BUCKET}/{key}"
    assert final.source.knowledge_base_id == KB_ID  # the folder named the knowledge base by name
    assert final.counts["chunks"] > 0
    assert [(t.stage, t.action) for t in final.trace] == [
        ("ingest_parse", "run"),
        ("ingest_chunk", "run"),
        ("ingest_embed", "skip"),  # a BM25-only knowledge base
        ("ingest_embed", "run"),
        ("ingest_index", "run"),
        ("ingest_graph", "skip"),  # a knowledge base without a graph
        ("ingest_graph", "run"),
    ]

    catalog = runtime.get_clients().context().catalog
    knowledge = catalog.get_knowledge(final.source.knowledge_id)
    assert knowledge is not None and knowledge.status == "completed"
    assert knowledge.chunk_count == final.counts["chunks"]
    assert knowledge.source_key == key
    # The transient products are gone; the upload stays (it is the document's original).
    keys = [o["Key"] for o in stack.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert key in keys and not [k for k in keys if k.startswith("ingest/")]

    assert "cold starts.md" in search("How do cold starts work on Lambda?")


def test_the_same_upload_again_is_unchanged_and_new_content_replaces_it(stack: Stack) -> None:
    stack.upload(SAMPLE_KEY, demo_doc(SAMPLE_DOC))
    first = run_ingest(stack.started()[0])[-1]

    stack.upload(SAMPLE_KEY, demo_doc(SAMPLE_DOC))
    again = run_ingest(stack.started()[0])
    assert [s["status"] for s in again] == ["unchanged"] * 5
    assert again[-1]["source"]["knowledge_id"] == first["source"]["knowledge_id"]

    # The same file under the knowledge base's id is the same document as under its name.
    stack.upload(f"uploads/{KB_ID}/guides/{SAMPLE_DOC}", demo_doc("hybrid-search.md"))
    replaced = run_ingest(stack.started()[0])[-1]
    assert replaced["status"] == "indexed"
    assert replaced["source"]["knowledge_id"] == first["source"]["knowledge_id"]
    (knowledge,) = runtime.get_clients().context().catalog.list_knowledge(KB_ID)
    assert knowledge.content_hash == replaced["source"]["content_hash"] != first["source"]["content_hash"]
    assert SAMPLE_DOC in search("reciprocal rank fusion of keyword and vector results")


def _event(key: str, bucket: str = BUCKET) -> dict[str, Any]:
    event = json.loads((EVENTS / "ingest_parse.json").read_text(encoding="utf-8"))
    event["detail"]["bucket"]["name"] = bucket
    event["detail"]["object"]["key"] = key
    return event


@pytest.mark.parametrize(
    ("key", "bucket", "error", "message"),
    [
        pytest.param("uploads/no-such-kb/a.md", BUCKET, NotFoundError, "no-such-kb", id="unknown-kb"),
        pytest.param(f"uploads/{KB_NAME}/a.md", "someone-elses", InputError, BUCKET, id="other-bucket"),
        pytest.param(f"docs/{KB_NAME}/a.md", BUCKET, InputError, "uploads/", id="outside-uploads"),
        pytest.param(f"uploads/{KB_NAME}", BUCKET, InputError, "not a file", id="no-file"),
        pytest.param(f"uploads/{KB_NAME}/dir/", BUCKET, InputError, "not a file", id="folder"),
    ],
)
def test_an_event_that_names_no_ingestible_upload_is_refused(
    stack: Stack, key: str, bucket: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message) as caught:
        invoke("ingest_parse", _event(key, bucket))
    # The Lambda runtime reports the class name: the Error the state machine's Fail state carries.
    assert type(caught.value).__name__ == error.__name__


def test_an_event_key_is_url_decoded_once_as_s3_encodes_it(stack: Stack) -> None:
    """S3 sends EventBridge the key form-encoded (``+`` for a space, ``%2B`` for a plus, UTF-8 percent escapes): the
    event below has the documented shape and the key of an object named with all three."""
    event = json.loads((Path(__file__).parent / "data" / "s3_object_created_encoded_key.json").read_text("utf-8"))
    key = f"uploads/{KB_NAME}/Q3 report + notes 中文.md"
    assert event["detail"]["object"]["key"] == f"uploads/{KB_NAME}/Q3+report+%2B+notes+%E4%B8%AD%E6%96%87.md"
    stack.upload(key, demo_doc(SAMPLE_DOC))
    stack.started()  # moto's own event (its key unencoded) is not the one under test

    final = IngestState.model_validate(run_ingest(event)[-1])
    assert final.status == "indexed"
    assert final.source.blob_key == key and final.source.filename == "Q3 report + notes 中文.md"
    assert final.source.uri == f"s3://{BUCKET}/{key}"
    assert "Q3 report + notes 中文.md" in search("reciprocal rank fusion of keyword and vector results")


def test_an_upload_under_tenants_is_ingested_into_that_tenants_store_and_catalog(stack: Stack) -> None:
    """``tenants/<tenant>/uploads/<kb>/<path>`` is another tenant's upload: its knowledge base, its catalog rows, its
    part of the bucket; the default tenant's knowledge base of the same name is not touched."""
    acme = runtime.get_clients().context("acme")
    kb = acme.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name=KB_NAME, created_at=time.time()))
    key = f"tenants/acme/uploads/{KB_NAME}/guides/{SAMPLE_DOC}"
    stack.upload(key, demo_doc(SAMPLE_DOC))

    final = IngestState.model_validate(run_ingest(_event(key))[-1])
    assert (final.tenant_id, final.status) == ("acme", "indexed")
    assert final.source.knowledge_base_id == kb.id != KB_ID
    assert final.source.blob_key == f"uploads/{KB_NAME}/guides/{SAMPLE_DOC}"  # relative to the tenant's store
    (knowledge,) = acme.catalog.list_knowledge(kb.id)
    assert knowledge.id == final.source.knowledge_id and knowledge.status == "completed"
    assert runtime.get_clients().context().catalog.list_knowledge(KB_ID) == []
    keys = [o["Key"] for o in stack.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert keys and all(k.startswith("tenants/acme/") for k in keys), keys


@pytest.mark.parametrize(
    ("key", "message"),
    [
        pytest.param(f"tenants/../uploads/{KB_NAME}/a.md", "tenant id '..'", id="dot-dot"),
        pytest.param(f"tenants/default/uploads/{KB_NAME}/a.md", "default tenant's uploads", id="default"),
        pytest.param(f"tenants/acme/uploads/{KB_NAME}/a.md", f"unknown knowledge base '{KB_NAME}'", id="not-acmes"),
    ],
)
def test_a_tenant_upload_is_checked_before_anything_is_read(stack: Stack, key: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        invoke("ingest_parse", _event(key))


def test_an_unsupported_upload_fails_in_the_first_stage(stack: Stack) -> None:
    stack.upload(f"uploads/{KB_NAME}/tool.exe", b"MZ\x90\x00")
    (event,) = stack.started()
    with pytest.raises(InputError, match=r"tool\.exe"):
        invoke("ingest_parse", event)


def test_only_the_first_stage_takes_an_s3_event(stack: Stack) -> None:
    with pytest.raises(InputError, match="S3 event"):
        invoke("ingest_chunk", _event(SAMPLE_KEY))


def test_a_blob_prefix_is_part_of_the_upload_key(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTEP_BLOB_PREFIX", "ragstep")
    runtime.reset()
    key = f"ragstep/uploads/{KB_NAME}/{SAMPLE_DOC}"
    stack.upload(key, demo_doc(SAMPLE_DOC))
    state = IngestState.model_validate(invoke("ingest_parse", _event(key)))
    assert state.source.blob_key == f"uploads/{KB_NAME}/{SAMPLE_DOC}"  # relative to the prefix, as blobs are
    assert state.status == "parsed"
    with pytest.raises(InputError, match="ragstep/uploads/"):
        invoke("ingest_parse", _event(f"uploads/{KB_NAME}/{SAMPLE_DOC}"))


# -- the sample events ---------------------------------------------------------------------------------------------


def _comparable(state: dict[str, Any]) -> dict[str, Any]:
    # Each run of the first stage records its own ingestion job (ragstep.app.s3_jobs): its id is no sample's.
    kept = {key: value for key, value in state.items() if key != "job_id"}
    return {**kept, "trace": [{**t, "duration_ms": 0.0} for t in state["trace"]]}


def sample_run(stack: Stack) -> list[dict[str, Any]]:
    stack.upload(SAMPLE_KEY, demo_doc(SAMPLE_DOC))
    return run_ingest(json.loads((EVENTS / "ingest_parse.json").read_text(encoding="utf-8")))


def test_each_sample_event_is_what_the_stage_before_it_returns(stack: Stack) -> None:
    """events/ingest_parse.json is an EventBridge S3 event for the sample upload; each handler runs on its own sample
    event, and returns the next stage's sample (durations aside)."""
    stack.upload(SAMPLE_KEY, demo_doc(SAMPLE_DOC))
    for stage, after in zip(INGEST_STAGES, [*INGEST_STAGES[1:], None], strict=True):
        produced = invoke(stage, json.loads((EVENTS / f"{stage}.json").read_text(encoding="utf-8")))
        if after is None:
            assert produced["status"] == "indexed"
            continue
        sample = json.loads((EVENTS / f"{after}.json").read_text(encoding="utf-8"))
        assert _comparable(sample) == _comparable(produced), f"events/{after}.json is stale: python {__file__}"


def write_sample_events() -> None:
    """Rewrite events/ingest_{chunk,embed,index}.json from a run on the sample upload (moto, temporary data dir)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        with stack_environment(Path(tmp), monkeypatch) as env:
            outputs = sample_run(env)
        for stage, produced in zip(INGEST_STAGES[1:], outputs, strict=False):
            path = EVENTS / f"{stage}.json"
            path.write_text(json.dumps(produced, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"wrote {path}")


if __name__ == "__main__":
    write_sample_events()
