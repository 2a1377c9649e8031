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

import numpy as np
import pytest

from ragstep.adapters.embedders import DEFAULT_LOCAL_MODEL
from ragstep.app.search import knowledge_search
from ragstep.entry.aws import runtime
from ragstep.errors import InputError, NotFoundError
from ragstep.index_capabilities import vector_backfill
from ragstep.models import IngestState, KnowledgeBase, SearchRequest, TraceEvent
from ragstep.pipeline import get_pipeline
from ragstep.pipeline.definitions import Map, payload_limit
from ragstep.ports import SearchFilter
from test_asl import load_template
from test_aws_stores import CATALOG_SCHEMA, HISTORY_SCHEMA
from test_handlers import EVENTS, ROOT, invoke

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
LOCAL_MODEL = f"local:{DEFAULT_LOCAL_MODEL}"


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


def run_ingest(event: dict[str, Any], *, after_first: bool = False) -> list[dict[str, Any]]:
    """The state machine's work for one event: each step's Lambda handler on the previous step's output. A Map step
    (embed_batches) invokes its first stage once per item, with ``{"state", "item"}`` as its ItemSelector builds
    it, keeps nothing of them (``ResultPath: null``) and hands its input to the merge, whose output is the step's.
    ``after_first``: ``event`` is the first step's output, and the steps after it run."""
    states = []
    payload: Any = event
    for step in get_pipeline("ingest").steps[1 if after_first else 0 :]:
        if isinstance(step, Map):
            for item in payload[step.items]:
                invoke(step.steps[0].name, {"state": payload, "item": item})
            payload = invoke(step.merge, payload)
        else:
            payload = invoke(step.name, payload)
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
    parsed, chunked, embedded, indexed, graphed, merged = run_ingest(event)

    statuses = [s["status"] for s in (parsed, chunked, embedded, indexed, graphed, merged)]
    assert statuses == ["parsed", "chunked", "embedded", "indexed", "indexed", "indexed"]
    final = IngestState.model_validate(merged)
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
        ("ingest_embed_merge", "skip"),  # no vectors to add after the index
        ("ingest_embed_merge", "run"),
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
    assert [s["status"] for s in again] == ["unchanged"] * 6
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


# -- progressive indexing: keyword-searchable after ingest_index, vectors from the embed_batches Map ---------------


def test_the_ingest_machine_embeds_after_the_index_in_a_map_state_that_keeps_nothing() -> None:
    """embed_batches: each item of embed_batches with the whole state, as many at once as the state's
    embed_concurrency (the EmbedBatchConcurrency parameter, through ingest_index), each iteration's output its item
    alone, the Map's output its input (ResultPath null): the state keeps the whole payload quota."""
    machine = json.loads((ROOT / "statemachine" / "ingest.asl.json").read_text(encoding="utf-8"))
    assert machine["States"]["ingest_graph"]["Next"] == "embed_batches"
    state = machine["States"]["embed_batches"]
    assert state["Type"] == "Map" and state["Next"] == "ingest_embed_merge"
    assert state["ItemsPath"] == "$.embed_batches" and state["MaxConcurrencyPath"] == "$.embed_concurrency"
    assert "MaxConcurrency" not in state and state["ResultPath"] is None
    assert state["ItemSelector"] == {"state.$": "$", "item.$": "$$.Map.Item.Value"}
    batch = state["ItemProcessor"]["States"]["ingest_embed_batch"]
    assert batch["OutputPath"] == "$.embed_batch" and batch["Resource"] == "${IngestEmbedBatchFunctionArn}"
    assert machine["States"]["ingest_embed_merge"]["End"] is True
    assert payload_limit("ingest", 256 * 1024) == 256 * 1024
    template = load_template()
    assert template["Parameters"]["EmbedBatchConcurrency"]["MaxValue"] == 40  # an inline Map's most at once
    env = template["Resources"]["IngestIndexFunction"]["Properties"]["Environment"]["Variables"]
    assert env == {
        "RAGSTEP_EMBED_BATCH_CHUNKS": {"Ref": "EmbedBatchSize"},
        "RAGSTEP_EMBED_BATCH_CONCURRENCY": {"Ref": "EmbedBatchConcurrency"},
    }


