"""Lambda entry points: the one place handler logic lives.

Each ``functions/<name>/app.py`` is a few lines that pick a handler from here::

    from ragstep.handlers import stage_handler

    handler = stage_handler("chunk_search")

* :func:`stage_handler` -- one pipeline stage: decode the state (restoring results a previous stage offloaded to the
  blob store), run the stage, encode the state again under the Step Functions payload limit.
* :func:`join_handler` -- the task after a ``Parallel`` state: joins the branch states (see ``pipeline/asl.py``).
* :func:`api_handler` -- the HTTP API (FastAPI through Mangum).

Importing this module costs only the standard library. The :class:`~ragstep.services.Services`, the Powertools
logger, the stage module and (for the API) the FastAPI app are created on the first invocation and kept for the life
of the execution environment, so a warm invocation pays for none of them.

Errors: a :class:`~ragstep.errors.RagstepError` propagates unchanged, and the Lambda runtime reports its class name
as the error type, which is the ``Error`` Step Functions matches on (``InputError``, ``NotFoundError``,
``StateTooLargeError`` ...). An event that is not a valid state raises :class:`~ragstep.errors.InputError`. The
generated state machine retries only Lambda service errors, so none of these is retried: the same input would fail
the same way.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger

    from .models import PipelineState
    from .services import Services

LambdaHandler = Callable[[Any, Any], Any]

SERVICE_NAME_ENV = "POWERTOOLS_SERVICE_NAME"
DEFAULT_SERVICE_NAME = "ragstep"

_lock = threading.RLock()
_services: Services | None = None
_logger: Logger | None = None
_mangum: Any = None


def get_services() -> Services:
    """The execution environment's :class:`Services` (built from ``RAGSTEP_*`` settings on first use)."""
    global _services
    if _services is None:
        with _lock:
            if _services is None:
                from .services import Services

                _services = Services()
    return _services


def reset() -> None:
    """Forget the cached services, logger and API app, so the next invocation reads the environment again.

    A Lambda execution environment never needs this; tests that change ``RAGSTEP_*`` variables do.
    """
    global _services, _logger, _mangum
    with _lock:
        _services = _logger = _mangum = None


def logger() -> Logger:
    """The Powertools logger (service name from ``POWERTOOLS_SERVICE_NAME``), created on first use."""
    global _logger
    if _logger is None:
        with _lock:
            if _logger is None:
                from aws_lambda_powertools import Logger

                _logger = Logger(service=os.environ.get(SERVICE_NAME_ENV) or DEFAULT_SERVICE_NAME)
    return _logger


def _with_lambda_context(fn: LambdaHandler, correlation_id_path: str | None = None) -> LambdaHandler:
    """``fn`` wrapped so that its logs carry the Lambda context (function name, request id, cold start).

    The Powertools decorator is applied per call rather than at import, so that importing a handler module stays
    cheap; applying it costs microseconds.
    """

    def handler(event: Any, context: Any) -> Any:
        wrapped = logger().inject_lambda_context(fn, correlation_id_path=correlation_id_path, clear_state=True)
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


def decode_state(payload: Any, services: Services) -> PipelineState:
    """The pipeline state in ``payload``, with offloaded results loaded back; :class:`InputError` if it is not one."""
    from pydantic import ValidationError

    from .errors import InputError
    from .pipeline import transport

    if not isinstance(payload, (dict, str, bytes)):
        raise InputError(f"the event must be a pipeline state (a JSON object), not {type(payload).__name__}")
    try:
        return transport.decode(payload, services.blobs)
    except ValidationError as exc:
        raise InputError(f"the event is not a valid pipeline state: {_validation_message(exc)}") from exc


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


def encode_state(state: PipelineState, services: Services) -> dict[str, Any]:
    """The state as the handler returns it: at most ``state_limit_bytes`` on the wire, offloading results if needed.

    :func:`ragstep.pipeline.transport.encode` measures compact UTF-8 JSON; what the runtime sends is a little larger
    (and much larger for escaped Chinese text), so the budget shrinks by the difference until the wire form fits.
    """
    from .errors import StateTooLargeError
    from .pipeline import transport

    limit = services.settings.state_limit_bytes
    budget = limit
    for _ in range(4):
        payload = transport.encode(state, services.blobs, budget)
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


def _log_state(message: str, state: PipelineState, payload: dict[str, Any], **keys: Any) -> None:
    from .pipeline.executor import result_counts

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
    from .errors import InputError, RagstepError

    log = logger()
    if isinstance(exc, InputError):
        log.warning("rejected input", extra={**keys, "error": type(exc).__name__, "error_message": str(exc)})
    elif isinstance(exc, RagstepError):
        log.error("stage failed", extra={**keys, "error": type(exc).__name__, "error_message": exc.message})
    else:
        log.exception("unexpected error", extra=keys)


# -- handlers -----------------------------------------------------------------------------------------------------


def stage_handler(stage_name: str) -> LambdaHandler:
    """The Lambda handler of one pipeline stage (event and result: a pipeline state as JSON).

    The stage name is checked against :data:`ragstep.pipeline.definitions.STAGES` on the first invocation (the
    tests import every ``functions/*/app.py``, so a misspelt name never reaches a deployment).
    """

    def run(event: Any, context: Any) -> dict[str, Any]:
        from .pipeline.executor import run_stage

        log = logger()
        log.append_keys(stage=stage_name)
        try:
            services = get_services()
            state = decode_state(event, services)
            # The pipeline request id is the same in every stage of one search: the key to follow it across functions.
            log.set_correlation_id(state.request_id)
            state = run_stage(stage_name, state, services)
            payload = encode_state(state, services)
        except Exception as exc:
            _log_error(exc, stage=stage_name)
            raise
        _log_state("stage finished", state, payload, stage=stage_name)
        return payload

    run.__name__ = f"{stage_name}_handler"
    run.__doc__ = f"Lambda handler of the {stage_name!r} stage."
    return _with_lambda_context(run)


def _join(event: Any, context: Any) -> dict[str, Any]:
    from .errors import InputError
    from .pipeline.executor import join_branches

    log = logger()
    log.append_keys(stage="join")
    try:
        if not isinstance(event, list) or len(event) < 2:
            raise InputError(
                "the join expects the output of a Parallel state: a list of the input state and each branch's state"
            )
        services = get_services()
        states = [decode_state(item, services) for item in event]
        base, outputs = states[0], states[1:]
        log.set_correlation_id(base.request_id)
        strays = sorted({s.request_id for s in outputs if s.request_id != base.request_id})
        if strays:
            raise InputError(f"branch states belong to other requests ({', '.join(strays)}), not {base.request_id}")
        state = join_branches(base, outputs)
        payload = encode_state(state, services)
    except Exception as exc:
        _log_error(exc, stage="join")
        raise
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

                from .api import create_app

                _mangum = Mangum(create_app(get_services()), lifespan="off")
    return _mangum


def _serve_api(event: Any, context: Any) -> dict[str, Any]:
    return _app()(event, context)


# The API Gateway request id (HTTP API payload 2.0) is the correlation id of an API call.
api_handler = _with_lambda_context(_serve_api, correlation_id_path="requestContext.requestId")
api_handler.__doc__ = "The HTTP API (API Gateway HTTP API, payload format 2.0) served by FastAPI through Mangum."
