"""The Lambda handlers of the state machines' tasks. Each ``functions/<stage>/app.py`` picks one::

    from ragstep.entry.aws.stage import stage_handler

    handler = stage_handler("chunk_search")

* :func:`stage_handler` -- one pipeline stage: decode the state (restoring results a previous stage offloaded to the
  tenant's blob store), run the stage in the state's tenant's context, encode the state again under the Step
  Functions payload limit (both through :mod:`ragstep.pipeline.transport`). The stage's pipeline decides the state
  model (:func:`ragstep.pipeline.definitions.state_model`): a ``PipelineState`` for the query stages, an
  ``IngestState`` for the ingest stages. The first ingest stage also accepts the S3 ``Object Created`` event
  EventBridge starts the ingest state machine with (:mod:`ragstep.entry.aws.events`), as the machine hands it over:
  ``{"input": <event>, "execution_arn": ...}``. It records the upload's ingestion job as running; the last stage
  records its outcome, and a stage that raises records it failed (:mod:`ragstep.app.s3_jobs`).
* :data:`join_handler` -- the task after a ``Parallel`` state: joins the branch states (see ``pipeline/asl.py``).
* The first stage of a ``Map`` state's iterations (``viking_query``, ``ingest_embed_batch``) takes
  ``{"state": ..., "item": ...}`` as the Map's ``ItemSelector`` builds it, or a state that already holds its item
  (a sample event, a test).

Observability (Powertools, :mod:`ragstep.entry.aws.runtime`): every invocation logs as JSON with the Lambda context
and the pipeline request id as correlation id; it is traced (a ``## <stage>`` X-Ray subsegment per stage, annotated
with stage, pipeline and request id); and it flushes its metrics as one EMF document on stdout (dimensions
``service`` and ``stage``): ``StageLatency`` (ms, the stage itself), ``Results`` (results, or chunks for an ingest
stage), ``Degradations`` (``degrade`` rows the stage added to the trace), ``StateBytes`` (the state as Lambda sends
it), ``StageErrors``, ``ColdStart``.

Errors: a :class:`~ragstep.errors.RagstepError` propagates unchanged, and the Lambda runtime reports its class name
as the error type, which is the ``Error`` Step Functions matches on (``InputError``, ``NotFoundError``,
``StateTooLargeError`` ...). An event that is not a valid state raises :class:`~ragstep.errors.InputError`. The
generated state machine retries only Lambda service errors, so none of these is retried: the same input would fail
the same way.

Importing this module costs only the standard library; the stage module is imported on the first invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ragstep.entry.aws.runtime import (
    LambdaHandler,
    get_clients,
    logger,
    metrics,
    tracer,
    warm_up,
    with_lambda_context,
)

if TYPE_CHECKING:
    from ragstep.context import Clients
    from ragstep.models import ResultField

#: The result list each query stage fills (its ``Results`` metric).
STAGE_RESULTS: dict[str, ResultField] = {
    "chunk_search": "search_results",
    "chunk_rerank": "rerank_results",
    "chunk_merge": "merge_results",
    "filter_top_k": "final_results",
}


def stage_handler(stage_name: str) -> LambdaHandler:
    """The Lambda handler of one pipeline stage (event and result: the state of the stage's pipeline as JSON).

    The stage name is checked against :data:`ragstep.pipeline.definitions.STAGES` on the first invocation (the
    tests import every ``functions/*/app.py``, so a misspelt name never reaches a deployment).
    """

    def run(event: Any, context: Any) -> dict[str, Any]:
        log = logger()
        log.append_keys(stage=stage_name)
        state: Any = None
        try:
            clients = get_clients()
            state = _input_state(stage_name, event, clients)
            # The pipeline request id is the same in every stage of one run: the key to follow it across functions.
            log.set_correlation_id(state.request_id)
            before = len(state.trace)
            ran = _run_traced(stage_name, state, clients)
            payload = _encode(ran, clients)
            state = ran
        except Exception as raised:
            exc = _as_input_error(raised)
            _log_error(exc, stage=stage_name)
            _error_metric(stage_name, exc)
            _job_failed(stage_name, state, exc)
            if exc is raised:
                raise
            raise exc from None
        _job_finished(stage_name, state, clients)
        _stage_metrics(stage_name, state, before, payload)
        _log_state("stage finished", state, payload, stage=stage_name)
        return payload

    run.__name__ = f"{stage_name}_handler"
    run.__doc__ = f"Lambda handler of the {stage_name!r} stage."
    warm_up(lambda: _load_stage(stage_name))
    return with_lambda_context(run)


def _as_input_error(exc: Exception) -> Exception:
    """A pydantic ``ValidationError`` escaping a stage (a value of the state that breaks a model's rule, e.g. a query
    over its limit) as the :class:`~ragstep.errors.InputError` it is; any other exception unchanged."""
    from pydantic import ValidationError

    from ragstep.errors import InputError

    if not isinstance(exc, ValidationError):
        return exc
    errors = exc.errors()
    if not errors:
        return InputError("the pipeline state breaks a rule of its model")
    where = ".".join(str(p) for p in errors[0]["loc"])
    return InputError(f"the pipeline state breaks a rule: {where}: {errors[0]['msg']}")


def _load_stage(stage_name: str) -> None:
    """Import what an invocation of ``stage_name`` imports: its module, the state models and the transport."""
    from ragstep.pipeline import transport  # noqa: F401
    from ragstep.pipeline.definitions import load_stage, state_model

    state_model(stage_name)
    load_stage(stage_name)


def _input_state(stage_name: str, event: Any, clients: Clients) -> Any:
    """The state ``stage_name`` runs on: the event decoded (an ingest stage's: :func:`ingest_input_state`, which also
    takes the S3 upload event the ingest machine starts with), or a Map iteration's item state."""
    from ragstep.models import IngestState
    from ragstep.pipeline import transport
    from ragstep.pipeline.definitions import state_model
    from ragstep.pipeline.mapping import item_state, map_starting_with

    model = state_model(stage_name)
    mapped = map_starting_with(stage_name)
    if mapped is not None and isinstance(event, dict) and set(event) == {"state", "item"}:
        # An iteration of a Map state: its ItemSelector hands over the Map's input and one item (pipeline/asl.py).
        return item_state(mapped, transport.decode_event(event["state"], clients.blobs, model), event["item"])
    if model is IngestState:
        from ragstep.entry.aws.events import ingest_input_state

        return ingest_input_state(stage_name, event, clients)
    return transport.decode_event(event, clients.blobs, model)


def _job_finished(stage_name: str, state: Any, clients: Clients) -> None:
    """After an ingest stage: its job's record (:func:`ragstep.app.s3_jobs.stage_finished`). A failure to record it
    is logged, not raised: the document is indexed, and reading the job later records the outcome from the
    execution's output."""
    from ragstep.models import IngestState

    if not isinstance(state, IngestState):
        return
    from ragstep.app.s3_jobs import stage_finished

    try:
        stage_finished(clients.context(state.tenant_id), stage_name, state)
    except Exception as exc:
        logger().warning(
            "could not record the end of ingestion job", extra={"job_id": state.job_id, "error": type(exc).__name__}
        )


def _job_failed(stage_name: str, state: Any, exc: BaseException) -> None:
    """A stage that raised: its job's record (:func:`ragstep.app.s3_jobs.stage_failed`). A failure to record it is
    logged: reading the job later records the failed execution instead."""
    from ragstep.models import IngestState

    if not isinstance(state, IngestState):
        return
    from ragstep.app.s3_jobs import stage_failed

    try:
        stage_failed(get_clients().context(state.tenant_id), stage_name, state, exc)
    except Exception as error:
        logger().warning(
            "could not record the failed ingestion job", extra={"job_id": state.job_id, "error": type(error).__name__}
        )


def _run_traced(stage_name: str, state: Any, clients: Clients) -> Any:
    """``state`` after the stage, run in its own tenant's context inside a ``## <stage>`` subsegment."""
    from ragstep.pipeline.executor import run_stage

    before = len(state.trace)
    with tracer().provider.in_subsegment(f"## {stage_name}") as subsegment:
        subsegment.put_annotation("stage", stage_name)
        subsegment.put_annotation("pipeline", state.pipeline)
        subsegment.put_annotation("request_id", state.request_id)
        state = run_stage(stage_name, state, clients.context(state.tenant_id))
        subsegment.put_metadata("trace", [t.model_dump(mode="json") for t in state.trace[before:]])
    return state


def _encode(state: Any, clients: Clients) -> dict[str, Any]:
    """The state as the handler returns it, under the payload limit as Lambda sends it; results it offloads go to
    the state's own tenant's blob store."""
    from ragstep.pipeline import transport
    from ragstep.pipeline.definitions import payload_limit

    # A pipeline with Parallel steps gives each state a share of the payload quota (a Parallel state's output holds
    # several of them).
    limit = payload_limit(state.pipeline, clients.settings.state_limit_bytes)
    return transport.encode_for_lambda(state, clients.blobs(state.tenant_id), limit)


# -- the join after a Parallel state ------------------------------------------------------------------------------


def _join(event: Any, context: Any) -> dict[str, Any]:
    import time

    from aws_lambda_powertools.metrics import MetricUnit

    from ragstep.errors import InputError
    from ragstep.models import PipelineState
    from ragstep.pipeline import transport
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
        states = [transport.decode_event(item, clients.blobs, PipelineState) for item in event]
        base, outputs = states[0], states[1:]
        log.set_correlation_id(base.request_id)
        strays = sorted({s.request_id for s in outputs if s.request_id != base.request_id})
        if strays:
            raise InputError(f"branch states belong to other requests ({', '.join(strays)}), not {base.request_id}")
        if any(s.tenant_id != base.tenant_id for s in outputs):
            raise InputError(f"branch states of request {base.request_id} belong to another tenant")
        state = join_branches(base, outputs)
        payload = _encode(state, clients)
    except Exception as exc:
        _log_error(exc, stage="join")
        _error_metric("join", exc)
        raise
    m = metrics()
    m.add_dimension(name="stage", value="join")
    m.add_metric(name="StageLatency", unit=MetricUnit.Milliseconds, value=(time.perf_counter() - started) * 1000.0)
    m.add_metric(name="StateBytes", unit=MetricUnit.Bytes, value=transport.wire_size(payload))
    _log_state("branches joined", state, payload, stage="join", branches=len(outputs))
    return payload


join_handler = with_lambda_context(_join)
join_handler.__doc__ = """The task after a Parallel state: ``[input state, branch 1 state, ...]`` -> one state.

The generated ASL makes the first branch a Pass state, so the first item is the state the branches started from and
:func:`ragstep.pipeline.executor.join_branches` can add each branch's new results and trace events to it, exactly as
the in-process executor does.
"""


# -- logs and metrics ---------------------------------------------------------------------------------------------


def _stage_metrics(stage_name: str, state: Any, before: int, payload: dict[str, Any]) -> None:
    """The stage's metrics (added to this invocation's EMF document): latency, results, degradations, state size."""
    from aws_lambda_powertools.metrics import MetricUnit

    from ragstep.models import IngestState
    from ragstep.pipeline import transport

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
        m.add_metric(name="Results", unit=MetricUnit.Count, value=len(state.results(STAGE_RESULTS[stage_name])))
    m.add_metric(name="StateBytes", unit=MetricUnit.Bytes, value=transport.wire_size(payload))


def _error_metric(stage_name: str, exc: BaseException) -> None:
    from aws_lambda_powertools.metrics import MetricUnit

    m = metrics()
    m.add_dimension(name="stage", value=stage_name)
    m.add_metric(name="StageErrors", unit=MetricUnit.Count, value=1)
    m.add_metadata(key="error", value=type(exc).__name__)


def _log_state(message: str, state: Any, payload: dict[str, Any], **keys: Any) -> None:
    from ragstep.pipeline.executor import result_counts
    from ragstep.pipeline.transport import offloaded_fields

    last = state.trace[-1] if state.trace else None
    logger().info(
        message,
        extra={
            **keys,
            "pipeline": state.pipeline,
            "tenant_id": state.tenant_id,
            "result_counts": result_counts(state),
            "trace_counts": last.counts if last else {},
            "duration_ms": last.duration_ms if last else None,
            "trace_events": len(state.trace),
            # By path in the state: the viking part's fields too (viking.matches, viking.outcome.passages).
            "offloaded": sorted(offloaded_fields(payload, type(state))),
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
