"""Powertools in the Lambda handlers: metrics (EMF on stdout, flushed per invocation), the tracer (off outside Lambda),
and API keys given as SSM / Secrets Manager references (moto), resolved in one place with caching."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from ragstep.app.ingest import expand_paths, ingest_file
from ragstep.context import Clients, Context
from ragstep.entry.aws import runtime
from ragstep.errors import InputError, StorageError
from ragstep.models import KnowledgeBase, PipelineState
from ragstep.pipeline import transport
from ragstep.settings import Settings, is_secret_ref, resolve_secret
from test_handlers import LambdaContext, function_handler, invoke, load_event

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto")
from aws_lambda_powertools.metrics.provider import cold_start  # noqa: E402
from aws_lambda_powertools.utilities import parameters  # noqa: E402
from moto import mock_aws  # noqa: E402

REGION = "eu-west-1"


@pytest.fixture
def lambda_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh execution environment on the embedded backends, with the template's Powertools settings."""
    for name in [k for k in os.environ if k.startswith(("RAGSTEP_", "POWERTOOLS_", "AWS_LAMBDA_"))]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("AWS_EXECUTION_ENV", raising=False)
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "ragstep-test")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "ragstep-test")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    runtime.reset()
    runtime.logger().registered_handler.stream = sys.stdout
    yield tmp_path / "data"
    runtime.reset()


@pytest.fixture
def demo_docs(lambda_env: Path) -> Context:
    ctx = Clients(Settings(data_dir=lambda_env)).context()
    kb = ctx.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="demo-docs", created_at=time.time()))
    with resources.as_file(resources.files("ragstep").joinpath("data", "demo", "docs")) as folder:
        results = [ingest_file(path, kb, ctx) for path in expand_paths([folder], (".md",))]
    assert results and all(r.status == "indexed" for r in results), results
    return ctx


def emf_documents(out: str) -> list[dict[str, Any]]:
    """The CloudWatch embedded-metric-format documents among the lines on stdout."""
    docs = [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]
    for doc in docs:
        assert doc["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "ragstep-test"
    return docs


def metric_names(doc: dict[str, Any]) -> dict[str, str]:
    return {m["Name"]: m["Unit"] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]}


# -- metrics -------------------------------------------------------------------------------------------------------


def test_each_invocation_flushes_the_stage_metrics(demo_docs: Context, capsys: pytest.CaptureFixture[str]) -> None:
    cold_start.reset_cold_start_flag()  # a new execution environment
    capsys.readouterr()
    event = load_event("chunk_search")
    first = invoke("chunk_search", event)
    second = invoke("chunk_search", event)
    docs = emf_documents(capsys.readouterr().out)

    cold = [d for d in docs if "ColdStart" in d]
    assert len(cold) == 1 and cold[0]["function_name"] == "ragstep-chunk_search", "only the first invocation is cold"
    stages = [d for d in docs if "StageLatency" in d]
    assert len(stages) == 2, "one document per invocation"
    for doc, out in zip(stages, (first, second), strict=True):
        assert doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["stage", "service"]]
        assert (doc["stage"], doc["service"]) == ("chunk_search", "ragstep-test")
        assert metric_names(doc) == {
            "StageLatency": "Milliseconds",
            "Degradations": "Count",
            "Results": "Count",
            "StateBytes": "Bytes",
        }
        run = next(t for t in out["trace"] if t["stage"] == "chunk_search" and t["action"] == "run")
        assert doc["StageLatency"] == [run["duration_ms"]]
        assert doc["Results"] == [len(out["search_results"])] and out["search_results"]
        assert doc["Degradations"] == [0]
        assert doc["StateBytes"] == [transport.wire_size(out)]


