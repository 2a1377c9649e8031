"""The postings a keyword-search term reads in a snapshot: those of every word of its group (its inflections the
snapshot holds, :func:`ragstep.retrieval.inflection.term_groups`), merged into one term's.

Used by the local index's keyword search, its per-part statistics (:meth:`LocalSearchIndex.bm25_stats`, which the
S3-snapshot index sums over its parts, keyed by the same group keys) and its scores of named chunks
(:meth:`~ragstep.adapters.index._candidates.CandidateScoring.bm25_scores`), so all three score a group as one term.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from ragstep.retrieval.inflection import term_groups


class _Postings(Protocol):
    vocab: dict[str, int]
    indptr: np.ndarray
    post_rows: np.ndarray
    post_tf: np.ndarray


def term_postings(snap: _Postings, tokens: Sequence[str]) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """``(key, rows, tf)`` of each query term group the snapshot holds a word of: the rows holding any of its words
    (ascending, unique) and the summed frequency of its words in each. A group of one word is that word's postings
    as stored (its scores are exactly those of the word alone)."""
    vocab, indptr = snap.vocab, snap.indptr
    for key, words in term_groups(tokens, vocab.__contains__).items():
        if not words:
            continue
        parts = [(indptr[t], indptr[t + 1]) for t in (vocab[w] for w in words)]
        if len(parts) == 1:
            lo, hi = parts[0]
            yield key, snap.post_rows[lo:hi], snap.post_tf[lo:hi]
            continue
        rows = np.concatenate([snap.post_rows[lo:hi] for lo, hi in parts])
        tf = np.concatenate([snap.post_tf[lo:hi] for lo, hi in parts])
        unique, at = np.unique(rows, return_inverse=True)
        summed = np.bincount(at, weights=tf, minlength=unique.size).astype(snap.post_tf.dtype)
        yield key, unique.astype(snap.post_rows.dtype), summed


__all__ = ["term_postings"]
