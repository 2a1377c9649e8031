"""The stack's AWS side in moto, in server mode on 127.0.0.1 (a thread of the test process), with the committed state
machines executed by moto's Step Functions interpreter and their Lambda tasks run by :mod:`support.stack_lambda`.

Two bridges stand in for what moto lacks, here in the test and never in the product:

* moto's Lambda runs functions in Docker: its ``invoke`` is replaced by a call to the function's warm Python 3.12
  worker (the response, or the error document with ``X-Amz-Function-Error``, exactly as Lambda returns them);
* moto's server has no ``StartSyncExecution``: it is answered by starting the execution on the same interpreter and
  waiting for it, with the response fields of the real API.

(moto's EventBridge cannot target a state machine either: :meth:`MotoStack.started_by_uploads` reads the upload
rule's events from an SQS target and the test starts the ingest executions with them.)
"""

from __future__ import annotations

import base64
import io
import json
import socket
import time
import uuid
import zipfile
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config

ACCOUNT = "123456789012"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def install_bridges(monkeypatch: pytest.MonkeyPatch, invoke: Callable[[str, Any], tuple[bool, str]]) -> None:
    """Route moto's Lambda invocations to ``invoke(function name, event) -> (ok, payload)`` and give moto's server
    ``StartSyncExecution`` (both bridges of the module docstring)."""
    from moto.awslambda.models import LambdaFunction
    from moto.core.responses import ActionResult
    from moto.stepfunctions.responses import StepFunctionResponse

    def lambda_invoke(self: Any, body: str, request_headers: Any, response_headers: Any) -> bytes:
        ok, payload = invoke(self.function_name, json.loads(body) if body else {})
        if not ok:
            response_headers["x-amz-function-error"] = "Unhandled"
        response_headers["x-amz-log-result"] = base64.b64encode(b"").decode()
        return payload.encode("utf-8")

    def start_sync_execution(self: Any) -> ActionResult:
        backend = self.stepfunction_backend
        execution = backend.start_execution(
            self._get_param("stateMachineArn"), self._get_param("name"), self._get_param("input", if_none="{}")
        )
        while execution.exec_status.value == "RUNNING":
            time.sleep(0.02)
        status = execution.exec_status.value
        response: dict[str, Any] = {
            "executionArn": execution.exec_arn,
            "stateMachineArn": execution.state_machine.arn,
            "name": execution.name,
            "startDate": execution.start_date,
            "stopDate": execution.stop_date,
            # A synchronous execution ends SUCCEEDED, FAILED or TIMED_OUT (an aborted one reads as FAILED).
            "status": status if status in ("SUCCEEDED", "TIMED_OUT") else "FAILED",
            "input": execution.input_data
            if isinstance(execution.input_data, str)
            else json.dumps(execution.input_data),
        }
        if status == "SUCCEEDED":
            response["output"] = json.dumps(execution.output, separators=(",", ":"))
        if execution.error is not None:
            response["error"] = execution.error
        if execution.cause is not None:
            response["cause"] = execution.cause
        return ActionResult(response)

    monkeypatch.setattr(LambdaFunction, "invoke", lambda_invoke)
    monkeypatch.setattr(StepFunctionResponse, "start_sync_execution", start_sync_execution, raising=False)


