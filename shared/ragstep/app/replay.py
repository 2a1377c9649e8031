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
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragstep.app.cost import cost_of
from ragstep.context import Context
from ragstep.errors import InputError, NotFoundError
from ragstep.models import PipelineState, RetrievalOverrides, SearchRequest, SearchResult
from ragstep.pipeline import recording
from ragstep.pipeline.definitions import Pipeline, get_pipeline
from ragstep.pipeline.executor import run_pipeline
from ragstep.retrieval.metrics import dedupe_docs, ndcg_at_k

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
    query: str = ""
    #: Each result's document, as names a judgement may use for it (knowledge id, file name, file stem).
    documents_before: list[tuple[str, ...]] = field(default_factory=list)
    documents_after: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(
            self.gained or self.lost or self.moved or self.answer_diff or self.citations_before != self.citations_after
        )


def _ranked(state: PipelineState) -> dict[str, tuple[int, float, str]]:
    return {r.id: (n, r.score, r.knowledge_filename) for n, r in enumerate(state.results("final_results"), start=1)}


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
    out.query = before.request.query
    out.documents_before = [_document_names(r) for r in before.results("final_results")]
    out.documents_after = [_document_names(r) for r in after.results("final_results")]
    return out


def _document_names(result: SearchResult) -> tuple[str, ...]:
    name = result.knowledge_filename or ""
    return (result.knowledge_id, name, name.rsplit(".", 1)[0] if "." in name else name)


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


# -- many requests at once: how many changed, and with judgements which settings are better -------------------------

#: Judged queries are scored by nDCG at this depth, as ``ragstep bench quality`` scores them.
JUDGED_DEPTH = 10


@dataclass(frozen=True, slots=True)
class Judgements:
    """Relevance judgements of a BEIR-layout set: each query's judged documents, by the query's normalised text (a
    recorded request is matched to a judged query by what was asked)."""

    by_query: dict[str, dict[str, int]]
    queries: list[tuple[str, str]]  # (id, text), in the set's order

    def of(self, query: str) -> dict[str, int] | None:
        return self.by_query.get(_normalised(query))


def _normalised(text: str) -> str:
    return " ".join(text.casefold().split())


def load_judgements(folder: Path) -> Judgements:
    """``queries.jsonl`` and ``qrels.tsv`` (or BEIR's ``qrels/test.tsv``: query-id, corpus-id, score; a header line
    is skipped) of ``folder``. A judged corpus id names a document by its knowledge id, its file name or its file
    name without the extension (a corpus ingested as ``<id>.txt`` files is judged as it is)."""
    folder = Path(folder)
    qrels_path = next((p for p in (folder / "qrels.tsv", folder / "qrels" / "test.tsv") if p.is_file()), None)
    if not (folder / "queries.jsonl").is_file() or qrels_path is None:
        raise InputError(
            f"{folder}: expected a BEIR-layout folder with queries.jsonl and qrels.tsv (or qrels/test.tsv)"
        )
    queries: list[tuple[str, str]] = []
    for n, line in enumerate((folder / "queries.jsonl").read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            queries.append((str(row["_id"]), str(row["text"])))
        except (ValueError, KeyError, TypeError):
            raise InputError(f'{folder / "queries.jsonl"} line {n}: expected {{"_id": ..., "text": ...}}') from None
    judged: dict[str, dict[str, int]] = {}
    for line in qrels_path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].strip().lstrip("-").isdigit():
            judged.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    by_query = {_normalised(text): judged[qid] for qid, text in queries if qid in judged}
    return Judgements(by_query=by_query, queries=[(qid, text) for qid, text in queries if qid in judged])


@dataclass
class BatchSummary:
    """What changed over many replays; with judgements, the nDCG@10 of each side over the judged ones."""

    replayed: int
    changed: int
    results_gained: int
    results_lost: int
    results_moved: int
    answers_changed: int
    changed_requests: list[str]
    changed_queries: list[str]
    judged: int = 0
    ndcg_before: float | None = None
    ndcg_after: float | None = None
    better: int = 0  # judged requests whose nDCG@10 went up
    worse: int = 0
    verdict: str = ""


def _ranking(documents: list[tuple[str, ...]], judged: dict[str, int]) -> list[str]:
    # The name a judgement uses for each result's document, if any; a document nobody judged keeps its id.
    return dedupe_docs(next((n for n in names if n in judged), names[0]) for names in documents)


def summarise(
    diffs: list[ReplayDiff],
    judgements: Judgements | None = None,
    sides: tuple[str, str] = ("the recorded settings", "the replayed settings"),
) -> BatchSummary:
    """The counts of ``diffs``; with ``judgements``, each side's mean nDCG@10 and which of ``sides`` (before,
    after) is better."""
    changed = [d for d in diffs if d.changed]
    out = BatchSummary(
        replayed=len(diffs),
        changed=len(changed),
        results_gained=sum(len(d.gained) for d in diffs),
        results_lost=sum(len(d.lost) for d in diffs),
        results_moved=sum(len(d.moved) for d in diffs),
        answers_changed=sum(1 for d in diffs if d.answer_diff),
        changed_requests=[d.request_id for d in changed],
        changed_queries=[d.query for d in changed],
    )
    if judgements is None:
        return out
    scores: list[tuple[float, float]] = []
    for d in diffs:
        judged = judgements.of(d.query)
        if judged and any(v > 0 for v in judged.values()):
            before = ndcg_at_k(_ranking(d.documents_before, judged), judged, JUDGED_DEPTH)
            after = ndcg_at_k(_ranking(d.documents_after, judged), judged, JUDGED_DEPTH)
            scores.append((before, after))
    out.judged = len(scores)
    if not scores:
        out.verdict = "no replayed request asks a judged query: nothing to judge"
        return out
    out.ndcg_before = round(sum(b for b, _ in scores) / len(scores), 4)
    out.ndcg_after = round(sum(a for _, a in scores) / len(scores), 4)
    out.better = sum(1 for b, a in scores if a > b + 1e-9)
    out.worse = sum(1 for b, a in scores if a < b - 1e-9)
    delta = out.ndcg_after - out.ndcg_before
    better = sides[1] if delta > 0 else sides[0]
    out.verdict = "no difference in nDCG@10" if abs(delta) < 1e-4 else f"{better} are better (nDCG@10 {delta:+.4f})"
    return out


def replay_set(
    ctx: Context,
    judgements: Judgements,
    knowledge_base_ids: list[str],
    *,
    retrieval: dict[str, Any] | None = None,
    limit: int | None = None,
) -> list[ReplayDiff]:
    """A benchmark set's queries searched twice on ``knowledge_base_ids``: under the current settings and with
    ``retrieval`` overrides; the diff of each pair (nothing recorded is needed)."""
    from ragstep.app.search import knowledge_search

    overrides = RetrievalOverrides.model_validate(retrieval or {})
    diffs: list[ReplayDiff] = []
    for _, text in judgements.queries[:limit]:
        request = SearchRequest(query=text, knowledge_base_ids=knowledge_base_ids)
        before = knowledge_search(request, ctx)
        after = knowledge_search(request.model_copy(update={"overrides": overrides}), ctx)
        diffs.append(diff(before, after, ctx, from_step="start", overrides=dict(retrieval or {})))
    return diffs
