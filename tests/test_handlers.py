"""The Lambda handlers, invoked as Lambda invokes them: the sample events in ``events/``, a context object, and the
handler that ``functions/<name>/app.py`` exposes, against a data dir with the demo documents ingested."""

from __future__ import annotations

import ast
import json
import os
import runpy
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from ragstep.app.ingest import expand_paths, ingest_file
from ragstep.context import Clients, Context
from ragstep.entry.aws import runtime
from ragstep.entry.aws.stage import join_handler
from ragstep.errors import InputError, NotFoundError, RagstepError
from ragstep.models import KnowledgeBase, PipelineState, SearchResult, TraceEvent
from ragstep.models.wire import WIRE
from ragstep.pipeline import (
    PIPELINES,
    STAGES,
    Map,
    Parallel,
    Pipeline,
    get_pipeline,
    join_branches,
    run_pipeline,
    run_stage,
    transport,
)
from ragstep.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"
FUNCTIONS = ROOT / "functions"
# Over a state's fixed part (request, effective settings, trace, ...: ~4.5 KB as Lambda sends it), under the sample
# search's results: each stage has to offload some of them.
SMALL_LIMIT = 6144
#: Functions of the channels (README: Channels): the Slack webhook and worker, event-driven retrieval.
CHANNEL_FUNCTIONS = {"slack_webhook", "slack_worker", "retrieval_events"}


@dataclass
class LambdaContext:
    """The attributes of the Python runtime's context object that handlers and Powertools read."""

    function_name: str
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 1024
    log_group_name: str = ""
    log_stream_name: str = "2025/11/20/[$LATEST]0123456789abcdef0123456789abcdef"

    def __post_init__(self) -> None:
        self.log_group_name = f"/aws/lambda/{self.function_name}"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def load_event(name: str) -> Any:
    return json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))


def function_handler(name: str) -> Callable[[Any, Any], Any]:
    """``handler`` of ``functions/<name>/app.py``, loaded as the runtime loads it (without writing bytecode there)."""
    return runpy.run_path(str(FUNCTIONS / name / "app.py"), run_name="app")["handler"]


