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

On the ``token_vector`` scale the reranker's share of the composite follows the query's vector evidence ``e =
top^1.5`` (``top``: the candidates' best calibrated cosine; the power is fusion's ``VECTOR_EVIDENCE_POWER``): model
``0.6 x e``, search score ``0.3 + 0.6 x (1 - e)``. What that reranker adds to the search is its vectors, and the
search stage's fusion already weighs those by the same evidence; at the fixed 0.6 / 0.3 it put back, for every query,
the vector weight fusion takes off a query the embedding model found nothing close to, and the rerank stage ranked
below its own candidates' order (msmarco-5k e5, msmarco-keywords; BENCHMARKS.md, "Fusion by each list's evidence").
``e`` = 1 is the fixed weights, and the total weight (0.9) is the same for every ``e``.

``token_relative`` is the model-free reranker with the vectors of a model that declares no scale (a provider's
``openai:`` / ``bedrock:`` model): its cosines are min-maxed over the candidates (the best 1, the worst 0), so a
threshold on the score would cut the candidates the vectors rank last, whatever their cosine; no threshold applies
and the fixed weights keep (there is no absolute evidence to scale them by).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from ragstep.retrieval.fusion import VECTOR_EVIDENCE_POWER

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

    ``vector_evidence``: on the ``token_vector`` scale, the best calibrated cosine among the query's candidates
    (clipped to 0-1); the model weight moves to the search score as it falls (module docstring). None (no cosine
    known, e.g. a server-fused list) keeps the fixed weights."""
    if scale == "token":
        return RerankCalibration(scale, None, TOKEN_MODEL_WEIGHT, TOKEN_BASE_WEIGHT)
    if scale == "token_relative":  # cosines min-maxed over the candidates: a cut on them would cut a rank, not a score
        return RerankCalibration(scale, None, MODEL_WEIGHT, BASE_WEIGHT)
    if scale == "token_vector" and vector_evidence is not None and math.isfinite(vector_evidence):
        e = min(max(vector_evidence, 0.0), 1.0) ** VECTOR_EVIDENCE_POWER
        return RerankCalibration(scale, rerank_threshold, MODEL_WEIGHT * e, BASE_WEIGHT + MODEL_WEIGHT * (1.0 - e))
    return RerankCalibration(scale, rerank_threshold, MODEL_WEIGHT, BASE_WEIGHT)
