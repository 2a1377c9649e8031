"""The passage-side vectors of the model-free answerer's candidate sentences (:mod:`ragstep.retrieval.answer_span`),
embedded in one batch and kept in the caller's bounded cache: a follow-up over the same passages embeds only its
question."""

from __future__ import annotations

from collections.abc import MutableMapping

import numpy as np

from ragstep.models.llm import SentenceEncoder

#: Entries a caller's sentence-vector cache keeps (oldest dropped first).
CACHE_SIZE = 4096


def sentence_vectors(
    encoder: SentenceEncoder, texts: list[str], vectors: MutableMapping[str, np.ndarray] | None
) -> np.ndarray:
    """The passage-side vectors of ``texts``, the uncached ones embedded in one batch (and cached). The answer is
    read from what this call found and embedded, not from the cache after it: caching a new vector into a full
    cache evicts its oldest, which may be one of ``texts`` found there a moment before."""
    cache = vectors if vectors is not None else {}
    found = {t: cache[t] for t in texts if t in cache}
    missing = [t for t in dict.fromkeys(texts) if t not in found]
    if missing:
        for text, vector in zip(missing, encoder.embed(missing), strict=True):
            found[text] = vector
            if vectors is not None:
                if len(vectors) >= CACHE_SIZE:
                    vectors.pop(next(iter(vectors)), None)
                vectors[text] = vector
    return np.vstack([found[t] for t in texts])
