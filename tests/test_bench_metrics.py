"""Metric arithmetic on hand-computed cases: graded gains, ties, duplicates, queries without relevant documents."""

from __future__ import annotations

import math

import pytest

from ragstep.bench.metrics import dedupe_docs, evaluate, ndcg_at_k, recall_at_k


def test_ndcg_graded_gains_by_hand() -> None:
    judgements = {"a": 2, "b": 1, "c": 0}
    # ranking b, x, a: DCG = (2^1-1)/log2(2) + 0 + (2^2-1)/log2(4) = 1 + 1.5 = 2.5
    # ideal a, b:      IDCG = 3/log2(2) + 1/log2(3) = 3 + 0.63093
    expected = 2.5 / (3 + 1 / math.log2(3))
    assert ndcg_at_k(["b", "x", "a"], judgements) == pytest.approx(expected)
    assert ndcg_at_k(["a", "b"], judgements) == pytest.approx(1.0)
    assert ndcg_at_k(["c", "x"], judgements) == 0.0  # judged not relevant counts as nothing


def test_ndcg_cuts_at_k() -> None:
    ranking = [f"x{i}" for i in range(10)] + ["a"]
    assert ndcg_at_k(ranking, {"a": 1}, k=10) == 0.0
    assert ndcg_at_k(ranking, {"a": 1}, k=11) == pytest.approx(1 / math.log2(12))


def test_recall_and_ties_between_equally_relevant_docs() -> None:
    judgements = {"a": 1, "b": 1, "c": 1, "d": 0}
    assert recall_at_k(["a", "d", "b"], judgements, 10) == pytest.approx(2 / 3)
    assert recall_at_k(["a", "d", "b"], judgements, 1) == pytest.approx(1 / 3)
    # two equally relevant documents swapped: same nDCG
    assert ndcg_at_k(["a", "b"], judgements) == pytest.approx(ndcg_at_k(["b", "a"], judgements))


def test_documents_take_the_rank_of_their_best_chunk() -> None:
    assert dedupe_docs(["d1", "d2", "d1", "d3", "d2"]) == ["d1", "d2", "d3"]
    result = evaluate({"q": ["a", "a", "b"]}, {"q": {"b": 1}})
    assert result["ndcg@10"] == pytest.approx(1 / math.log2(3), abs=1e-4)  # b is second after dedupe, not third


def test_queries_without_relevant_documents_are_left_out() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 0}, "q3": {}}
    result = evaluate({"q1": ["a"], "q2": ["b"], "q3": []}, qrels)
    assert result == {"ndcg@10": 1.0, "recall@10": 1.0, "recall@100": 1.0}
    assert evaluate({}, {"q": {"x": 0}}) == {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0}


def test_missing_ranking_counts_as_zero() -> None:
    result = evaluate({"q1": ["a"]}, {"q1": {"a": 1}, "q2": {"b": 2}})
    assert result["ndcg@10"] == pytest.approx(0.5)
    assert result["recall@100"] == pytest.approx(0.5)
