"""The generated state machines and the SAM template: in sync with the pipeline declarations, and valid."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.pipeline import Parallel, Pipeline, Stage, asl
from ragstep.pipeline.definitions import DEPLOYED_PIPELINES as PIPELINES  # the ones with state machines
from ragstep.pipeline.definitions import Stream, get_pipeline, payload_limit

ROOT = Path(__file__).resolve().parents[1]
STATEMACHINE = ROOT / "statemachine"
TEMPLATE = ROOT / "template.yaml"
ASL_VALIDATOR = ROOT / ".tools" / "node_modules" / ".bin" / "asl-validator"

# Written out rather than imported from asl.py: the test states what AWS recommends, the code must match it.
# https://docs.aws.amazon.com/step-functions/latest/dg/bp-lambda-serviceexception.html
RECOMMENDED_RETRIER = {
    "ErrorEquals": [
        "Lambda.ServiceException",
        "Lambda.AWSLambdaException",
        "Lambda.SdkClientException",
        "Lambda.ClientExecutionTimeoutException",
        "Lambda.TooManyRequestsException",
    ],
    "IntervalSeconds": 2,
    "MaxAttempts": 6,
    "BackoffRate": 2,
}

# The EXPRESS machines' callers wait (the API gives up at 30 s): one retry of the same errors, delay capped and
# jittered, and the whole execution bounded under those 30 s.
EXPRESS_RETRIER = {
    "ErrorEquals": RECOMMENDED_RETRIER["ErrorEquals"],
    "IntervalSeconds": 1,
    "MaxAttempts": 1,
    "BackoffRate": 2,
    "MaxDelaySeconds": 2,
    "JitterStrategy": "FULL",
}
API_TIMEOUT_S = 30

FANOUT = Pipeline(
    "fanout_example",
    (
        Stage("chunk_search"),
        Parallel("expand", ((Stage("branch_a"),), (Stage("branch_b"), Stage("branch_c")))),
        Stage("filter_top_k"),
    ),
)


def committed(pipeline: Pipeline) -> dict[str, Any]:
    return json.loads((STATEMACHINE / asl.file_name(pipeline)).read_text(encoding="utf-8"))


def scopes(machine: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The ``States`` of a machine and of every branch in it."""
    yield machine["States"]
    for state in machine["States"].values():
        for branch in [*state.get("Branches", []), *([state["ItemProcessor"]] if "ItemProcessor" in state else [])]:
            yield from scopes(branch)


def task_order(machine: dict[str, Any]) -> list[str]:
    """Task names in execution order, following StartAt/Next (branches in declaration order, a Map's iteration)."""
    order: list[str] = []
    name: str | None = machine["StartAt"]
    while name is not None:
        state = machine["States"][name]
        if state["Type"] == "Task":
            order.append(name)
        for branch in [*state.get("Branches", []), *([state["ItemProcessor"]] if "ItemProcessor" in state else [])]:
            order += task_order(branch)
        name = state.get("Next")
    return order


# -- the committed definitions -------------------------------------------------------------------------------------


def test_committed_definitions_match_the_declarations() -> None:
    problems = asl.check(STATEMACHINE, list(PIPELINES.values()))
    assert not problems, "\n".join([*problems, "run: python -m ragstep.pipeline.asl --write statemachine/"])


def test_committed_files_are_pretty_and_end_with_a_newline() -> None:
    for path in STATEMACHINE.glob("*.json"):
        text = path.read_text(encoding="utf-8")
        assert text.endswith("}\n") and text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("pipeline", [*PIPELINES.values(), FANOUT], ids=lambda p: p.name)
