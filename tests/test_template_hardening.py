"""The template's least privilege, logs and alarms (issue 16): what each function may touch, what lands in CloudWatch
by default, and that a failed ingestion is never silent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ragstep.models.blob_keys import (
    DATA_PREFIX,
    HASHES_PREFIX,
    IMAGES_PREFIX,
    INGEST_PREFIX,
    PENDING_PREFIX,
    SOURCES_PREFIX,
    TENANTS_PREFIX,
    UPLOADS_PREFIX,
)
from ragstep.pipeline.definitions import STAGES
from ragstep.pipeline.transport import OFFLOAD_PREFIX
from test_asl import load_template

TEMPLATE = load_template()
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
FUNCTIONS = {name: r for name, r in RESOURCES.items() if r["Type"] == "AWS::Serverless::Function"}
MACHINES = {name: r for name, r in RESOURCES.items() if r["Type"] == "AWS::Serverless::StateMachine"}


def stage_functions() -> dict[str, dict[str, Any]]:
    """The functions whose code is one pipeline stage (``stage_handler("<stage>")`` in their app.py)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = {}
    for name, resource in FUNCTIONS.items():
        app = (root / resource["Properties"]["CodeUri"] / "app.py").read_text(encoding="utf-8")
        if any(f'stage_handler("{stage}")' in app for stage in STAGES):
            out[name] = resource
    return out


def policy_statements(logical_id: str) -> list[dict[str, Any]]:
    return list(RESOURCES[logical_id]["Properties"]["PolicyDocument"]["Statement"])


def object_prefixes(statements: list[dict[str, Any]]) -> set[str]:
    """The key patterns of ``${BlobBucket.Arn}/<pattern>`` resources in ``statements``."""
    found = set()
    for statement in statements:
        resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        for resource in resources:
            text = resource.get("Fn::Sub", "") if isinstance(resource, dict) else resource
            if text.startswith("${BlobBucket.Arn}/"):
                found.add(text.removeprefix("${BlobBucket.Arn}/"))
    return found


# -- S3, DynamoDB, Bedrock ------------------------------------------------------------------------------------------


def test_stage_functions_reach_only_the_bucket_prefixes_they_use() -> None:
    stages = stage_functions()
    assert len(stages) >= 10
    for name, resource in stages.items():
        policies = resource["Properties"]["Policies"]
        assert not any(isinstance(p, dict) and "S3CrudPolicy" in p for p in policies), name
        expected = {"Ref": "IngestBlobsPolicy"} if name.startswith("Ingest") else {"Ref": "StateBlobsPolicy"}
        assert expected in policies, name
    state = object_prefixes(policy_statements("StateBlobsPolicy"))
    assert state == {f"{OFFLOAD_PREFIX}*", f"{TENANTS_PREFIX}*/{OFFLOAD_PREFIX}*"}
    ingest = object_prefixes(policy_statements("IngestBlobsPolicy"))
    # pending/: the chunks indexed before their vectors (progressive indexing: ingest_index, ingest_embed_batch).
    ours = (UPLOADS_PREFIX, SOURCES_PREFIX, INGEST_PREFIX, DATA_PREFIX, HASHES_PREFIX, IMAGES_PREFIX, PENDING_PREFIX)
    ours += (OFFLOAD_PREFIX,)
    assert ingest == {f"{p}*" for p in ours} | {f"{TENANTS_PREFIX}*/{p}*" for p in ours}
    (listing,) = [s for s in policy_statements("IngestBlobsPolicy") if s["Action"] == "s3:ListBucket"]
    assert set(listing["Condition"]["StringLike"]["s3:prefix"]) <= ingest


def test_only_functions_that_use_the_idempotency_table_may_touch_it() -> None:
    for name, resource in FUNCTIONS.items():
        props = resource["Properties"]
        touches = '"IdempotencyTable"' in json.dumps(props.get("Policies", []))
        configured = "RAGSTEP_IDEMPOTENCY_TABLE" in props.get("Environment", {}).get("Variables", {})
        assert touches == configured, name
    for name in stage_functions():
        assert "IdempotencyTable" not in json.dumps(FUNCTIONS[name]["Properties"]), name


def test_bedrock_is_granted_on_the_configured_models_only() -> None:
    for name, resource in RESOURCES.items():
        for statement in resource.get("Properties", {}).get("PolicyDocument", {}).get("Statement", []):
            body = json.dumps(statement)
            if "foundation-model/*" in body:  # only through the configured inference profile
                assert statement["Condition"]["StringEquals"]["bedrock:InferenceProfileArn"], name
    for policy, model, condition in (
        ("BedrockEmbedPolicy", "${EmbeddingModel}", "UseBedrockEmbedder"),
        ("BedrockRerankPolicy", "${RerankModel}", "UseBedrockReranker"),
        ("BedrockChatPolicy", "${ChatModel}", "UseBedrockChat"),
    ):
        assert RESOURCES[policy]["Condition"] == condition
        invoke = [s for s in policy_statements(policy) if "bedrock:InvokeModel" in json.dumps(s["Action"])]
        assert invoke and all(model in json.dumps(s) for s in invoke), policy
    embedders = {n for n, r in FUNCTIONS.items() if "BedrockEmbedPolicy" in json.dumps(r["Properties"]["Policies"])}
    # The API, the streaming chat function, the Slack worker and event-driven retrieval run stages in-process.
    in_process = {"ApiFunction", "ChatStreamFunction", "SlackWorkerFunction", "RetrievalEventsFunction"}
    # viking_query embeds each typed query for its search of the trees.
    stages = {"ChunkSearchFunction", "IngestEmbedFunction", "IngestEmbedBatchFunction", "VikingQueryFunction"}
    assert embedders == {*stages, *in_process}