class MotoStack:
    """A moto server with the template's tables, bucket, functions, state machines and upload rule."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, region: str) -> None:
        from moto.server import ThreadedMotoServer

        self.region = region
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        # moto's Step Functions interpreter calls Lambda through the server at MOTO_PORT.
        monkeypatch.setenv("MOTO_PORT", str(self.port))
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        import requests

        # Execute the definitions (moto's own ASL interpreter) instead of returning canned results.
        configured = requests.post(
            f"{self.endpoint}/moto-api/config", json={"stepfunctions": {"execute_state_machine": True}}, timeout=10
        )
        configured.raise_for_status()
        session = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region
        )
        # StartSyncExecution's "sync-" host prefix cannot resolve against 127.0.0.1.
        config = Config(inject_host_prefix=False)
        self.clients: dict[str, Any] = {}
        for service in ("s3", "dynamodb", "lambda", "stepfunctions", "events", "sqs", "iam"):
            self.clients[service] = session.client(service, endpoint_url=self.endpoint, config=config)
        self.role = self.clients["iam"].create_role(
            RoleName="ragstep-test-role",
            AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
        )["Role"]["Arn"]
        self.upload_queue = ""

    def stop(self) -> None:
        self.server.stop()

    # -- resources ---------------------------------------------------------------------------------------------------

    def create_table(self, name: str, properties: dict[str, Any]) -> None:
        spec = {k: properties[k] for k in ("KeySchema", "AttributeDefinitions") if k in properties}
        if "GlobalSecondaryIndexes" in properties:
            spec["GlobalSecondaryIndexes"] = properties["GlobalSecondaryIndexes"]
        self.clients["dynamodb"].create_table(TableName=name, BillingMode="PAY_PER_REQUEST", **spec)

    def create_bucket(self, name: str) -> None:
        s3 = self.clients["s3"]
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": self.region})
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        # The template's EventBridgeConfiguration: object events go to the default event bus.
        s3.put_bucket_notification_configuration(
            Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
        )

    def create_function(self, name: str, handler: str, timeout: int, memory: int) -> str:
        # The code moto keeps is never run (invocations go to the worker); Lambda wants a zip all the same.
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("app.py", "# run by the built-stack test's worker\n")
        created = self.clients["lambda"].create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=self.role,
            Handler=handler,
            Code={"ZipFile": buffer.getvalue()},
            Timeout=timeout,
            MemorySize=memory,
        )
        return str(created["FunctionArn"])

    def create_state_machine(self, name: str, definition: str, kind: str) -> str:
        created = self.clients["stepfunctions"].create_state_machine(
            name=name, definition=definition, roleArn=self.role, type=kind
        )
        return str(created["stateMachineArn"])

    def route_uploads(self, pattern: dict[str, Any]) -> None:
        """The template's upload rule, with an SQS target standing in for the ingest state machine."""
        sqs, events = self.clients["sqs"], self.clients["events"]
        self.upload_queue = sqs.create_queue(QueueName="ingest-uploads")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=self.upload_queue, AttributeNames=["QueueArn"])["Attributes"]
        events.put_rule(Name="ingest-uploads", EventPattern=json.dumps(pattern))
        events.put_targets(Rule="ingest-uploads", Targets=[{"Id": "ingest", "Arn": arn["QueueArn"]}])

    def started_by_uploads(self) -> list[dict[str, Any]]:
        """The events the upload rule delivered since the last call: each starts one ingest execution."""
        sqs, out = self.clients["sqs"], []
        while True:
            messages = sqs.receive_message(QueueUrl=self.upload_queue, MaxNumberOfMessages=10).get("Messages", [])
            if not messages:
                return out
            for message in messages:
                out.append(json.loads(message["Body"]))
                sqs.delete_message(QueueUrl=self.upload_queue, ReceiptHandle=message["ReceiptHandle"])

    # -- executions --------------------------------------------------------------------------------------------------

    def run_execution(self, arn: str, payload: Any, timeout_s: float = 300) -> dict[str, Any]:
        """Start an execution (what the upload rule does for the ingest machine) and wait for its end."""
        sfn = self.clients["stepfunctions"]
        name = uuid.uuid4().hex  # as AWS does when a starter names none
        execution = sfn.start_execution(stateMachineArn=arn, name=name, input=json.dumps(payload))["executionArn"]
        deadline = time.monotonic() + timeout_s
        while True:
            described = sfn.describe_execution(executionArn=execution)
            if described["status"] != "RUNNING":
                return dict(described)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{execution} still running after {timeout_s}s")
            time.sleep(0.05)
