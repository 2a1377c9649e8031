"""``RAGSTEP_EXECUTOR=stepfunctions``: knowledge_search on the EXPRESS state machine (ragstep.pipeline.remote).

What moto can and cannot do here (moto 5.2):

* moto does not implement ``StartSyncExecution`` (it answers 404 "Not yet implemented"). The call itself is tested
  with botocore's Stubber on a real client: the request is checked against the Step Functions API model (parameters
  and types) and the responses are shaped as the model says, for every status.
* moto's state machine interpreter (``execute_state_machine``) runs the generated definition, asynchronously
  (``StartExecution`` + ``DescribeExecution``). moto cannot run a Python Lambda function without Docker: its
  Docker-less Lambda answers each invocation from a queue of responses. The queue holds what our handlers returned
  when invoked in order on the same state, so the test shows that the definition calls the four functions in the
  declared order, hands each one exactly the previous one's output (no envelope, no ResultPath), and ends with the
  last one's output; ``execution_result`` then decodes that output (claim check included) into the same final
  state as the in-process executor.
* Not tested anywhere: a stage failure going through the generated Catch/Fail states in moto (its Docker-less Lambda
  cannot raise), so the FAILED responses below are written as the Step Functions and Lambda documentation
  describe them (Error = exception class, Cause = the runtime's JSON), with the exceptions our handlers raise.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest

from ragstep.app.ingest import expand_paths, ingest_file
from ragstep.app.search import knowledge_search, new_state, search_response
from ragstep.context import Context
from ragstep.entry.aws import runtime
from ragstep.errors import InputError, NotFoundError, ProviderError, RagstepError, StateTooLargeError
from ragstep.models import KnowledgeBase, PipelineState, SearchRequest
from ragstep.pipeline import asl, get_pipeline, run_pipeline, transport
from ragstep.pipeline.remote import ExecutionFailedError, execution_result, failure_error, redact, run_remote
from test_asl import STATEMACHINE
from test_aws_stores import CATALOG_SCHEMA
from test_handlers import invoke, load_event

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto")
from botocore.stub import ANY, Stubber  # noqa: E402
from moto import mock_aws  # noqa: E402

pytestmark = pytest.mark.aws

REGION = "eu-west-1"
ACCOUNT = "123456789012"
BUCKET = "ragstep-remote-blobs"
CATALOG_TABLE = "ragstep-remote-catalog"
STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:ragstep-knowledge-search"
STAGES = get_pipeline("knowledge_search").stage_names()
# Over a state's fixed part (~4.5 KB), under the sample search's results: they travel through the bucket (claim check).
SMALL_LIMIT = 6144


@pytest.fixture(scope="module")
def aws_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The API function's environment: catalog in DynamoDB, blobs in S3 (moto), the embedded index, the demo
    documents ingested into "demo-docs", and RAGSTEP_EXECUTOR=stepfunctions. Built once for the module: the tests
    only read what was ingested (each search's claim-check blobs have their own keys)."""
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
        "RAGSTEP_DATA_DIR": str(tmp_path_factory.mktemp("aws-remote") / "data"),
        "RAGSTEP_CATALOG_BACKEND": "dynamodb",
        "RAGSTEP_CATALOG_TABLE": CATALOG_TABLE,
        "RAGSTEP_BLOB_BACKEND": "s3",
        "RAGSTEP_BLOB_BUCKET": BUCKET,
        "RAGSTEP_STATE_LIMIT_BYTES": str(SMALL_LIMIT),
        "RAGSTEP_EXECUTOR": "stepfunctions",
        "RAGSTEP_STATE_MACHINE_ARN": STATE_MACHINE_ARN,
    }
    config = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
    with pytest.MonkeyPatch.context() as monkeypatch, mock_aws(config=config):  # type: ignore[arg-type]
        set_environment(monkeypatch, env)
        session = boto3.session.Session()
        session.client("s3", region_name=REGION).create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        session.client("dynamodb", region_name=REGION).create_table(
            TableName=CATALOG_TABLE, BillingMode="PAY_PER_REQUEST", **CATALOG_SCHEMA
        )
        runtime.reset()
        ctx = runtime.get_clients().context()
        kb = ctx.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="demo-docs", created_at=time.time()))
        with resources.as_file(resources.files("ragstep").joinpath("data", "demo", "docs")) as folder:
            results = [ingest_file(path, kb, ctx) for path in expand_paths([folder], (".md",))]
        assert results and all(r.status == "indexed" for r in results), results
        runtime.reset()
        yield env


