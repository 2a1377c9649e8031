"""Replay a recorded request (:mod:`ragstep.pipeline.recording`) on today's code and settings, or with overrides,
from any step, and say what changed: results gained, lost and moved (with scores), the answer's text, its
citations, each stage's time, and the cost.

* From the start, nothing overridden: the request as it was asked, through today's stages (a replay on unchanged
  code and settings gives the recorded results and answer). A session's history is the one recorded: a pipeline
  that begins with ``load_history`` is replayed from the state that step loaded.
* ``from_step``: the state recorded just before that step, so the steps before it are not run again (their output
  is what the request had: a replay from ``chunk_rerank`` reranks the same candidates).
* ``retrieval`` / ``chat``: retrieval and chat settings applied to the state before it runs on (``--set``).
"""

from __future__ import annotations

import difflib
import uuid
from dataclasses import dataclass, field
from typing import Any

from ragstep.app.cost import cost_of
from ragstep.context import Context
from ragstep.errors import InputError, NotFoundError
from ragstep.models import PipelineState, RetrievalOverrides
from ragstep.pipeline import recording
from ragstep.pipeline.definitions import Pipeline, get_pipeline
from ragstep.pipeline.executor import run_pipeline

HISTORY_STEP = "load_history"


@dataclass(frozen=True, slots=True)
class ResultMove:
    id: str
    file: str
    before: int | None  # 1-based rank, None: not there
    after: int | None
    score_before: float | None
    score_after: float | None


@dataclass
class ReplayDiff:
    request_id: str
    pipeline: str
    from_step: str
    overrides: dict[str, Any]
    gained: list[ResultMove] = field(default_factory=list)
    lost: list[ResultMove] = field(default_factory=list)
    moved: list[ResultMove] = field(default_factory=list)
    unchanged: int = 0
    answer_before: str = ""
    answer_after: str = ""
    answer_diff: list[str] = field(default_factory=list)
    citations_before: list[str] = field(default_factory=list)
    citations_after: list[str] = field(default_factory=list)
    stage_ms: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    cost_before: float = 0.0
    cost_after: float = 0.0

    @property
    def changed(self) -> bool:
        return bool(
            self.gained or self.lost or self.moved or self.answer_diff or self.citations_before != self.citations_after
        )


def _ranked(state: PipelineState) -> dict[str, tuple[int, float, str]]:
    return {r.id: (n, r.score, r.knowledge_filename) for n, r in enumerate(state.final_results, start=1)}


def _cited(state: PipelineState) -> list[str]:
    return [r.id for r in state.chat.references if r.cited]


def _stage_times(state: PipelineState) -> dict[str, float]:
    times: dict[str, float] = {}
    for row in state.trace:
        if row.action == "run":
            times[row.stage] = times.get(row.stage, 0.0) + row.duration_ms
    return times


def diff(before: PipelineState, after: PipelineState, ctx: Context, **about: Any) -> ReplayDiff:
    out = ReplayDiff(request_id=before.request_id, pipeline=before.pipeline, **about)
    old, new = _ranked(before), _ranked(after)
    for rid, (rank, score, name) in new.items():
        if rid not in old:
            out.gained.append(ResultMove(rid, name, None, rank, None, score))
        elif old[rid][0] != rank or abs(old[rid][1] - score) > 1e-6:
            out.moved.append(ResultMove(rid, name, old[rid][0], rank, old[rid][1], score))
        else:
            out.unchanged += 1
    out.lost = [
        ResultMove(rid, name, rank, None, score, None) for rid, (rank, score, name) in old.items() if rid not in new
    ]
    out.answer_before, out.answer_after = before.chat.answer, after.chat.answer
    if out.answer_before != out.answer_after:
        out.answer_diff = list(
            difflib.unified_diff(
                out.answer_before.splitlines(), out.answer_after.splitlines(), "recorded", "replayed", lineterm=""
            )
        )
    out.citations_before, out.citations_after = _cited(before), _cited(after)
    times_before, times_after = _stage_times(before), _stage_times(after)
    out.stage_ms = {s: (times_before.get(s), times_after.get(s)) for s in dict.fromkeys([*times_before, *times_after])}
    out.cost_before, out.cost_after = cost_of(before, ctx).total_usd, cost_of(after, ctx).total_usd
    return out


def _start_state(document: dict[str, Any], from_step: str | None, pipe: Pipeline) -> tuple[PipelineState, int]:
    names = [step.name for step in pipe.steps]
    if from_step is None:
        # A session's history is what it was then: the turns saved since (this request's own among them) are not
        # read again, so a pipeline that begins by loading it starts from the state it loaded.
        from_step = names[1] if names[0] == HISTORY_STEP and len(names) > 1 else names[0]
    if from_step not in names:
        raise InputError(f"--from {from_step!r}: the {pipe.name} pipeline's steps are {', '.join(names)}")
    index = names.index(from_step)
    before = "start" if index == 0 else names[index - 1]
    recorded = {step["after"]: step["state"] for step in document["steps"]}
    if before not in recorded:
        raise InputError(f"--from {from_step!r}: the record ends before that step (the request failed earlier)")
    return PipelineState.model_validate(recorded[before]), index


def replay(
    ctx: Context,
    request_id: str,
    *,
    from_step: str | None = None,
    retrieval: dict[str, Any] | None = None,
    chat: dict[str, Any] | None = None,
) -> ReplayDiff:
    """Run the recorded request again (see the module docstring) and compare it with what was recorded."""
    document = recording.load(ctx, request_id)
    if document is None:
        raise NotFoundError(
            f"no record of request {request_id!r} (RAGSTEP_RECORD_RATE decides which requests are recorded; "
            "records are kept RAGSTEP_RECORD_RETENTION_S)"
        )
    pipe = get_pipeline(document["pipeline"])
    start, index = _start_state(document, from_step, pipe)
    for kb in start.knowledge_bases:  # a caller limited to some knowledge bases replays only requests on those
        ctx.require_kb(kb.id)
    recorded_end = PipelineState.model_validate(document["steps"][-1]["state"])
    state = start
    if retrieval:
        overrides = RetrievalOverrides.model_validate(retrieval)
        state = state.model_copy(update={"retrieval": overrides.apply(state.retrieval)})
    if chat:
        from ragstep.models import ChatSettings

        settings = ChatSettings.model_validate({**state.chat.settings.model_dump(), **chat})
        state = state.model_copy(update={"chat": state.chat.model_copy(update={"settings": settings})})
    # A replay is not recorded again (recording.should_record), and its id says it is a replay.
    state = state.model_copy(update={"request_id": f"{recording.REPLAY_PREFIX}{uuid.uuid4().hex}"})
    # The steps already run keep their trace rows; the replay adds its own for the steps it runs.
    remaining = Pipeline(name=pipe.name, steps=pipe.steps[index:], kind=pipe.kind, state=pipe.state, deployed=False)
    replayed = run_pipeline(remaining, state, ctx)
    return diff(
        recorded_end,
        replayed,
        ctx,
        from_step=pipe.steps[index].name,
        overrides={**(retrieval or {}), **{f"chat.{k}": v for k, v in (chat or {}).items()}},
    )


def recent(ctx: Context, limit: int) -> list[str]:
    """The request ids of the newest ``limit`` records, newest first."""
    keys = recording.record_keys(ctx)[-limit:]
    return [k.rsplit("/", 1)[-1].partition("-")[2].removesuffix(recording.SUFFIX) for k in reversed(keys)]
