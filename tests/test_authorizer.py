"""The HTTP API's Lambda authorizer: template.yaml wiring (REQUEST type, payload 2.0, the Authorization header as
identity source, result caching, stage throttling, reserved concurrency), and ``functions/authorizer/app.py``
invoked as API Gateway invokes it (``events/authorizer.json``) against keys in DynamoDB (moto), as deployed."""

from __future__ import annotations

import copy
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ragstep.app.keys import create_key, revoke_key
from ragstep.app.tenants import create_tenant
from ragstep.context import Clients
from ragstep.entry.aws import runtime
from ragstep.settings import Settings
from test_asl import load_template
from test_handlers import LambdaContext, function_handler, load_event

boto3 = pytest.importorskip("boto3")
moto = pytest.importorskip("moto")
from moto import mock_aws  # noqa: E402

REGION = "eu-west-1"
KEYS_TABLE = "ragstep-test-keys"


# -- the template ---------------------------------------------------------------------------------------------------


def test_the_api_routes_take_keys_through_the_cached_authorizer() -> None:
    template = load_template()
    authorizer = template["Globals"]["HttpApi"]["Auth"]["Authorizers"]["ApiKeyAuthorizer"]
    assert authorizer["FunctionArn"] == {"Fn::GetAtt": ["AuthorizerFunction", "Arn"]}
    assert authorizer["AuthorizerPayloadFormatVersion"] == "2.0" and authorizer["EnableSimpleResponses"] is True
    # Every identity source must be present for API Gateway to call the authorizer: one header, the usual one.
    assert authorizer["Identity"] == {
        "Headers": ["Authorization"],
        "ReauthorizeEvery": {"Ref": "AuthorizerCacheSeconds"},
    }
    assert template["Parameters"]["AuthorizerCacheSeconds"]["MaxValue"] == 3600  # API Gateway's limit
    events = template["Resources"]["ApiFunction"]["Properties"]["Events"]
    assert events["HttpApi"]["Properties"]["Auth"] == {"Authorizer": "ApiKeyAuthorizer"}
    assert events["Healthz"]["Properties"] == {"Path": "/healthz", "Method": "GET"}  # no key for health checks


def test_the_authorizer_reads_only_the_keys_table_and_the_stacks_secrets() -> None:
    props = load_template()["Resources"]["AuthorizerFunction"]["Properties"]
    assert props["CodeUri"].rstrip("/") == "functions/authorizer" and props["Handler"] == "app.handler"
    assert props["Policies"] == [
        {"DynamoDBReadPolicy": {"TableName": {"Ref": "KeysTable"}}},
        {"Ref": "SecretsReadPolicy"},
    ]
    assert props["Environment"]["Variables"] == {
        "RAGSTEP_KEYS_BACKEND": "dynamodb",
        "RAGSTEP_KEYS_TABLE": {"Ref": "KeysTable"},
    }


def test_throttling_and_reserved_concurrency_are_parameters() -> None:
    template = load_template()
    routes = template["Globals"]["HttpApi"]["DefaultRouteSettings"]
    assert routes == {
        "ThrottlingRateLimit": {"Ref": "ApiThrottlingRate"},
        "ThrottlingBurstLimit": {"Ref": "ApiThrottlingBurst"},
    }
    resources = template["Resources"]
    for function, parameter in (
        ("ApiFunction", "ApiReservedConcurrency"),
        ("ChatStreamFunction", "ChatStreamReservedConcurrency"),
    ):
        reserved = resources[function]["Properties"]["ReservedConcurrentExecutions"]["Fn::If"]
        assert reserved[1] == {"Ref": parameter} and reserved[2] == {"Ref": "AWS::NoValue"}  # 0: none reserved
        assert template["Parameters"][parameter]["Default"] == 0


# -- the function, against DynamoDB -----------------------------------------------------------------------------------


@pytest.fixture
def keys_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[Clients]:
    """The deployed authorizer's environment: keys in a DynamoDB table (moto), settings from the environment."""
    for name in [k for k in os.environ if k.startswith(("RAGSTEP_", "POWERTOOLS_", "AWS_"))]:
        monkeypatch.delenv(name)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "RAGSTEP_DATA_DIR": str(tmp_path / "data"),
        "RAGSTEP_KEYS_BACKEND": "dynamodb",
        "RAGSTEP_KEYS_TABLE": KEYS_TABLE,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_SERVICE_NAME": "ragstep-test",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        boto3.client("dynamodb", region_name=REGION).create_table(
            TableName=KEYS_TABLE,
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        )
        runtime.reset()
        try:
            yield Clients(Settings())
        finally:
            runtime.reset()


def invoke(headers: dict[str, str]) -> Any:
    event = copy.deepcopy(load_event("authorizer"))
    event["headers"] = {**{k: v for k, v in event["headers"].items() if k != "authorization"}, **headers}
    return function_handler("authorizer")(event, LambdaContext(function_name="ragstep-authorizer"))


def test_a_valid_key_is_authorized_with_its_tenant_and_scopes(keys_table: Clients) -> None:
    create_tenant(keys_table.keys, "acme")
    secret = create_key(keys_table.keys, "acme", ["search", "chat"]).secret
    prefix = secret.split("_")[1]
    expected = {"isAuthorized": True, "context": {"tenant_id": "acme", "key_prefix": prefix, "scopes": "search,chat"}}
    assert invoke({"authorization": f"Bearer {secret}"}) == expected
    assert invoke({"x-api-key": secret}) == expected  # the function reads X-API-Key too (README: API keys on AWS)
    assert invoke({"Authorization": f"Bearer {secret}"}) == expected  # a hand-written event's header case


def test_bad_keys_are_refused_without_saying_why(keys_table: Clients, capsys: pytest.CaptureFixture[str]) -> None:
    # Powertools keeps the stdout of the moment its logger was made: point it at this test's captured one.
    runtime.logger().registered_handler.stream = sys.stdout
    store = keys_table.keys
    live = create_key(store, "default", ["search"]).secret
    revoked = create_key(store, "default", ["search"]).secret
    revoke_key(store, revoked.split("_")[1])
    expired = create_key(store, "default", ["search"], expires_at=time.time() - 60, now=time.time() - 120).secret
    unknown = live[: -len("x")] + ("A" if live[-1] != "A" else "B")
    denied = {"isAuthorized": False}
    for headers in (
        {},
        {"authorization": "Basic dXNlcjpwYXNz"},
        {"authorization": "Bearer not-a-key"},
        {"authorization": f"Bearer {unknown}"},
        {"authorization": f"Bearer {revoked}"},
        {"authorization": f"Bearer {expired}"},
        {"authorization": f"Bearer {live}", "x-api-key": revoked},
    ):
        assert invoke(headers) == denied, headers
    logs = capsys.readouterr().out
    assert "API key refused" in logs
    for secret in (live, revoked, expired, unknown):
        assert secret.split("_", 2)[2] not in logs  # never the secret part of a key in the logs