def test_every_lambda_task_retries_as_recommended_and_catches_into_a_fail_state(pipeline: Pipeline) -> None:
    machine = asl.definition(pipeline)
    tasks = 0
    for states in scopes(machine):
        for name, state in states.items():
            if state["Type"] != "Task":
                continue
            tasks += 1
            assert state["Resource"].startswith("${") and state["Resource"].endswith("FunctionArn}"), name
            expected = EXPRESS_RETRIER if pipeline.kind == "EXPRESS" else RECOMMENDED_RETRIER
            assert state["Retry"] == [expected], name
            assert len(state["Catch"]) == 1 and state["Catch"][0]["ErrorEquals"] == ["States.ALL"], name
            target = states[state["Catch"][0]["Next"]]
            assert target == {
                "Type": "Fail",
                "Comment": target["Comment"],
                "ErrorPath": "$.Error",
                "CausePath": "$.Cause",
            }, name
    assert tasks == len(pipeline.stage_names()) + sum(isinstance(s, Parallel) for s in pipeline.steps)


@pytest.mark.parametrize("pipeline", list(PIPELINES.values()), ids=lambda p: p.name)
def test_no_retry_chain_outlives_the_caller_of_an_express_machine(pipeline: Pipeline) -> None:
    machine = committed(pipeline)
    if pipeline.kind == "STANDARD":
        assert "TimeoutSeconds" not in machine  # nobody waits for an ingest; Lambda's own timeouts bound each task
        return
    timeout = machine["TimeoutSeconds"]
    assert 0 < timeout < API_TIMEOUT_S
    for states in scopes(machine):
        for name, state in states.items():
            for retrier in state.get("Retry", []):
                delays = sum(
                    min(retrier["MaxDelaySeconds"], retrier["IntervalSeconds"] * retrier["BackoffRate"] ** n)
                    for n in range(retrier["MaxAttempts"])
                )
                assert retrier["MaxAttempts"] <= 2 and delays < timeout, name


def test_errors_raised_by_ragstep_are_never_retried() -> None:
    from ragstep import errors

    ours = {cls.__name__ for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, Exception)}
    assert ours >= {"InputError", "NotFoundError", "StateTooLargeError"}
    for pipeline in PIPELINES.values():
        for states in scopes(committed(pipeline)):
            for state in states.values():
                for retrier in state.get("Retry", []):
                    assert not ours & set(retrier["ErrorEquals"])
                    assert "States.ALL" not in retrier["ErrorEquals"]


@pytest.mark.parametrize("pipeline", list(PIPELINES.values()), ids=lambda p: p.name)
def test_stage_order_matches_the_declaration(pipeline: Pipeline) -> None:
    joins = [f"{step.name} join" for step in pipeline.steps if isinstance(step, Parallel)]
    assert [t for t in task_order(committed(pipeline)) if t not in joins] == pipeline.stage_names()
    assert committed(pipeline)["Comment"].startswith(f"ragstep pipeline {pipeline.name!r}")


def test_a_parallel_step_becomes_a_parallel_state_and_a_join() -> None:
    machine = asl.definition(FANOUT)
    assert task_order(machine) == ["chunk_search", "branch_a", "branch_b", "branch_c", "expand join", "filter_top_k"]
    parallel = machine["States"]["expand"]
    assert parallel["Type"] == "Parallel" and parallel["Next"] == "expand join"
    # The first branch hands the input to the join, which adds each branch's results to it.
    assert parallel["Branches"][0] == {
        "StartAt": "expand input",
        "States": {"expand input": {"Type": "Pass", "End": True}},
    }
    assert [b["StartAt"] for b in parallel["Branches"][1:]] == ["branch_a", "branch_b"]
    assert parallel["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$", "Next": "expand failed"}]
    assert machine["States"]["expand join"]["Resource"] == "${JoinFunctionArn}"
    assert asl.placeholders(FANOUT) == [
        "ChunkSearchFunctionArn",
        "BranchAFunctionArn",
        "BranchBFunctionArn",
        "BranchCFunctionArn",
        "JoinFunctionArn",
        "FilterTopKFunctionArn",
    ]
    # Every Next and Catch target exists in its own scope, and exactly one state per scope ends it.
    for states in scopes(machine):
        for state in states.values():
            for target in [state.get("Next"), *(c["Next"] for c in state.get("Catch", []))]:
                assert target is None or target in states
        assert sum(1 for s in states.values() if s.get("End")) == 1


