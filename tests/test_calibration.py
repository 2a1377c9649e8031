"""The rerank stage's threshold and weights follow the reranker's score scale."""

from __future__ import annotations

import math

import pytest

from ragstep.retrieval.calibration import BASE_WEIGHT, MODEL_WEIGHT, rerank_calibration


def test_rerank_scales() -> None:
    model = rerank_calibration("rerank_model", 0.3)
    assert (model.threshold, model.model_weight, model.base_weight) == (0.3, MODEL_WEIGHT, BASE_WEIGHT)
    # Issue 32: nor on the model-free reranker's with vectors (the search's thresholds cut on its signals already).
    assert rerank_calibration("token_vector", 0.2).threshold is None
    token = rerank_calibration("token", 0.2)
    # No cut on the token scale, and the search score leads; the composite's total weight is unchanged.
    assert token.threshold is None and token.base_weight > token.model_weight
    assert token.model_weight + token.base_weight == pytest.approx(MODEL_WEIGHT + BASE_WEIGHT)


def test_the_model_free_reranker_with_vectors_keeps_the_search_order() -> None:
    # Issue 32: on the token_vector and token_relative scales the composite reads the search score alone (model weight
    # 0, the composite's total weight unchanged) and no threshold applies, whatever the vector evidence: that
    # reranker re-measures what the search stage cut on and fused already.
    for scale in ("token_vector", "token_relative"):
        for evidence in (None, math.nan, -0.5, 0.0, 0.5, 1.0, 1.5):
            c = rerank_calibration(scale, 0.2, evidence)
            assert c.threshold is None and c.model_weight == 0.0
            assert c.base_weight == pytest.approx(MODEL_WEIGHT + BASE_WEIGHT)
    # A rerank model's score is a judgement the search did not make: its threshold and weights stand.
    assert rerank_calibration("rerank_model", 0.3, 0.1) == rerank_calibration("rerank_model", 0.3)
    assert rerank_calibration("rerank_model", 0.3).threshold == 0.3
    assert rerank_calibration("token", 0.3, 0.1) == rerank_calibration("token", 0.3)