# -- logs -----------------------------------------------------------------------------------------------------------


def test_state_machines_log_errors_without_data_unless_asked() -> None:
    assert TEMPLATE["Parameters"]["StateMachineLogData"]["Default"] == "false"
    for name, machine in MACHINES.items():
        logging = machine["Properties"]["Logging"]
        assert logging["Level"] == {"Fn::If": ["LogStateMachineData", "ALL", "ERROR"]}, name
        assert logging["IncludeExecutionData"] == {"Fn::If": ["LogStateMachineData", True, False]}, name
        (destination,) = logging["Destinations"]
        group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
        assert RESOURCES[group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_every_function_has_a_log_group_with_retention(function: str) -> None:
    groups = [
        r["Properties"]
        for r in RESOURCES.values()
        if r["Type"] == "AWS::Logs::LogGroup"
        and r["Properties"].get("LogGroupName") == {"Fn::Sub": f"/aws/lambda/${{{function}}}"}
    ]
    assert len(groups) == 1, f"add a {function}LogGroup (LogGroupName /aws/lambda/${{{function}}})"
    assert groups[0]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert TEMPLATE["Parameters"]["LogRetentionDays"]["Default"] == 30


# -- failures are not silent ----------------------------------------------------------------------------------------


def test_undelivered_uploads_go_to_a_dead_letter_queue_only_the_rule_may_fill() -> None:
    upload = MACHINES["IngestStateMachine"]["Properties"]["Events"]["Upload"]["Properties"]
    assert upload["DeadLetterConfig"] == {"Arn": {"Fn::GetAtt": ["IngestUploadDeadLetterQueue", "Arn"]}}
    rule_name = upload["RuleName"]["Fn::Sub"]
    (statement,) = policy_statements("IngestUploadDeadLetterQueuePolicy")
    assert statement["Principal"] == {"Service": "events.amazonaws.com"} and statement["Action"] == "sqs:SendMessage"
    assert statement["Condition"]["ArnEquals"]["aws:SourceArn"]["Fn::Sub"].endswith(f":rule/{rule_name}")


def test_failed_ingestion_raises_an_alarm_that_may_notify_a_topic() -> None:
    assert TEMPLATE["Parameters"]["AlarmTopicArn"]["Default"] == ""
    alarms = {n: r["Properties"] for n, r in RESOURCES.items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    failed = alarms["IngestFailedAlarm"]
    assert failed["Namespace"] == "AWS/States" and failed["MetricName"] == "ExecutionsFailed"
    assert failed["Dimensions"] == [{"Name": "StateMachineArn", "Value": {"Ref": "IngestStateMachine"}}]
    assert failed["Threshold"] == 1 and failed["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    undelivered = alarms["IngestUploadsUndeliveredAlarm"]
    assert undelivered["Dimensions"][0]["Value"] == {"Fn::GetAtt": ["IngestUploadDeadLetterQueue", "QueueName"]}
    for name in ("IngestFailedAlarm", "IngestTimedOutAlarm", "IngestUploadsUndeliveredAlarm"):
        actions = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
        assert alarms[name]["AlarmActions"] == actions, name
        assert alarms[name]["TreatMissingData"] == "notBreaching", name


def test_the_ocr_image_function_is_the_parse_function_s_twin() -> None:
    """Off by default (ParseOcrImageUri empty); when on, the ingest machine runs it instead of the zip function, with
    the same settings and rights (a plain Lambda function: the Globals are written out, so they must stay equal)."""
    from pathlib import Path

    ocr, zipped = RESOURCES["IngestParseOcrFunction"], FUNCTIONS["IngestParseFunction"]
    assert (Path(__file__).resolve().parents[1] / "containers" / "parse-ocr" / "Dockerfile").is_file()
    assert TEMPLATE["Parameters"]["ParseOcrImageUri"]["Default"] == ""
    assert ocr["Condition"] == "ParseWithOcrImage" and ocr["Properties"]["PackageType"] == "Image"
    assert ocr["Properties"]["Code"] == {"ImageUri": {"Ref": "ParseOcrImageUri"}}
    globals_env = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    own = zipped["Properties"]["Environment"]["Variables"]
    assert ocr["Properties"]["Environment"]["Variables"] == {**globals_env, **own}
    role = RESOURCES["IngestParseOcrRole"]["Properties"]
    for policy in ("IngestBlobsPolicy", "SecretsReadPolicy"):
        assert {"Ref": policy} in role["ManagedPolicyArns"] and {"Ref": policy} in zipped["Properties"]["Policies"]
    machine = MACHINES["IngestStateMachine"]["Properties"]
    assert machine["DefinitionSubstitutions"]["IngestParseFunctionArn"] == {
        "Fn::If": [
            "ParseWithOcrImage",
            {"Fn::GetAtt": ["IngestParseOcrFunction", "Arn"]},
            {"Fn::GetAtt": ["IngestParseFunction", "Arn"]},
        ]
    }


def test_the_deploy_page_lists_every_parameter() -> None:
    from pathlib import Path

    deploy = (Path(__file__).resolve().parents[1] / "docs" / "aws.md").read_text(encoding="utf-8")
    missing = [name for name in TEMPLATE["Parameters"] if f"`{name}`" not in deploy]
    assert not missing, f"docs/aws.md (Deploy on AWS) does not list {missing}"