def test_the_rag_machine_runs_the_parallel_steps_of_rag_stream() -> None:
    """The deployed rag machine understands and searches the question as rag_stream does in-process: two Parallel
    states (the input passed on beside each branch), each followed by its join."""
    machine = committed(PIPELINES["rag"])
    declared = {s.name: s for s in get_pipeline("rag_stream").steps if isinstance(s, Parallel)}
    assert machine["StartAt"] == "understand_query"
    assert machine["States"]["understand_query join"]["Next"] == "search"
    assert machine["States"]["search join"]["Next"] == "chunk_rerank"
    for name, step in declared.items():
        state = machine["States"][name]
        assert state["Type"] == "Parallel" and state["Next"] == f"{name} join"
        assert [b["StartAt"] for b in state["Branches"]] == [f"{name} input", *(b[0].name for b in step.branches)]
        assert machine["States"][f"{name} join"]["Resource"] == "${JoinFunctionArn}"
        assert state["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$", "Next": f"{name} failed"}]


def test_states_of_a_pipeline_with_parallel_steps_share_the_payload_quota() -> None:
    """A Parallel state's output is [input, branch 1, branch 2] in one payload: each state gets a third of the
    quota (less the array's punctuation), so the three always fit; pipelines without Parallel keep it whole."""
    quota = 256 * 1024
    share = payload_limit("rag", quota)
    assert 3 * share + len("[, , ]") <= quota and share > quota // 4
    assert payload_limit("knowledge_search", quota) == payload_limit("no_such_pipeline", quota) == quota


def test_a_stream_step_is_a_task_whose_function_drains_it() -> None:
    """A state machine cannot relay events: the last step's function drains the stream and returns the final state."""
    streamed = Pipeline("streamed_example", (Stage("chunk_search"), Stream("chat_completion_stream")))
    machine = asl.definition(streamed)
    assert task_order(machine) == ["chunk_search", "chat_completion_stream"]
    assert machine["States"]["chat_completion_stream"]["Resource"] == "${ChatCompletionStreamFunctionArn}"
    assert machine["States"]["chat_completion_stream"]["End"] is True
    assert asl.placeholders(streamed) == ["ChunkSearchFunctionArn", "ChatCompletionStreamFunctionArn"]


def test_only_the_non_streaming_chat_pipelines_have_state_machines() -> None:
    from ragstep.pipeline.definitions import CHAT_PIPELINES

    assert {name for name in CHAT_PIPELINES if name in PIPELINES} == {"rag", "chat", "viking"}
    assert all(PIPELINES[name].kind == "EXPRESS" for name in ("rag", "chat", "viking"))
    generated = {path.name for path in STATEMACHINE.glob(f"*{asl.SUFFIX}")}
    assert generated == {asl.file_name(p) for p in PIPELINES.values()}


def test_a_step_name_used_twice_is_refused() -> None:
    twice = Pipeline("twice", (Parallel("both", ((Stage("chunk_search"),), (Stage("chunk_search"),))),))
    with pytest.raises(ValueError, match="chunk_search"):
        asl.definition(twice)


def test_cli_writes_checks_and_removes_stale_definitions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "statemachine"
    assert asl.main(["--check", str(folder)]) == 1
    assert asl.main(["--write", str(folder)]) == 0
    assert asl.main(["--check", str(folder)]) == 0
    capsys.readouterr()
    assert asl.main(["--write", str(folder)]) == 0
    assert capsys.readouterr().out == "", "an unchanged file is not rewritten"

    path = folder / asl.file_name(PIPELINES["ingest"])
    path.write_text(path.read_text(encoding="utf-8").replace('"MaxAttempts": 6', '"MaxAttempts": 3'), encoding="utf-8")
    assert asl.main(["--check", str(folder)]) == 1
    assert "differs" in capsys.readouterr().err

    stale = folder / "retired_pipeline.asl.json"
    stale.write_text(asl.render(FANOUT), encoding="utf-8")
    hand_written = folder / "hand_written.asl.json"
    hand_written.write_text('{"StartAt": "x", "States": {"x": {"Type": "Succeed"}}}\n', encoding="utf-8")
    assert asl.main(["--check", str(folder)]) == 1
    assert "retired_pipeline.asl.json: no pipeline" in capsys.readouterr().err
    assert asl.main(["--write", str(folder)]) == 0
    assert not stale.exists() and hand_written.exists()
    assert asl.main(["--check", str(folder)]) == 0


