"""Fusion arithmetic: weighted RRF with 1-based ranks, single-list passthrough, min-max."""

from __future__ import annotations

import pytest

from ragstep.models import MatchType
from ragstep.ports import Hit
from ragstep.retrieval.fusion import fuse_minmax, fuse_rrf

V = [Hit("a", 0.9), Hit("b", 0.8), Hit("c", 0.5)]
K = [Hit("c", 1.0), Hit("d", 0.6), Hit("a", 0.4)]


def test_weighted_rrf_arithmetic() -> None:
    fused = {f.chunk_id: f for f in fuse_rrf(V, K, k=60, w_vector=0.7, w_keyword=0.3)}
    assert fused["a"].score == pytest.approx(0.7 / 61 + 0.3 / 63)
    assert fused["b"].score == pytest.approx(0.7 / 62)
    assert fused["c"].score == pytest.approx(0.7 / 63 + 0.3 / 61)
    assert fused["d"].score == pytest.approx(0.3 / 62)
    assert fused["a"].match_type == MatchType.HYBRID and fused["b"].match_type == MatchType.VECTOR
    assert fused["d"].match_type == MatchType.KEYWORD
    assert (fused["c"].vector_rank, fused["c"].keyword_rank) == (3, 1)
    assert (fused["c"].vector_score, fused["c"].keyword_score) == (0.5, 1.0)
    order = [f.chunk_id for f in fuse_rrf(V, K)]
    assert order == ["a", "c", "b", "d"]


def test_one_list_keeps_its_order_and_raw_scores() -> None:
    only_k = fuse_rrf([], K)
    assert [(f.chunk_id, f.score, f.match_type) for f in only_k] == [
        ("c", 1.0, MatchType.KEYWORD),
        ("d", 0.6, MatchType.KEYWORD),
        ("a", 0.4, MatchType.KEYWORD),
    ]
    assert [(f.chunk_id, f.score) for f in fuse_minmax(V, [])] == [("a", 0.9), ("b", 0.8), ("c", 0.5)]
    assert fuse_rrf([], []) == []


def test_ties_are_deterministic() -> None:
    a = fuse_rrf([Hit("x", 0.5), Hit("y", 0.5)], [Hit("y", 1.0), Hit("x", 1.0)], w_vector=1.0, w_keyword=1.0)
    # equal RRF scores: the better vector rank wins
    assert [f.chunk_id for f in a] == ["x", "y"]
    assert a[0].score == pytest.approx(a[1].score)


def test_minmax_convex_combination() -> None:
    fused = {f.chunk_id: f.score for f in fuse_minmax(V, K, w_vector=0.7, w_keyword=0.3)}
    # vector: a=1, b=0.75, c=0; keyword: c=1, d=1/3, a=0
    assert fused["a"] == pytest.approx(0.7 * 1.0)
    assert fused["b"] == pytest.approx(0.7 * 0.75)
    assert fused["c"] == pytest.approx(0.3 * 1.0)
    assert fused["d"] == pytest.approx(0.3 * (0.6 - 0.4) / 0.6)
    equal = fuse_minmax([Hit("p", 0.3), Hit("q", 0.3)], [Hit("p", 2.0)], w_vector=1.0, w_keyword=1.0)
    assert {f.chunk_id: f.score for f in equal} == {"p": 1.0, "q": 0.5}
