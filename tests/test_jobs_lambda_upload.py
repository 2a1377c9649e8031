"""A small direct upload on AWS Lambda: ``POST /v1/knowledge-bases/{kb}/documents`` through the API function as API
Gateway invokes it (the multipart body base64-encoded, payload format 2.0), against S3 on moto: the file lands where a
presigned PUT puts it (its S3 event starts the ingest state machine), and the answer names the document it becomes."""

from __future__ import annotations

import base64
import copy
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.context import Clients
from ragstep.entry.aws import runtime
from ragstep.models import KnowledgeBase
from ragstep.models.blob_keys import split_upload_key
from ragstep.settings import Settings
from test_handlers import LambdaContext, data_dir, function_handler, load_event

moto = pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")

__all__ = ["data_dir"]  # the fixture, from the handler tests: a Lambda-like environment per test
BUCKET = "ragstep-test-uploads"
BOUNDARY = "----ragstep-test-boundary"
NOTES = b"# Notes\n\nLambda functions freeze between invocations.\n"


@pytest.fixture
def on_lambda(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KnowledgeBase]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_LAMBDA_FUNCTION_NAME": "ragstep-api",
        "RAGSTEP_BLOB_BACKEND": "s3",
        "RAGSTEP_BLOB_BUCKET": BUCKET,
    }.items():
        monkeypatch.setenv(name, value)
    with moto.mock_aws():
        boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        runtime.reset()
        catalog = Clients(Settings()).context().catalog
        yield catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="docs", created_at=time.time()))
        runtime.reset()


def multipart_event(files: dict[str, bytes], **fields: str) -> dict[str, Any]:
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
        f"Content-Type: text/markdown\r\n\r\n".encode()
        + data
        + b"\r\n"
        for name, data in files.items()
    ]
    parts += [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    body = b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()
    event: dict[str, Any] = copy.deepcopy(load_event("api_healthz"))
    path = "/v1/knowledge-bases/docs/documents"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = "POST"
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    event["headers"]["content-type"] = f"multipart/form-data; boundary={BOUNDARY}"
    event["body"] = base64.b64encode(body).decode()  # API Gateway base64-encodes a binary body
    event["isBase64Encoded"] = True
    return event


def invoke(event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = function_handler("api")(event, LambdaContext(function_name="ragstep-api"))
    return response["statusCode"], json.loads(response["body"])


def test_a_small_upload_goes_to_s3_where_its_event_ingests_it(on_lambda: KnowledgeBase) -> None:
    status, body = invoke(multipart_event({"notes.md": NOTES}))
    assert status == 202, body
    key = f"uploads/{on_lambda.id}/notes.md"
    stored = boto3.client("s3").get_object(Bucket=BUCKET, Key=key)
    assert stored["Body"].read() == NOTES and stored["ServerSideEncryption"] == "AES256"
    assert split_upload_key(key, "", "test") == ("default", on_lambda.id, "notes.md")  # what the S3 event reads
    (job,) = body["jobs"]  # queued until the upload's S3 event starts the ingest machine (tests/test_s3_jobs.py)
    assert job["status"] == "queued" and job["blob_key"] == f"uploads/{on_lambda.id}/notes.md"
    assert body["documents"] == [job["knowledge_id"]]
    # The same document id a presigned upload of the file answers with.
    handler = function_handler("api")
    presign = copy.deepcopy(load_event("api_healthz"))
    path = "/v1/knowledge-bases/docs/uploads"
    presign["rawPath"] = presign["requestContext"]["http"]["path"] = path
    presign["requestContext"]["http"]["method"] = "POST"
    presign["headers"]["content-type"] = "application/json"
    presign["body"] = json.dumps({"filename": "notes.md", "size": len(NOTES)})
    answer = json.loads(handler(presign, LambdaContext(function_name="ragstep-api"))["body"])
    assert answer["document_id"] == body["documents"][0]


def test_bad_direct_uploads_on_lambda_store_nothing(on_lambda: KnowledgeBase) -> None:
    refused = {
        "a tag": invoke(multipart_event({"notes.md": NOTES}, tag="2026")),
        "chunking options": invoke(multipart_event({"notes.md": NOTES}, chunk_size="300")),
        "an empty file": invoke(multipart_event({"notes.md": NOTES, "empty.md": b""})),
        "a folder in the name": invoke(multipart_event({"../notes.md": NOTES})),
    }
    assert {why: status for why, (status, _) in refused.items()} == dict.fromkeys(refused, 400)
    assert "cannot travel with it" in refused["a tag"][1]["message"]
    assert boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("KeyCount", 0) == 0
