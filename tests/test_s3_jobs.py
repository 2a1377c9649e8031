"""Ingestion jobs on AWS (issue 22), against moto: the API function as API Gateway invokes it, a presigned PUT, the
upload rule of template.yaml delivering the S3 event, the ingest stage functions chained as the committed ingest
state machine chains them (its first task's input built from the definition's ``Parameters``, with the ARN of an
execution moto started), the catalog in DynamoDB, and ``GET /v1/ingestion-jobs/{id}`` asking Step Functions about an
execution no stage reported the end of.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.entry.aws import runtime
from ragstep.models import KnowledgeBase
from test_asl import ROOT
from test_aws_ingest import INGEST_STAGES, KB_ID, KB_NAME, REGION, Stack, demo_doc, run_ingest, stack_environment
from test_handlers import LambdaContext, function_handler, invoke, load_event

boto3 = pytest.importorskip("boto3")
requests = pytest.importorskip("requests")

pytestmark = pytest.mark.aws

DOC = "serverless-deployment.md"
#: A machine whose executions stay RUNNING in moto (it does not run definitions by default): the ARNs the stages see.
WAITING = {"StartAt": "wait", "States": {"wait": {"Type": "Wait", "Seconds": 3600, "End": True}}}


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    from ragstep.app import s3_jobs

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "ragstep-api")  # the API as it runs on Lambda
    s3_jobs._stepfunctions.cache_clear()  # a client of this test's moto
    with stack_environment(tmp_path, monkeypatch) as env:
        yield env
    s3_jobs._stepfunctions.cache_clear()


def api(method: str, path: str, body: Any = None) -> tuple[int, Any]:
    event: dict[str, Any] = copy.deepcopy(load_event("api_healthz"))
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["requestContext"]["http"]["method"] = method
    event["pathParameters"] = {"proxy": path.lstrip("/")}
    if body is not None:
        event["headers"]["content-type"] = "application/json"
        event["body"] = json.dumps(body)
    response = function_handler("api")(event, LambdaContext(function_name="ragstep-api"))
    return response["statusCode"], json.loads(response["body"])


def job(job_id: str) -> dict[str, Any]:
    status, body = api("GET", f"/v1/ingestion-jobs/{job_id}")
    assert status == 200, body
    return dict(body)


def sfn() -> Any:
    return boto3.client("stepfunctions", region_name=REGION)


def start_execution(event: dict[str, Any]) -> str:
    """An execution of a machine like the ingest one, started with the upload's event, as the upload rule does."""
    client = sfn()
    name = f"ingest-{uuid.uuid4().hex[:8]}"
    role = f"arn:aws:iam::123456789012:role/{name}"
    machine = client.create_state_machine(name=name, definition=json.dumps(WAITING), roleArn=role)
    return str(
        client.start_execution(stateMachineArn=machine["stateMachineArn"], input=json.dumps(event))["executionArn"]
    )


def first_task_input(event: dict[str, Any], execution_arn: str) -> dict[str, Any]:
    """What the committed ingest machine hands its first task: its ``Parameters`` applied to the execution's input."""
    definition = json.loads((ROOT / "statemachine" / "ingest.asl.json").read_text(encoding="utf-8"))
    paths = {"$": event, "$$.Execution.Id": execution_arn}
    parameters = definition["States"][definition["StartAt"]]["Parameters"]
    return {key.removesuffix(".$"): paths[path] for key, path in parameters.items()}


def run_machine(event: dict[str, Any], execution_arn: str, *, first_only: bool = False) -> list[dict[str, Any]]:
    """The stage functions in the machine's order (its Map state once per item); the first one's error ends the run
    (its Catch: a Fail state)."""
    first = invoke(INGEST_STAGES[0], first_task_input(event, execution_arn))
    return [first] if first_only else [first, *run_ingest(first, after_first=True)]


def test_a_presigned_upload_is_followed_by_its_job_from_queued_to_indexed(stack: Stack) -> None:
    status, signed = api("POST", f"/v1/knowledge-bases/{KB_NAME}/uploads", {"filename": DOC, "size": 4})
    assert status == 200, signed
    queued = job(signed["job_id"])
    assert (queued["status"], queued["knowledge_id"], queued["execution_arn"]) == ("queued", signed["document_id"], "")

    body = demo_doc(DOC)
    status, signed = api("POST", f"/v1/knowledge-bases/{KB_NAME}/uploads", {"filename": DOC, "size": len(body)})
    assert status == 200, signed
    put = requests.put(signed["url"], data=body, headers=signed["headers"], timeout=10)
    assert put.status_code == 200, put.text
    (event,) = stack.started()
    arn = start_execution(event)

    run_machine(event, arn, first_only=True)
    # The oldest queued job of the document (the first URL, never used) takes the upload; the other still waits.
    running = job(queued["id"])
    assert (running["status"], running["execution_arn"], running["size"]) == ("running", arn, len(body))
    assert job(signed["job_id"])["status"] == "queued"
    assert job(queued["id"])["status"] == "running"  # asked Step Functions: the execution is still going

    parsed = invoke(INGEST_STAGES[0], first_task_input(event, arn))  # a retried invocation takes the same job
    assert parsed["job_id"] == queued["id"]
    payload = run_ingest(parsed, after_first=True)[-1]
    done = job(queued["id"])
    assert (done["status"], done["error"], done["execution_arn"]) == ("indexed", "", arn)
    assert done["chunks"] == payload["counts"]["chunks"] > 0 and done["finished_at"] >= done["started_at"]
    assert done["content_hash"] == payload["source"]["content_hash"]
    status, document = api("GET", f"/v1/documents/{signed['document_id']}")
    # The document is indexed; its latest job is the second URL's, still waiting for its upload.
    assert (document["chunks"], document["job_id"], document["status"]) == (done["chunks"], signed["job_id"], "queued")

    # The second URL used for the same content: its job ends unchanged.
    put = requests.put(signed["url"], data=body, headers=signed["headers"], timeout=10)
    assert put.status_code == 200, put.text
    (event,) = stack.started()
    run_machine(event, start_execution(event))
    again = job(signed["job_id"])
    assert (again["status"], again["chunks"]) == ("unchanged", 0)
    status, document = api("GET", f"/v1/documents/{signed['document_id']}")
    assert (document["status"], document["chunks"]) == ("unchanged", done["chunks"])


