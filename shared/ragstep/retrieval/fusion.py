"""Fusing the vector and keyword candidate lists into one ranking (pure functions).

Used by the search stage whatever the backend (the local index and OpenSearch both return two lists and fuse here),
so every deployment ranks the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ragstep.models import MatchType
from ragstep.ports import Hit


@dataclass(frozen=True, slots=True)
class Fused:
    chunk_id: str
    score: float
    match_type: MatchType
    vector_score: float | None = None
    keyword_score: float | None = None
    vector_rank: int | None = None
    keyword_rank: int | None = None


def _single(hits: Sequence[Hit], match_type: MatchType, vector: bool) -> list[Fused]:
    # One list only: WeKnora keeps its order and raw scores (no RRF rescaling of a lone list).
    return [
        Fused(
            h.chunk_id,
            h.score,
            match_type,
            vector_score=h.score if vector else None,
            keyword_score=None if vector else h.score,
            vector_rank=i + 1 if vector else None,
            keyword_rank=None if vector else i + 1,
        )
        for i, h in enumerate(hits)
    ]


def _ranks(hits: Sequence[Hit]) -> dict[str, tuple[int, float]]:
    out: dict[str, tuple[int, float]] = {}
    for i, h in enumerate(hits):
        out.setdefault(h.chunk_id, (i + 1, h.score))  # 1-based; the first (best) occurrence wins
    return out


def _combine(
    vector: Sequence[Hit], keyword: Sequence[Hit], score: Callable[[str, bool, bool, int, int], float]
) -> list[Fused]:
    """One :class:`Fused` per distinct chunk of either list; ``score(id, in_v, in_k, rank_v, rank_k)``."""
    rv, rk = _ranks(vector), _ranks(keyword)
    fused = []
    for cid in dict.fromkeys([*rv, *rk]):
        v, kw = rv.get(cid), rk.get(cid)
        kind = MatchType.HYBRID if v and kw else (MatchType.VECTOR if v else MatchType.KEYWORD)
        fused.append(
            Fused(
                cid,
                score(cid, v is not None, kw is not None, v[0] if v else 0, kw[0] if kw else 0),
                kind,
                vector_score=v[1] if v else None,
                keyword_score=kw[1] if kw else None,
                vector_rank=v[0] if v else None,
                keyword_rank=kw[0] if kw else None,
            )
        )
    return sorted(fused, key=_order)


def fuse_rrf(
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    *,
    k: int = 60,
    w_vector: float = 0.7,
    w_keyword: float = 0.3,
) -> list[Fused]:
    """Weighted reciprocal rank fusion: ``w_v / (k + rank_v) + w_k / (k + rank_k)``, ranks 1-based."""
    if not vector or not keyword:
        return _single(vector, MatchType.VECTOR, True) if vector else _single(keyword, MatchType.KEYWORD, False)

    def score(_cid: str, in_v: bool, in_k: bool, rank_v: int, rank_k: int) -> float:
        return (w_vector / (k + rank_v) if in_v else 0.0) + (w_keyword / (k + rank_k) if in_k else 0.0)

    return _combine(vector, keyword, score)


def _minmax(hits: Sequence[Hit]) -> dict[str, float]:
    if not hits:
        return {}
    scores = [h.score for h in hits]
    lo, hi = min(scores), max(scores)
    span = hi - lo
    # A list whose scores are all equal carries no ordering information: give every hit full credit.
    return {h.chunk_id: (1.0 if span == 0 else (h.score - lo) / span) for h in reversed(hits)}


def fuse_minmax(
    vector: Sequence[Hit], keyword: Sequence[Hit], *, w_vector: float = 0.7, w_keyword: float = 0.3
) -> list[Fused]:
    """Convex combination of min-max normalised scores (a missing score counts as 0)."""
    if not vector or not keyword:
        return _single(vector, MatchType.VECTOR, True) if vector else _single(keyword, MatchType.KEYWORD, False)
    total = (w_vector + w_keyword) or 1.0
    nv, nk = _minmax(vector), _minmax(keyword)

    def score(cid: str, _in_v: bool, _in_k: bool, _rank_v: int, _rank_k: int) -> float:
        return (w_vector * nv.get(cid, 0.0) + w_keyword * nk.get(cid, 0.0)) / total

    return _combine(vector, keyword, score)


def _order(f: Fused) -> tuple[float, int, str]:
    # Score first; ties go to the better vector rank, then id, so equal inputs always give the same ranking.
    return (-f.score, f.vector_rank or 1_000_000, f.chunk_id)