def test_cli_prints_one_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    assert asl.main(["knowledge_search"]) == 0
    assert json.loads(capsys.readouterr().out) == asl.definition(PIPELINES["knowledge_search"])
    with pytest.raises(SystemExit):
        asl.main(["no_such_pipeline"])


def test_asl_validator_accepts_the_definitions(tmp_path: Path) -> None:
    if not ASL_VALIDATOR.exists():
        pytest.skip("asl-validator is not installed in .tools/ (./dev test installs it with npm)")
    fanout = tmp_path / asl.file_name(FANOUT)
    fanout.write_text(asl.render(FANOUT), encoding="utf-8")
    for path in [*sorted(STATEMACHINE.glob("*.json")), fanout]:
        run = subprocess.run([str(ASL_VALIDATOR), "--json-path", str(path)], capture_output=True, text=True)
        assert run.returncode == 0, f"{path.name}: {run.stdout}{run.stderr}"


def test_asl_validator_rejects_a_broken_definition(tmp_path: Path) -> None:
    """Guards the check above: a validator that accepts anything (wrong flags, no files) would prove nothing."""
    if not ASL_VALIDATOR.exists():
        pytest.skip("asl-validator is not installed in .tools/ (./dev test installs it with npm)")
    broken = asl.definition(PIPELINES["knowledge_search"])
    broken["States"]["chunk_search"]["Next"] = "nowhere"
    path = tmp_path / "broken.asl.json"
    path.write_text(json.dumps(broken), encoding="utf-8")
    run = subprocess.run([str(ASL_VALIDATOR), "--json-path", str(path)], capture_output=True, text=True)
    assert run.returncode != 0


# -- the SAM template ----------------------------------------------------------------------------------------------


def load_template() -> dict[str, Any]:
    pytest.importorskip("yaml", reason="PyYAML (installed with cfn-lint) reads template.yaml")
    from support.stack_template import load

    return load(TEMPLATE)


@pytest.mark.parametrize("pipeline", list(PIPELINES.values()), ids=lambda p: p.name)
def test_template_wires_each_state_machine_to_its_functions(pipeline: Pipeline) -> None:
    resources = load_template()["Resources"]
    machines = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::Serverless::StateMachine"
        and r["Properties"]["DefinitionUri"] == f"statemachine/{asl.file_name(pipeline)}"
    ]
    assert len(machines) == 1, f"template.yaml needs one state machine for {pipeline.name}"
    machine = machines[0]
    assert machine["Type"] == pipeline.kind
    assert set(machine["DefinitionSubstitutions"]) == set(asl.placeholders(pipeline))
    invoked = {p["LambdaInvokePolicy"]["FunctionName"]["Ref"] for p in machine["Policies"] if "LambdaInvokePolicy" in p}
    for stage in pipeline.stage_names():
        logical_id = asl.function_logical_id(stage)
        function = resources.get(logical_id)
        assert function and function["Type"] == "AWS::Serverless::Function", f"no {logical_id} for stage {stage}"
        assert function["Properties"]["CodeUri"].rstrip("/") == f"functions/{stage}"
        assert function["Properties"]["Handler"] == "app.handler"
        arn = {"Fn::GetAtt": [logical_id, "Arn"]}
        if stage == "ingest_parse":  # or its container image with OCR, when ParseOcrImageUri names one
            arn = {"Fn::If": ["ParseWithOcrImage", {"Fn::GetAtt": ["IngestParseOcrFunction", "Arn"]}, arn]}
        assert machine["DefinitionSubstitutions"][asl.function_arn_placeholder(stage)] == arn
        assert logical_id in invoked, f"the state machine may not invoke {logical_id}"
    if any(isinstance(step, Parallel) for step in pipeline.steps):
        join = resources[f"{asl.JOIN_FUNCTION}Function"]["Properties"]
        assert join["CodeUri"].rstrip("/") == "functions/join" and join["Handler"] == "app.handler"
        assert f"{asl.JOIN_FUNCTION}Function" in invoked, "the state machine may not invoke the join"