def invoke(name: str, event: Any) -> Any:
    """One invocation as Lambda makes it: the event in, the return value through the runtime's JSON encoding."""
    result = function_handler(name)(event, LambdaContext(function_name=f"ragstep-{name}"))
    return json.loads(json.dumps(result, ensure_ascii=False))


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A Lambda-like environment: settings from the environment only, a fresh execution environment per test."""
    for name in [k for k in os.environ if k.startswith(("RAGSTEP_", "POWERTOOLS_", "AWS_LAMBDA_"))]:
        monkeypatch.delenv(name)
    monkeypatch.delenv("AWS_EXECUTION_ENV", raising=False)
    data = tmp_path / "data"
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(data))
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "ragstep-test")
    # X-Ray is off outside Lambda anyway; say so, as the test environment of a deployment would.
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "ragstep-test")
    runtime.reset()
    # Powertools configures the standard logger of a service once per process, with the stdout of that moment:
    # point it at this test's stdout.
    runtime.logger().registered_handler.stream = sys.stdout
    yield data
    runtime.reset()


@pytest.fixture
def demo_docs(data_dir: Path) -> Context:
    """The knowledge base the sample events name ("demo-docs"), with the bundled demo documents ingested."""
    ctx = Clients(Settings(data_dir=data_dir)).context()
    kb = KnowledgeBase(id=uuid.uuid4().hex, name="demo-docs", created_at=time.time())
    ctx.catalog.create_kb(kb)
    with resources.as_file(resources.files("ragstep").joinpath("data", "demo", "docs")) as folder:
        results = [ingest_file(path, kb, ctx) for path in expand_paths([folder], (".md",))]
    assert results and all(r.status == "indexed" for r in results), results
    return ctx


def ids(results: list[dict[str, Any]] | list[SearchResult]) -> list[str]:
    return [r["id"] if isinstance(r, dict) else r.id for r in results]


# -- the function folders ------------------------------------------------------------------------------------------


def test_every_stage_has_a_small_function_folder() -> None:
    folders = {p.name for p in FUNCTIONS.iterdir() if (p / "app.py").is_file()}
    deployed = {name for pipeline in PIPELINES.values() if pipeline.deployed for name in pipeline.stage_names()}
    missing = sorted(deployed - folders)
    assert not missing, f"stages without functions/<stage>/app.py: {missing}"
    # The join follows the Parallel states of the deployed pipelines that have them.
    parallel = any(isinstance(s, Parallel) for p in PIPELINES.values() if p.deployed for s in p.steps)
    joins = {"join"} if parallel else set()
    strays = sorted(folders - deployed - {"api", "authorizer"} - CHANNEL_FUNCTIONS - joins)
    assert not strays, f"function folders that are neither a deployed stage, the API nor a channel: {strays}"
    assert deployed <= set(STAGES)
    for name in folders:
        source = (FUNCTIONS / name / "app.py").read_text(encoding="utf-8")
        code_lines = [line for line in source.splitlines() if line.strip()]
        assert len(code_lines) <= 6, f"functions/{name}/app.py should only pick a handler from ragstep.entry.aws"
        assert callable(function_handler(name))


def test_every_sample_event_belongs_to_a_function() -> None:
    for event in EVENTS.glob("*.json"):
        function = event.stem.split("_")[0] if event.stem.startswith("api_") else event.stem
        assert (FUNCTIONS / function / "app.py").is_file(), f"{event.name} has no function {function}"


def test_every_deployed_stage_has_a_sample_event_of_its_state() -> None:
    from ragstep.entry.aws.events import is_s3_object_created
    from ragstep.pipeline.definitions import state_model

    for pipeline in PIPELINES.values():
        if not pipeline.deployed:
            continue
        for stage in pipeline.stage_names():
            assert (EVENTS / f"{stage}.json").is_file(), f"no sample event events/{stage}.json"
            event = load_event(stage)
            if stage == "ingest_parse" and is_s3_object_created(event):
                continue  # the upload event EventBridge starts the ingest state machine with
            state = state_model(stage).model_validate(event)
            assert stage in get_pipeline(state.pipeline).stage_names(), f"events/{stage}.json: {state.pipeline}"


def test_the_answer_stage_events_chain_and_answer(data_dir: Path) -> None:
    """events/chat_completion.json is what into_chat_message makes of events/into_chat_message.json (a run of the rag
    pipeline on the demo documents), and chat_completion answers it with the embedded default."""
    import re

    # The context template dates the message ({{current_time}}, {{current_week}}): the clock is not the sample's.
    now = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|(Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day|星期[一二三四五六日]")
    built = PipelineState.model_validate(invoke("into_chat_message", load_event("into_chat_message")))
    sample = PipelineState.model_validate(load_event("chat_completion"))
    assert now.sub("<now>", built.chat.user_content) == now.sub("<now>", sample.chat.user_content)
    assert built.chat.passages == sample.chat.passages
    assert sample.chat.user_content and sample.chat.answer == ""

    answered = PipelineState.model_validate(invoke("chat_completion", load_event("chat_completion")))
    assert answered.chat.model == "extractive" and answered.chat.fallback is None
    assert "[1]" in answered.chat.answer and "fusion" in answered.chat.answer
    assert answered.trace[-1].stage == "chat_completion"


def test_importing_a_function_stays_cheap() -> None:
    """A cold start imports app.py at init: nothing heavy may load before the first invocation needs it."""
    heavy = ["pydantic", "numpy", "jieba", "boto3", "botocore", "fastapi", "mangum", "aws_lambda_powertools"]
    apps = [str(p) for p in sorted(FUNCTIONS.glob("*/app.py"))]
    code = (
        "import json, runpy, sys\n"
        "for app in json.loads(sys.argv[1]): runpy.run_path(app)\n"
        "import ragstep.entry.aws.events, ragstep.entry.aws.runtime\n"
        "print(json.dumps(sorted(m for m in json.loads(sys.argv[2]) if m in sys.modules)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "shared")}
    args = [sys.executable, "-c", code, json.dumps(apps), json.dumps(heavy)]
    out = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_nothing_lambda_runs_imports_the_benchmarks() -> None:
    """shared/Makefile leaves ragstep/bench out of the shared layer (tests/test_bench.py builds it): only the CLI,
    which no function runs, may import it."""
    package = ROOT / "shared" / "ragstep"
    offenders = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if not path.is_relative_to(package / "bench") and not path.is_relative_to(package / "entry" / "cli")
        if any(name == "ragstep.bench" or name.startswith("ragstep.bench.") for name in _imported_modules(path))
    ]
    assert not offenders, f"modules the Lambda functions may load import ragstep.bench: {offenders}"


# -- stage handlers ------------------------------------------------------------------------------------------------


def test_chunk_search_event_runs_like_the_in_process_stage(demo_docs: Context) -> None:
    event = load_event("chunk_search")
    out = invoke("chunk_search", event)

    state = PipelineState.model_validate(out)
    assert state.request_id == event["request_id"]
    assert state.offloaded == {}
    assert state.search_results, "the demo documents answer the sample query"
    assert state.search_results[0].knowledge_filename == "hybrid-search.md"
    run = [t for t in state.trace if t.stage == "chunk_search" and t.action == "run"]
    assert len(run) == 1 and run[0].duration_ms > 0

    local = run_stage("chunk_search", PipelineState.model_validate(event), demo_docs)
    assert ids(state.search_results) == ids(local.search_results)


def test_filter_top_k_event_keeps_the_best_results(data_dir: Path) -> None:
    event = load_event("filter_top_k")
    out = invoke("filter_top_k", event)

    state = PipelineState.model_validate(out)
    expected = sorted(event["search_results"], key=lambda r: -r["score"])[: event["retrieval"]["rerank_top_k"]]
    assert ids(state.final_results) == ids(expected)
    assert state.trace[-1].stage == "filter_top_k"
    assert state.trace[-1].counts == {"input": len(event["search_results"]), "kept": len(expected)}


def test_handlers_chained_give_the_in_process_pipeline_result(demo_docs: Context) -> None:
    event = load_event("chunk_search")
    out = event
    for stage in get_pipeline("knowledge_search").stage_names():  # what the state machine does, one Lambda a stage
        out = invoke(stage, out)

    local = run_pipeline("knowledge_search", PipelineState.model_validate(event), demo_docs)
    assert ids(PipelineState.model_validate(out).results("final_results")) == ids(local.results("final_results"))
    assert [(t["stage"], t["action"]) for t in out["trace"]] == [(t.stage, t.action) for t in local.trace]


def test_the_rag_parallel_steps_through_their_functions_give_the_in_process_state(
    demo_docs: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the rag machine does for [rewrite_query || extract_entities] and [chunk_search || entity_search]: each
    branch on its function, then the Parallel state's output [input, branch states...] to the join function. The
    result is the in-process executor's state; every payload fits its share of the quota, so the three states of a
    Parallel output fit the quota together (chunk_search's results go by claim check to make room)."""
    from ragstep.app.chat import new_chat_state
    from ragstep.models import ChatRequest
    from ragstep.pipeline.definitions import payload_limit

    quota = 3 * SMALL_LIMIT
    monkeypatch.setenv("RAGSTEP_STATE_LIMIT_BYTES", str(quota))
    request = ChatRequest(query="How are keyword and vector results fused?", knowledge_base_ids=["demo-docs"])
    state = new_chat_state(request.model_copy(update={"pipeline": "rag"}), demo_docs)
    steps = tuple(s for s in get_pipeline("rag").steps if isinstance(s, Parallel))
    assert [s.name for s in steps] == ["understand_query", "search"]
    local = run_pipeline(Pipeline("rag_parallel_steps", steps, deployed=False), state, demo_docs)

    payload: Any = json.loads(state.model_dump_json())
    offloaded = False
    for step in steps:
        outputs = [invoke(branch[0].name, payload) for branch in step.branches]
        for out in outputs:
            assert transport.wire_size(out) <= payload_limit("rag", quota)
            offloaded = offloaded or bool(out.get("offloaded"))
        payload = invoke("join", [payload, *outputs])
    assert offloaded, "no branch needed the claim check: the test does not exercise the share"
    joined: PipelineState = transport.decode(payload, demo_docs.blobs)
    assert local.search_results and ids(joined.search_results) == ids(local.search_results)
    assert [(t.stage, t.action) for t in joined.trace] == [(t.stage, t.action) for t in local.trace]
    assert joined.model_dump(exclude={"trace"}) == local.model_dump(exclude={"trace"})


