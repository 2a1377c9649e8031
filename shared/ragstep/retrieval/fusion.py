"""Fusing the vector and keyword candidate lists into one ranking (pure functions).

Used by the search stage whatever the backend (the local index and OpenSearch both return two lists and fuse here),
so every deployment ranks the same way.

Why fixed weights fail when one retriever is weak: min-max normalisation gives every list's best hit 1.0 however
poor it is, and a fixed weight then trusts that hit as much on a corpus where the retriever is useless as on one
where it is nearly perfect. On msmarco-5k the vector list is the better one (0.8 x vector scores best), on
cmrc2018-zh with e5 vectors the keyword list is (0.5 does); no single pair suits both (BENCHMARKS.md, "Robust
fusion"). :func:`fuse_adaptive`, the previous default, keeps the configured weights as a prior and scales each by
how much of the list's head the *other* retriever confirms: a retriever whose best hits the other one does not find
at all is probably the weak one on this query. It min-maxes the vector list only: keyword scores arrive on a scale
of their own already (BM25 relative to the query's best hit). :func:`fuse_dbsf` is Qdrant's distribution-based score
fusion (each list normalised to mean +- 3 sigma), kept as a setting with RRF and min-max.

:func:`fuse_absolute`, the default since agreement was found not to tell the weak retriever apart on sets it was not
tuned on (BENCHMARKS.md, "Fusion on absolute scales"), normalises neither list per query: cosines are read on the
common scale (each model's declared :class:`~ragstep.models.scale.ScoreScale`) and BM25 as raw points. A per-list
normalisation gives every query's best hit full credit however weak the evidence behind it; on absolute scales a
question whose words many passages share (BM25 ~18 on msmarco) lets the vectors decide, and a query that copies a
passage's rare words (BM25 ~50) lets the keywords decide, with no feature to learn. Each list weighs by its own
best evidence on its own absolute scale: the keyword list by its best hit's BM25 points, the vector list by its best
hit's calibrated cosine (an embedding model that found nothing close to a terse keyword query leaves the ranking to
the keywords; one that found a near-paraphrase keeps it). Where the pool cut the vector list, a chunk only the
keyword list holds counts at the list's lowest cosine, not at 0: the list says only that its cosine is below that.

:func:`fuse_evidence`, the default since issue 32's third pass, weighs nothing: each hit's cosine and BM25 are read as
how unlikely they would be for a chunk unrelated to the query, in nats, under this corpus's own statistics (the
query's cosine mean and spread over the searched chunks; each term's idf), and the two surprises are added. Every
number in it comes from the corpus and the query, or from BM25's definition (``k1 + 1``): where each comes from, and
what was measured, in its docstring and BENCHMARKS.md ("Retrieval quality on every set, before and after").
The share-of-ceiling rule it replaces (0.7 x best cosine share x share + 0.3 x BM25 share of the query's ceiling)
held the vectors' say at 0.7 x their best share: on a corpus on one topic (an FAQ, all cosines high and close) the
best share was small and a keyword hit sharing two words outvoted the answer; the fixed 0.7 / 0.3 prior left
msmarco-5k's hybrid under its vectors alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragstep.models import MatchType
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.ports import Hit
from ragstep.retrieval.background import QueryBackground
from ragstep.retrieval.bm25 import BM25_K1


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
    for i, h in enumerate(hits, 1):
        if h.chunk_id not in out:  # 1-based; the first (best) occurrence wins
            out[h.chunk_id] = (i, h.score)
    return out


#: In place of a missing vector rank in the sort key (:func:`_combine`): keyword-only chunks after every vector hit.
_NO_RANK = 1_000_000


def _clip01(x: float) -> float:
    # min(max(x, 0.0), 1.0) without the two calls, NaN and -0.0 included: both pass through unchanged, as there.
    return 0.0 if x < 0.0 else (1.0 if x > 1.0 else x)


@dataclass(frozen=True, slots=True)
class _Weighted:
    """A weighted mean of per-list scores, ``(wv x nv[id] + wk x nk[id]) / total`` (a missing score counts as 0):
    what every fusion but RRF computes, inlined by :func:`_combine` instead of called per candidate."""

    nv: dict[str, float]
    nk: dict[str, float]
    wv: float
    wk: float
    total: float
    #: What a keyword-only chunk counts as when ``nv`` has no score for it (0 but for the vector floor of
    #: :func:`fuse_absolute` / :func:`fuse_evidence`; ``nv`` holds one where the index scored the chunk exactly).
    v_missing: float = 0.0


def _combine(
    vector: Sequence[Hit], keyword: Sequence[Hit], score: Callable[[str, bool, bool, int, int], float] | _Weighted
) -> list[Fused]:
    """One :class:`Fused` per distinct chunk of either list, scored by ``score(id, in_v, in_k, rank_v, rank_k)`` or
    by a :class:`_Weighted` mean.

    Order: score first; ties go to the better vector rank, then the id, so equal inputs always give the same
    ranking. Rows are plain tuples that lead with that key and are sorted as they are, the :class:`Fused` made last:
    a key function and a score function called per candidate, and keyword arguments to the frozen dataclass, were
    most of fusion's time (about 250 candidates a query at 100k chunks). Chunk ids are unique, so the order is the
    key's alone."""
    rv, rk = _ranks(vector), _ranks(keyword)
    fn: Callable[[str, bool, bool, int, int], float] | None = None
    if isinstance(score, _Weighted):
        nv, nk, wv, wk, total, v_missing = score.nv, score.nk, score.wv, score.wk, score.total, score.v_missing
    else:
        fn, nv, nk, wv, wk, total, v_missing = score, {}, {}, 0.0, 0.0, 1.0, 0.0
    hybrid, vec_only, kw_only = MatchType.HYBRID, MatchType.VECTOR, MatchType.KEYWORD
    rows: list[tuple[float, int, str, MatchType, float | None, float | None, int | None, int | None]] = []
    append = rows.append
    for cid, (rank_v, score_v) in rv.items():
        kw = rk.get(cid)
        if fn is None:
            s = (wv * nv.get(cid, 0.0) + wk * nk.get(cid, 0.0)) / total
        else:
            s = fn(cid, True, kw is not None, rank_v, kw[0] if kw else 0)
        if kw is None:
            append((-s, rank_v, cid, vec_only, score_v, None, rank_v, None))
        else:
            append((-s, rank_v, cid, hybrid, score_v, kw[1], rank_v, kw[0]))
    for cid, (rank_k, score_k) in rk.items():
        if cid not in rv:
            s = (
                (wv * nv.get(cid, v_missing) + wk * nk.get(cid, 0.0)) / total
                if fn is None
                else fn(cid, False, True, 0, rank_k)
            )
            append((-s, _NO_RANK, cid, kw_only, None, score_k, None, rank_k))
    rows.sort()
    return [Fused(cid, -neg, kind, sv, sk, r_v, r_k) for neg, _, cid, kind, sv, sk, r_v, r_k in rows]


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

    return _combine(vector, keyword, _Weighted(nv, nk, w_vector, w_keyword, total))


