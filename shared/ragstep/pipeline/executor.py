"""The in-process executor: runs a pipeline declaration stage by stage and records the trace.

On AWS, Step Functions plays this role; locally (and on Lambda with ``RAGSTEP_EXECUTOR=inprocess``) this does.
With ``check_transport=True`` the state is encoded and decoded between stages exactly as it would be between Lambda
functions, so tests catch a stage that depends on something the JSON does not carry.

Any state model runs here: the query pipeline's :class:`~ragstep.models.PipelineState` and the ingest pipeline's
:class:`~ragstep.models.IngestState` (each stage returns the type it was given).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Generator
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any, TypeVar

from ragstep.errors import InputError, RagstepError
from ragstep.models import RESULT_FIELDS, ErrorInfo, PipelineState, StreamEvent, TraceEvent
from ragstep.models.profiles import DEGRADE_ORDER
from ragstep.pipeline import transport
from ragstep.pipeline.budget import Budget, skip_reason
from ragstep.pipeline.definitions import (
    STREAM_STAGES,
    Map,
    Parallel,
    Pipeline,
    Stage,
    Step,
    Stream,
    get_pipeline,
    load_stage,
    payload_limit,
)
from ragstep.pipeline.join import join_branches
from ragstep.pipeline.recording import Recording, should_record

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.models import IngestState

# The ingest models are not imported for the query pipelines (a search function, `ragstep search`): named here, and
# recognised below by their module, which any IngestState in this process has loaded.
State = TypeVar("State", PipelineState, "IngestState")


def result_counts(state: Any) -> dict[str, int]:
    """Result list sizes of a query state (those whose stage ran, 0 for one that kept nothing); an ingest state's own
    ``counts``."""
    ingest = sys.modules.get("ragstep.models.ingest")
    if ingest is not None and isinstance(state, ingest.IngestState):
        return dict(state.counts)
    return {f: len(state.results(f)) for f in RESULT_FIELDS if state.ran(f)}


def run_stage(name: str, state: State, ctx: Context) -> State:
    """Run one stage and append its ``run`` trace event (what a Lambda handler does around the stage). A streaming
    stage is drained: its events are dropped, its final state kept."""
    if name in STREAM_STAGES:
        return drain(stream_stage(name, state, ctx))
    fn = load_stage(name)
    before = len(state.trace)
    started = time.perf_counter()
    out: State = fn(state, ctx)
    return _timed(name, out, before, started)


def stream_stage(name: str, state: State, ctx: Context) -> Generator[StreamEvent, None, State]:
    """Run a streaming stage, relaying its events; returns its final state with the ``run`` trace event.

    The caller may stop early (``close()`` on this generator, as a server does when its client disconnects): the
    stage sees ``GeneratorExit`` at the event it was yielding and is expected to stop its own work there."""
    fn = load_stage(name)
    before = len(state.trace)
    started = time.perf_counter()
    out: State = yield from fn(state, ctx)
    return _timed(name, out, before, started)


def _timed(name: str, out: State, before: int, started: float) -> State:
    elapsed = round((time.perf_counter() - started) * 1000.0, 3)
    # A stage may log its own ``run`` event with counts and details; it gets the timing, so each stage is one row.
    trace = list(out.trace)
    for i in range(len(trace) - 1, before - 1, -1):
        if trace[i].stage == name and trace[i].action == "run":
            trace[i] = trace[i].model_copy(update={"duration_ms": elapsed})
            return out.model_copy(update={"trace": trace})
    return out.with_trace(TraceEvent(stage=name, duration_ms=elapsed, counts=result_counts(out)))


def drain(events: Generator[StreamEvent, None, State]) -> State:
    """Consume a stream and return the state it ends with (what an executor that cannot stream does)."""
    while True:
        try:
            next(events)
        except StopIteration as stop:
            return stop.value


def run_pipeline(pipeline: Pipeline | str, state: State, ctx: Context, *, check_transport: bool = False) -> State:
    """Run every step; a :class:`RagstepError` from a stage is re-raised after being recorded on the state."""
    return drain(stream_pipeline(pipeline, state, ctx, check_transport=check_transport))


def stream_pipeline(
    pipeline: Pipeline | str, state: State, ctx: Context, *, check_transport: bool = False
) -> Generator[StreamEvent, None, State]:
    """Run every step, relaying the events of a final :class:`Stream` step as they come; returns the final state."""
    if state.tenant_id != ctx.tenant_id:  # a state must never be served from another tenant's adapters
        raise InputError(f"the state belongs to tenant {state.tenant_id!r}, the context to {ctx.tenant_id!r}")
    pipe = get_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    budget = _budget_of(state)
    recording = Recording(pipe.name) if should_record(state, ctx) else None
    if recording is not None:
        recording.add("start", state)  # type: ignore[arg-type]  # should_record: query states only
    try:
        for step in pipe.steps:
            if isinstance(step, Stream):
                state = yield from _recorded(step.name, state, stream_stage(step.name, state, ctx))
            else:
                state = _run_step(step, state, ctx, check_transport, budget)
            if recording is not None:
                recording.add(step.name, state)  # type: ignore[arg-type]
    finally:
        if recording is not None and len(recording.steps) > 1:
            _save_recording(recording, state, ctx)
    return state


def _save_recording(recording: Recording, state: Any, ctx: Context) -> None:
    """Keep the record; a store that fails loses the record, never the request's answer."""
    import logging

    try:
        recording.save(state, ctx)
    except Exception:
        logging.getLogger("ragstep.replay").exception("could not save the record of request %s", state.request_id)