def test_the_join_sample_event_joins_like_the_in_process_executor(data_dir: Path) -> None:
    event = load_event("join")
    base, *branches = [PipelineState.model_validate(item) for item in event]
    assert PipelineState.model_validate(invoke("join", event)) == join_branches(base, branches)


def test_services_are_created_once_per_execution_environment_and_logs_are_structured(
    demo_docs: Context, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime.logger().registered_handler.stream = sys.stdout  # capsys's stdout
    handler = function_handler("chunk_search")
    event = load_event("chunk_search")
    first, second = LambdaContext("ragstep-chunk_search"), LambdaContext("ragstep-chunk_search")
    handler(event, first)
    ctx = runtime.get_clients()
    handler(event, second)
    assert runtime.get_clients() is ctx

    expected = run_stage("chunk_search", PipelineState.model_validate(event), demo_docs).search_results
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    # stdout also carries each invocation's metrics (EMF documents, without a "message").
    finished = [line for line in lines if line.get("message") == "stage finished"]
    assert [line["function_request_id"] for line in finished] == [first.aws_request_id, second.aws_request_id]
    for line in finished:
        assert line["service"] == "ragstep-test"
        assert line["stage"] == "chunk_search"
        # The pipeline request id correlates the logs of every stage of one search.
        assert line["correlation_id"] == event["request_id"]
        assert line["result_counts"] == {"search_results": len(expected)}
        assert line["trace_counts"]["results"] == line["result_counts"]["search_results"]
        assert line["offloaded"] == []


# -- uploads: the S3 event that starts an ingest -------------------------------------------------------------------


def upload_event(key: str, size: int) -> dict[str, Any]:
    event = load_event("ingest_parse")
    event["detail"]["object"].update(key=key, size=size)
    return event


def test_an_upload_under_tenants_is_ingested_for_that_tenant_only(data_dir: Path) -> None:
    clients = runtime.get_clients()
    acme = clients.context("acme")
    kb = acme.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="docs", created_at=time.time()))
    body = resources.files("ragstep").joinpath("data", "demo", "docs", "hybrid-search.md").read_bytes()
    acme.blobs.put("uploads/docs/guides/hybrid-search.md", body)  # the tenant's store: tenants/acme/ in the bucket

    state: Any = upload_event("tenants/acme/uploads/docs/guides/hybrid-search.md", len(body))
    for step in get_pipeline("ingest").steps:  # a BM25-only knowledge base: the embed_batches Map has no items
        stage = step.merge if isinstance(step, Map) else step.name
        state = invoke(stage, state)
        assert state["tenant_id"] == "acme", f"{stage} dropped the tenant"
    assert state["status"] == "indexed" and state["counts"]["chunks"] > 0
    assert state["source"]["blob_key"] == "uploads/docs/guides/hybrid-search.md"
    (knowledge,) = acme.catalog.list_knowledge(kb.id)
    assert knowledge.id == state["source"]["knowledge_id"] and knowledge.status == "completed"
    assert clients.context().catalog.list_kbs() == [], "the default tenant sees nothing of it"

    # The same knowledge base name under the default tenant's uploads is not acme's: the default tenant has none.
    with pytest.raises(NotFoundError, match="'docs'"):
        invoke("ingest_parse", upload_event("uploads/docs/guides/hybrid-search.md", len(body)))


