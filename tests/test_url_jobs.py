"""Web pages on AWS, against moto: the API function as API Gateway invokes it starts one ingest execution per page
(Step Functions in moto), the ingest stage functions run that execution's input as the committed machine hands it
over, and the first stage fetches the page from a real HTTP server on 127.0.0.1; the job goes queued -> indexed, or
failed with the fetch's reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.scripted_http import ScriptedHTTPServer, ScriptedResponse
from test_aws_ingest import KB_NAME, REGION, Stack, stack_environment
from test_s3_jobs import WAITING, api, job, run_machine

boto3 = pytest.importorskip("boto3")
pytestmark = pytest.mark.aws

PAGE = "<html><head><title>Tides</title></head><body><p>The spring tide floods the harbour steps.</p></body></html>"


@pytest.fixture
def site() -> Iterator[ScriptedHTTPServer]:
    pages = {"/tides.html": ScriptedResponse(200, PAGE, headers={"Content-Type": "text/html; charset=utf-8"})}
    missing = ScriptedResponse(404, "missing", headers={"Content-Type": "text/plain"})
    with ScriptedHTTPServer(fallback=lambda r: pages.get(r.path, missing)) as server:
        yield server


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, site: ScriptedHTTPServer) -> Iterator[tuple[Stack, str]]:
    from ragstep.app import s3_jobs
    from ragstep.entry.aws import runtime

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "ragstep-api")
    s3_jobs._stepfunctions.cache_clear()
    with stack_environment(tmp_path, monkeypatch) as env:
        client = boto3.client("stepfunctions", region_name=REGION)
        role = "arn:aws:iam::123456789012:role/ingest"
        arn = client.create_state_machine(name="ingest", definition=json.dumps(WAITING), roleArn=role)
        monkeypatch.setenv("RAGSTEP_INGEST_STATE_MACHINE_ARN", arn["stateMachineArn"])
        monkeypatch.setenv("RAGSTEP_URL_ALLOWED_HOSTS", '["127.0.0.1"]')  # the test's site is on loopback
        runtime.reset()
        yield env, arn["stateMachineArn"]
    s3_jobs._stepfunctions.cache_clear()


def executions(machine: str) -> list[tuple[str, dict[str, Any]]]:
    client = boto3.client("stepfunctions", region_name=REGION)
    found = client.list_executions(stateMachineArn=machine)["executions"]
    described = [client.describe_execution(executionArn=e["executionArn"]) for e in found]
    return [(d["executionArn"], json.loads(d["input"])) for d in described]


def test_the_url_route_on_aws_starts_one_ingest_execution_per_page(
    stack: tuple[Stack, str], site: ScriptedHTTPServer
) -> None:
    _, machine = stack
    good, gone = site.url + "/tides.html", site.url + "/gone.html"
    status, body = api("POST", f"/v1/knowledge-bases/{KB_NAME}/urls", {"urls": [good, gone]})
    assert status == 200, body
    assert [(r["url"], r["status"]) for r in body] == [(good, "queued"), (gone, "queued")]
    assert site.requests == []  # the API fetched nothing: the executions do
    started = dict((data["ragstep_url"]["url"], (arn, data)) for arn, data in executions(machine))
    assert set(started) == {good, gone}

    arn, data = started[good]
    states = run_machine(data, arn)
    assert states[-1]["status"] == "indexed"
    done = job(body[0]["job"])
    assert (done["status"], done["execution_arn"], done["error"]) == ("indexed", arn, "")
    assert done["chunks"] > 0
    status, document = api("GET", f"/v1/documents/{body[0]['document']}")
    assert status == 200 and document["status"] == "indexed"

    arn, data = started[gone]
    with pytest.raises(Exception, match="answered 404"):
        run_machine(data, arn, first_only=True)
    failed = job(body[1]["job"])
    assert failed["status"] == "failed" and "answered 404" in failed["error"]