def test_template_functions_exist_and_the_api_has_outputs() -> None:
    template = load_template()
    resources = template["Resources"]
    for name, resource in resources.items():
        if resource["Type"] == "AWS::Serverless::Function":
            assert (ROOT / resource["Properties"]["CodeUri"] / "app.py").is_file(), name
    for name, resource in resources.items():
        if resource["Type"] == "AWS::Serverless::LayerVersion":
            assert (ROOT / resource["Properties"]["ContentUri"]).is_dir(), name
            if resource["Metadata"]["BuildMethod"] == "makefile":
                makefile = ROOT / resource["Properties"]["ContentUri"] / "Makefile"
                assert f"build-{name}:" in makefile.read_text(encoding="utf-8"), name
    events = resources["ApiFunction"]["Properties"]["Events"]
    assert {e["Type"] for e in events.values()} == {"HttpApi"}  # the API, and its health check (no key needed)
    assert {"ApiUrl", "KnowledgeSearchStateMachineArn"} <= set(template["Outputs"])
    assert template["Globals"]["Function"]["Runtime"] == "python3.12"


def test_xray_tracing_is_one_parameter_for_functions_powertools_and_state_machines() -> None:
    template = load_template()
    assert template["Parameters"]["XRayTracing"]["Default"] == "true"
    assert template["Conditions"]["TraceWithXRay"] == {"Fn::Equals": [{"Ref": "XRayTracing"}, "true"]}
    function = template["Globals"]["Function"]
    assert function["Tracing"] == {"Fn::If": ["TraceWithXRay", "Active", "PassThrough"]}
    # Off, the handlers never build the Powertools Tracer (ragstep.entry.aws.runtime.tracing_active), saving its import
    assert function["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == {
        "Fn::If": ["TraceWithXRay", "false", "true"]
    }
    machines = [r for r in template["Resources"].values() if r["Type"] == "AWS::Serverless::StateMachine"]
    assert len(machines) == len(PIPELINES)
    for machine in machines:
        assert machine["Properties"]["Tracing"] == {"Enabled": {"Fn::If": ["TraceWithXRay", True, False]}}


