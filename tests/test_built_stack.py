"""The stack tested as built (issue 16): ``sam build`` of template.yaml, moto in server mode on 127.0.0.1 executing
the committed state machines (statemachine/*.asl.json with the template's DefinitionSubstitutions), and every Lambda
function the scenarios reach run as a real Python 3.12 process over its built layers and the runtime's boto3, with the
environment template.yaml gives it at the default parameters, and X-Ray tracing on (the default XRayTracing=true).

Bridges in the test (never in the product), each where moto has no such thing: Lambda invocations go to the
functions' processes, StartSyncExecution waits on moto's interpreter, the upload rule delivers to a queue the test
starts ingest executions from, and API Gateway's call of the API function is the HTTP API v2 event it would send
(tests/support/stack_aws.py).

Slow: the first run installs aws-sam-cli into .tools/sam and downloads the layers' wheels (pip's cache keeps them);
later runs rebuild only what changed.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ragstep.pipeline import run_pipeline
from ragstep.pipeline.asl import function_logical_id
from ragstep.pipeline.definitions import get_pipeline, payload_limit
from support.stack_aws import ACCOUNT, MotoStack, install_bridges
from support.stack_build import BuildUnavailable, runtime_boto3, runtime_python, sam_build
from support.stack_lambda import Invocation, LambdaWorker, lambda_environment
from support.stack_template import ROOT, Deployment, load

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.models import PipelineState

pytestmark = [pytest.mark.slow, pytest.mark.aws]

REGION = "eu-west-1"
STACK = "ragstep-test"
STEP_FUNCTIONS_PAYLOAD_LIMIT = 256 * 1024
#: A share of the payload quota under a typed query's state over the guide below (~4.8 KB as Lambda sends it) and
#: over what it cannot offload (~4.3 KB).
VIKING_SMALL_SHARE = 4500
KB_NAME = "espresso-guides"
GUIDE = """# Descaling the espresso machine

Descale the espresso machine every month with a citric acid solution: scale clogs the boiler and the group head.
Run the solution through the steam wand, then rinse with two full tanks of fresh water before pulling a shot.
"""


@dataclass
class Stack:
    deployment: Deployment
    moto: MotoStack
    workers: dict[str, LambdaWorker]  # by physical function name
    invocations: list[Invocation] = field(default_factory=list)
    xray: list[str] = field(default_factory=list)
    api_key: str = ""

    def names(self, logical_id: str) -> dict[str, str]:
        return self.deployment.physical[logical_id]

    def api(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """The API function invoked with the HTTP API (payload 2.0) event API Gateway sends for this request."""
        raw = json.dumps(body) if body is not None else None
        event = {
            "version": "2.0",
            "routeKey": "ANY /{proxy+}",
            "rawPath": path,
            "rawQueryString": "",
            "headers": {
                "authorization": f"Bearer {self.api_key}",
                "content-type": "application/json",
                "host": "api.example.test",
                **(headers or {}),
            },
            "requestContext": {
                "accountId": ACCOUNT,
                "apiId": "api",
                "domainName": "api.example.test",
                "http": {
                    "method": method,
                    "path": path,
                    "protocol": "HTTP/1.1",
                    "sourceIp": "127.0.0.1",
                    "userAgent": "built-stack-test",
                },
                "requestId": uuid.uuid4().hex,
                "routeKey": "ANY /{proxy+}",
                "stage": "$default",
                "time": "23/Nov/2026:00:00:00 +0000",
                "timeEpoch": int(time.time() * 1000),
            },
            "body": raw,
            "isBase64Encoded": False,
        }
        done = self.workers[self.names("ApiFunction")["Ref"]].invoke(event)
        assert done.ok, done.payload[-3000:]
        response = json.loads(done.payload)
        return int(response["statusCode"]), json.loads(response["body"]) if response.get("body") else None

    def upload(self, key: str, body: bytes) -> dict[str, Any]:
        """Put ``key`` in the bucket and run the ingest execution its upload event starts; the execution's end."""
        self.moto.clients["s3"].put_object(Bucket=self.names("BlobBucket")["Ref"], Key=key, Body=body)
        (event,) = self.moto.started_by_uploads()
        return self.moto.run_execution(self.names("IngestStateMachine")["Ref"], event)


