"""What one Lambda execution environment keeps between invocations, and the wrapper every handler runs in.

* :func:`get_clients` -- the process's :class:`~ragstep.context.Clients`, built from ``RAGSTEP_*`` settings on the
  first invocation and kept, so a warm invocation pays for no client or connection. Secrets given as references
  (``ssm:...``, ``secretsmanager:...``; see :mod:`ragstep.settings`) are looked up again on every invocation (a cache
  hit for ``RAGSTEP_SECRETS_MAX_AGE_S``): when one has changed, the clients are built again with the new value.
* :func:`logger`, :func:`tracer`, :func:`metrics` -- the Powertools objects, created on first use. The tracer is
  real only where X-Ray records anything (:func:`tracing_active`) and aws-xray-sdk is installed; elsewhere it is a
  :class:`NullTracer`.
* :func:`with_lambda_context` -- wraps a handler so that its logs carry the Lambda context, it is traced, and its
  metrics are flushed as one EMF document per invocation.

Importing this module costs only the standard library: a cold start imports it before the first invocation needs
any of these.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger, Metrics

    from ragstep.context import Clients
    from ragstep.settings import Settings

LambdaHandler = Callable[[Any, Any], Any]

SERVICE_NAME_ENV = "POWERTOOLS_SERVICE_NAME"
DEFAULT_SERVICE_NAME = "ragstep"
METRICS_NAMESPACE_ENV = "POWERTOOLS_METRICS_NAMESPACE"
DEFAULT_METRICS_NAMESPACE = "ragstep"

#: The clients whose calls X-Ray records, where installed (:func:`patchable_modules`).
TRACED_MODULES = ("botocore", "httpx", "requests")

_lock = threading.RLock()
_clients: Clients | None = None
_logger: Logger | None = None
_tracer: Any = None
_metrics: Metrics | None = None


def get_clients() -> Clients:
    """The execution environment's :class:`Clients` (built from ``RAGSTEP_*`` settings on first use, and again when
    a secret reference now resolves to another value). Callers that keep something built from them compare
    identities to notice a rebuild (see :mod:`ragstep.entry.aws.api`)."""
    global _clients
    if _clients is not None and not _secrets_current(_clients.settings):
        with _lock:
            logger().info("a secret changed: building the clients again")
            _clients = None
    if _clients is None:
        with _lock:
            if _clients is None:
                from ragstep.context import Clients

                _clients = Clients()
    return _clients


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
    """Forget the cached clients, logger, tracer and metrics, so the next invocation reads the environment again
    (and the API builds its app again on the new clients).

    A Lambda execution environment never needs this; tests that change ``RAGSTEP_*`` variables do.
    """
    global _clients, _logger, _tracer, _metrics
    with _lock:
        _clients = _logger = _tracer = _metrics = None


def logger() -> Logger:
    """The Powertools logger (service name from ``POWERTOOLS_SERVICE_NAME``), created on first use."""
    global _logger
    if _logger is None:
        with _lock:
            if _logger is None:
                from aws_lambda_powertools import Logger

                _logger = Logger(service=os.environ.get(SERVICE_NAME_ENV) or DEFAULT_SERVICE_NAME)
    return _logger


# -- initialisation ahead of requests ------------------------------------------------------------------------------

#: ``AWS_LAMBDA_INITIALIZATION_TYPE`` values whose init phase runs before any request waits for it (provisioned
#: concurrency, SnapStart's snapshot), so everything built then is off every request's path; ``on-demand`` init is
#: on the first request's path anyway and stays lazy (a function that fails before needing a client pays for none).
AHEAD_OF_TIME_INIT = frozenset({"provisioned-concurrency", "snap-start"})


def initialised_ahead(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this execution environment is initialised ahead of its requests (:data:`AHEAD_OF_TIME_INIT`)."""
    env = os.environ if environ is None else environ
    return env.get("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand") in AHEAD_OF_TIME_INIT


def warm_up(*loaders: Callable[[], object]) -> bool:
    """When initialised ahead (:func:`initialised_ahead`): build the clients, the Powertools objects and whatever
    ``loaders`` load (a stage's module, the API's app) now, during init. Returns whether it did.

    A failure is logged and left to the first invocation, which builds everything again lazily and reports the error
    to its caller: failing the init would only make Lambda retry it.
    """
    if not initialised_ahead():
        return False
    try:
        logger()
        tracer()
        metrics()
        get_clients()
        for load in loaders:
            load()
    except Exception:
        logger().exception("initialisation ahead of requests failed; the first invocation tries again")
        return False
    return True


# -- tracing ------------------------------------------------------------------------------------------------------


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
    a large share of a cold start (``ragstep bench coldstart``), paid even where the tracer then stays off.
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

    return Tracer(service=os.environ.get(SERVICE_NAME_ENV) or DEFAULT_SERVICE_NAME, patch_modules=patchable_modules())


def patchable_modules() -> tuple[str, ...]:
    """The clients X-Ray patches, of those this function's layers hold.

    Only the clients whose calls leave the process (AWS services, HTTP model providers, OpenSearch); Powertools'
    default patches sqlite3 too, which would make every local index query a subsegment. Each function has its own
    layers (ingest_parse has no httpx and no requests), and the X-Ray SDK raises on patching a module that is not
    installed, which failed every invocation, so the list is what is importable here: found, not imported.
    """
    import importlib.util

    return tuple(name for name in TRACED_MODULES if importlib.util.find_spec(name) is not None)


# -- metrics ------------------------------------------------------------------------------------------------------


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


def with_lambda_context(fn: LambdaHandler, correlation_id_path: str | None = None) -> LambdaHandler:
    """``fn`` wrapped so that its logs carry the Lambda context (function name, request id, cold start), it is
    traced, and its metrics are flushed (with ``ColdStart`` on the first invocation) when it returns or raises.

    It runs under the invocation's deadline (:mod:`ragstep.deadline`: the context's remaining time less a margin for
    the handler's own epilogue), which bounds every provider and OpenSearch call it makes -- the stages, the join,
    and the API's app under Mangum (whose tasks and worker threads inherit it).

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
            from ragstep.deadline import deadline_at, from_lambda_context

            with deadline_at(from_lambda_context(context)):
                return wrapped(event, context)

    handler.__name__ = handler.__qualname__ = getattr(fn, "__name__", "handler")
    handler.__doc__ = fn.__doc__
    return handler