def _dbsf(hits: Sequence[Hit], sigmas: float = 3.0) -> dict[str, float]:
    scores = np.fromiter((h.score for h in hits), dtype=np.float64, count=len(hits))
    mean, std = float(scores.mean()), float(scores.std())
    if std == 0:  # one hit, or all equal: no ordering information, full credit as in _minmax
        return {h.chunk_id: 1.0 for h in reversed(hits)}
    lo = mean - sigmas * std
    return {h.chunk_id: min(1.0, max(0.0, (h.score - lo) / (2 * sigmas * std))) for h in reversed(hits)}


def fuse_dbsf(
    vector: Sequence[Hit], keyword: Sequence[Hit], *, w_vector: float = 0.5, w_keyword: float = 0.5
) -> list[Fused]:
    """Distribution-based score fusion (Qdrant's DBSF): each list's scores mapped from [mean - 3 sigma, mean + 3
    sigma] to [0, 1] (clipped), then the weighted mean (a missing score counts as 0). An outlier at the top of a list
    no longer stretches the rest of it, as it does under min-max."""
    if not vector or not keyword:
        return _single(vector, MatchType.VECTOR, True) if vector else _single(keyword, MatchType.KEYWORD, False)
    total = (w_vector + w_keyword) or 1.0
    nv, nk = _dbsf(vector), _dbsf(keyword)

    return _combine(vector, keyword, _Weighted(nv, nk, w_vector, w_keyword, total))