def physical_names(template: dict[str, Any]) -> dict[str, dict[str, str]]:
    """What Ref and Fn::GetAtt give for each resource in the test stack (names and ARNs moto will use)."""
    out: dict[str, dict[str, str]] = {}
    for logical_id, resource in template["Resources"].items():
        kind, name = resource["Type"], f"{STACK}-{logical_id}"
        if kind == "AWS::S3::Bucket":
            name = name.lower()
            out[logical_id] = {"Ref": name, "Arn": f"arn:aws:s3:::{name}", "DomainName": f"{name}.s3.amazonaws.com"}
        elif kind == "AWS::Serverless::Function":
            arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{name}"
            out[logical_id] = {"Ref": name, "Arn": arn}
            out[f"{logical_id}Role"] = {"Ref": f"{name}-role", "Arn": f"arn:aws:iam::{ACCOUNT}:role/{name}-role"}
            if resource.get("Properties", {}).get("FunctionUrlConfig"):  # SAM's implicit <Function>Url resource
                url = f"https://{name.lower()}.lambda-url.{REGION}.on.aws/"
                out[f"{logical_id}Url"] = {"Ref": name, "FunctionUrl": url, "FunctionArn": arn}
        elif kind == "AWS::Serverless::StateMachine":
            arn = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{name}"
            out[logical_id] = {"Ref": arn, "Name": name, "Arn": arn}
        elif kind == "AWS::SQS::Queue":
            out[logical_id] = {
                "Ref": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{name}",
                "Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}",
                "QueueName": name,
            }
        else:
            out[logical_id] = {"Ref": name, "Arn": f"arn:aws:{kind.split('::')[1].lower()}:{REGION}:{ACCOUNT}:{name}"}
    return out