def test_a_file_dropped_into_the_bucket_gets_its_own_job(stack: Stack) -> None:
    """No API call: the event records the job, found from the document it makes; another tenant's is unknown."""
    key = f"uploads/{KB_NAME}/guides/{DOC}"
    stack.upload(key, demo_doc(DOC))
    (event,) = stack.started()
    final = run_machine(event, start_execution(event))[-1]
    status, document = api("GET", f"/v1/documents/{final['source']['knowledge_id']}")
    assert status == 200 and document["job_id"] == final["job_id"]
    dropped = job(document["job_id"])
    assert (dropped["status"], dropped["filename"], dropped["blob_key"]) == ("indexed", DOC, key)

    acme = runtime.get_clients().context("acme")
    acme.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name=KB_NAME, created_at=time.time()))
    stack.upload(f"tenants/acme/uploads/{KB_NAME}/{DOC}", demo_doc(DOC))
    (event,) = stack.started()
    theirs = run_machine(event, start_execution(event))[-1]["job_id"]
    assert acme.catalog.get_job(theirs) is not None
    for job_id in (theirs, "never-made"):
        status, said = api("GET", f"/v1/ingestion-jobs/{job_id}")
        assert (status, said["message"]) == (404, f"unknown ingestion job {job_id!r}")


def test_a_stage_that_fails_fails_the_job_with_its_error_line(stack: Stack) -> None:
    stack.upload(f"uploads/{KB_NAME}/tool.exe", b"MZ\x90\x00")
    (event,) = stack.started()
    with pytest.raises(Exception, match="unsupported file type"):
        run_machine(event, start_execution(event))
    (failed,) = runtime.get_clients().context().catalog.list_jobs(KB_ID)
    assert failed.status == "failed" and failed.finished_at is not None
    assert failed.error.startswith("ingest_parse: ") and "unsupported file type .exe" in failed.error
    assert "Traceback" not in failed.error and job(failed.id)["status"] == "failed"


def test_a_job_whose_execution_ended_unreported_is_brought_up_to_date(stack: Stack) -> None:
    """A stage that crashed (a timeout, out of memory) never said: reading the job asks DescribeExecution."""
    stack.upload(f"uploads/{KB_NAME}/{DOC}", demo_doc(DOC))
    (event,) = stack.started()
    arn = start_execution(event)
    job_id = invoke(INGEST_STAGES[1], run_machine(event, arn, first_only=True)[-1])["job_id"]  # two stages ran
    assert job(job_id)["status"] == "running"
    sfn().stop_execution(executionArn=arn)  # ends ABORTED
    stopped = job(job_id)
    assert stopped["status"] == "failed" and stopped["finished_at"] is not None
    assert stopped["error"] == "the ingestion stopped: its execution ended ABORTED; upload the file again"
    assert job(job_id) == stopped  # recorded: not asked again

    # A presigned upload that never came (or whose event never arrived) fails once its URL is long expired.
    status, signed = api("POST", f"/v1/knowledge-bases/{KB_NAME}/uploads", {"filename": "late.md", "size": 3})
    assert status == 200, signed
    catalog = runtime.get_clients().context().catalog
    waiting = catalog.get_job(signed["job_id"])
    assert waiting is not None and job(waiting.id)["status"] == "queued"
    catalog.put_job(waiting.model_copy(update={"created_at": time.time() - 2 * 3600}))
    late = job(waiting.id)
    assert late["status"] == "failed" and "no upload started this ingestion" in late["error"]


def test_a_succeeded_execution_finishes_a_job_its_last_stage_could_not(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last stage could not record the outcome (the catalog failed then): the execution's output has it."""
    from moto.core.config import default_user_config

    stack.upload(f"uploads/{KB_NAME}/{DOC}", demo_doc(DOC))
    (event,) = stack.started()
    parsed = invoke(INGEST_STAGES[0], first_task_input(event, "placeholder"))
    # the later stages know no job, as if recording had failed
    payload = run_ingest({**parsed, "job_id": ""}, after_first=True)[-1]

    # moto runs this definition: a Pass state ends SUCCEEDED with the last stage's state as its output.
    monkeypatch.setitem(default_user_config["stepfunctions"], "execute_state_machine", True)
    client = sfn()
    passing = {"StartAt": "done", "States": {"done": {"Type": "Pass", "End": True}}}
    machine = client.create_state_machine(
        name="ingest-done", definition=json.dumps(passing), roleArn="arn:aws:iam::123456789012:role/ingest-done"
    )
    arn = client.start_execution(stateMachineArn=machine["stateMachineArn"], input=json.dumps(payload))["executionArn"]
    deadline = time.monotonic() + 30
    while client.describe_execution(executionArn=arn)["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    catalog = runtime.get_clients().context().catalog
    running = catalog.get_job(parsed["job_id"])
    assert running is not None and running.status == "running"
    catalog.put_job(running.model_copy(update={"execution_arn": arn}))

    done = job(running.id)
    assert (done["status"], done["chunks"]) == ("indexed", payload["counts"]["chunks"])