#: Adaptive fusion: the head of a list (its best AGREEMENT_HEAD hits) is looked for among the other list's best
#: AGREEMENT_DEPTH; a list none of whose head the other confirms keeps AGREEMENT_FLOOR of its weight (it may still
#: be right where the other retriever is blind, e.g. a product code the embedding model has never seen).
AGREEMENT_HEAD, AGREEMENT_DEPTH, AGREEMENT_FLOOR = 10, 100, 0.1


def agreement(
    hits: Sequence[Hit], other: Sequence[Hit], head: int = AGREEMENT_HEAD, depth: int = AGREEMENT_DEPTH
) -> float:
    """Share of the first ``head`` hits of ``hits`` that are among the first ``depth`` of ``other`` (0 to 1)."""
    top = hits[:head]
    if not top:
        return 0.0
    seen = {h.chunk_id for h in other[:depth]}
    return sum(1 for h in top if h.chunk_id in seen) / len(top)


def adaptive_weights(
    vector: Sequence[Hit], keyword: Sequence[Hit], w_vector: float, w_keyword: float
) -> tuple[float, float]:
    """The query's weights: each configured weight times its list's :func:`agreement` with the other (at least
    ``AGREEMENT_FLOOR``), normalised to sum to 1 (equal when both configured weights are 0)."""
    wv = w_vector * max(agreement(vector, keyword), AGREEMENT_FLOOR)
    wk = w_keyword * max(agreement(keyword, vector), AGREEMENT_FLOOR)
    total = wv + wk
    return (wv / total, wk / total) if total > 0 else (0.5, 0.5)


def fuse_adaptive(
    vector: Sequence[Hit], keyword: Sequence[Hit], *, w_vector: float = 0.7, w_keyword: float = 0.3
) -> list[Fused]:
    """Vector scores min-max normalised, keyword scores as the index gives them (BM25 relative to the query's best
    hit, 0 to 1), under query-adaptive weights (:func:`adaptive_weights`; module docstring).

    The keyword scores are not min-maxed again: they already share a scale whose 0 means "no query term", and
    stretching the list's weakest hit (at ``keyword_threshold``) down to 0 spent the keyword weight on the gap
    between the threshold and the best instead of on how far each hit is from the best. Chosen on the two tuning
    sets by the worst gap to their best single retriever at pools 150 and 500 (-0.0046, against -0.0082 with both
    lists min-maxed; BENCHMARKS.md, "Joint BM25 statistics ..."), then checked on the held-out one."""
    if not vector or not keyword:
        return _single(vector, MatchType.VECTOR, True) if vector else _single(keyword, MatchType.KEYWORD, False)
    wv, wk = adaptive_weights(vector, keyword, w_vector, w_keyword)
    total = (wv + wk) or 1.0
    nv = _minmax(vector)
    nk = {h.chunk_id: _clip01(h.score) for h in reversed(keyword)}

    return _combine(vector, keyword, _Weighted(nv, nk, wv, wk, total))


#: Raw BM25 points that weigh as much as the configured keyword weight says, against a vector list whose best hit
#: has a calibrated cosine of 1: about two query terms each found in a single chunk only (idf ln(1 + N / 1.5) x
#: (k1 + 1) = 20.7 points per term for msmarco-5k's 5,844 chunks; 17 for 1,600 chunks, 26 for 50,000). A query's
#: best BM25 in these units is how much evidence its keyword list holds, in pairs of rare-word matches. 44 since the
#: vector floor (:func:`fuse_absolute`; 40 before it): with the floor, units 42-46 all keep every set with vectors
#: within 0.01 of its best single retriever, 40 and 48 miss by 0.001-0.002 (BENCHMARKS.md, "A sixth set").
KEYWORD_UNIT = 44.0

#: The vector weight is the configured one times the vector list's best calibrated cosine to this power: the vector
#: list's evidence on its own absolute scale, as the keyword list's is its best BM25 in points. Chosen with the unit
#: over every set with vectors by the worst gap to the best single retriever (powers 1.25-1.75 with units 40-46 all
#: within 0.01 of it; power 1 within only at unit 40; power 0, the previous rule at unit 20, 0.017 below;
#: BENCHMARKS.md, "Fusion by each list's evidence").
VECTOR_EVIDENCE_POWER = 1.5