@pytest.mark.parametrize(
    ("key", "message"),
    [
        pytest.param("tenants/../uploads/docs/a.md", "tenant id '..'", id="dot-dot"),
        pytest.param("tenants//uploads/docs/a.md", "tenant id ''", id="empty"),
        pytest.param("tenants/a b/uploads/docs/a.md", "tenant id 'a b'", id="space"),
        pytest.param("tenants/default/uploads/docs/a.md", "default tenant's uploads go under uploads/", id="default"),
        pytest.param("tenants/acme/docs/a.md", "uploads to ingest go under", id="outside-uploads"),
        pytest.param("tenants/acme/uploads/docs/", "not a file", id="folder"),
    ],
)
def test_an_upload_key_that_names_no_valid_tenant_is_refused(data_dir: Path, key: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as caught:
        invoke("ingest_parse", upload_event(key, 10))
    assert type(caught.value).__name__ == "InputError"


# -- the claim check across handlers -------------------------------------------------------------------------------


def test_oversized_state_is_offloaded_and_restored_by_the_next_handler(
    demo_docs: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = load_event("chunk_search")
    expected = run_pipeline("knowledge_search", PipelineState.model_validate(event), demo_docs)
    assert transport.wire_size(expected.model_dump(mode="json")) > SMALL_LIMIT, "the sample must outgrow the limit"

    monkeypatch.setenv("RAGSTEP_STATE_LIMIT_BYTES", str(SMALL_LIMIT))
    runtime.reset()
    searched = invoke("chunk_search", event)
    # the wire form's results table (each result once) is what goes; the lists of ids and scores stay
    assert set(searched["offloaded"]) == {"chunks"} and "chunks" not in searched
    assert [entry[0] for entry in searched["search_results"]] == ids(expected.search_results)
    assert transport.wire_size(searched) <= SMALL_LIMIT

    final = searched
    for stage in get_pipeline("knowledge_search").stage_names()[1:]:
        final = invoke(stage, final)
        assert transport.wire_size(final) <= SMALL_LIMIT
    assert final["offloaded"], "the final state is over the limit too"
    # the rerank stage saw the restored search results, and nothing is lost on the way.
    rerank_row = next(t for t in final["trace"] if t["stage"] == "chunk_rerank")
    assert rerank_row["counts"]["input"] == len(expected.search_results)
    restored = transport.decode(final, runtime.get_clients().context().blobs)
    assert ids(restored.final_results) == ids(expected.final_results)
    assert ids(restored.search_results) == ids(expected.search_results)


def _state_with_chinese_results(n: int) -> PipelineState:
    text = "混合检索把向量召回和关键词召回的结果融合在一起。" * 8
    results = [
        SearchResult(id=f"c{i}", content=text, knowledge_id="k", knowledge_base_id="kb", score=1.0 - i / 100)
        for i in range(n)
    ]
    return PipelineState.model_validate(
        {"request": {"query": "混合检索", "knowledge_base_ids": ["demo-docs"]}, "search_results": results}
    )


@pytest.mark.parametrize(
    ("execution_env", "offloads"), [("AWS_Lambda_python3.11", True), ("AWS_Lambda_python3.12", False)]
)
def test_state_limit_counts_the_bytes_the_runtime_sends(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, execution_env: str, offloads: bool
) -> None:
    """Runtimes before python3.12 escape non-ASCII characters (6 bytes per Han character instead of 3)."""
    state = _state_with_chinese_results(6)
    wire = state.model_dump(mode="json", context=WIRE)
    compact = len(json.dumps(wire, ensure_ascii=False, separators=(",", ":")).encode())
    limit = compact + 1024  # fits as UTF-8, not once escaped
    monkeypatch.setenv("RAGSTEP_STATE_LIMIT_BYTES", str(limit))
    monkeypatch.setenv("AWS_EXECUTION_ENV", execution_env)
    runtime.reset()

    clients = runtime.get_clients()
    payload = transport.encode_for_lambda(state, clients.blobs(state.tenant_id), clients.settings.state_limit_bytes)
    assert transport.wire_size(payload) <= limit
    assert bool(payload["offloaded"]) is offloads
    assert ids(transport.decode_event(payload, clients.blobs).search_results) == ids(state.search_results)


# -- errors --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        pytest.param({"request_id": "abc"}, id="no-request"),
        pytest.param({"request": {"query": "   ", "knowledge_base_ids": ["demo-docs"]}}, id="empty-query"),
        pytest.param({"request": {"query": "q", "knowledge_base_ids": ["demo-docs"]}, "typo": 1}, id="unknown-key"),
        pytest.param([{"request": {"query": "q", "knowledge_base_ids": ["demo-docs"]}}], id="list"),
        pytest.param("not json", id="not-json"),
    ],
)
def test_an_invalid_event_raises_input_error(data_dir: Path, event: Any) -> None:
    with pytest.raises(InputError) as caught:
        invoke("chunk_search", event)
    # The runtime reports the class name as the error type: the `Error` the state machine sees (and never retries).
    assert type(caught.value).__name__ == "InputError"
    assert "pipeline state" in caught.value.message


