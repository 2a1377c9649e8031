"""The rerank stage's threshold and weights, calibrated to the score scale the reranker produces (pure functions).

(Vector scores are calibrated per embedding model where the search runs: an embedder declares its cosine scale,
:func:`ragstep.ports.score_scale`, and ``vector_threshold`` is mapped onto it; keyword scores are normalised to the
best hit of each query before ``keyword_threshold`` applies.)

Rerank scores come on three scales (:data:`RerankScale`): a rerank model's relevance probabilities
(``rerank_model``: ``rerank_threshold`` as it is, WeKnora's 0.3 by default); the model-free reranker with vectors
(``token_vector``: 0.3 x token similarity + 0.7 x cosine, RAGFlow's scale, where its own cut-off is 0.2; the 0.7
shrinks with the vector evidence, :class:`ragstep.retrieval.token_vector.TokenVectorReranker`); and the
model-free reranker without vectors (``token``: token similarity alone). On the ``token`` scale the score re-measures
what BM25 already measured (the query terms a chunk holds), and the search stage's ``keyword_threshold`` has cut on
that signal already. A second cut there only threw relevant chunks away: on msmarco-5k keyword-only the median
relevant candidate scores 0.15 and the median irrelevant one 0.12, and the 0.2 cut left `ragstep search --top-k 10`
with 6.5 results and 72 % of the search stage's Recall@10. So on that scale no rerank threshold applies and the
search score leads the composite (0.15 / 0.75 instead of 0.6 / 0.3: the default run's nDCG@10 there went from 0.42 to
0.55, against 0.52 with 0.6 / 0.3 and no threshold; BENCHMARKS.md, "Robust fusion").

On the model-free reranker's scales with vectors (``token_vector``, ``token_relative``) the rerank stage keeps the
search's order and its candidates (issue 32): no threshold, and the composite reads the search score alone (model
weight 0, base 0.9). That reranker re-measures the query's words and its cosines, which the search stage cut on
(``keyword_threshold``, ``vector_threshold``) and fused with weights read from this corpus and this query
(:func:`ragstep.retrieval.fusion.fuse_evidence`); blended again at fixed weights, it could only undo that reading.
Measured, it did not help where it was neutral and hurt where the lists disagree: msmarco-5k e5 (``ragstep search
--top-k 10``) its threshold kept 9.3 of 30 candidates and cost nDCG@10 0.022, its reordering +0.002; on English
questions over Russian passages (xquad-en-ru, no word in common but names and numbers, token similarity near 0
except on the passages that share a name) the reordering cost 0.019 and, since a rerank that keeps nothing now
empties the answer (:mod:`ragstep.stages.search.filter_top_k`), the threshold left a third of the questions with no
result (the default run 0.64 where the search ranks at 0.90). Its scores are still computed and reported with each
result (``metadata.rerank.model``); a rerank model's score, a judgement the search did not make, keeps its
threshold and weights.

``token_relative`` is the model-free reranker with the vectors of a model that declares no scale (a provider's
``openai:`` / ``bedrock:`` model): its cosines are min-maxed over the candidates (the best 1, the worst 0), so a
threshold on the score would cut the candidates the vectors rank last, whatever their cosine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: The score scales a reranker produces (module docstring).
RerankScale = Literal["rerank_model", "token_vector", "token_relative", "token"]


@dataclass(frozen=True, slots=True)
class RerankCalibration:
    """How the rerank stage treats one score scale: the threshold (None: no cut) and the composite's weights."""

    scale: RerankScale
    threshold: float | None
    model_weight: float
    base_weight: float


#: The composite's weights of the reranker's score and the (normalised) search score, WeKnora's 0.6 / 0.3, kept
#: where the reranker adds a signal the search did not have (a model, or vectors next to BM25).
MODEL_WEIGHT, BASE_WEIGHT = 0.6, 0.3
#: On the token scale the search score leads: the token similarity only breaks near-ties of the BM25 order.
TOKEN_MODEL_WEIGHT, TOKEN_BASE_WEIGHT = 0.15, 0.75


def rerank_calibration(
    scale: RerankScale, rerank_threshold: float, vector_evidence: float | None = None
) -> RerankCalibration:
    """The rerank stage's threshold and weights on ``scale`` for the configured ``rerank_threshold``.

    ``vector_evidence`` (the candidates' best calibrated cosine) is no longer read: the model-free reranker with
    vectors keeps the search's order whatever it is (module docstring); kept for the callers' signature."""
    if scale == "token":
        return RerankCalibration(scale, None, TOKEN_MODEL_WEIGHT, TOKEN_BASE_WEIGHT)
    if scale in ("token_vector", "token_relative"):
        return RerankCalibration(scale, None, 0.0, MODEL_WEIGHT + BASE_WEIGHT)
    return RerankCalibration(scale, rerank_threshold, MODEL_WEIGHT, BASE_WEIGHT)
