"""Exact scores of named chunks in the local index (:class:`ragstep.index_capabilities.CandidateScores`): the
cosine of a chunk only the keyword list holds, the BM25 of one only the vector list holds, each computed as the
index's own searches compute them, for fusion to read both scores of every candidate.

A mixin of :class:`~ragstep.adapters.index.local.LocalSearchIndex`, over its snapshots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from ragstep.adapters.index._keyword import term_postings
from ragstep.retrieval.bm25 import idf, term_scores

if TYPE_CHECKING:
    from ragstep.adapters.index._snapshot import Snapshot
    from ragstep.ports import SearchFilter


class _Index(Protocol):
    """What the mixin uses of the index it is part of."""

    def snapshot(self) -> Snapshot: ...

    def vectors(self, chunk_ids: Sequence[str], space: str) -> dict[str, np.ndarray]: ...


class CandidateScoring:
    def bm25_scores(self, tokens: Sequence[str], flt: SearchFilter, chunk_ids: Sequence[str]) -> dict[str, float]:
        """Raw BM25 of ``chunk_ids`` for ``tokens``, scored exactly as the index's keyword search scores them for
        ``flt`` (the same statistics and float32 arithmetic); chunks holding none of the terms are left out."""
        snap = cast(_Index, self).snapshot()
        known = {cid: pos for cid in dict.fromkeys(chunk_ids) if (pos := snap.position(cid)) is not None}
        terms = list(term_postings(snap, tokens))  # each word as written; its other forms held: one term
        if not known or not terms:
            return {}
        wanted = np.fromiter(known.values(), dtype=np.int64, count=len(known))
        order = np.argsort(wanted)
        wanted_sorted = wanted[order]
        acc = np.zeros(len(known), dtype=np.float32)
        scope = snap.bm25_scope(flt)
        kb_codes = snap.kb.codes
        df = {t.key: scope.df(t.rows, kb_codes) for t in terms}
        for term in terms:
            # The term's weight over all its postings (the df counts them all), its score for the candidates only.
            rows = term.rows
            at = np.minimum(np.searchsorted(wanted_sorted, rows), wanted_sorted.size - 1)
            hit = wanted_sorted[at] == rows
            if not hit.any():
                continue
            weight = idf(term.frequency(df), scope.docs)
            acc[order[at[hit]]] += term.share(df) * term_scores(term.tf[hit], scope.norm[rows[hit]], weight)
        return {cid: float(s) for cid, s in zip(known, acc.tolist(), strict=True) if s > 0.0}

    def cosines(self, vector: np.ndarray, space: str, chunk_ids: Sequence[str]) -> dict[str, float]:
        """The cosine of ``vector``'s direction to each of ``chunk_ids`` with a vector in ``space``, scored as the
        index's vector search rescores its candidates (their float32 rows times the unit query)."""
        found = cast(_Index, self).vectors(chunk_ids, space)
        if not found:
            return {}
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        if not math.isfinite(norm) or norm == 0.0 or q.shape[0] != next(iter(found.values())).shape[0]:
            return {}
        scores = np.stack(list(found.values())) @ (q / norm)
        return dict(zip(found, scores.tolist(), strict=True))