def _recorded(
    name: str, state: State, events: Generator[StreamEvent, None, State]
) -> Generator[StreamEvent, None, State]:
    try:
        return (yield from events)
    except RagstepError as exc:
        exc.state = state.model_copy(update={"error": ErrorInfo(stage=name, error=exc.code, message=exc.message)})
        raise


def _budget_of(state: Any) -> Budget | None:
    budget_ms = getattr(state, "budget_ms", None)
    return None if budget_ms is None else Budget(time.monotonic(), float(budget_ms))


def run_step(step: Step, state: State, ctx: Context) -> State:
    """Run one declared step (a stage, a Parallel step and its join, a Map and its merge) as :func:`run_pipeline`
    does, without a profile's skips or a budget (what a benchmark that looks at each step's state uses)."""
    if isinstance(step, Stream):
        return drain(stream_stage(step.name, state, ctx))
    return _run_step(step, state, ctx, False)


def _run_step(step: Step, state: State, ctx: Context, check: bool, budget: Budget | None = None) -> State:
    if isinstance(step, Parallel):
        state = _run_parallel(step, state, ctx, check, budget)
    elif isinstance(step, Map):
        state = _run_map(step, state, ctx, check)
    else:
        skipped = getattr(state, "skip_stages", None)
        if skipped is not None:  # a query state: its profile and budget may leave this stage out
            profile = str(getattr(state, "profile", ""))
            row = skip_reason(step.name, profile, skipped, budget, ctx.clients.stage_timings)
            if row is not None:
                # A stage the cost budget gave up already has its degrade row (ragstep.app.profiles.plan_cost_budget).
                planned = any(t.stage == step.name and t.action == "degrade" for t in state.trace)
                return state if planned else state.with_trace(row)
        try:
            started = time.perf_counter()
            state = run_stage(step.name, state, ctx)
            if skipped is not None and step.name in DEGRADE_ORDER:
                ctx.clients.stage_timings.observe(step.name, (time.perf_counter() - started) * 1000.0)
        except RagstepError as exc:
            info = ErrorInfo(stage=step.name, error=exc.code, message=exc.message)
            exc.state = state.model_copy(update={"error": info})
            raise
    if check:  # the joined state of a Parallel step crosses the wire too (the join Lambda's output)
        limit = payload_limit(state.pipeline, ctx.settings.state_limit_bytes)
        state = transport.decode(transport.encode(state, ctx.blobs, limit), ctx.blobs, type(state))
    return state


def _run_parallel(step: Parallel, state: State, ctx: Context, check: bool, budget: Budget | None) -> State:
    """The first branch runs in this thread, the others on the process's branch threads; then the join."""

    def branch(steps: tuple[Step, ...]) -> State:
        out = state
        for s in steps:
            out = _run_step(s, out, ctx, check, budget)
        return out

    pool = ctx.clients.branch_executor
    others: list[Future[State]] = [pool.submit(branch, steps) for steps in step.branches[1:]]
    try:
        first = branch(step.branches[0])
    except BaseException:
        wait(others)  # no branch outlives the step that failed
        raise
    outputs: list[Any] = [first, *(f.result() for f in others)]
    return join_branches(state, outputs)  # type: ignore[arg-type,return-value]  # query pipelines only


def _run_map(step: Map, state: State, ctx: Context, check: bool) -> State:
    """Each item's steps concurrently (the first item in this thread, the others on the branch threads, as a
    Parallel step's branches), their results in the items' order on the input state, then the merge stage."""
    from ragstep.pipeline import mapping

    def item(value: Any) -> Any:
        out = mapping.item_state(step, state, value)
        for s in step.steps:
            out = _run_step(s, out, ctx, check)
        return mapping.result_of(step, out)

    items = mapping.items_of(step, state)
    pool = ctx.clients.branch_executor
    others: list[Future[Any]] = [pool.submit(item, value) for value in items[1:]]
    try:
        first: list[Any] = [item(items[0])] if items else []
    except BaseException:
        wait(others)  # no item outlives the step that failed
        raise
    results = [*first, *(f.result() for f in others)]
    merged = mapping.with_results(step, state, results) if step.results else state
    return _run_step(Stage(step.merge), merged, ctx, check)


__all__ = [
    "drain",
    "join_branches",
    "result_counts",
    "run_pipeline",
    "run_stage",
    "run_step",
    "stream_pipeline",
    "stream_stage",
]