def fuse_absolute(
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    *,
    w_vector: float = 0.7,
    w_keyword: float = 0.3,
    vector_scale: ScoreScale | None = COMMON_SCALE,
    keyword_unit: float = KEYWORD_UNIT,
    vector_power: float = VECTOR_EVIDENCE_POWER,
    vector_floor: bool = False,
) -> list[Fused]:
    """Cosines on the common scale plus raw BM25, each list weighted by its best hit's evidence: ``w_v x top^p x
    cosine + w_k x BM25 / keyword_unit``, with ``top`` the vector list's best calibrated cosine and ``p``
    ``vector_power``, divided by the query's ``w_v x top^p + w_k x best BM25 / keyword_unit`` so scores stay in 0-1
    (the order is the plain sum's). ``vector_power=0`` with ``keyword_unit=20`` is the rule before the vector weight
    read its list's evidence, ``keyword_unit=40`` the rule before the vector floor (both kept for comparison).

    ``vector_floor``: the pool cut the vector list (it holds as many hits as the search asked for), so a chunk only
    the keyword list holds counts at the list's lowest calibrated cosine instead of 0: all the list says of it is that
    its cosine is below that one, and a full list's tail is flat (e5 on Chinese: a 500-chunk list of a 1,607-chunk
    corpus ends at calibrated 0.33, its best hit at 0.55). At 0 such a chunk paid the whole floor as a penalty that
    the keyword list's best hit could not make up for: the passage BM25 found first, which e5 missed, fell below e5's
    unrelated hits (BENCHMARKS.md, "A sixth set"). A list the similarity threshold cut (``False``) keeps 0: below
    the threshold is what the common scale calls unrelated (counting such a chunk at the threshold instead cost the
    pipeline on msmarco-5k more than it gained).

    ``vector_scale`` is the declared scale of the model whose cosines the vector list holds (calibrated cosines are
    clipped to 0-1). Without it (``None``: the list merges several models' raw cosines, or its model declares no
    scale, as a provider's ``openai:`` / ``bedrock:`` model) or without raw BM25 scores (an index that reports none)
    there is no absolute scale to read, and :func:`fuse_adaptive` ranks instead, on the vector list's min-max (its
    cosines relative to one another: any affine scale ranks the same). Reading an undeclared model on MiniLM's scale
    instead put e5's cosines (all ~0.8-0.9, a few hundredths apart) against BM25 relative to its best (0-1), and the
    keywords decided (issue 32; BENCHMARKS.md, "Every set, before and after"). Keyword
    hits are read through their normalised score times the best hit's raw BM25, so hits an expansion pass put at the
    list's tail (scored on the first pass's scale) keep their place."""
    if not vector or not keyword:
        return _single(vector, MatchType.VECTOR, True) if vector else _single(keyword, MatchType.KEYWORD, False)
    best_raw = keyword[0].raw_score
    if vector_scale is None or best_raw <= 0:
        return fuse_adaptive(vector, keyword, w_vector=w_vector, w_keyword=w_keyword)
    nv = {h.chunk_id: _clip01(vector_scale.calibrate(h.score)) for h in reversed(vector)}
    # The best calibrated cosine, whatever order the list came in (0 ** 0 is 1: power 0 ignores it).
    top = max(nv.values())
    wv, wk = w_vector * top**vector_power, w_keyword * best_raw / keyword_unit
    total = (wv + wk) or 1.0
    nk = {h.chunk_id: _clip01(h.score) for h in reversed(keyword)}
    floor = min(nv.values()) if vector_floor else 0.0

    return _combine(vector, keyword, _Weighted(nv, nk, wv, wk, total, floor))


#: sqrt(2 pi), for the normal tail's asymptotic form.
_SQRT_2PI = math.sqrt(2.0 * math.pi)


def tail_surprise(z: float) -> float:
    """``-ln P(Z > z)`` for a standard normal ``Z``, in nats: how unlikely a chunk scoring ``z`` standard
    deviations above the query's mean cosine is among chunks unrelated to it. 0.69 at ``z`` 0, near 0 far below,
    ``z^2 / 2`` and more far above (the asymptotic form past 8, where ``erfc`` loses its digits)."""
    if z < 0.0:  # P(Z > z) near 1: its complement keeps the digits
        return -math.log1p(-0.5 * math.erfc(-z / math.sqrt(2.0)))
    if z < 8.0:
        return -math.log(0.5 * math.erfc(z / math.sqrt(2.0)))
    return 0.5 * z * z + math.log(z * _SQRT_2PI) - math.log1p(-1.0 / (z * z))