@contextlib.contextmanager
def xray_daemon(sink: list[str]) -> Iterator[str]:
    """A UDP socket standing in for the X-Ray daemon; its datagrams (segment documents) go to ``sink``."""
    daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    daemon.bind(("127.0.0.1", 0))
    daemon.settimeout(0.2)
    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                sink.append(daemon.recv(65536).decode("utf-8", "replace"))

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{daemon.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        daemon.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    try:
        python = runtime_python()
        build = sam_build()
        boto3_dir = runtime_boto3()
    except BuildUnavailable as exc:
        pytest.skip(str(exc))
    source = load(ROOT / "template.yaml")
    built = load(build / "template.yaml")
    deployment = Deployment(
        source,
        physical_names(source),
        pseudo={**Deployment(source, {}).pseudo, "AWS::StackName": STACK, "AWS::Region": REGION},
    )
    scratch = tmp_path_factory.mktemp("built-stack")
    xray: list[str] = []
    with pytest.MonkeyPatch.context() as monkeypatch, xray_daemon(xray) as daemon:
        moto = MotoStack(monkeypatch, REGION)
        workers: dict[str, LambdaWorker] = {}
        stack = Stack(deployment, moto, workers, xray=xray)

        def invoke(function: str, event: Any) -> tuple[bool, str]:
            done = workers[function].invoke(event)
            stack.invocations.append(done)
            return done.ok, done.payload

        install_bridges(monkeypatch, invoke)
        try:
            for logical_id, resource in deployment.resources("AWS::DynamoDB::Table").items():
                moto.create_table(deployment.physical[logical_id]["Ref"], resource["Properties"])
            for logical_id in deployment.resources("AWS::S3::Bucket"):
                moto.create_bucket(deployment.physical[logical_id]["Ref"])
            for logical_id in deployment.resources("AWS::Serverless::Function"):
                handler = str(deployment.function_property(logical_id, "Handler"))
                if not handler.startswith("app."):
                    continue  # served by a web adapter (ChatStreamFunction), not a handler the runtime calls
                name = deployment.physical[logical_id]["Ref"]
                timeout = int(deployment.function_property(logical_id, "Timeout"))
                memory = int(deployment.function_property(logical_id, "MemorySize"))
                arn = moto.create_function(name, handler, timeout, memory)
                code = build / built["Resources"][logical_id]["Properties"]["CodeUri"]
                layers = [
                    build / built["Resources"][layer]["Properties"]["ContentUri"] / "python"
                    for layer in deployment.function_layers(logical_id)
                ]
                env = lambda_environment(
                    deployment.function_environment(logical_id),
                    name=name,
                    arn=arn,
                    code=code,
                    handler=handler,
                    memory_mb=memory,
                    endpoint=moto.endpoint,
                    region=REGION,
                    xray_daemon=daemon,
                    scratch=scratch / logical_id,
                )
                # Bridge: StartSyncExecution's "sync-" host prefix cannot resolve against 127.0.0.1.
                env["AWS_DISABLE_HOST_PREFIX_INJECTION"] = "true"
                workers[name] = LambdaWorker(
                    name, python, code, [*layers, boto3_dir], env, timeout, scratch / f"{logical_id}.log"
                )
            for logical_id, resource in deployment.resources("AWS::Serverless::StateMachine").items():
                definition = (ROOT / resource["Properties"]["DefinitionUri"]).read_text(encoding="utf-8")
                for key, value in deployment.definition_substitutions(logical_id).items():
                    definition = definition.replace(f"${{{key}}}", value)
                arn = moto.create_state_machine(
                    deployment.physical[logical_id]["Name"], definition, resource["Properties"]["Type"]
                )
                assert arn == deployment.physical[logical_id]["Ref"]
            upload = source["Resources"]["IngestStateMachine"]["Properties"]["Events"]["Upload"]["Properties"]
            moto.route_uploads(deployment.resolve(upload["Pattern"]))
            stack.api_key = first_api_key(stack, monkeypatch)
            yield stack
        finally:
            # The environments shut down side by side, not one after the other.
            with ThreadPoolExecutor(max_workers=max(1, len(workers))) as pool:
                list(pool.map(LambdaWorker.stop, workers.values()))
            moto.stop()


def first_api_key(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> str:
    """The README's first key (``ragstep keys create`` against the stack's KeysTable), made here by the library."""
    from ragstep.app.keys import create_key
    from ragstep.context import Clients
    from ragstep.settings import Settings

    configure_aws(stack, monkeypatch)
    keys_table = stack.names("KeysTable")["Ref"]
    clients = Clients(Settings(keys_backend="dynamodb", keys_table=keys_table))
    return create_key(clients.keys, "default", ["manage", "search", "chat", "ingest"], name="built-stack").secret


def configure_aws(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ENDPOINT_URL": stack.moto.endpoint,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DISABLE_HOST_PREFIX_INJECTION": "true",
    }.items():
        monkeypatch.setenv(name, value)


def api_clients(stack: Stack, monkeypatch: pytest.MonkeyPatch, scratch: Path) -> Any:
    """Clients configured as the API function is (its template environment), for building states in the test."""
    from ragstep.context import Clients
    from ragstep.entry.aws import runtime

    configure_aws(stack, monkeypatch)
    env = stack.deployment.function_environment("ApiFunction")
    for name in [k for k in env if k.startswith("RAGSTEP_")]:
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(scratch))
    runtime.reset()
    return Clients()


# -- the scenarios -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def knowledge_base(stack: Stack) -> dict[str, Any]:
    status, kb = stack.api("POST", "/v1/knowledge-bases", {"name": KB_NAME})
    assert status == 201, kb
    return dict(kb["knowledge_base"])


def test_an_upload_is_ingested_and_found_by_a_search_through_the_api(
    stack: Stack, knowledge_base: dict[str, Any]
) -> None:
    """Default parameters: an upload under uploads/<knowledge base>/ starts the ingest machine, whose four functions
    index it into the template's default index; the API's search (the knowledge_search machine) finds it."""
    ended = stack.upload(f"uploads/{KB_NAME}/guides/descaling.md", GUIDE.encode("utf-8"))
    assert ended["status"] == "SUCCEEDED", ended
    final = json.loads(ended["output"])
    assert final["status"] == "indexed" and final["counts"]["chunks"] >= 1
    # The upload's ingestion job, recorded by the first stage with the execution's ARN and finished by the last.
    status, job = stack.api("GET", f"/v1/ingestion-jobs/{final['job_id']}")
    assert status == 200, job
    assert (job["status"], job["chunks"], job["execution_arn"]) == (
        "indexed",
        final["counts"]["chunks"],
        ended["executionArn"],
    )

    status, found = stack.api(
        "POST",
        "/v1/knowledge-search",
        {"query": "how often to descale the espresso machine", "knowledge_base_ids": [knowledge_base["id"]]},
    )
    assert status == 200, found
    index = stack.deployment.function_environment("ChunkSearchFunction")["RAGSTEP_INDEX_BACKEND"]
    names = [r["knowledge_filename"] for r in found["results"]]
    assert "descaling.md" in names, f"the default index ({index}) did not find what was ingested: {found}"
    declared = get_pipeline("knowledge_search").stage_names()
    assert [t["stage"] for t in found["trace"] if t["action"] == "run" and t["stage"] in declared] == declared


@contextlib.contextmanager
def function_environment(stack: Stack, logical_id: str, **extra: str) -> Iterator[None]:
    """The function ``logical_id`` reconfigured with ``extra`` environment variables (its execution environment starts
    again, as after a configuration update), and as the template has it afterwards."""
    worker = stack.workers[stack.names(logical_id)["Ref"]]
    template_env = worker.env
    worker.stop()
    worker.env = {**template_env, **extra}
    try:
        yield
    finally:
        worker.stop()
        worker.env = template_env


GRINDING = "\n\n".join(
    f"## {title}\n\n" + " ".join([sentence] * 6)
    for title, sentence in [
        ("Burr grinders", "A conical burr grinder gives an even particle size for espresso, unlike a blade grinder."),
        ("Dialling in", "Grind finer when the shot runs faster than twenty-five seconds, coarser when it chokes."),
        ("Retention", "Purge a few grams after changing the setting: old grounds stay in the chute and go stale."),
    ]
)


def test_an_upload_is_embedded_in_batches_by_the_map_state_after_it_is_keyword_searchable(
    stack: Stack, knowledge_base: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Progressive indexing on the ingest machine (default parameters; batches of two chunks here): ingest_index makes
    the document keyword-searchable and lists the batches; the embed_batches Map state runs ingest_embed_batch once
    per batch in moto's interpreter, then ingest_embed_merge marks the document complete. Every chunk then has its
    vector in the S3-snapshot index, and a vector search finds each one."""
    from ragstep.index_capabilities import scoped_reads, vector_backfill
    from ragstep.ports import SearchFilter

    before = len(stack.invocations)
    with function_environment(stack, "IngestIndexFunction", RAGSTEP_EMBED_BATCH_CHUNKS="2"):
        ended = stack.upload(f"uploads/{KB_NAME}/guides/grinding.md", GRINDING.encode("utf-8"))
    assert ended["status"] == "SUCCEEDED", ended
    final = json.loads(ended["output"])
    chunks, kid = final["counts"]["chunks"], final["source"]["knowledge_id"]
    batches_listed = [{"start": i, "stop": min(i + 2, chunks)} for i in range(0, chunks, 2)]
    assert chunks >= 3 and final["embed_batches"] == batches_listed
    ran = [i for i in stack.invocations[before:] if i.ok]

    def invoked(stage: str) -> list[Invocation]:
        return [i for i in ran if i.function == stack.names(function_logical_id(stage))["Ref"]]

    batches = invoked("ingest_embed_batch")
    assert len(batches) == len(batches_listed) >= 2 and len(invoked("ingest_embed_merge")) == 1
    assert sorted(json.loads(i.payload)["embed_batch"]["start"] for i in batches) == list(range(0, chunks, 2))
    (index_run,) = invoked("ingest_index")
    assert json.loads(index_run.payload)["trace"][-1]["counts"]["vectors_pending"] == chunks

    ctx = api_clients(stack, monkeypatch, tmp_path).context()
    backfill = vector_backfill(scoped_reads(ctx.index, [knowledge_base["id"]]))
    assert backfill is not None and backfill.missing_vectors(kid) == []
    record = ctx.catalog.get_knowledge(kid)
    assert record is not None and record.vectors_pending == ""
    # Every chunk is found by a vector search with its own vector (as written by the batches, read from S3).
    model = knowledge_base["embedding_model"]
    flt = SearchFilter(knowledge_base_ids=(knowledge_base["id"],), knowledge_ids=(kid,))
    ids = [c.id for c in ctx.index.knowledge_chunks(kid, 100)]
    vectors = ctx.index.vectors(ids, model)
    assert len(ids) == len(vectors) == chunks
    for chunk_id, vector in vectors.items():
        assert ctx.index.vector_search(vector, model, flt, 1, 0.0)[0].chunk_id == chunk_id


def test_mcp_lists_its_tools_and_searches_through_the_api_function(
    stack: Stack, knowledge_base: dict[str, Any]
) -> None:
    """MCP over Streamable HTTP at /mcp of the API function (stateless: no session to keep between invocations)."""
    if not any(i.function.endswith("IngestIndexFunction") for i in stack.invocations):
        stack.upload(f"uploads/{KB_NAME}/guides/descaling.md", GUIDE.encode("utf-8"))
    mcp = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
    status, listed = stack.api("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, mcp)
    assert status == 200, listed
    assert {"search", "answer", "list_knowledge_bases"} <= {t["name"] for t in listed["result"]["tools"]}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "search",
            "arguments": {"query": "how often to descale the espresso machine", "knowledge_bases": [KB_NAME]},
        },
    }
    status, found = stack.api("POST", "/mcp", call, mcp)
    assert status == 200, found
    result = found["result"]
    assert result["isError"] is False, result
    assert "descaling.md" in {r["knowledge_filename"] for r in result["structuredContent"]["results"]}


def descaling_question(
    stack: Stack, knowledge_base: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pipeline: str
) -> tuple[Context, PipelineState]:
    """The guide's question as the API puts it to ``pipeline`` (the guide uploaded first when no test has yet)."""
    from ragstep.app.chat import new_chat_state
    from ragstep.models import ChatRequest

    if not any(i.function.endswith("IngestIndexFunction") for i in stack.invocations):
        stack.upload(f"uploads/{KB_NAME}/guides/descaling.md", GUIDE.encode("utf-8"))
    ctx = api_clients(stack, monkeypatch, tmp_path).context()
    question = "How often should the espresso machine be descaled?"
    request = ChatRequest(query=question, knowledge_base_ids=[knowledge_base["id"]], pipeline=pipeline)
    return ctx, new_chat_state(request, ctx)


def run_on_machine(
    stack: Stack, machine: str, ctx: Context, state: PipelineState, limit: int, **start: Any
) -> PipelineState:
    """``state`` through the state machine ``machine`` (a synchronous EXPRESS execution), as the remote executor
    sends it (encoded under ``limit``) and reads its result."""
    from ragstep.pipeline import transport
    from ragstep.pipeline.remote import execution_result

    response = stack.moto.clients["stepfunctions"].start_sync_execution(
        stateMachineArn=stack.names(machine)["Ref"],
        input=json.dumps(transport.encode(state, ctx.blobs, limit)),
        **start,
    )
    return execution_result(response, ctx, state.pipeline)


def test_the_rag_machine_answers_from_the_knowledge_base(
    stack: Stack, knowledge_base: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ctx, state = descaling_question(stack, knowledge_base, monkeypatch, tmp_path, "rag")
    before = len(stack.invocations)
    answered = run_on_machine(
        stack, "RagStateMachine", ctx, state, payload_limit("rag", ctx.settings.state_limit_bytes)
    )
    # The extractive answerer (ChatProvider's default) answers from the passages into_chat_message listed.
    assert answered.chat is not None and answered.chat.answer, answered.chat
    assert any("Descale the espresso machine every month" in p for p in answered.chat.passages), answered.chat
    assert "descaling.md" in {r.name for r in answered.chat.doc_aggs}, answered.chat
    declared = get_pipeline("rag").stage_names()
    assert [t.stage for t in answered.trace if t.action == "run" and t.stage in declared] == declared
    # Both Parallel states ran in moto's interpreter: every branch on its function, each followed by the join.
    ran = [i for i in stack.invocations[before:] if i.ok]
    for stage in ("rewrite_query", "extract_entities", "chunk_search", "entity_search"):
        assert sum(i.function == stack.names(function_logical_id(stage))["Ref"] for i in ran) == 1, stage
    assert sum(i.function == stack.names("JoinFunction")["Ref"] for i in ran) == 2
    # The same state as the in-process executor makes of the same input (the API's Executor=inprocess).
    local = run_pipeline("rag", state, ctx)
    assert answered.chat.answer == local.chat.answer
    assert [r.id for r in answered.merge_results] == [r.id for r in local.merge_results]
    assert [(t.stage, t.action) for t in answered.trace] == [(t.stage, t.action) for t in local.trace]


def test_the_viking_machine_runs_the_typed_queries_as_a_map_state(
    stack: Stack, knowledge_base: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The viking machine in moto's interpreter: each typed query of the plan an iteration of the Map state (its
    ItemSelector's {state, item} to viking_query, the item's outcome kept by OutputPath, the outcomes put back by
    ResultPath), then the merge, the layers and the answer: the in-process executor's state."""
    ctx, state = descaling_question(stack, knowledge_base, monkeypatch, tmp_path, "viking")
    before = len(stack.invocations)
    limit = payload_limit("viking", ctx.settings.state_limit_bytes)
    answered = run_on_machine(stack, "VikingStateMachine", ctx, state, limit)
    assert answered.viking is not None and answered.viking.plan is not None
    planned = len(answered.viking.plan.queries)
    assert planned >= 1 and not answered.viking.outcomes
    assert any(r.knowledge_filename.endswith("descaling.md") for r in answered.final_results), answered.final_results
    ran = [i for i in stack.invocations[before:] if i.ok]
    assert sum(i.function == stack.names("VikingQueryFunction")["Ref"] for i in ran) == planned
    local = run_pipeline("viking", state, ctx)
    assert answered.chat.answer == local.chat.answer
    assert [r.id for r in answered.final_results] == [r.id for r in local.final_results]
    assert [(t.stage, t.action) for t in answered.trace] == [(t.stage, t.action) for t in local.trace]


@contextlib.contextmanager
def state_limit(stack: Stack, stages: list[str], quota: int) -> Iterator[None]:
    """The functions of ``stages`` reconfigured with ``RAGSTEP_STATE_LIMIT_BYTES=quota`` (their execution
    environments start again, as after a configuration update), and as the template has them afterwards."""
    workers = [stack.workers[stack.names(function_logical_id(stage))["Ref"]] for stage in stages]
    template_env = [worker.env for worker in workers]
    for worker in workers:
        worker.stop()
        worker.env = {**worker.env, "RAGSTEP_STATE_LIMIT_BYTES": str(quota)}
    try:
        yield
    finally:
        for worker, env in zip(workers, template_env, strict=True):
            worker.stop()
            worker.env = env


def test_the_viking_machine_offloads_the_typed_queries_outcomes_under_a_small_quota(
    stack: Stack, knowledge_base: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The Map's functions (viking_intent, viking_query) with a quota whose share is under a typed query's state: the
    iteration's outcome, all the Map keeps of it (OutputPath), holds its own references to the bucket, which
    viking_merge reads back from the outcomes the Map put in its input; the answer is the in-process executor's."""
    quota = 6 * VIKING_SMALL_SHARE + 2 * 6
    assert payload_limit("viking", quota) == VIKING_SMALL_SHARE
    ctx, state = descaling_question(stack, knowledge_base, monkeypatch, tmp_path, "viking")
    before = len(stack.invocations)
    with state_limit(stack, ["viking_intent", "viking_query"], quota):
        answered = run_on_machine(stack, "VikingStateMachine", ctx, state, VIKING_SMALL_SHARE, name=state.request_id)

    def ran(stage: str) -> list[Invocation]:
        function = stack.names(function_logical_id(stage))["Ref"]
        return [i for i in stack.invocations[before:] if i.ok and i.function == function]

    queries = ran("viking_query")
    assert queries and all(len(i.payload.encode("utf-8")) <= VIKING_SMALL_SHARE for i in queries)
    assert all(json.loads(i.payload)["viking"]["outcome"]["offloaded"] for i in queries), "no outcome was offloaded"
    (merge,) = ran("viking_merge")
    assert all(o["offloaded"] for o in merge.event["viking"]["outcomes"])
    local = run_pipeline("viking", state, ctx)
    assert answered.chat.answer == local.chat.answer
    assert [r.id for r in answered.final_results] == [r.id for r in local.final_results]
    assert answered.viking == local.viking
    assert [(t.stage, t.action) for t in answered.trace] == [(t.stage, t.action) for t in local.trace]


def test_a_stage_failing_in_a_parallel_branch_fails_the_rag_execution_with_its_error(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """chunk_search raises NotFoundError inside the search Parallel state: the branch's Fail state fails the
    Parallel state, whose catch ends the execution FAILED with the stage's error, as a sequential task would."""
    from ragstep.errors import NotFoundError
    from ragstep.models import PipelineState, SearchRequest
    from ragstep.pipeline.remote import execution_result

    ctx = api_clients(stack, monkeypatch, tmp_path).context()
    state = PipelineState(
        pipeline="rag", request=SearchRequest(query="espresso", knowledge_base_ids=["no-such-knowledge-base"])
    )
    response = stack.moto.clients["stepfunctions"].start_sync_execution(
        stateMachineArn=stack.names("RagStateMachine")["Ref"], name=state.request_id, input=state.model_dump_json()
    )
    assert response["status"] == "FAILED" and response["error"] == "NotFoundError", response
    with pytest.raises(NotFoundError) as caught:
        execution_result(response, ctx, "rag")
    assert caught.value.http_status == 404 and "no-such-knowledge-base" in caught.value.message


def test_a_failing_stage_ends_the_execution_with_its_error_and_http_status(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A state naming a knowledge base that does not exist: chunk_search raises NotFoundError, the execution fails
    with it as its Error, and the API's executor turns that into HTTP 404 {error, message}."""
    from ragstep.errors import NotFoundError
    from ragstep.models import PipelineState, SearchRequest
    from ragstep.pipeline.remote import execution_result

    ctx = api_clients(stack, monkeypatch, tmp_path).context()
    state = PipelineState(
        pipeline="knowledge_search",
        request=SearchRequest(query="espresso", knowledge_base_ids=["no-such-knowledge-base"]),
    )
    response = stack.moto.clients["stepfunctions"].start_sync_execution(
        stateMachineArn=stack.names("KnowledgeSearchStateMachine")["Ref"], input=state.model_dump_json()
    )
    assert response["status"] == "FAILED" and response["error"] == "NotFoundError", response
    with pytest.raises(NotFoundError) as caught:
        execution_result(response, ctx)
    assert caught.value.http_status == 404 and "no-such-knowledge-base" in caught.value.message
    assert ACCOUNT not in caught.value.message  # no ARNs or account ids reach the API's caller


def test_a_large_state_travels_by_claim_check_under_the_payload_quota(stack: Stack) -> None:
    # BM25 only: embedding 600 chunks on this machine's CPU would take minutes, and keywords fill the state as well.
    status, created = stack.api("POST", "/v1/knowledge-bases", {"name": "espresso-logs", "embedding_model": "none"})
    assert status == 201, created
    knowledge_base = created["knowledge_base"]
    paragraphs = [
        f"Espresso note {i}: tamp {i % 7} grams firmer, grind setting {i % 13}, {'crema ' * 40}" for i in range(600)
    ]
    ended = stack.upload("uploads/espresso-logs/espresso-log.md", "\n\n".join(paragraphs).encode("utf-8"))
    assert ended["status"] == "SUCCEEDED", ended
    before = len(stack.invocations)
    status, found = stack.api(
        "POST",
        "/v1/knowledge-search",
        {
            "query": "espresso crema",
            "knowledge_base_ids": [knowledge_base["id"]],
            "overrides": {"embedding_top_k": 500, "keyword_threshold": 0.0},
        },
    )
    assert status == 200, found
    payloads = [i.payload for i in stack.invocations[before:] if i.ok]
    assert payloads and max(len(p.encode("utf-8")) for p in payloads) < STEP_FUNCTIONS_PAYLOAD_LIMIT
    offloaded = [json.loads(p).get("offloaded") for p in payloads]
    assert any(offloaded), "no stage offloaded its results: the state never needed the claim check"
    assert found["results"], found


def test_every_stage_that_ran_was_traced_with_xray(stack: Stack, knowledge_base: dict[str, Any]) -> None:
    """XRayTracing=true (the default): each stage function sends its "## <stage>" subsegment to the daemon."""
    if not stack.invocations:
        stack.upload(f"uploads/{KB_NAME}/guides/descaling.md", GUIDE.encode("utf-8"))
    ran = {
        stage
        for pipeline in ("ingest", "knowledge_search", "rag")
        for stage in get_pipeline(pipeline).stage_names()
        if any(i.function == stack.names(function_logical_id(stage))["Ref"] for i in stack.invocations)
    }
    assert {"ingest_parse", "ingest_index", "chunk_search"} <= ran
    traced: set[str] = set()
    deadline = time.monotonic() + 5  # segments are sent as UDP datagrams: give the last ones time to arrive
    while not ran <= traced and time.monotonic() < deadline:
        documents = [json.loads(d.split("\n", 1)[1]) for d in list(stack.xray) if "\n" in d]
        traced = {d["name"].removeprefix("## ") for d in documents if str(d.get("name", "")).startswith("## ")}
        time.sleep(0.1)
    assert ran <= traced, f"no X-Ray subsegment from {sorted(ran - traced)}"


def test_a_searchs_cost_receipt_agrees_with_the_readmes_cost_model(
    stack: Stack, knowledge_base: dict[str, Any]
) -> None:
    """README "Cost per 1,000 queries" (Executor=stepfunctions, S3-snapshot index) against the receipt of a search
    through the built API. The counted items must match within 5 %: HTTP API $0.0010, Lambda requests $0.0010 (the
    API function and the four stage functions), the Express execution's request $0.0010, DynamoDB $0.0010, S3
    $0.0004. The time-priced items come from this run's measured stage durations, so they are checked against the
    durations themselves (each stage at 1024 MB, the execution at 64 MB in 100 ms steps), not against the README's
    ~0.32 s; the receipt leaves out what the README adds on top (the API function's ~0.6 s of waiting for the
    execution, logs, X-Ray), which is the stated difference: the README's ≈ $0.028 per 1,000 against a receipt of
    ≈ $0.010 at the README's stage times."""
    if not stack.invocations:  # run alone (-k): the guide the other scenarios upload
        stack.upload(f"uploads/{KB_NAME}/guides/descaling.md", GUIDE.encode("utf-8"))
    query = {"query": "how often to descale the espresso machine", "knowledge_base_ids": [knowledge_base["id"]]}
    status, found = stack.api("POST", "/v1/knowledge-search", query)
    assert status == 200, found
    cost = found["usage"]["cost"]
    assert cost["estimate"] is True and "stepfunctions" in cost["assumes"] and "s3snapshot" in cost["assumes"]
    assert cost["total_usd"] == pytest.approx(sum(line["usd"] for line in cost["lines"]), abs=1e-9)
    per_1000: dict[str, float] = {}
    for line in cost["lines"]:
        per_1000[line["item"]] = per_1000.get(line["item"], 0.0) + line["usd"] * 1000
    declared = get_pipeline("knowledge_search").stage_names()
    runs = [t for t in found["trace"] if t["action"] == "run" and t["stage"] in declared and t["duration_ms"] > 0]
    assert len(runs) == len(declared) == 4
    assert per_1000["http_api_request"] == pytest.approx(0.0010, rel=0.05)
    assert per_1000["lambda_request"] == pytest.approx(0.0010, rel=0.05)
    assert per_1000["stepfunctions_express_request"] == pytest.approx(0.0010, rel=0.05)
    assert per_1000["dynamodb_read"] + per_1000["dynamodb_write"] == pytest.approx(0.0010, rel=0.05)
    assert per_1000["s3_get"] == pytest.approx(0.0004, rel=0.05)
    stage_gb_s = sum(math.ceil(t["duration_ms"]) for t in runs) / 1000.0
    assert per_1000["lambda_duration"] == pytest.approx(stage_gb_s * 0.0000166667 * 1000, rel=0.01)
    express_gb_s = math.ceil(sum(t["duration_ms"] for t in runs) / 100) * 0.1 * 64 / 1024
    assert per_1000["stepfunctions_express_duration"] == pytest.approx(express_gb_s * 0.00001667 * 1000, rel=0.01)
    print(
        f"receipt ${cost['total_usd'] * 1000:.4f} per 1,000 (stages {stage_gb_s:.3f} GB-s); README ≈ $0.028 with the "
        "API function's waiting, logs and X-Ray, which the receipt leaves out"
    )
