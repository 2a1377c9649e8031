"""BM25's collection statistics and term weights (pure functions).

Scores of one query are comparable only when every chunk is scored with the same statistics: the chunk count ``N``,
the average chunk length ``avgdl`` and each query term's document frequency ``df``. The statistics are those of the
knowledge bases being searched, taken together: a search over one knowledge base is unaffected by what another one
holds, and a search over several ranks their chunks on one scale (per-knowledge-base statistics made a term that is
rare in a large knowledge base but common in a small one score low in the small one, whatever its relevance).

The local index computes them from its snapshot; the S3-snapshot index, which keeps one local index per knowledge
base, sums :class:`Bm25Stats` of each and has every part score with the sum (:func:`joint`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

#: Okapi BM25's term-frequency saturation and length normalisation (Lucene's and the bm25s defaults).
BM25_K1 = 1.5
BM25_B = 0.75


@dataclass(frozen=True, slots=True)
class Bm25Stats:
    """The statistics one BM25 query is scored with: ``docs`` chunks holding ``tokens`` tokens in all, and the
    number of those chunks that hold each query term (a term missing from ``df`` is held by none)."""

    docs: int = 0
    tokens: int = 0
    df: Mapping[str, int] = field(default_factory=dict)

    @property
    def avgdl(self) -> float:
        """Average chunk length; 1.0 stands in for a collection of empty chunks (every length norm is then 1 - b)."""
        return self.tokens / self.docs if self.docs and self.tokens else 1.0


def joint(parts: Iterable[Bm25Stats]) -> Bm25Stats:
    """The statistics of several disjoint collections taken as one (counts add up)."""
    docs = tokens = 0
    df: dict[str, int] = {}
    for part in parts:
        docs += part.docs
        tokens += part.tokens
        for term, count in part.df.items():
            df[term] = df.get(term, 0) + count
    return Bm25Stats(docs, tokens, df)


def idf(df: float, docs: float) -> float:
    """BM25's inverse document frequency, the non-negative form (Lucene's): ``ln(1 + (N - df + 0.5) / (df + 0.5))``."""
    return math.log1p((docs - df + 0.5) / (df + 0.5))


def length_norms(lengths: np.ndarray, avgdl: float) -> np.ndarray:
    """Each chunk's length norm ``k1 * (1 - b + b * len / avgdl)`` (the denominator's second term), float32."""
    return (BM25_K1 * (1.0 - BM25_B + BM25_B * np.asarray(lengths, dtype=np.float64) / avgdl)).astype(np.float32)


def term_scores(tf: np.ndarray, norms: np.ndarray, weight: float) -> np.ndarray:
    """BM25 of one term in the chunks holding it: ``idf * tf * (k1 + 1) / (tf + norm)``, with ``weight`` the idf."""
    return weight * tf * (BM25_K1 + 1.0) / (tf + norms)


__all__ = ["BM25_B", "BM25_K1", "Bm25Stats", "idf", "joint", "length_norms", "term_scores"]
