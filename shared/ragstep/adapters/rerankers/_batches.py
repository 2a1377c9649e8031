"""What the model rerankers (HTTP, Bedrock) share: documents sent in batches, each cut to a length, and the answers
checked and scaled to relevances in [0, 1]."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from ragstep.adapters._http import one_line
from ragstep.errors import InputError, ProviderError
from ragstep.retrieval.token_vector import check_documents

#: Documents per request when not configured, and the characters of each document sent.
DEFAULT_MAX_DOCUMENTS = 64
DEFAULT_MAX_CHARS = 4096


def scale_scores(scores: Sequence[float]) -> list[float]:
    """Scores as relevances in [0, 1], by RAGFlow's rule for rerank models that answer logits.

    Scores already all in [0, 1] are kept (they are probabilities and comparable across queries). If any falls
    outside, all are min-max scaled: ``(s - min) / (max - min)``; when they are all equal there is no order to
    keep, and each becomes 1.0 if that value is positive, else 0.0.
    """
    values = [float(s) for s in scores]
    if all(0.0 <= s <= 1.0 for s in values):
        return values
    low, high = min(values), max(values)
    if high == low:
        return [1.0 if high > 0 else 0.0] * len(values)
    return [(s - low) / (high - low) for s in values]


def finish(scores: Sequence[float | None]) -> list[float]:
    """Scale the scores the provider returned; documents it left out score 0."""
    returned = [s for s in scores if s is not None]
    scaled = iter(scale_scores(returned))
    return [0.0 if s is None else next(scaled) for s in scores]


def index_scores(items: list[Any], n: int, source: str, score_keys: tuple[str, ...]) -> list[tuple[int, float]]:
    """``(index, score)`` pairs from ``[{index, <score key>}]``, checked: each index once, in 0..n-1, finite scores."""
    seen: set[int] = set()
    out: list[tuple[int, float]] = []
    for item in items:
        if not isinstance(item, dict):
            raise ProviderError(f"{source} returned a result that is not an object: {one_line(json.dumps(item))}")
        index = item.get("index")
        if type(index) is not int or not 0 <= index < n or index in seen:
            raise ProviderError(f"{source} returned result index {index!r}: not in 0..{n - 1} or repeated")
        score = next((item[key] for key in score_keys if key in item), None)
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise ProviderError(
                f"{source} returned no finite {score_keys[0]} for document {index}: {one_line(json.dumps(score))}"
            )
        seen.add(index)
        out.append((index, float(score)))
    return out


def rerank_in_batches(
    query: str,
    documents: Sequence[str],
    batch_size: int,
    max_chars: int,
    score_batch: Callable[[str, list[str]], list[tuple[int, float]]],
) -> list[float]:
    """Score non-empty documents ``batch_size`` at a time, each cut to ``max_chars``; then :func:`finish`."""
    docs = check_documents(documents)
    scores: list[float | None] = [None] * len(docs)
    sendable = [i for i, doc in enumerate(docs) if doc.strip()]
    if not query.strip() or not sendable:
        return [0.0] * len(docs)
    for start in range(0, len(sendable), batch_size):
        positions = sendable[start : start + batch_size]
        for j, score in score_batch(query, [docs[i][:max_chars] for i in positions]):
            scores[positions[j]] = score
    return finish(scores)


def check_limits(kind: str, max_documents_per_call: int, max_chars: int, timeout_s: float, max_retries: int) -> None:
    if max_documents_per_call < 1 or max_chars < 1 or max_retries < 0 or timeout_s <= 0:
        raise InputError(f"{kind}: max_documents_per_call and max_chars must be >= 1, max_retries >= 0, timeout_s > 0")
