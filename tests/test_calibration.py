"""The rerank stage's threshold and weights follow the reranker's score scale."""

from __future__ import annotations

import math

import pytest

from ragstep.retrieval.calibration import BASE_WEIGHT, MODEL_WEIGHT, rerank_calibration


def test_rerank_scales() -> None:
    model = rerank_calibration("rerank_model", 0.3)
    assert (model.threshold, model.model_weight, model.base_weight) == (0.3, MODEL_WEIGHT, BASE_WEIGHT)
    assert rerank_calibration("token_vector", 0.2).threshold == 0.2
    token = rerank_calibration("token", 0.2)
    # No cut on the token scale, and the search score leads; the composite's total weight is unchanged.
    assert token.threshold is None and token.base_weight > token.model_weight
    assert token.model_weight + token.base_weight == pytest.approx(MODEL_WEIGHT + BASE_WEIGHT)


def test_token_vector_weights_follow_the_vector_evidence() -> None:
    # Issue 17: on the token_vector scale the model weight is 0.6 x top^1.5 and the rest goes to the search score.
    full = rerank_calibration("token_vector", 0.2, 1.0)
    assert (full.model_weight, full.base_weight) == pytest.approx((MODEL_WEIGHT, BASE_WEIGHT))  # the old weights
    for unknown in (None, math.nan):  # no cosine known: the fixed weights
        fixed = rerank_calibration("token_vector", 0.2, unknown)
        assert (fixed.model_weight, fixed.base_weight) == (MODEL_WEIGHT, BASE_WEIGHT)
    half = rerank_calibration("token_vector", 0.2, 0.5)
    assert half.model_weight == pytest.approx(MODEL_WEIGHT * 0.5**1.5)
    steps = [rerank_calibration("token_vector", 0.2, top) for top in (-0.5, 0.0, 0.2, 0.5, 0.8, 1.0, 1.5)]
    models = [c.model_weight for c in steps]
    assert models == sorted(models) and models[0] == 0.0 and models[-1] == pytest.approx(MODEL_WEIGHT)  # clipped
    for c in steps:  # bounded, the threshold and the composite's total weight unchanged
        assert 0.0 <= c.model_weight <= MODEL_WEIGHT and BASE_WEIGHT <= c.base_weight <= MODEL_WEIGHT + BASE_WEIGHT
        assert c.model_weight + c.base_weight == pytest.approx(MODEL_WEIGHT + BASE_WEIGHT) and c.threshold == 0.2
    # Other scales ignore it: a rerank model's score is its own evidence, the token scale has no vectors.
    assert rerank_calibration("rerank_model", 0.3, 0.1) == rerank_calibration("rerank_model", 0.3)
    assert rerank_calibration("token", 0.3, 0.1) == rerank_calibration("token", 0.3)


def test_relative_cosines_have_no_threshold_and_the_fixed_weights() -> None:
    # Issue 32: a model that declares no scale gets its cosines min-maxed over the candidates; a cut on such a score
    # cuts the candidates the vectors rank last whatever their cosine, and there is no absolute evidence to read.
    c = rerank_calibration("token_relative", 0.3, 0.2)
    assert c.threshold is None and (c.model_weight, c.base_weight) == (MODEL_WEIGHT, BASE_WEIGHT)