@pytest.fixture
def progressive(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    """The template's default index (S3 snapshots), the sample knowledge base embedding with the local model, and
    batches of one chunk (the sample document has two)."""
    monkeypatch.setenv("RAGSTEP_INDEX_BACKEND", "s3snapshot")
    monkeypatch.setenv("RAGSTEP_EMBED_BATCH_CHUNKS", "1")
    runtime.reset()
    embedding_kb()
    return stack


def index_upload(stack: Stack, key: str, body: bytes) -> dict[str, Any]:
    """An upload through the steps before embed_batches: the state the Map state receives."""
    stack.upload(key, body)
    (payload,) = stack.started()
    for step in get_pipeline("ingest").steps:
        if isinstance(step, Map):
            return dict(payload)
        payload = invoke(step.name, payload)
    raise AssertionError("the ingest pipeline has no Map step")


def run_batch(state: dict[str, Any], item: dict[str, Any]) -> TraceEvent:
    """One iteration of embed_batches as the Map state invokes it; the batch's own trace event."""
    out = invoke("ingest_embed_batch", {"state": state, "item": item})
    event = TraceEvent.model_validate(out["trace"][len(state["trace"])])  # a skip is followed by its timing's row
    assert event.stage == "ingest_embed_batch"
    return event


def test_an_upload_is_keyword_searchable_after_the_index_and_fully_embedded_after_the_batches(
    progressive: Stack,
) -> None:
    ctx = runtime.get_clients().context()
    state = index_upload(progressive, SAMPLE_KEY, demo_doc(SAMPLE_DOC))
    kid, chunks = state["source"]["knowledge_id"], state["counts"]["chunks"]
    assert chunks >= 2 and state["embed_batches"] == [{"start": i, "stop": i + 1} for i in range(chunks)]
    assert next(t["reason"] for t in state["trace"] if t["stage"] == "ingest_embed").startswith("vectors later")
    backfill = vector_backfill(ctx.index)
    assert backfill is not None and len(backfill.missing_vectors(kid)) == chunks
    assert SAMPLE_DOC in search("How do cold starts work on Lambda?")  # by keyword, before any vector

    assert [run_batch(state, item).counts["embedded"] for item in state["embed_batches"]] == [1] * chunks
    final = IngestState.model_validate(invoke("ingest_embed_merge", state))
    assert final.trace[-1].counts == {"vectors_pending": 0, "batches": chunks}
    assert backfill.missing_vectors(kid) == []
    knowledge = ctx.catalog.get_knowledge(kid)
    assert knowledge is not None and knowledge.vectors_pending == ""
    assert ctx.index.stats().vector_spaces == {LOCAL_MODEL: chunks}
    # Found by its vectors alone.
    embedder = ctx.embedder(LOCAL_MODEL)
    assert embedder is not None
    query = embedder.embed_query("How do cold starts work on Lambda?")
    hits = ctx.index.vector_search(query, LOCAL_MODEL, SearchFilter(knowledge_base_ids=(KB_ID,)), 5, 0.0)
    assert hits and {c.knowledge_id for c in ctx.index.fetch([h.chunk_id for h in hits]).values()} == {kid}
    keys = [o["Key"] for o in progressive.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert not [k for k in keys if k.startswith(("pending/", "ingest/"))], keys


def test_a_batch_run_again_adds_no_vector_and_loses_none(progressive: Stack) -> None:
    """Step Functions may retry or redrive an iteration: a batch whose vectors landed embeds nothing the second time,
    and a batch re-run after the merge (the pending chunks gone) does nothing."""
    ctx = runtime.get_clients().context()
    state = index_upload(progressive, SAMPLE_KEY, demo_doc(SAMPLE_DOC))
    first, *others = state["embed_batches"]
    assert run_batch(state, first).counts == {"embedded": 1, "had_vectors": 0, "not_landed": 0}
    generation = ctx.index.stats().vector_spaces
    assert run_batch(state, first).counts == {"embedded": 0, "had_vectors": 1, "not_landed": 0}
    assert ctx.index.stats().vector_spaces == generation == {LOCAL_MODEL: 1}
    for item in others:
        run_batch(state, item)
    invoke("ingest_embed_merge", state)
    again = run_batch(state, first)
    assert again.action == "skip" and again.reason.startswith("done"), again
    kid = state["source"]["knowledge_id"]
    assert vector_backfill(ctx.index).missing_vectors(kid) == []  # type: ignore[union-attr]
    assert ctx.index.stats().vector_spaces == {LOCAL_MODEL: state["counts"]["chunks"]}


def test_a_stale_batch_does_not_land(progressive: Stack) -> None:
    """The document is uploaded again with other content before the first upload's batches run: they stop without
    writing (the record names the new upload's chunks), its merge leaves the new record pending, and the new
    upload's own batches embed it. The index's write guard refuses a vector for a chunk whose content changed."""
    ctx = runtime.get_clients().context()
    old = index_upload(progressive, SAMPLE_KEY, demo_doc(SAMPLE_DOC))
    new = index_upload(progressive, SAMPLE_KEY, demo_doc("hybrid-search.md"))
    kid = new["source"]["knowledge_id"]
    backfill = vector_backfill(ctx.index)
    assert backfill is not None
    pending = backfill.missing_vectors(kid)
    assert len(pending) == new["counts"]["chunks"]

    stale = run_batch(old, old["embed_batches"][0])
    assert stale.action == "skip" and stale.reason.startswith("stale"), stale
    assert backfill.missing_vectors(kid) == pending
    invoke("ingest_embed_merge", old)
    knowledge = ctx.catalog.get_knowledge(kid)
    assert knowledge is not None and knowledge.vectors_pending

    # The narrower race: the write itself gives no vector to a chunk stored with other content than embedded.
    (chunk,) = ctx.index.fetch(pending[:1]).values()
    changed = chunk.model_copy(update={"content": chunk.content + " (as it was before)"})
    vector = np.zeros((1, 384), np.float32)
    vector[0, 0] = 1.0
    assert backfill.add_vectors([changed], vector, LOCAL_MODEL) == 0
    assert backfill.missing_vectors(kid) == pending

    for item in new["embed_batches"]:
        run_batch(new, item)
    invoke("ingest_embed_merge", new)
    assert backfill.missing_vectors(kid) == []
    knowledge = ctx.catalog.get_knowledge(kid)
    assert knowledge is not None and knowledge.vectors_pending == ""
    assert "reciprocal rank fusion" in " ".join(c.content for c in ctx.index.fetch(pending).values()).lower()


def test_on_an_opensearch_domain_the_map_adds_the_vectors_after_the_index(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same machine on OpenSearch (a scripted domain on 127.0.0.1 that runs the guarded update as documented,
    tests/test_opensearch_backfill.py): chunks indexed without vectors, each batch one guarded ``_bulk`` update, a
    re-run batch a no-op, the merge done once no chunk lacks its vector."""
    from support.scripted_http import ScriptedHTTPServer
    from test_opensearch_backfill import Cluster

    cluster = Cluster()
    with ScriptedHTTPServer(fallback=cluster) as server:
        for name, value in {
            "RAGSTEP_INDEX_BACKEND": "opensearch",
            "RAGSTEP_OPENSEARCH_URL": server.url,
            "RAGSTEP_OPENSEARCH_INDEX": "t",
            "RAGSTEP_OPENSEARCH_AUTH": "none",
            "RAGSTEP_EMBED_BATCH_CHUNKS": "1",
        }.items():
            monkeypatch.setenv(name, value)
        runtime.reset()
        embedding_kb()
        state = index_upload(stack, SAMPLE_KEY, demo_doc(SAMPLE_DOC))
        chunks = state["counts"]["chunks"]
        assert chunks >= 2 and len(state["embed_batches"]) == chunks
        assert next(t["reason"] for t in state["trace"] if t["stage"] == "ingest_embed").startswith("vectors later")
        assert len(cluster.docs) == chunks and all("space" not in d for d in cluster.docs.values())

        first, *others = state["embed_batches"]
        assert run_batch(state, first).counts == {"embedded": 1, "had_vectors": 0, "not_landed": 0}
        assert run_batch(state, first).counts == {"embedded": 0, "had_vectors": 1, "not_landed": 0}
        for item in others:
            run_batch(state, item)
        final = IngestState.model_validate(invoke("ingest_embed_merge", state))
        assert final.trace[-1].counts == {"vectors_pending": 0, "batches": chunks}
        field = next(iter(cluster.fields.keys() - {"tenant_id"}))
        assert len(cluster.docs) == chunks and all(len(d[field]) == 384 for d in cluster.docs.values())
        # One guarded update per chunk: the re-run found its chunk done and sent none (the guard's own re-run and
        # stale cases: tests/test_opensearch_backfill.py).
        assert [u[1]["script"]["params"]["space"] for u in cluster.updates] == [LOCAL_MODEL] * chunks


def test_a_long_document_gets_at_most_the_maps_items_in_batches(stack: Stack) -> None:
    from ragstep.pipeline.definitions import EMBED_BATCHES
    from ragstep.stages.ingest.index import embed_batches

    ctx = runtime.get_clients().context()
    assert [(b.start, b.stop) for b in embed_batches(2500, ctx)] == [(0, 1000), (1000, 2000), (2000, 2500)]
    many = embed_batches(2_000_001, ctx)
    assert len(many) == EMBED_BATCHES.max_items and many[-1].stop == 2_000_001
    assert {b.stop - b.start for b in many[:-1]} == {2001}


# -- the sample events ---------------------------------------------------------------------------------------------


def _comparable(state: dict[str, Any]) -> dict[str, Any]:
    # Each run of the first stage records its own ingestion job (ragstep.app.s3_jobs): its id is no sample's.
    kept = {key: value for key, value in state.items() if key != "job_id"}
    return {**kept, "trace": [{**t, "duration_ms": 0.0} for t in state["trace"]]}


def embedding_kb(model: str = LOCAL_MODEL) -> KnowledgeBase:
    """The sample knowledge base, now embedding with ``model`` (its documents get vectors)."""
    catalog = runtime.get_clients().context().catalog
    kb = catalog.get_kb(KB_ID)
    assert kb is not None
    return catalog.update_kb(kb.model_copy(update={"embedding_model": model}))


def step_names() -> list[str]:
    """The name of each top-level step's last stage (a Map's: its merge), as :func:`run_ingest` lists outputs."""
    return [step.merge if isinstance(step, Map) else step.name for step in get_pipeline("ingest").steps]


def samples_from(outputs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The sample event of each stage after the first, from a run's outputs by stage: the output of the step before
    it; for the Map's first stage, that output holding the Map's first item (what the handler makes of the
    ItemSelector's ``{"state", "item"}``), and for its merge that output itself (the Map keeps nothing)."""
    samples: dict[str, dict[str, Any]] = {}
    before: str | None = None
    for step in get_pipeline("ingest").steps:
        if isinstance(step, Map):
            assert before is not None
            state = outputs[before]
            samples[step.steps[0].name] = {**state, step.item: state[step.items][0]}
            samples[step.merge] = state
            before = step.merge
            continue
        if before is not None:
            samples[step.name] = outputs[before]
        before = step.name
    return samples


def test_each_sample_event_is_what_the_stage_before_it_returns(stack: Stack) -> None:
    """events/ingest_parse.json is an EventBridge S3 event for the sample upload into a knowledge base with the local
    model; each handler runs on its own sample event, and the samples are what the run makes of the outputs
    (durations aside): through ingest_index without vectors, then one batch of embed_batches, then the merge."""
    embedding_kb()
    stack.upload(SAMPLE_KEY, demo_doc(SAMPLE_DOC))
    outputs = {
        stage: invoke(stage, json.loads((EVENTS / f"{stage}.json").read_text("utf-8"))) for stage in INGEST_STAGES
    }
    assert outputs["ingest_embed_batch"]["trace"][-1]["counts"]["embedded"] >= 1
    assert outputs[INGEST_STAGES[-1]]["status"] == "indexed"
    for stage, expected in samples_from(outputs).items():
        sample = json.loads((EVENTS / f"{stage}.json").read_text(encoding="utf-8"))
        assert _comparable(sample) == _comparable(expected), f"events/{stage}.json is stale: python {__file__}"


def write_sample_events() -> None:
    """Rewrite events/ingest_*.json (all but ingest_parse.json) from a run on the sample upload (moto, temporary data
    dir, the knowledge base embedding with the local model)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        with stack_environment(Path(tmp), monkeypatch) as env:
            embedding_kb()
            env.upload(SAMPLE_KEY, demo_doc(SAMPLE_DOC))
            outputs = run_ingest(json.loads((EVENTS / "ingest_parse.json").read_text(encoding="utf-8")))
        for stage, produced in samples_from(dict(zip(step_names(), outputs, strict=True))).items():
            path = EVENTS / f"{stage}.json"
            path.write_text(json.dumps(produced, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            print(f"wrote {path}")


if __name__ == "__main__":
    write_sample_events()