def set_environment(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Exactly ``env`` for the RAGSTEP_, POWERTOOLS_ and AWS_ variables."""
    for name in [k for k in os.environ if k.startswith(("RAGSTEP_", "POWERTOOLS_", "AWS_"))]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def aws_env(aws_world: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Context]:
    """A fresh runtime (clients, context) on the module's stack, as a new Lambda environment would start."""
    set_environment(monkeypatch, aws_world)
    runtime.reset()
    runtime.logger().registered_handler.stream = sys.stdout
    yield runtime.get_clients().context()
    runtime.reset()


def first_state(ctx: Context, query: str = "How are keyword and vector results fused?") -> PipelineState:
    request = SearchRequest(query=query, knowledge_base_ids=["demo-docs"])
    return new_state(request, ctx)


def handler_outputs(state: PipelineState, ctx: Context) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The state machine's input for ``state``, and what each stage's Lambda handler returns on the previous one's
    output (what the state machine's tasks return, one after the other)."""
    payload = transport.encode(state, ctx.blobs, ctx.settings.state_limit_bytes)
    outputs, current = [], payload
    for stage in STAGES:
        current = invoke(stage, current)
        outputs.append(current)
    return payload, outputs


def stubbed_client(ctx: Context) -> tuple[Any, Stubber]:
    """A real Step Functions client whose answers come from a Stubber, used by ``ctx`` from now on."""
    client = boto3.session.Session().client("stepfunctions", region_name=REGION)
    stubber = Stubber(client)
    stubber.activate()
    ctx.clients.__dict__["stepfunctions"] = client  # the cached property, set as it would be on first use
    return client, stubber


def sync_response(status: str, **fields: Any) -> dict[str, Any]:
    """A StartSyncExecution response (the fields the API model requires, plus ``fields``)."""
    now = datetime.datetime.now(datetime.UTC)
    return {
        "executionArn": f"arn:aws:states:{REGION}:{ACCOUNT}:express:ragstep-knowledge-search:x:y",
        "stateMachineArn": STATE_MACHINE_ARN,
        "startDate": now,
        "stopDate": now,
        "status": status,
        **fields,
    }


def runtime_cause(exc: BaseException) -> str:
    """The ``Cause`` of a Lambda task whose handler raised ``exc``: the Python runtime's error JSON."""
    return json.dumps(
        {
            "errorMessage": str(exc),
            "errorType": type(exc).__name__,
            "requestId": str(uuid.uuid4()),
            "stackTrace": traceback.format_tb(exc.__traceback__) or ['  File "/var/task/app.py", line 5, in handler\n'],
        }
    )


def without_durations(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "trace": [{**t, "duration_ms": 0.0} for t in body["trace"]]}


# -- the generated definition, executed by moto ------------------------------------------------------------------------


def test_the_generated_definition_chains_the_handlers_on_moto(aws_env: Context) -> None:
    ctx = aws_env
    state = first_state(ctx)
    payload, outputs = handler_outputs(state, ctx)
    assert outputs[0]["offloaded"], "the search results must travel through the bucket for this test"

    # moto's Docker-less Lambda answers the four invocations, in order, with what the handlers returned.
    import requests

    queued = {"results": [json.dumps(o, ensure_ascii=False) for o in outputs], "region": REGION}
    answer = requests.post("http://motoapi.amazonaws.com/moto-api/static/lambda-simple/response", json=queued)
    assert answer.status_code == 201

    pipeline = get_pipeline("knowledge_search")
    arns = {
        asl.function_arn_placeholder(stage): f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:ragstep-{stage}"
        for stage in STAGES
    }
    definition = (STATEMACHINE / asl.file_name(pipeline)).read_text(encoding="utf-8")
    for placeholder, arn in arns.items():  # what DefinitionSubstitutions does
        definition = definition.replace("${" + placeholder + "}", arn)
    sfn = boto3.session.Session().client("stepfunctions", region_name=REGION)
    machine = sfn.create_state_machine(
        name="ragstep-knowledge-search",
        definition=definition,
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/ragstep-knowledge-search",
        type="EXPRESS",
    )
    started = sfn.start_execution(
        stateMachineArn=machine["stateMachineArn"],
        name=state.request_id,
        input=json.dumps(payload, ensure_ascii=False),
    )
    deadline = time.monotonic() + 30
    while (described := sfn.describe_execution(executionArn=started["executionArn"]))["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the execution did not finish"
        time.sleep(0.05)
    assert described["status"] == "SUCCEEDED", described

    events = sfn.get_execution_history(executionArn=started["executionArn"])["events"]
    scheduled = [e["lambdaFunctionScheduledEventDetails"] for e in events if e["type"] == "LambdaFunctionScheduled"]
    assert [s["resource"] for s in scheduled] == list(arns.values()), "one task per stage, in declared order"
    # Each task gets exactly the previous task's output: the state, with nothing wrapped around it.
    assert [json.loads(s["input"]) for s in scheduled] == [payload, *outputs[:-1]]
    assert json.loads(described["output"]) == outputs[-1]

    final = execution_result(described, ctx)
    local = run_pipeline("knowledge_search", state, ctx)
    assert final.offloaded == {} and final.final_results, "offloaded results are read back from the bucket"
    assert [r.id for r in final.final_results] == [r.id for r in local.final_results]
    assert without_durations(search_response(final)) == without_durations(search_response(local))


# -- StartSyncExecution (botocore Stubber: requests and responses checked against the API model) -----------------


def test_run_remote_starts_a_sync_execution_and_decodes_its_output(aws_env: Context) -> None:
    ctx = aws_env
    state = first_state(ctx)
    payload, outputs = handler_outputs(state, ctx)
    _, stubber = stubbed_client(ctx)
    stubber.add_response(
        "start_sync_execution",
        sync_response("SUCCEEDED", output=json.dumps(outputs[-1]), input=json.dumps(payload)),
        expected_params={
            "stateMachineArn": STATE_MACHINE_ARN,
            "name": state.request_id,
            "input": json.dumps(payload, ensure_ascii=False, separators=(",", ":")),
        },
    )
    final = run_remote(state, ctx)
    stubber.assert_no_pending_responses()
    assert final.model_dump(mode="json") == transport.decode(outputs[-1], ctx.blobs).model_dump(mode="json")
    assert final.offloaded == {} and final.final_results


def test_the_api_answers_with_the_state_machine_output(aws_env: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSTEP_STATE_LIMIT_BYTES")  # the Chinese query's trace alone is over the small limit
    runtime.reset()
    ctx = runtime.get_clients().context()
    _, outputs = handler_outputs(first_state(ctx, "Lambda 冷启动 词典加载"), ctx)
    _, stubber = stubbed_client(ctx)
    stubber.add_response(
        "start_sync_execution",
        sync_response("SUCCEEDED", output=json.dumps(outputs[-1], ensure_ascii=False)),
        expected_params={"stateMachineArn": STATE_MACHINE_ARN, "name": ANY, "input": ANY},
    )
    response = invoke("api", load_event("api_search"))
    stubber.assert_no_pending_responses()
    assert response["statusCode"] == 200, response["body"]
    expected = search_response(transport.decode(outputs[-1], ctx.blobs))
    answered = json.loads(response["body"])
    assert answered.pop("usage")["cost"]["assumes"].startswith("AWS, RAGSTEP_EXECUTOR=stepfunctions")
    assert answered == expected
    assert [t["stage"] for t in expected["trace"] if t["action"] == "run"] == STAGES


def _stage_exception(kind: str, ctx: Context) -> BaseException:
    """An exception as a stage's handler raises it (so its Cause is the one the runtime would report)."""
    try:
        if kind == "input":
            invoke("chunk_search", {"request": {"query": "   ", "knowledge_base_ids": ["demo-docs"]}})
        elif kind == "not_found":
            event = load_event("chunk_search")
            event["request"]["knowledge_base_ids"] = ["deleted-meanwhile"]
            invoke("chunk_search", event)
        elif kind == "too_large":
            raise StateTooLargeError("pipeline state is 300000 bytes after offloading results, over the limit")
        elif kind == "provider":
            raise ProviderError("rerank provider cohere failed after 4 retries: HTTP 503")
        else:
            {}["missing"]  # an unexpected exception
    except Exception as exc:
        return exc
    raise AssertionError("the stage did not fail")


@pytest.mark.parametrize(
    ("kind", "status", "code"),
    [
        ("input", 400, "invalid_input"),
        ("not_found", 404, "not_found"),
        ("too_large", 413, "state_too_large"),
        ("provider", 502, "pipeline_failed"),
        ("unexpected", 502, "pipeline_failed"),
    ],
)
def test_a_failed_execution_answers_like_the_in_process_path(
    aws_env: Context, kind: str, status: int, code: str
) -> None:
    ctx = aws_env
    exc = _stage_exception(kind, ctx)
    _, stubber = stubbed_client(ctx)
    # StartSyncExecution answers 200 with status FAILED; the Fail state passes the caught Error and Cause on.
    stubber.add_response(
        "start_sync_execution", sync_response("FAILED", error=type(exc).__name__, cause=runtime_cause(exc))
    )
    response = invoke("api", load_event("api_search"))
    body = json.loads(response["body"])
    assert (response["statusCode"], body["error"]) == (status, code)
    if isinstance(exc, RagstepError) and exc.http_status < 500:
        # The same status and body as the in-process path gives for the same error.
        assert body == type(exc)(exc.message).to_dict()
    elif isinstance(exc, RagstepError):
        assert exc.message in body["message"] and type(exc).__name__ in body["message"]
    else:
        assert body["message"].startswith("knowledge_search failed on Step Functions")
        assert "KeyError" in body["message"] and "missing" not in body["message"], "no internal text leaks"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        pytest.param(sync_response("TIMED_OUT"), "timed out", id="timed-out"),
        pytest.param(
            sync_response("FAILED", error="States.Timeout", cause="The execution timed out."),
            "States.Timeout: The execution timed out.",
            id="states-error",
        ),
        pytest.param(
            sync_response(
                "FAILED",
                error="Sandbox.Timedout",
                cause=json.dumps({"errorMessage": "Task timed out after 30.03 seconds", "errorType": "Sandbox"}),
            ),
            "Sandbox.Timedout; the state machine's execution log has the details",
            id="lambda-timeout",
        ),
    ],
)
def test_other_outcomes_are_502(aws_env: Context, response: dict[str, Any], expected: str) -> None:
    _, stubber = stubbed_client(aws_env)
    stubber.add_response("start_sync_execution", response)
    with pytest.raises(ExecutionFailedError, match=expected) as caught:
        run_remote(first_state(aws_env), aws_env)
    message = caught.value.message
    assert caught.value.http_status == 502
    # The execution is named by its resource part; the API's caller never sees an ARN or the account id.
    assert response["executionArn"].split(f":{ACCOUNT}:", 1)[1] in message
    assert "arn:aws" not in message and ACCOUNT not in message


def test_a_state_machine_that_cannot_be_started_is_a_clear_502(aws_env: Context) -> None:
    _, stubber = stubbed_client(aws_env)
    role = f"arn:aws:sts::{ACCOUNT}:assumed-role/ragstep-api-role/ragstep-api"
    stubber.add_client_error(
        "start_sync_execution",
        service_error_code="AccessDeniedException",
        # What Step Functions says: the caller's and the resource's ARNs, with the account id in both.
        service_message=f"User: {role} is not authorized to perform: states:StartSyncExecution on resource: "
        f"{STATE_MACHINE_ARN} because no identity-based policy allows the states:StartSyncExecution action",
        http_status_code=400,
    )
    response = invoke("api", load_event("api_search"))
    assert response["statusCode"] == 502
    message = json.loads(response["body"])["message"]
    assert "stateMachine:ragstep-knowledge-search" in message and "states:StartSyncExecution" in message
    assert "arn:aws" not in message and ACCOUNT not in message, message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            f"cannot start {STATE_MACHINE_ARN}.", "cannot start stateMachine:ragstep-knowledge-search.", id="sentence"
        ),
        pytest.param(
            f"User: arn:aws:sts::{ACCOUNT}:assumed-role/r/s is not authorized",
            "User: assumed-role/r/s is not authorized",
            id="role",
        ),
        pytest.param("arn:aws:s3:::bucket/key (denied)", "bucket/key (denied)", id="no-account"),
        pytest.param(
            f"account {ACCOUNT} is over its quota; request 0f4c2a1e-1234-4321-8e6f-123456789012",
            "account <account id> is over its quota; request 0f4c2a1e-1234-4321-8e6f-123456789012",
            id="bare-account-id",
        ),
        pytest.param("no ARN here: 1234567890123 ms", "no ARN here: 1234567890123 ms", id="13-digits"),
    ],
)
def test_messages_for_the_caller_carry_no_arn_or_account_id(text: str, expected: str) -> None:
    assert redact(text) == expected
    cause = json.dumps({"errorMessage": text, "errorType": "InputError"})
    assert failure_error("InputError", cause).message == expected
    upstream = failure_error("ProviderError", json.dumps({"errorMessage": text}))
    assert upstream.message.endswith(f"ProviderError: {expected}")