def test_cfn_lint_passes() -> None:
    try:
        import cfnlint  # noqa: F401
    except ImportError:
        pytest.skip("cfn-lint is not installed (pip install -e '.[dev]')")
    script = Path(sys.executable).with_name("cfn-lint")
    command = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "import sys; from cfnlint.runner import main; sys.exit(main())"]
    )
    run = subprocess.run([*command, str(TEMPLATE)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr


def test_template_api_runs_the_search_state_machine_synchronously() -> None:
    resources = load_template()["Resources"]
    api = resources["ApiFunction"]["Properties"]
    env = api["Environment"]["Variables"]
    assert env["RAGSTEP_EXECUTOR"] == {"Ref": "Executor"}
    assert env["RAGSTEP_STATE_MACHINE_ARN"] == {"Ref": "KnowledgeSearchStateMachine"}
    statements = [s for p in api["Policies"] if isinstance(p, dict) for s in p.get("Statement", [])]
    (start,) = [s for s in statements if "states:StartSyncExecution" in s["Action"]]
    assert start["Action"] == ["states:StartSyncExecution"]
    assert start["Resource"] == {"Ref": "KnowledgeSearchStateMachine"}, "only the search state machine"
    assert load_template()["Parameters"]["Executor"]["AllowedValues"] == ["stepfunctions", "inprocess"]


def test_the_events_consumer_finishes_a_batch_before_the_queue_hands_it_out_again() -> None:
    """The retrieval-events consumer runs its batch's records one after another: a knowledge_search on Step Functions
    ends with the EXPRESS machine's TimeoutSeconds, a rag answer (in-process) may take as long as the answer stage's
    function may. A batch must end inside the function's Timeout, and the queue's visibility timeout be six times
    it (what Lambda's SQS event source asks), or a message is handed out again while it is still being processed."""
    resources = load_template()["Resources"]
    function = resources["RetrievalEventsFunction"]["Properties"]
    source = function["Events"]["Requests"]["Properties"]
    record_budget = max(resources["ChatCompletionFunction"]["Properties"]["Timeout"], asl.EXPRESS_TIMEOUT_SECONDS)
    assert source["BatchSize"] * record_budget <= function["Timeout"]
    assert resources["RetrievalRequestsQueue"]["Properties"]["VisibilityTimeout"] >= 6 * function["Timeout"]
    assert function["Environment"]["Variables"]["RAGSTEP_STATE_MACHINE_ARN"] == {"Ref": "KnowledgeSearchStateMachine"}


def test_template_uploads_start_the_ingest_state_machine() -> None:
    from ragstep.models.blob_keys import TENANTS_PREFIX, UPLOADS_PREFIX

    resources = load_template()["Resources"]
    bucket = resources["BlobBucket"]["Properties"]
    assert bucket["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    machine = resources["IngestStateMachine"]["Properties"]
    assert machine["Type"] == "STANDARD"
    (event,) = machine["Events"].values()
    pattern = event["Properties"]["Pattern"]
    assert (event["Type"], pattern["source"], pattern["detail-type"]) == (
        "EventBridgeRule",
        ["aws.s3"],
        ["Object Created"],
    )
    assert pattern["detail"]["bucket"]["name"] == [{"Ref": "BlobBucket"}]
    # The default tenant's uploads and every other tenant's (the layout events.ingest_state_from_s3_event reads).
    assert pattern["detail"]["object"]["key"] == [
        {"prefix": UPLOADS_PREFIX},
        {"wildcard": f"{TENANTS_PREFIX}*/{UPLOADS_PREFIX}*"},
    ]
    # Ingestion's own products never match: none of its prefixes is under uploads/.
    rules = {r["Id"]: r for r in bucket["LifecycleConfiguration"]["Rules"]}
    assert not any(r.get("Prefix", "").startswith(UPLOADS_PREFIX) for r in rules.values()), "uploads never expire"
    # Only ingest_parse and data_analysis (DuckDB over the stored data files) carry the parsers' layer.
    with_parsers = [
        name
        for name, r in resources.items()
        if r["Type"] == "AWS::Serverless::Function" and {"Ref": "ParserLayer"} in r["Properties"].get("Layers", [])
    ]
    assert sorted(with_parsers) == ["DataAnalysisFunction", "IngestParseFunction"]


def test_template_opensearch_access_is_scoped_and_optional() -> None:
    template = load_template()
    params, resources = template["Parameters"], template["Resources"]
    assert params["CreateOpenSearchDomain"]["Default"] == "false"
    assert params["OpenSearchEndpoint"]["Default"] == "" and params["OpenSearchArn"]["Default"] == ""
    assert resources["OpenSearchDomain"]["Condition"] == "CreateDomain"
    created = resources["CreatedDomainAccessPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert created[0]["Resource"] == [
        {"Fn::GetAtt": ["OpenSearchDomain", "Arn"]},
        {"Fn::Sub": "${OpenSearchDomain.Arn}/*"},
    ]
    (existing,) = resources["ExistingOpenSearchAccessPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    _, aoss, es = existing["Fn::If"]
    assert (aoss["Action"], aoss["Resource"]) == ("aoss:APIAccessAll", {"Ref": "OpenSearchArn"})
    assert all(a.startswith("es:ESHttp") for a in es["Action"])
    assert es["Resource"] == [{"Ref": "OpenSearchArn"}, {"Fn::Sub": "${OpenSearchArn}/*"}]


def test_template_api_keys_are_references_readable_only_under_the_stack_name() -> None:
    template = load_template()
    for name in ("EmbeddingApiKey", "RerankApiKey", "ChatApiKey"):
        assert template["Parameters"][name]["AllowedPattern"] == "^$|^(ssm:|secretsmanager:).+$"
    statements = template["Resources"]["SecretsReadPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    for statement in statements:
        assert "${AWS::StackName}/*" in statement["Resource"]["Fn::Sub"]
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::Serverless::Function":
            assert {"Ref": "SecretsReadPolicy"} in resource["Properties"]["Policies"], name


def test_template_chat_settings_reach_the_functions_that_answer() -> None:
    template = load_template()
    resources = template["Resources"]
    settings = {
        "RAGSTEP_CHAT_PROVIDER": {"Ref": "ChatProvider"},
        "RAGSTEP_CHAT_MODEL": {"Ref": "ChatModel"},
        "RAGSTEP_CHAT_BASE_URL": {"Ref": "ChatBaseUrl"},
        "RAGSTEP_CHAT_API_KEY": {"Ref": "ChatApiKey"},
    }
    # The API and the streaming chat function answer in-process; chat_completion on Step Functions. Only they resolve
    # the chat API key.
    # data_analysis asks the same model for its SQL.
    # The Slack worker and event-driven retrieval (rag) answer in-process too (README: Channels).
    # ingest_graph asks the model for each chunk's entities (knowledge bases with a graph), rag's extract_entities the
    # question's, and its rewrite_query a self-contained question.
    answering = (
        "ApiFunction",
        "ChatStreamFunction",
        "ChatCompletionFunction",
        "DataAnalysisFunction",
        "IngestGraphFunction",
        "RewriteQueryFunction",
        "ExtractEntitiesFunction",
        "SlackWorkerFunction",
        "RetrievalEventsFunction",
        # viking_intent's intent analysis asks the chat model for the typed queries.
        "VikingIntentFunction",
    )
    for name in answering:
        env = resources[name]["Properties"]["Environment"]["Variables"]
        assert {k: env.get(k) for k in settings} == settings, name
    others = [
        name for name, r in resources.items() if r["Type"] == "AWS::Serverless::Function" and name not in answering
    ]
    assert "IntoChatMessageFunction" in others
    for name in others:
        assert not set(settings) & set(resources[name]["Properties"].get("Environment", {}).get("Variables", {}))
    assert not set(settings) & set(template["Globals"]["Function"]["Environment"]["Variables"])
    assert template["Parameters"]["ChatProvider"]["AllowedValues"] == ["extractive", "openai", "bedrock"]
    assert template["Parameters"]["ChatProvider"]["Default"] == "extractive"


def test_template_bedrock_chat_access_only_with_the_bedrock_provider() -> None:
    template = load_template()
    resources = template["Resources"]
    assert template["Conditions"]["UseBedrockChat"] == {"Fn::Equals": [{"Ref": "ChatProvider"}, "bedrock"]}
    policy = resources["BedrockChatPolicy"]
    assert policy["Condition"] == "UseBedrockChat"
    # Converse needs InvokeModel, ConverseStream InvokeModelWithResponseStream; nothing else, on ChatModel only.
    for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
        assert statement["Action"] == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
        assert "${ChatModel}" in json.dumps(statement), statement["Sid"]
    granted = {"Fn::If": ["UseBedrockChat", {"Ref": "BedrockChatPolicy"}, {"Ref": "AWS::NoValue"}]}
    holders = [
        name
        for name, r in resources.items()
        if r["Type"] == "AWS::Serverless::Function" and granted in r["Properties"]["Policies"]
    ]
    assert sorted(holders) == [
        "ApiFunction",
        "ChatCompletionFunction",
        "ChatStreamFunction",
        "DataAnalysisFunction",
        "ExtractEntitiesFunction",
        "IngestGraphFunction",
        "RetrievalEventsFunction",
        "RewriteQueryFunction",
        "SlackWorkerFunction",
        "VikingIntentFunction",
    ]


def test_template_answer_stages_never_touch_the_history_or_the_index() -> None:
    """The state carries the history rounds and the caller saves the turn: the answer stages need neither table."""
    resources = load_template()["Resources"]
    for name in ("IntoChatMessageFunction", "ChatCompletionFunction"):
        policies = resources[name]["Properties"]["Policies"]
        tables = [
            body["TableName"]
            for policy in policies
            if isinstance(policy, dict)
            for kind, body in policy.items()
            if kind.startswith("DynamoDB")
        ]
        assert tables == [], name
        assert "OpenSearch" not in str(policies), name