def fuse_evidence(
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    *,
    background: QueryBackground | None = None,
    keyword_gain: float = BM25_K1 + 1.0,
    w_vector: float = 0.7,
    w_keyword: float = 0.3,
    vector_scale: ScoreScale | None = COMMON_SCALE,
    vector_floor: bool = False,
    cosines: Mapping[str, float] | None = None,
) -> list[Fused]:
    """Each hit scored by how unlikely its scores would be for a chunk unrelated to the query, in nats, the two
    lists' surprises added (the default fusion, ``absolute``, since issue 32's third pass):

    ``score = D + K``, divided by the query's ``max D + max K`` so scores stay in 0-1 (the order is the sum's), where

    * ``D = -ln P(Z > z)`` (:func:`tail_surprise`), ``z = (cosine - mean) / sd`` with ``mean`` and ``sd`` the
      query's cosines over the searched chunks (``background``, :class:`~ragstep.retrieval.background.QueryBackground`:
      ``q . m`` and ``sqrt(q' C q)`` from the chunks' mean vector and covariance, taken once per snapshot): how
      far out of this corpus's crowd the chunk stands for this query. A corpus on one topic (all cosines high and
      close) and a question in another language (all cosines low) are read from their own crowd, and a model whose
      scale is declared and one whose scale is not read alike: no model constant plays any part;
    * ``K`` is the hit's BM25 over ``keyword_gain`` (BM25's ``k1 + 1``, the most one term's occurrences can
      multiply its idf by): the sum over the query terms the chunk holds of ``idf x`` a saturation in 0-1, and
      ``idf = ln(1 + (N - df + 0.5) / (df + 0.5))`` is (nearly) ``-ln P(a chunk holds the term)``, the same unit:
      the surprise of finding those words in a chunk by chance.

    Both are ``-ln`` of a chance under the corpus's own statistics, so they add without weights: a list's say is as
    large as its evidence for this query in this corpus (a foreign-language question's keyword hits share a name or
    a number, a few nats; a paraphrase's vector hit stands 4-5 standard deviations out, ~10 nats; a question that
    copies a passage's rare words scores 20+ nats of BM25). The configured ``w_vector`` / ``w_keyword`` are not
    read here (they weigh the other fusions, and the fallback below).

    A keyword hit's BM25 is read as its normalised score times the best hit's raw BM25, so hits an expansion pass put
    at the list's tail keep their place. ``cosines``: the exact cosines of chunks only the keyword list holds (an
    index that can score named chunks, :class:`~ragstep.index_capabilities.CandidateScores`), so such a chunk gets
    its own ``D`` instead of an unknown read as 0: a chunk the similarity threshold or the pool cut from the vector
    list still weighs its cosine (covid-faq with e5 read as a model of undeclared scale, whose threshold cuts deeper:
    hybrid nDCG@10 0.607 -> 0.661, above the vectors alone). Without one, ``vector_floor``: the pool cut the vector
    list, so a chunk only BM25 found counts at the list's lowest ``D`` (its bound), not 0. Without a background (an
    index that cannot describe its vectors, several models' cosines in one list, a filter of a single chunk)
    or without raw BM25, :func:`fuse_absolute` ranks instead, with ``vector_scale`` and the weights."""
    if not vector or not keyword:
        return _single(vector, MatchType.VECTOR, True) if vector else _single(keyword, MatchType.KEYWORD, False)
    best_raw = keyword[0].raw_score
    if background is None or not background.sd > 0 or best_raw <= 0 or keyword_gain <= 0:
        return fuse_absolute(
            vector,
            keyword,
            w_vector=w_vector,
            w_keyword=w_keyword,
            vector_scale=vector_scale,
            vector_floor=vector_floor,
        )
    mean, sd = background.mean, background.sd
    nv = {h.chunk_id: tail_surprise((h.score - mean) / sd) for h in reversed(vector)}
    unit = best_raw / keyword_gain
    nk = {h.chunk_id: (h.score if h.score > 0.0 else 0.0) * unit for h in reversed(keyword)}
    floor = min(nv.values()) if vector_floor else 0.0
    for cid, cos in (cosines or {}).items():  # a keyword-only chunk's exact cosine (the list's own score wins)
        nv.setdefault(cid, tail_surprise((cos - mean) / sd))
    total = (max(nv.values()) + max(nk.values())) or 1.0

    return _combine(vector, keyword, _Weighted(nv, nk, 1.0, 1.0, total, floor))