def test_the_executor_needs_the_state_machine_arn(aws_env: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSTEP_STATE_MACHINE_ARN")
    runtime.reset()
    with pytest.raises(RagstepError, match="RAGSTEP_STATE_MACHINE_ARN"):
        knowledge_search(
            SearchRequest(query="cold start", knowledge_base_ids=["demo-docs"]), runtime.get_clients().context()
        )


def test_knowledge_bases_are_resolved_before_the_execution_starts(aws_env: Context) -> None:
    _, stubber = stubbed_client(aws_env)  # no response queued: a call would fail the test
    with pytest.raises(NotFoundError, match="no-such-kb"):
        knowledge_search(SearchRequest(query="cold start", knowledge_base_ids=["no-such-kb"]), aws_env)
    stubber.assert_no_pending_responses()


def test_the_client_is_in_the_state_machine_region(aws_env: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTEP_STATE_MACHINE_ARN", STATE_MACHINE_ARN.replace(REGION, "ap-southeast-2"))
    runtime.reset()
    assert runtime.get_clients().stepfunctions.meta.region_name == "ap-southeast-2"


@pytest.mark.parametrize(
    ("error", "cause", "expected"),
    [
        ("InputError", json.dumps({"errorMessage": "query is empty", "errorType": "InputError"}), InputError),
        ("NotFoundError", json.dumps({"errorMessage": "unknown kb", "errorType": "NotFoundError"}), NotFoundError),
        ("InputError", "not the runtime's JSON", ExecutionFailedError),
        ("", "", ExecutionFailedError),
    ],
)
def test_failure_error_maps_only_what_it_can_read(error: str, cause: str, expected: type[RagstepError]) -> None:
    exc = failure_error(error, cause)
    assert type(exc) is expected
    if expected is not ExecutionFailedError:
        assert exc.message == json.loads(cause)["errorMessage"]
