"""Ranking metrics over document ids (pure functions; tests pin them on hand-computed cases): the benchmarks and
`ragstep replay --qrels` judge rankings with them.

nDCG@k uses graded gains ``2^rel - 1`` and a ``log2(rank + 1)`` discount; Recall@k is the share of a query's relevant
documents (judgement > 0) found in the top k. Queries with no relevant document are left out of the averages, as
BEIR does. When several chunks of one document are returned, the document takes the rank of its best chunk.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence


def dedupe_docs(doc_ids: Iterable[str]) -> list[str]:
    """Chunk-level ranking to document ranking: each document at the rank of its first (best) chunk."""
    return list(dict.fromkeys(doc_ids))


def dcg(gains: Sequence[float]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def ndcg_at_k(ranking: Sequence[str], judgements: Mapping[str, int], k: int = 10) -> float:
    ideal = sorted((2**r - 1 for r in judgements.values() if r > 0), reverse=True)[:k]
    best = dcg(ideal)
    if best == 0:
        return 0.0
    gains = [2 ** judgements.get(doc, 0) - 1 for doc in ranking[:k]]
    return dcg(gains) / best


def recall_at_k(ranking: Sequence[str], judgements: Mapping[str, int], k: int) -> float:
    relevant = {d for d, r in judgements.items() if r > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def evaluate(rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Mean nDCG@10, Recall@10 and Recall@100 over the queries that have at least one relevant document."""
    judged = [q for q, j in qrels.items() if any(r > 0 for r in j.values())]
    if not judged:
        return {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0}
    totals = {"ndcg@10": 0.0, "recall@10": 0.0, "recall@100": 0.0}
    for q in judged:
        ranking = dedupe_docs(rankings.get(q, ()))
        totals["ndcg@10"] += ndcg_at_k(ranking, qrels[q], 10)
        totals["recall@10"] += recall_at_k(ranking, qrels[q], 10)
        totals["recall@100"] += recall_at_k(ranking, qrels[q], 100)
    return {name: round(value / len(judged), 4) for name, value in totals.items()}
