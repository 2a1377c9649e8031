"""Lambda entry points: the one place handler logic lives.

Each ``functions/<name>/app.py`` is a few lines that pick a handler from here::

    from ragstep.entry.aws.handlers import stage_handler

    handler = stage_handler("chunk_search")

* :func:`stage_handler` -- one pipeline stage: decode the state (restoring results a previous stage offloaded to the
  blob store), run the stage, encode the state again under the Step Functions payload limit. The stage's pipeline
  decides the state model (:func:`ragstep.pipeline.definitions.state_model`): a ``PipelineState`` for the query
  stages, an ``IngestState`` for the ingest stages. The first ingest stage also accepts the S3 ``Object Created``
  event EventBridge starts the ingest state machine with (:func:`ingest_state_from_s3_event`).
* :func:`join_handler` -- the task after a ``Parallel`` state: joins the branch states (see ``pipeline/asl.py``).
* :func:`api_handler` -- the HTTP API (FastAPI through Mangum).

Importing this module costs only the standard library. The :class:`~ragstep.context.Clients`, the Powertools
logger, tracer and metrics, the stage module and (for the API) the FastAPI app are created on the first invocation
and kept for the life of the execution environment, so a warm invocation pays for none of them.

Observability (Powertools): every invocation logs as JSON with the Lambda context and the pipeline request id as
correlation id; it is traced (a ``## <stage>`` X-Ray subsegment per stage, annotated with stage, pipeline and
request id; the tracer is off outside Lambda, when ``POWERTOOLS_TRACE_DISABLED`` is true, and a no-op when
aws-xray-sdk is not installed); and it flushes its metrics as one EMF document on stdout (namespace
``POWERTOOLS_METRICS_NAMESPACE``, dimensions ``service`` and ``stage``): ``StageLatency`` (ms, the stage itself),
``Results`` (results, or chunks for an ingest stage), ``Degradations`` (``degrade`` rows the stage added to the
trace), ``StateBytes`` (the state as Lambda sends it), ``StageErrors``, ``ColdStart``; the API reports
``ApiLatency``, ``ApiClientErrors`` and ``ApiServerErrors`` by ``executor``.

Secrets given as references (``ssm:...``, ``secretsmanager:...``; see :mod:`ragstep.settings`) are resolved when the
clients are built and looked up again on every invocation (a cache hit for ``RAGSTEP_SECRETS_MAX_AGE_S``): when
one has changed, the clients are built again with the new value.

Errors: a :class:`~ragstep.errors.RagstepError` propagates unchanged, and the Lambda runtime reports its class name
as the error type, which is the ``Error`` Step Functions matches on (``InputError``, ``NotFoundError``,
``StateTooLargeError`` ...). An event that is not a valid state raises :class:`~ragstep.errors.InputError`. The
generated state machine retries only Lambda service errors, so none of these is retried: the same input would fail
the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger, Metrics
    from pydantic import BaseModel

    from ragstep.context import Clients
    from ragstep.models import IngestState
    from ragstep.settings import Settings

LambdaHandler = Callable[[Any, Any], Any]

SERVICE_NAME_ENV = "POWERTOOLS_SERVICE_NAME"
DEFAULT_SERVICE_NAME = "ragstep"
METRICS_NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"
DEFAULT_METRICS_NAMESPACE = "ragstep"
#: Where uploads start the ingest state machine: ``<RAGSTEP_BLOB_PREFIX>uploads/<knowledge base>/<path>``.
UPLOADS_PREFIX = "uploads/"
#: The result list each query stage fills (the ``Results`` metric).
STAGE_RESULTS = {
    "chunk_search": "search_results",
    "chunk_rerank": "rerank_results",
    "chunk_merge": "merge_results",
    "filter_top_k": "final_results",
}

_lock = threading.RLock()
_services: Clients | None = None
_logger: Logger | None = None
_tracer: Any = None
_metrics: Metrics | None = None
_mangum: Any = None


def get_clients() -> Clients:
    """The execution environment's :class:`Clients` (built from ``RAGSTEP_*`` settings on first use, and again when
    a secret reference now resolves to another value)."""
    global _services
    if _services is not None and not _secrets_current(_services.settings):
        with _lock:
            logger().info("a secret changed: building the clients again")
            _services = None
    if _services is None:
        with _lock:
            if _services is None:
                from ragstep.context import Clients

                _services = Clients()
    return _services


def _secrets_current(settings: Settings) -> bool:
    """Whether every secret given by reference still resolves to the value the clients were built with."""
    from ragstep.settings import SECRET_FIELDS, is_secret_ref, resolve_secret

    for field in SECRET_FIELDS:
        raw = os.environ.get(f"RAGSTEP_{field.upper()}", "")
        if not is_secret_ref(raw):
            continue
        value = resolve_secret(raw, max_age=settings.secrets_max_age_s, setting=f"RAGSTEP_{field.upper()}")
        current = getattr(settings, field)
        if current is None or current.get_secret_value() != value:
            return False
    return True


def reset() -> None:
    """Forget the cached clients, logger, tracer, metrics and API app, so the next invocation reads the environment
    again.

    A Lambda execution environment never needs this; tests that change ``RAGSTEP_*`` variables do.
    """
    global _services, _logger, _tracer, _metrics, _mangum
    with _lock:
        _services = _logger = _tracer = _metrics = _mangum = None


def logger() -> Logger:
    """The Powertools logger (service name from ``POWERTOOLS_SERVICE_NAME``), created on first use."""
    global _logger
    if _logger is None:
        with _lock:
            if _logger is None:
                from aws_lambda_powertools import Logger

                _logger = Logger(service=os.environ.get(SERVICE_NAME_ENV) or DEFAULT_SERVICE_NAME)
    return _logger


class _NullSubsegment:
    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass


class _NullProvider:
    @contextlib.contextmanager
    def in_subsegment(self, name: str, **kwargs: Any) -> Iterator[_NullSubsegment]:
        yield _NullSubsegment()


class NullTracer:
    """Stands in for the Powertools Tracer where tracing is off or aws-xray-sdk is not installed."""

    disabled = True
    provider = _NullProvider()

    def capture_lambda_handler(self, fn: LambdaHandler, **kwargs: Any) -> LambdaHandler:
        return fn


def tracing_active(environ: Mapping[str, str] | None = None) -> bool:
    """Whether X-Ray would record anything: Powertools' own rule (inside Lambda, not under SAM local or Chalice, and
    ``POWERTOOLS_TRACE_DISABLED`` not true), checked without importing the tracer.

    Asked first because a Powertools ``Tracer`` imports aws_xray_sdk, whose sampler builds a botocore client:
    ~200 ms of a cold start (BENCHMARKS.md, Cold start), paid even where the tracer then stays off.
    """
    env = os.environ if environ is None else environ
    if env.get("POWERTOOLS_TRACE_DISABLED", "false").strip().lower() in ("1", "y", "yes", "t", "true", "on"):
        return False
    return bool(env.get("LAMBDA_TASK_ROOT")) and not (env.get("AWS_SAM_LOCAL") or env.get("AWS_CHALICE_CLI_MODE"))


def tracer() -> Any:
    """The Powertools Tracer, created on first use when tracing is active (:func:`tracing_active`); otherwise, and
    where aws-xray-sdk is not installed, a :class:`NullTracer`."""
    global _tracer
    if _tracer is None:
        with _lock:
            if _tracer is None:
                _tracer = _make_tracer()
    return _tracer


def _make_tracer() -> Any:
    if not tracing_active():
        return NullTracer()
    try:
        import aws_xray_sdk  # noqa: F401
    except ImportError:
        return NullTracer()
    from aws_lambda_powertools import Tracer

    # Patch only the clients whose calls leave the process (AWS services, HTTP model providers, OpenSearch);
    # Powertools' default patches sqlite3 too, which would make every local index query a subsegment.
    return Tracer(
        service=os.environ.get(SERVICE_NAME_ENV) or DEFAULT_SERVICE_NAME,
        patch_modules=("botocore", "httpx", "requests"),
    )


def metrics() -> Metrics:
    """The Powertools metrics (CloudWatch EMF), created on first use; flushed at the end of every invocation."""
    global _metrics
    if _metrics is None:
        with _lock:
            if _metrics is None:
                from aws_lambda_powertools import Metrics

                _metrics = Metrics(
                    namespace=os.environ.get(METRICS_NAMESPACE_ENV) or DEFAULT_METRICS_NAMESPACE,
                    service=os.environ.get(SERVICE_NAME_ENV) or DEFAULT_SERVICE_NAME,
                )
    return _metrics


def _with_lambda_context(fn: LambdaHandler, correlation_id_path: str | None = None) -> LambdaHandler:
    """``fn`` wrapped so that its logs carry the Lambda context (function name, request id, cold start), it is
    traced, and its metrics are flushed (with ``ColdStart`` on the first invocation) when it returns or raises.

    The Powertools decorators are applied per call rather than at import, so that importing a handler module stays
    cheap; applying them costs microseconds.
    """

    def handler(event: Any, context: Any) -> Any:
        with warnings.catch_warnings():
            # An invocation that failed before recording a metric has nothing to flush; that is not worth a warning.
            warnings.filterwarnings("ignore", message="No application metrics to publish")
            traced = tracer().capture_lambda_handler(fn, capture_response=False)
            measured = metrics().log_metrics(traced, capture_cold_start_metric=True)
            wrapped = logger().inject_lambda_context(
                measured, correlation_id_path=correlation_id_path, clear_state=True
            )
            return wrapped(event, context)

    handler.__name__ = handler.__qualname__ = getattr(fn, "__name__", "handler")
    handler.__doc__ = fn.__doc__
    return handler


# -- state transport ----------------------------------------------------------------------------------------------


def _validation_message(exc: Exception) -> str:
    errors = exc.errors() if hasattr(exc, "errors") else []
    if not errors:
        return str(exc)
    err = errors[0]
    where = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return (f"{where}: {msg}" if where else msg) + more


def decode_state(payload: Any, clients: Clients, model: type[BaseModel] | None = None) -> Any:
    """The state in ``payload`` (a ``PipelineState`` unless ``model`` says otherwise), with offloaded results loaded
    back; :class:`InputError` if it is not one."""
    from pydantic import ValidationError

    from ragstep.errors import InputError
    from ragstep.models import PipelineState
    from ragstep.pipeline import transport

    model = model or PipelineState
    if not isinstance(payload, (dict, str, bytes)):
        raise InputError(f"the event must be a pipeline state (a JSON object), not {type(payload).__name__}")
    try:
        # Offloaded results live in the state's own tenant's blob store.
        blobs = clients.context(transport.tenant_of(payload)).blobs
        if model is PipelineState:
            return transport.decode(payload, blobs)
        return transport.decode(payload, blobs, model)
    except ValidationError as exc:
        raise InputError(f"the event is not a valid pipeline state: {_validation_message(exc)}") from exc


# -- the ingest starter -------------------------------------------------------------------------------------------


def is_s3_object_created(event: Any) -> bool:
    """``event`` is an S3 ``Object Created`` event as EventBridge delivers it."""
    return (
        isinstance(event, dict)
        and event.get("source") == "aws.s3"
        and event.get("detail-type") == "Object Created"
        and isinstance(event.get("detail"), dict)
    )


def ingest_state_from_s3_event(event: dict[str, Any], clients: Clients) -> IngestState:
    """The :class:`~ragstep.models.IngestState` the ingest pipeline starts from, for an upload to
    ``<RAGSTEP_BLOB_PREFIX>uploads/<knowledge base>/<path>`` in the blob store's bucket.

    ``<knowledge base>`` is the id or the name of an existing knowledge base; ``<path>`` may have folders, and its
    last part is the file name. The knowledge id comes from the knowledge base id and the path, so uploading the same
    path again replaces that document (or skips it when the content is unchanged). EventBridge gives the object key
    as it is (not URL-encoded, unlike S3 event notifications).
    """
    from pathlib import PurePosixPath

    from ragstep.errors import InputError
    from ragstep.stages.ingest.products import knowledge_id_for, new_ingest_state

    detail = event["detail"]
    bucket = str((detail.get("bucket") or {}).get("name") or "")
    obj = detail.get("object") or {}
    key = str(obj.get("key") or "")
    where = f"s3://{bucket}/{key}"
    settings = clients.settings
    if settings.blob_backend == "s3" and bucket != settings.blob_bucket:
        raise InputError(
            f"{where}: uploads are read from the blob store's bucket {settings.blob_bucket!r}, not {bucket!r}"
        )
    prefix = settings.blob_prefix.strip("/") + "/" if settings.blob_prefix.strip("/") else ""
    layout = f"{prefix}{UPLOADS_PREFIX}<knowledge base id or name>/<file>"
    if not key.startswith(prefix + UPLOADS_PREFIX):
        raise InputError(f"{where}: uploads to ingest go under {layout}")
    blob_key = key.removeprefix(prefix)
    kb_ref, _, path = blob_key.removeprefix(UPLOADS_PREFIX).partition("/")
    if not kb_ref or not path or path.endswith("/"):
        raise InputError(f"{where}: not a file under {layout}")
    kb = clients.context().require_kb(kb_ref)
    size = obj.get("size")
    state = new_ingest_state(
        kb,
        # Canonical (knowledge base id, not the name the upload used), so both spellings are the same document.
        knowledge_id=knowledge_id_for(kb, f"s3://{bucket}/{prefix}{UPLOADS_PREFIX}{kb.id}/{path}"),
        blob_key=blob_key,
        filename=PurePosixPath(path).name,
        uri=where,
        size=size if isinstance(size, int) and not isinstance(size, bool) else None,
    )
    event_id = str(event.get("id") or "").replace("-", "")
    # The EventBridge event id is the request id: the stages' logs and the event share it.
    return state.model_copy(update={"request_id": event_id}) if event_id else state


# Runtimes whose interface client writes non-ASCII characters as they are (awslambdaric checks AWS_EXECUTION_ENV);
# every other runtime, and any place off Lambda, is measured in the larger escaped form.
UNESCAPED_RUNTIMES = frozenset({"AWS_Lambda_python3.12", "AWS_Lambda_python3.13"})


def wire_size(payload: dict[str, Any]) -> int:
    """Bytes of ``payload`` as the Lambda runtime serialises a handler's return value.

    The runtime writes JSON with ``", "``/``": "`` separators and, before python3.12, escapes non-ASCII characters
    (6 bytes for one Han character instead of 3).
    """
    ensure_ascii = os.environ.get("AWS_EXECUTION_ENV", "") not in UNESCAPED_RUNTIMES
    return len(json.dumps(payload, ensure_ascii=ensure_ascii).encode("utf-8"))


def encode_state(state: BaseModel, clients: Clients) -> dict[str, Any]:
    """The state as the handler returns it: at most ``state_limit_bytes`` on the wire, offloading results if needed.

    :func:`ragstep.pipeline.transport.encode` measures compact UTF-8 JSON; what the runtime sends is a little larger
    (and much larger for escaped Chinese text), so the budget shrinks by the difference until the wire form fits.
    """
    from ragstep.errors import StateTooLargeError
    from ragstep.pipeline import transport

    limit = clients.settings.state_limit_bytes
    budget = limit
    for _ in range(4):
        payload = transport.encode(state, clients.context(state.tenant_id).blobs, budget)
        size = wire_size(payload)
        if size <= limit:
            return payload
        budget -= size - limit + 512
        if budget < 1024:
            break
    raise StateTooLargeError(
        f"pipeline state is {size} bytes as Lambda sends it, over the {limit}-byte limit even after offloading "
        "results; shorten the query or lower embedding_top_k"
    )


def _log_state(message: str, state: Any, payload: dict[str, Any], **keys: Any) -> None:
    from ragstep.pipeline.executor import result_counts

    last = state.trace[-1] if state.trace else None
    logger().info(
        message,
        extra={
            **keys,
            "pipeline": state.pipeline,
            "result_counts": result_counts(state),
            "trace_counts": last.counts if last else {},
            "duration_ms": last.duration_ms if last else None,
            "trace_events": len(state.trace),
            "offloaded": sorted(payload.get("offloaded") or {}),
        },
    )


def _log_error(exc: BaseException, **keys: Any) -> None:
    from ragstep.errors import InputError, RagstepError

    log = logger()
    if isinstance(exc, InputError):
        log.warning("rejected input", extra={**keys, "error": type(exc).__name__, "error_message": str(exc)})
    elif isinstance(exc, RagstepError):
        log.error("stage failed", extra={**keys, "error": type(exc).__name__, "error_message": exc.message})
    else:
        log.exception("unexpected error", extra=keys)


# -- handlers -----------------------------------------------------------------------------------------------------


def _stage_metrics(stage_name: str, state: Any, before: int, payload: dict[str, Any]) -> None:
    """The stage's metrics (added to this invocation's EMF document): latency, results, degradations, state size."""
    from aws_lambda_powertools.metrics import MetricUnit

    from ragstep.models import IngestState

    m = metrics()
    m.add_dimension(name="stage", value=stage_name)
    added = state.trace[before:]
    runs = [t for t in added if t.stage == stage_name and t.action == "run"]
    if runs:
        m.add_metric(name="StageLatency", unit=MetricUnit.Milliseconds, value=runs[-1].duration_ms)
    m.add_metric(name="Degradations", unit=MetricUnit.Count, value=sum(t.action == "degrade" for t in added))
    if isinstance(state, IngestState):
        if "chunks" in state.counts:
            m.add_metric(name="Results", unit=MetricUnit.Count, value=state.counts["chunks"])
    elif stage_name in STAGE_RESULTS:
        m.add_metric(name="Results", unit=MetricUnit.Count, value=len(getattr(state, STAGE_RESULTS[stage_name])))
    m.add_metric(name="StateBytes", unit=MetricUnit.Bytes, value=wire_size(payload))


def _error_metric(stage_name: str, exc: BaseException) -> None:
    from aws_lambda_powertools.metrics import MetricUnit

    m = metrics()
    m.add_dimension(name="stage", value=stage_name)
    m.add_metric(name="StageErrors", unit=MetricUnit.Count, value=1)
    m.add_metadata(key="error", value=type(exc).__name__)


def stage_handler(stage_name: str) -> LambdaHandler:
    """The Lambda handler of one pipeline stage (event and result: the state of the stage's pipeline as JSON).

    The stage name is checked against :data:`ragstep.pipeline.definitions.STAGES` on the first invocation (the
    tests import every ``functions/*/app.py``, so a misspelt name never reaches a deployment).
    """

    def run(event: Any, context: Any) -> dict[str, Any]:
        from ragstep.models import IngestState
        from ragstep.pipeline.definitions import get_pipeline, state_model
        from ragstep.pipeline.executor import run_stage

        log = logger()
        log.append_keys(stage=stage_name)
        try:
            clients = get_clients()
            model = state_model(stage_name)
            if model is IngestState and is_s3_object_created(event):
                if stage_name != get_pipeline("ingest").stage_names()[0]:
                    raise _input_error(f"{stage_name} takes an ingest state; an S3 event starts the first stage")
                state = ingest_state_from_s3_event(event, clients)
            else:
                state = decode_state(event, clients, model)
            # The pipeline request id is the same in every stage of one run: the key to follow it across functions.
            log.set_correlation_id(state.request_id)
            before = len(state.trace)
            with tracer().provider.in_subsegment(f"## {stage_name}") as subsegment:
                subsegment.put_annotation("stage", stage_name)
                subsegment.put_annotation("pipeline", state.pipeline)
                subsegment.put_annotation("request_id", state.request_id)
                state = run_stage(stage_name, state, clients.context(state.tenant_id))
                subsegment.put_metadata("trace", [t.model_dump(mode="json") for t in state.trace[before:]])
            payload = encode_state(state, clients)
        except Exception as exc:
            _log_error(exc, stage=stage_name)
            _error_metric(stage_name, exc)
            raise
        _stage_metrics(stage_name, state, before, payload)
        _log_state("stage finished", state, payload, stage=stage_name)
        return payload

    run.__name__ = f"{stage_name}_handler"
    run.__doc__ = f"Lambda handler of the {stage_name!r} stage."
    return _with_lambda_context(run)


def _input_error(message: str) -> Exception:
    from ragstep.errors import InputError

    return InputError(message)


def _join(event: Any, context: Any) -> dict[str, Any]:
    import time

    from aws_lambda_powertools.metrics import MetricUnit

    from ragstep.errors import InputError
    from ragstep.pipeline.executor import join_branches

    log = logger()
    log.append_keys(stage="join")
    started = time.perf_counter()
    try:
        if not isinstance(event, list) or len(event) < 2:
            raise InputError(
                "the join expects the output of a Parallel state: a list of the input state and each branch's state"
            )
        clients = get_clients()
        states = [decode_state(item, clients) for item in event]
        base, outputs = states[0], states[1:]
        log.set_correlation_id(base.request_id)
        strays = sorted({s.request_id for s in outputs if s.request_id != base.request_id})
        if strays:
            raise InputError(f"branch states belong to other requests ({', '.join(strays)}), not {base.request_id}")
        state = join_branches(base, outputs)
        payload = encode_state(state, clients)
    except Exception as exc:
        _log_error(exc, stage="join")
        _error_metric("join", exc)
        raise
    m = metrics()
    m.add_dimension(name="stage", value="join")
    m.add_metric(name="StageLatency", unit=MetricUnit.Milliseconds, value=(time.perf_counter() - started) * 1000.0)
    m.add_metric(name="StateBytes", unit=MetricUnit.Bytes, value=wire_size(payload))
    _log_state("branches joined", state, payload, stage="join", branches=len(outputs))
    return payload


join_handler = _with_lambda_context(_join)
join_handler.__doc__ = """The task after a Parallel state: ``[input state, branch 1 state, ...]`` -> one state.

The generated ASL makes the first branch a Pass state, so the first item is the state the branches started from and
:func:`ragstep.pipeline.executor.join_branches` can add each branch's new results and trace events to it, exactly as
the in-process executor does.
"""


def _app() -> Any:
    global _mangum
    if _mangum is None:
        with _lock:
            if _mangum is None:
                from mangum import Mangum

                from ragstep.entry.http.app import create_app

                _mangum = Mangum(create_app(get_clients()), lifespan="off")
    return _mangum


def _serve_api(event: Any, context: Any) -> dict[str, Any]:
    import time

    from aws_lambda_powertools.metrics import MetricUnit

    started = time.perf_counter()
    app = _app()
    response = app(event, context)
    status = int(response.get("statusCode") or 0) if isinstance(response, dict) else 0
    m = metrics()
    m.add_dimension(name="executor", value=get_clients().settings.executor)
    m.add_metric(name="ApiLatency", unit=MetricUnit.Milliseconds, value=(time.perf_counter() - started) * 1000.0)
    m.add_metric(name="ApiClientErrors", unit=MetricUnit.Count, value=int(400 <= status < 500))
    m.add_metric(name="ApiServerErrors", unit=MetricUnit.Count, value=int(status >= 500))
    return response


# The API Gateway request id (HTTP API payload 2.0) is the correlation id of an API call.
api_handler = _with_lambda_context(_serve_api, correlation_id_path="requestContext.requestId")
api_handler.__doc__ = "The HTTP API (API Gateway HTTP API, payload format 2.0) served by FastAPI through Mangum."