def test_an_unknown_knowledge_base_is_an_input_error_with_its_own_name(demo_docs: Context) -> None:
    event = load_event("chunk_search")
    event["request"]["knowledge_base_ids"] = ["no-such-kb"]
    with pytest.raises(NotFoundError, match="no-such-kb") as caught:
        invoke("chunk_search", event)
    assert isinstance(caught.value, InputError)


def test_a_state_that_cannot_fit_raises_state_too_large(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTEP_STATE_LIMIT_BYTES", str(SMALL_LIMIT))
    runtime.reset()
    event = load_event("filter_top_k")
    event["trace"] = [TraceEvent(stage="x", reason="r" * SMALL_LIMIT).model_dump(mode="json")]
    with pytest.raises(RagstepError) as caught:
        invoke("filter_top_k", event)
    assert type(caught.value).__name__ == "StateTooLargeError"


# -- the join after a Parallel state -------------------------------------------------------------------------------


def test_join_handler_adds_each_branch_to_the_input_state(demo_docs: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    base = load_event("chunk_search")
    searched = invoke("chunk_search", base)
    cut = invoke("filter_top_k", base)  # a branch that adds a trace event and no results
    expected = join_branches(
        PipelineState.model_validate(base), [PipelineState.model_validate(s) for s in (searched, cut)]
    )

    joined = join_handler([base, searched, cut], LambdaContext("ragstep-join"))
    assert joined == expected.model_dump(mode="json", context=WIRE)

    # Offloaded branch results are restored before joining.
    monkeypatch.setenv("RAGSTEP_STATE_LIMIT_BYTES", str(SMALL_LIMIT))
    runtime.reset()
    small = invoke("chunk_search", base)
    assert small["offloaded"]
    joined = join_handler([base, small, cut], LambdaContext("ragstep-join"))
    restored = transport.decode(joined, runtime.get_clients().context().blobs)
    assert ids(restored.search_results) == ids(expected.search_results)


@pytest.mark.parametrize(
    "event",
    [pytest.param({"request_id": "x"}, id="not-a-list"), pytest.param([], id="empty"), pytest.param([{}], id="one")],
)
def test_join_handler_rejects_what_is_not_a_parallel_output(data_dir: Path, event: Any) -> None:
    with pytest.raises(InputError):
        join_handler(event, LambdaContext("ragstep-join"))


def test_join_handler_rejects_branches_of_another_request(data_dir: Path) -> None:
    base = load_event("filter_top_k")
    other = {**base, "request_id": "someone-else"}
    with pytest.raises(InputError, match="someone-else"):
        join_handler([base, other], LambdaContext("ragstep-join"))


def test_join_handler_rejects_branches_of_another_tenant(data_dir: Path) -> None:
    base = load_event("filter_top_k")
    with pytest.raises(InputError, match="another tenant"):
        join_handler([base, {**base, "tenant_id": "acme"}], LambdaContext("ragstep-join"))


# -- the HTTP API --------------------------------------------------------------------------------------------------


def test_api_healthz(data_dir: Path) -> None:
    response = invoke("api", load_event("api_healthz"))
    assert response["statusCode"] == 200
    assert json.loads(response["body"])["status"] == "ok"


def test_api_search_runs_the_pipeline(demo_docs: Context) -> None:
    event = load_event("api_search")
    response = invoke("api", event)
    assert response["statusCode"] == 200, response["body"]
    body = json.loads(response["body"])
    request = json.loads(event["body"])
    assert body["query"] == request["query"]
    assert 0 < len(body["results"]) <= request["overrides"]["rerank_top_k"]
    assert body["results"][0]["knowledge_filename"] == "部署与冷启动.md"
    assert [t["stage"] for t in body["trace"] if t["action"] == "run"] == get_pipeline("knowledge_search").stage_names()


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"query": "", "knowledge_base_ids": ["demo-docs"]}, 422, "invalid_input"),
        ({"query": "cold start", "knowledge_base_ids": ["no-such-kb"]}, 404, "not_found"),
    ],
)
def test_api_errors_are_json(demo_docs: Context, body: dict[str, Any], status: int, error: str) -> None:
    event = load_event("api_search")
    event["body"] = json.dumps(body)
    event["headers"]["content-length"] = str(len(event["body"]))
    response = invoke("api", event)
    assert response["statusCode"] == status
    assert json.loads(response["body"])["error"] == error


def test_api_lists_the_size_of_knowledge_bases_ingested_from_the_cli(demo_docs: Context) -> None:
    """``ragstep ingest`` (ingest_file) makes no ingestion job, where the size was read from: it was 0."""
    event = load_event("api_healthz")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/v1/knowledge-bases"
    response = invoke("api", event)
    assert response["statusCode"] == 200, response["body"]
    (listed,) = json.loads(response["body"])["items"]
    originals = sum(p.stat().st_size for p in _demo_files())
    assert listed["documents"] == len(_demo_files()) and listed["size"] == originals > 0


def _demo_files() -> list[Path]:
    with resources.as_file(resources.files("ragstep").joinpath("data", "demo", "docs")) as folder:
        return list(expand_paths([folder], (".md",)))
