"""``ragstep bench answer --curve``: the model-free answerer's trade-off between answering and declining.

The answerer (:mod:`ragstep.retrieval.answer_span`) answers when its best sentence passes the checks that need no
threshold and its support reaches :data:`~ragstep.retrieval.answer_span.ANSWER_THRESHOLD`. Where to put that
threshold is a trade-off: lower answers more of the questions the passages answer and also more of those they do
not. The curve shows it: per threshold, the share of the answerable questions answered correctly (of all, and of
those whose source was retrieved), the share of the unanswerable ones declined, and the citation precision of the
answers given. The operating point is read off it.

The expensive part -- retrieval and each question's sentence scoring -- runs once: every question's grounding (the
passages and scores the pipeline gave the answerer) is kept as a :class:`Sample`, assessed once
(:func:`~ragstep.retrieval.answer_span.assess`), and the sweep only compares numbers.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ragstep.adapters.chat.extractive import render_quotes
from ragstep.context import Context
from ragstep.models import PipelineState, language_of
from ragstep.retrieval.answer_span import ANSWER_THRESHOLD, Assessment, assess
from ragstep.stages.chat.common import context_results, grounding

#: The thresholds swept (support is the best fit above the question's background; see answer_span).
THRESHOLDS = tuple(round(0.50 + 0.05 * k, 2) for k in range(17))
#: The targets the operating point must meet on the unanswerable questions (issue 31).
TARGET_DECLINED = 0.8


@dataclass(frozen=True, slots=True)
class Sample:
    """One question as the answerer saw it: the question read, the passages and their scores, which passages come
    from a relevant document, and the reference answers (None: the corpus does not answer it)."""

    question: str
    passages: tuple[str, ...]
    scores: tuple[float, ...]
    relevant: tuple[bool, ...]
    references: tuple[str, ...] | None
    max_chars: int = 600

    @property
    def answerable(self) -> bool:
        return self.references is not None

    @property
    def given(self) -> bool:
        """The source was among the passages."""
        return any(self.relevant)


def sample_of(state: PipelineState, relevant: set[str], references: Sequence[str] | None) -> Sample:
    """The sample of one asked question (``relevant``: its relevant document ids)."""
    passages = tuple(state.chat.passages)
    results = context_results(state)[: len(passages)]
    g = grounding(state)
    return Sample(
        question=g.question,
        passages=passages,
        scores=tuple(g.scores),
        relevant=tuple(r.knowledge_id in relevant for r in results),
        references=None if references is None else tuple(references),
        max_chars=g.max_chars or 600,
    )


Assess = Callable[[Sample], Assessment]


def assessor(ctx: Context) -> Assess:
    """Assess samples as the extractive answerer does in the pipeline: the configured embedding model, one cache."""
    from ragstep.ports import score_scale

    encoder = ctx.embedder(ctx.clients.default_embedding_model())
    scale = score_scale(encoder)
    vectors: dict[str, Any] = {}

    def run(s: Sample) -> Assessment:
        return assess(s.question, s.passages, scores=s.scores, encoder=encoder, scale=scale, vectors=vectors)

    return run


def normalise(text: str) -> str:
    """NFKC, lower case, without spaces or punctuation: how an answer and a reference answer are compared."""
    text = unicodedata.normalize("NFKC", text).lower()
    return "".join(ch for ch in text if not ch.isspace() and not unicodedata.category(ch).startswith("P"))


def contains_answer(answer: str, references: list[str]) -> bool:
    """``answer`` holds one of the reference answers (both normalised)."""
    got = normalise(answer)
    return any(normalise(r) and normalise(r) in got for r in references)


def _correct(sample: Sample, a: Assessment) -> bool:
    text = "".join(render_quotes(a.quotes, sample.max_chars, language_of(sample.question)))
    return contains_answer(text, list(sample.references or ()))


def curve(
    samples: Sequence[Sample], assessments: Sequence[Assessment], thresholds: Sequence[float] = THRESHOLDS
) -> list[dict[str, Any]]:
    """Per threshold: answered correctly (all answerable / source retrieved), declined on unanswerable, answered
    (answerable), citation precision of the answers to answerable questions."""
    answerable = [(s, a, _correct(s, a)) for s, a in zip(samples, assessments, strict=True) if s.answerable]
    unanswerable = [a for s, a in zip(samples, assessments, strict=True) if not s.answerable]
    given = [row for row in answerable if row[0].given]
    points = []
    for t in thresholds:
        said = [(s, a, ok) for s, a, ok in answerable if a.answers(t)]
        cited = [s.relevant[q.passage - 1] for s, a, _ in said for q in a.quotes if q.passage - 1 < len(s.relevant)]
        points.append(
            {
                "threshold": t,
                "answered_correctly": _share(sum(ok for _, _, ok in said), len(answerable)),
                "answered_correctly_retrieved": _share(sum(ok for s, _, ok in said if s.given), len(given)),
                "answered": _share(len(said), len(answerable)),
                "declined_unanswerable": _share(sum(not a.answers(t) for a in unanswerable), len(unanswerable)),
                "citation_precision": _share(sum(cited), len(cited)),
            }
        )
    return points


def _share(part: float, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def operating_point(points: Sequence[dict[str, Any]]) -> float | None:
    """The lowest threshold declining at least :data:`TARGET_DECLINED` of the unanswerable questions (the most
    answers the decline target allows); None when no threshold does or the set has no unanswerable question."""
    for p in points:
        declined = p["declined_unanswerable"]
        if declined is not None and declined >= TARGET_DECLINED:
            return float(p["threshold"])
    return None


def report(samples: Sequence[Sample], assess_one: Assess) -> dict[str, Any]:
    """The curve of ``samples`` and the threshold the answerer uses, for ``run_answer``'s result."""
    assessments = [assess_one(s) for s in samples]
    points = curve(samples, assessments)
    return {"curve": points, "curve_threshold_in_use": ANSWER_THRESHOLD, "curve_suggested": operating_point(points)}


def render_curve(points: Sequence[dict[str, Any]]) -> str:
    from ragstep.entry.cli.console import table

    def show(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"

    rows = [
        (
            f"{p['threshold']:.2f}",
            show(p["answered_correctly"]),
            show(p["answered_correctly_retrieved"]),
            show(p["answered"]),
            show(p["declined_unanswerable"]),
            show(p["citation_precision"]),
        )
        for p in points
    ]
    head = ("threshold", "correct", "correct (source given)", "answered", "declined unanswerable", "citation prec.")
    return table(head, rows)
