"""The ranking metrics of the benchmarks: :mod:`ragstep.retrieval.metrics` (replay judges with them too)."""

from ragstep.retrieval.metrics import dcg, dedupe_docs, evaluate, ndcg_at_k, recall_at_k

__all__ = ["dcg", "dedupe_docs", "evaluate", "ndcg_at_k", "recall_at_k"]
