"""The rerank stage's threshold and weights follow the reranker's score scale."""

from __future__ import annotations

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