def test_degradations_are_counted_from_the_trace(
    demo_docs: Context, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An embedding provider that cannot be reached degrades the search to keywords: one ``degrade`` row."""
    kb = demo_docs.catalog.create_kb(
        KnowledgeBase(id=uuid.uuid4().hex, name="vectors", embedding_model="openai:text-embedding-3-small")
    )
    monkeypatch.setenv("RAGSTEP_EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens on the discard port
    monkeypatch.setenv("RAGSTEP_EMBEDDING_API_KEY", "sk-test")
    monkeypatch.setenv("RAGSTEP_PROVIDER_MAX_RETRIES", "0")
    monkeypatch.setenv("RAGSTEP_PROVIDER_TIMEOUT_S", "2")
    runtime.reset()
    event = load_event("chunk_search")
    event["request"]["knowledge_base_ids"] = [kb.id]
    capsys.readouterr()
    out = invoke("chunk_search", event)
    degraded = [t for t in out["trace"] if t["action"] == "degrade"]
    (doc,) = [d for d in emf_documents(capsys.readouterr().out) if "StageLatency" in d]
    assert degraded and doc["Degradations"] == [len(degraded)]


def test_a_failing_stage_reports_an_error_metric(lambda_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    with pytest.raises(InputError):
        invoke("chunk_search", {"request_id": "x"})
    (doc,) = emf_documents(capsys.readouterr().out)
    assert metric_names(doc) == {"StageErrors": "Count"}
    assert (doc["stage"], doc["StageErrors"], doc["error"]) == ("chunk_search", [1], "InputError")


def test_ingest_stages_report_their_chunks(lambda_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ctx = runtime.get_clients().context()
    kb = ctx.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="docs", created_at=time.time()))
    doc = resources.files("ragstep").joinpath("data", "demo", "docs", "hybrid-search.md").read_bytes()
    ctx.blobs.put("uploads/docs/hybrid-search.md", doc)
    event = load_event("ingest_parse")
    event["detail"]["object"].update(key="uploads/docs/hybrid-search.md", size=len(doc))
    capsys.readouterr()
    state: Any = event
    for stage in ("ingest_parse", "ingest_chunk", "ingest_embed", "ingest_index"):
        state = invoke(stage, state)
    docs = [d for d in emf_documents(capsys.readouterr().out) if "StageLatency" in d]
    assert [d["stage"] for d in docs] == ["ingest_parse", "ingest_chunk", "ingest_embed", "ingest_index"]
    assert docs[-1]["Results"] == [state["counts"]["chunks"]] and state["source"]["knowledge_base_id"] == kb.id


def test_the_api_reports_latency_and_errors_by_executor(demo_docs: Context, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert invoke("api", load_event("api_search"))["statusCode"] == 200
    event = load_event("api_search")
    event["body"] = json.dumps({"query": "cold start", "knowledge_base_ids": ["no-such-kb"]})
    assert invoke("api", event)["statusCode"] == 404
    docs = [d for d in emf_documents(capsys.readouterr().out) if "ApiLatency" in d]
    assert [(d["executor"], d["ApiClientErrors"], d["ApiServerErrors"]) for d in docs] == [
        ("inprocess", [0], [0]),
        ("inprocess", [1], [0]),
    ]


# -- tracing -------------------------------------------------------------------------------------------------------


def test_the_tracer_is_off_outside_lambda_and_the_handlers_run(demo_docs: Context) -> None:
    # Outside Lambda nothing would be recorded, so aws_xray_sdk (~200 ms of a cold start) is never imported for it.
    assert runtime.tracing_active() is False
    assert isinstance(runtime.tracer(), runtime.NullTracer)
    handler = function_handler("chunk_search")
    out = handler(load_event("chunk_search"), LambdaContext("ragstep-chunk_search"))
    assert PipelineState.model_validate(out).search_results


@pytest.mark.parametrize(
    ("environ", "active"),
    [
        ({"LAMBDA_TASK_ROOT": "/var/task"}, True),
        ({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "true"}, False),
        ({"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "0"}, True),
        ({"LAMBDA_TASK_ROOT": "/var/task", "AWS_SAM_LOCAL": "true"}, False),
        ({"LAMBDA_TASK_ROOT": "/var/task", "AWS_CHALICE_CLI_MODE": "true"}, False),
        ({}, False),
    ],
)
def test_tracing_is_active_by_powertools_rule(environ: dict[str, str], active: bool) -> None:
    assert runtime.tracing_active(environ) is active


# Run in a fresh interpreter: patching botocore/httpx/requests for X-Ray is process-wide and permanent, as in Lambda.
XRAY_CHILD = """
import json, runpy, sys
sys.path[:0] = sys.argv[2].split(":")
from test_handlers import LambdaContext, load_event
from ragstep.entry.aws import runtime
handler = runpy.run_path(sys.argv[1], run_name="app")["handler"]
out = handler(load_event("chunk_search"), LambdaContext("ragstep-chunk_search"))
tracer = runtime.tracer()
print(json.dumps({"tracer": type(tracer).__name__, "disabled": tracer.disabled,
                  "results": len(out["search_results"]), "patched": sorted(__import__("aws_xray_sdk.core.patcher",
                  fromlist=["_PATCHED_MODULES"])._PATCHED_MODULES)}))
"""


def test_in_lambda_the_stage_subsegment_reaches_the_xray_daemon(demo_docs: Context) -> None:
    """With tracing active (a Lambda environment) the handler sends its segments to the daemon address Lambda sets:
    here a UDP socket on 127.0.0.1 standing in for the X-Ray daemon."""
    pytest.importorskip("aws_xray_sdk", reason="the dev extra installs aws-xray-sdk, as the dependency layer does")
    import socket
    import subprocess

    root = Path(__file__).resolve().parents[1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as daemon:
        daemon.bind(("127.0.0.1", 0))
        daemon.settimeout(5)
        env = {k: v for k, v in os.environ.items() if k != "POWERTOOLS_TRACE_DISABLED"}
        env |= {
            "LAMBDA_TASK_ROOT": str(root / "functions" / "chunk_search"),
            "AWS_LAMBDA_FUNCTION_NAME": "ragstep-chunk_search",
            "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{daemon.getsockname()[1]}",
            "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
        }
        paths = f"{root / 'shared'}:{root / 'tests'}"
        app = str(root / "functions" / "chunk_search" / "app.py")
        run = subprocess.run(
            [sys.executable, "-c", XRAY_CHILD, app, paths], env=env, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr[-3000:]
        documents = []
        with contextlib.suppress(TimeoutError):
            while not any("## chunk_search" in d for d in documents):
                documents.append(daemon.recv(65536).decode("utf-8"))
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["tracer"] == "Tracer" and report["disabled"] is False and report["results"] > 0
    # Only the ctx that leave the process: AWS, HTTP model providers, OpenSearch; never sqlite3 (the local index)
    assert report["patched"] == ["botocore", "httpx", "requests"]
    stage = [json.loads(d.split("\n", 1)[1]) for d in documents if "## chunk_search" in d]
    assert stage, f"no ## chunk_search subsegment among {len(documents)} datagrams"
    assert stage[0]["annotations"]["stage"] == "chunk_search"


def test_without_aws_xray_sdk_the_tracer_is_a_no_op() -> None:
    tracer = runtime.NullTracer()

    def fn(event: Any, context: Any) -> Any:
        return event

    assert tracer.capture_lambda_handler(fn, capture_response=False) is fn
    with tracer.provider.in_subsegment("## chunk_search") as subsegment:
        subsegment.put_annotation("stage", "chunk_search")
        subsegment.put_metadata("trace", [])


# -- secrets -------------------------------------------------------------------------------------------------------


@pytest.fixture
def aws_secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in [k for k in os.environ if k.startswith(("RAGSTEP_", "AWS_PROFILE", "AWS_SESSION_TOKEN"))]:
        monkeypatch.delenv(name)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)
    parameters.clear_caches()  # Powertools keeps values (and ctx) per process
    with mock_aws():
        session = boto3.session.Session()
        yield session.client("ssm", region_name=REGION), session.client("secretsmanager", region_name=REGION)
    parameters.clear_caches()


def test_secret_references_resolve_through_ssm_and_secrets_manager(
    aws_secrets: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssm, secretsmanager = aws_secrets
    ssm.put_parameter(Name="/ragstep/openai", Value="sk-from-ssm", Type="SecureString")
    secretsmanager.create_secret(Name="ragstep/cohere", SecretString="co-from-secrets-manager")
    secretsmanager.create_secret(Name="ragstep/opensearch", SecretString=json.dumps({"password": "pw", "user": "u"}))
    monkeypatch.setenv("RAGSTEP_EMBEDDING_API_KEY", "ssm:/ragstep/openai")
    monkeypatch.setenv("RAGSTEP_RERANK_API_KEY", "secretsmanager:ragstep/cohere")
    monkeypatch.setenv("RAGSTEP_OPENSEARCH_PASSWORD", "secretsmanager:ragstep/opensearch#password")

    settings = Settings()
    assert settings.embedding_api_key is not None and settings.rerank_api_key is not None
    assert settings.embedding_api_key.get_secret_value() == "sk-from-ssm"
    assert settings.rerank_api_key.get_secret_value() == "co-from-secrets-manager"
    assert settings.opensearch_password is not None and settings.opensearch_password.get_secret_value() == "pw"
    assert "sk-from-ssm" not in repr(settings)
    # A key given as such is used as it is.
    assert Settings(embedding_api_key="sk-plain").embedding_api_key.get_secret_value() == "sk-plain"  # type: ignore[union-attr]
    assert not is_secret_ref("sk-plain") and is_secret_ref("ssm:/x") and is_secret_ref("secretsmanager:x")


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("ssm:/ragstep/missing", "cannot read the SSM parameter '/ragstep/missing' (ParameterNotFound)"),
        ("secretsmanager:ragstep/missing", "Secrets Manager secret 'ragstep/missing' (ResourceNotFoundException)"),
        ("secretsmanager:ragstep/plain#field", "not a JSON object with the field 'field'"),
        ("ssm:", "names no SSM parameter"),
    ],
)
def test_a_reference_that_cannot_be_read_is_a_clear_error(
    aws_secrets: Any, monkeypatch: pytest.MonkeyPatch, ref: str, message: str
) -> None:
    aws_secrets[1].create_secret(Name="ragstep/plain", SecretString="not json")
    monkeypatch.setenv("RAGSTEP_RERANK_API_KEY", ref)
    with pytest.raises(StorageError) as caught:
        Settings()
    assert message in caught.value.message and caught.value.message.startswith("RAGSTEP_RERANK_API_KEY: ")
    assert "not json" not in caught.value.message, "never the secret's value"


def test_values_are_cached_for_max_age(aws_secrets: Any) -> None:
    ssm = aws_secrets[0]
    for name in ("/ragstep/cached", "/ragstep/uncached"):
        ssm.put_parameter(Name=name, Value="v1", Type="SecureString")
    assert resolve_secret("ssm:/ragstep/cached", max_age=300) == "v1"
    assert resolve_secret("ssm:/ragstep/uncached", max_age=0) == "v1"
    for name in ("/ragstep/cached", "/ragstep/uncached"):
        ssm.put_parameter(Name=name, Value="v2", Type="SecureString", Overwrite=True)
    assert resolve_secret("ssm:/ragstep/cached", max_age=300) == "v1", "a cache hit: no call to SSM"
    assert resolve_secret("ssm:/ragstep/uncached", max_age=0) == "v2"


def test_a_warm_function_picks_up_a_rotated_key(
    aws_secrets: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssm = aws_secrets[0]
    ssm.put_parameter(Name="/ragstep/openai", Value="sk-old", Type="SecureString")
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RAGSTEP_EMBEDDING_API_KEY", "ssm:/ragstep/openai")
    monkeypatch.setenv("RAGSTEP_SECRETS_MAX_AGE_S", "0")
    runtime.reset()
    try:
        ctx = runtime.get_clients()
        assert ctx.settings.embedding_api_key.get_secret_value() == "sk-old"  # type: ignore[union-attr]
        assert runtime.get_clients() is ctx, "unchanged: the same ctx"
        ssm.put_parameter(Name="/ragstep/openai", Value="sk-new", Type="SecureString", Overwrite=True)
        rotated = runtime.get_clients()
        assert rotated is not ctx
        assert rotated.settings.embedding_api_key.get_secret_value() == "sk-new"  # type: ignore[union-attr]
    finally:
        runtime.reset()
