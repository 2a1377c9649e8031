"""Fusion arithmetic: weighted RRF with 1-based ranks, single-list passthrough, min-max."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.embedders import PrecomputedEmbedder
from ragstep.models import MatchType
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.ports import Hit
from ragstep.retrieval.fusion import (
    KEYWORD_UNIT,
    VECTOR_EVIDENCE_POWER,
    Fused,
    adaptive_weights,
    agreement,
    fuse_absolute,
    fuse_adaptive,
    fuse_dbsf,
    fuse_minmax,
    fuse_rrf,
)

V = [Hit("a", 0.9), Hit("b", 0.8), Hit("c", 0.5)]
K = [Hit("c", 1.0), Hit("d", 0.6), Hit("a", 0.4)]


def test_weighted_rrf_arithmetic() -> None:
    fused = {f.chunk_id: f for f in fuse_rrf(V, K, k=60, w_vector=0.7, w_keyword=0.3)}
    assert fused["a"].score == pytest.approx(0.7 / 61 + 0.3 / 63)
    assert fused["b"].score == pytest.approx(0.7 / 62)
    assert fused["c"].score == pytest.approx(0.7 / 63 + 0.3 / 61)
    assert fused["d"].score == pytest.approx(0.3 / 62)
    assert fused["a"].match_type == MatchType.HYBRID and fused["b"].match_type == MatchType.VECTOR
    assert fused["d"].match_type == MatchType.KEYWORD
    assert (fused["c"].vector_rank, fused["c"].keyword_rank) == (3, 1)
    assert (fused["c"].vector_score, fused["c"].keyword_score) == (0.5, 1.0)
    order = [f.chunk_id for f in fuse_rrf(V, K)]
    assert order == ["a", "c", "b", "d"]


def test_one_list_keeps_its_order_and_raw_scores() -> None:
    only_k = fuse_rrf([], K)
    assert [(f.chunk_id, f.score, f.match_type) for f in only_k] == [
        ("c", 1.0, MatchType.KEYWORD),
        ("d", 0.6, MatchType.KEYWORD),
        ("a", 0.4, MatchType.KEYWORD),
    ]
    assert [(f.chunk_id, f.score) for f in fuse_minmax(V, [])] == [("a", 0.9), ("b", 0.8), ("c", 0.5)]
    assert fuse_rrf([], []) == []


def test_ties_are_deterministic() -> None:
    a = fuse_rrf([Hit("x", 0.5), Hit("y", 0.5)], [Hit("y", 1.0), Hit("x", 1.0)], w_vector=1.0, w_keyword=1.0)
    # equal RRF scores: the better vector rank wins
    assert [f.chunk_id for f in a] == ["x", "y"]
    assert a[0].score == pytest.approx(a[1].score)


@pytest.mark.parametrize("fuse", [fuse_rrf, fuse_minmax, fuse_dbsf, fuse_adaptive, fuse_absolute])
def test_every_fusion_orders_by_score_then_vector_rank_then_id(fuse: Callable[..., list[Fused]]) -> None:
    # Scores on a coarse grid, so many candidates tie; a chunk twice in a list counts at its first (best) place.
    rng = np.random.default_rng(7)
    names = [f"c{i:02d}" for i in range(40)]

    def hits(n: int, lo: int, raw: float) -> list[Hit]:
        scores = np.sort(rng.integers(lo, lo + 4, n))[::-1] / 4
        return [Hit(str(c), float(s), raw * float(s)) for c, s in zip(rng.choice(names, n), scores, strict=True)]

    vector, keyword = hits(30, 0, 1.0), hits(25, 1, 20.0)
    fused = fuse(vector, keyword)
    assert len(fused) == len({h.chunk_id for h in [*vector, *keyword]})
    assert fused == sorted(fused, key=lambda f: (-f.score, f.vector_rank or 1_000_000, f.chunk_id))
    first_v = {h.chunk_id: (i + 1, h.score) for i, h in reversed(list(enumerate(vector)))}
    first_k = {h.chunk_id: (i + 1, h.score) for i, h in reversed(list(enumerate(keyword)))}
    for f in fused:
        assert (f.vector_rank, f.vector_score) == first_v.get(f.chunk_id, (None, None))
        assert (f.keyword_rank, f.keyword_score) == first_k.get(f.chunk_id, (None, None))
        both, in_v = f.chunk_id in first_v and f.chunk_id in first_k, f.chunk_id in first_v
        assert f.match_type == (MatchType.HYBRID if both else MatchType.VECTOR if in_v else MatchType.KEYWORD)


def test_minmax_convex_combination() -> None:
    fused = {f.chunk_id: f.score for f in fuse_minmax(V, K, w_vector=0.7, w_keyword=0.3)}
    # vector: a=1, b=0.75, c=0; keyword: c=1, d=1/3, a=0
    assert fused["a"] == pytest.approx(0.7 * 1.0)
    assert fused["b"] == pytest.approx(0.7 * 0.75)
    assert fused["c"] == pytest.approx(0.3 * 1.0)
    assert fused["d"] == pytest.approx(0.3 * (0.6 - 0.4) / 0.6)
    equal = fuse_minmax([Hit("p", 0.3), Hit("q", 0.3)], [Hit("p", 2.0)], w_vector=1.0, w_keyword=1.0)
    assert {f.chunk_id: f.score for f in equal} == {"p": 1.0, "q": 0.5}


# -- distribution-based and adaptive fusion (issue 17) --------------------------------------------------------------


def test_dbsf_maps_mean_plus_minus_three_sigma_to_the_unit_interval() -> None:
    vector = [Hit("a", 0.9), Hit("b", 0.5), Hit("c", 0.1)]
    keyword = [Hit("b", 3.0), Hit("d", 2.0), Hit("a", 1.0)]

    def dbsf(scores: dict[str, float]) -> dict[str, float]:
        mean, std = float(np.mean(list(scores.values()))), float(np.std(list(scores.values())))
        return {c: (s - (mean - 3 * std)) / (6 * std) for c, s in scores.items()}

    nv, nk = dbsf({"a": 0.9, "b": 0.5, "c": 0.1}), dbsf({"b": 3.0, "d": 2.0, "a": 1.0})
    fused = {f.chunk_id: f.score for f in fuse_dbsf(vector, keyword, w_vector=1.0, w_keyword=1.0)}
    for cid in "abcd":
        assert fused[cid] == pytest.approx((nv.get(cid, 0.0) + nk.get(cid, 0.0)) / 2)
    assert next(f.chunk_id for f in fuse_dbsf(vector, keyword)) == "b"
    # An outlier at the top no longer squeezes the rest of its list towards 0 as min-max does.
    outlier = [Hit("o", 100.0), *(Hit(f"h{i}", 1.0 + i / 100) for i in range(20))]
    spread = {f.chunk_id: f.score for f in fuse_dbsf(outlier, [Hit("h0", 1.0)], w_vector=1.0, w_keyword=0.0)}
    squeezed = {f.chunk_id: f.score for f in fuse_minmax(outlier, [Hit("h0", 1.0)], w_vector=1.0, w_keyword=0.0)}
    assert spread["o"] == 1.0 and spread["h19"] > 0.4 > 0.01 > squeezed["h19"]


def test_agreement_counts_the_head_found_in_the_others_depth() -> None:
    a = [Hit(c, 1.0) for c in "abcd"]
    b = [Hit(c, 1.0) for c in "xbya"]
    assert agreement(a, b, head=2, depth=4) == 1.0  # a and b are both somewhere in b's four
    assert agreement(a, b, head=4, depth=2) == 0.25  # b's first two are x and b: one of a's four
    assert agreement([], b) == 0.0


def test_adaptive_weights_follow_the_retriever_the_other_confirms() -> None:
    vector = [Hit(f"v{i}", 1.0 - i / 20) for i in range(10)]
    confirmed = [Hit(f"v{i}", 1.0 - i / 20) for i in range(5)] + [Hit(f"k{i}", 0.4) for i in range(5)]
    alone = [Hit(f"k{i}", 1.0 - i / 20) for i in range(10)]
    # Half of the keyword head is among the vector hits, all of the vector head is not in an unrelated list.
    wv, wk = adaptive_weights(vector, confirmed, 0.7, 0.3)
    assert (wv, wk) == pytest.approx((0.7 * 0.5 / (0.7 * 0.5 + 0.3 * 0.5), 0.3 * 0.5 / (0.7 * 0.5 + 0.3 * 0.5)))
    # No agreement at all: both fall to the floor and the configured weights decide.
    assert adaptive_weights(vector, alone, 0.7, 0.3) == pytest.approx((0.7, 0.3))
    # A weak keyword list: its head is noise the vector retriever never found, while the vector head does occur
    # further down the keyword list. The keyword weight falls to its floor.
    weak = [Hit(f"k{i}", 1.0 - i / 40) for i in range(10)] + [Hit(f"v{i}", 0.5 - i / 40) for i in range(10)]
    assert adaptive_weights(vector, weak, 0.5, 0.5) == pytest.approx((1 / 1.1, 0.1 / 1.1))
    assert adaptive_weights(vector, weak, 0.0, 0.0) == (0.5, 0.5)


def test_fuse_adaptive_minmaxes_the_vector_list_under_the_adaptive_weights() -> None:
    wv, wk = adaptive_weights(V, K, 0.7, 0.3)
    # Vector scores min-max normalised (a 1, b 0.75, c 0); keyword scores as given (BM25 relative to the best).
    expected = {"a": wv * 1.0 + wk * 0.4, "b": wv * 0.75, "c": wk * 1.0, "d": wk * 0.6}
    fused = fuse_adaptive(V, K, w_vector=0.7, w_keyword=0.3)
    assert [f.chunk_id for f in fused] == sorted(expected, key=lambda c: -expected[c])
    assert {f.chunk_id: f.score for f in fused} == pytest.approx(expected)
    # Min-max instead maps the keyword list's weakest hit (a, 0.4) to 0 and d's 0.6 to 0.33.
    minmax = {f.chunk_id: f.score for f in fuse_minmax(V, K, w_vector=wv, w_keyword=wk)}
    assert minmax["a"] == pytest.approx(wv * 1.0) and minmax["d"] == pytest.approx(wk * (0.6 - 0.4) / 0.6)
    assert [(f.chunk_id, f.score) for f in fuse_adaptive(V, [])] == [("a", 0.9), ("b", 0.8), ("c", 0.5)]
    assert fuse_dbsf([], []) == []


# -- fusion on absolute scales (issue 17) ---------------------------------------------------------------------------

E5 = ScoreScale(zero=0.77, span=0.2)


def _keyword(best_raw: float, relative: list[tuple[str, float]]) -> list[Hit]:
    return [Hit(cid, rel, rel * best_raw) for cid, rel in relative]


def test_fuse_absolute_reads_calibrated_cosines_and_raw_bm25() -> None:
    vector = [Hit("a", 0.93), Hit("b", 0.89), Hit("c", 0.81)]  # raw e5 cosines: 0.8, 0.6, 0.2 on the common scale
    keyword = _keyword(30.0, [("c", 1.0), ("d", 0.5)])
    wv = 0.7 * 0.8**VECTOR_EVIDENCE_POWER  # the vector weight times the list's best calibrated cosine (a's 0.8)
    wk = 0.3 * 30.0 / KEYWORD_UNIT
    total = wv + wk
    expected = {"a": wv * 0.8 / total, "b": wv * 0.6 / total, "c": (wv * 0.2 + wk) / total, "d": wk * 0.5 / total}
    fused = fuse_absolute(vector, keyword, vector_scale=E5)
    assert {f.chunk_id: f.score for f in fused} == pytest.approx(expected)
    assert [f.chunk_id for f in fused] == sorted(expected, key=lambda c: -expected[c])
    assert {f.chunk_id: f.vector_score for f in fused}["a"] == 0.93  # the raw cosine is what the result reports
    # Cosines below the scale's zero count as 0, none above 1: a common-scale score.
    low = fuse_absolute([Hit("x", 0.70), Hit("y", 1.0)], keyword, vector_scale=E5)
    assert {f.chunk_id: f.score for f in low}["x"] == 0.0 and all(0.0 <= f.score <= 1.0 for f in low)


def test_the_keyword_list_weighs_as_much_as_its_best_hit_holds() -> None:
    # The same relative keyword scores; only the raw BM25 of the best hit differs. A question whose best keyword
    # match is weak (one common word) leaves the ranking to the vectors; a query that copies a passage's rare words
    # (many unit's worth of BM25) puts that passage first although the vectors rank it third.
    vector = [Hit("v1", 0.92), Hit("v2", 0.91), Hit("p", 0.88)]
    relative = [("p", 1.0), ("k2", 0.4)]
    weak = [f.chunk_id for f in fuse_absolute(vector, _keyword(5.0, relative), vector_scale=E5)]
    strong = [f.chunk_id for f in fuse_absolute(vector, _keyword(60.0, relative), vector_scale=E5)]
    assert weak[:3] == ["v1", "v2", "p"]
    assert strong[0] == "p"
    # Min-max and adaptive fusion see the same lists whatever the raw scores: they cannot tell the two queries apart.
    for fuse in (fuse_minmax, fuse_adaptive):
        assert [f.chunk_id for f in fuse(vector, _keyword(5.0, relative))] == [
            f.chunk_id for f in fuse(vector, _keyword(60.0, relative))
        ]


def test_power_zero_and_unit_20_is_the_rule_before_the_vector_evidence() -> None:
    # The previous rule, 0.7 x cosine + 0.3 x BM25 / 20 over 0.7 + 0.3 x best / 20, whatever the best cosine (a
    # vector list whose best calibrated cosine is 0 included: 0 ** 0 is 1).
    keyword = _keyword(30.0, [("c", 1.0), ("d", 0.5)])
    for vector in ([Hit("a", 0.93), Hit("b", 0.89), Hit("c", 0.81)], [Hit("a", 0.70), Hit("c", 0.60)]):
        cal = {h.chunk_id: min(max((h.score - 0.77) / 0.2, 0.0), 1.0) for h in vector}
        total = 0.7 + 0.3 * 30.0 / 20
        expected = {cid: 0.7 * c / total for cid, c in cal.items()}
        expected["c"] = (0.7 * cal.get("c", 0.0) + 0.3 * 30.0 / 20) / total
        expected["d"] = 0.3 * 15.0 / 20 / total
        fused = fuse_absolute(vector, keyword, vector_scale=E5, vector_power=0.0, keyword_unit=20.0)
        assert {f.chunk_id: f.score for f in fused} == pytest.approx(expected)


def test_a_weak_vector_list_leaves_the_ranking_to_the_keywords() -> None:
    # A terse keyword query: BM25 finds the passage "p" with a modest 20 points; the embedding model ranks two other
    # passages a little above it. Where the model's best cosine is high (a near-paraphrase, 0.9 on the common scale)
    # its order stands; where every cosine is low (0.3 and below: it found nothing close) the keywords decide.
    keyword = _keyword(20.0, [("p", 1.0), ("k2", 0.5)])
    strong = [Hit("v1", 0.77 + 0.2 * 0.90), Hit("v2", 0.77 + 0.2 * 0.88), Hit("p", 0.77 + 0.2 * 0.60)]
    weak = [Hit("v1", 0.77 + 0.2 * 0.30), Hit("v2", 0.77 + 0.2 * 0.29), Hit("p", 0.77 + 0.2 * 0.20)]
    assert [f.chunk_id for f in fuse_absolute(strong, keyword, vector_scale=E5)][:3] == ["v1", "v2", "p"]
    # ... down to the keyword list's runner-up, which outranks every vector hit too.
    assert [f.chunk_id for f in fuse_absolute(weak, keyword, vector_scale=E5)] == ["p", "k2", "v1", "v2"]
    # The rule before it (vector weight fixed) ranks both queries alike: only the cosines' gaps count there.
    for vector in (strong, weak):
        before = fuse_absolute(vector, keyword, vector_scale=E5, vector_power=0.0, keyword_unit=20.0)
        assert [f.chunk_id for f in before][:3] == ["p", "v1", "v2"]


def test_the_keyword_share_grows_as_the_vector_evidence_falls_and_scores_stay_in_0_1() -> None:
    # The same shape of vector list, shifted down: the keyword-only hit's fused score (its share of the weight)
    # rises step by step, and never leaves 0-1; with power 0 it does not move. Without the vector floor, which would
    # add the floor's own (falling) cosine to that share: the weights alone are measured here.
    keyword = _keyword(25.0, [("k", 1.0), ("a", 0.3)])
    shares, flat = [], []
    for top in (1.0, 0.8, 0.6, 0.4, 0.2, 0.05):
        vector = [Hit("a", 0.77 + 0.2 * top), Hit("b", 0.77 + 0.2 * top * 0.9)]
        assert all(0.0 <= f.score <= 1.0 for f in fuse_absolute(vector, keyword, vector_scale=E5))
        fused = fuse_absolute(vector, keyword, vector_scale=E5)
        shares.append({f.chunk_id: f.score for f in fused}["k"])
        before = fuse_absolute(vector, keyword, vector_scale=E5, vector_power=0.0)
        flat.append({f.chunk_id: f.score for f in before}["k"])
    assert all(lo < hi for lo, hi in pairwise(shares))
    assert flat == pytest.approx([flat[0]] * len(flat))
    # Random lists, raw e5 cosines and BM25 points of any size: every fused score in 0-1.
    rng = np.random.default_rng(7)
    for _ in range(50):
        cos = np.sort(rng.uniform(0.6, 1.0, 8))[::-1]
        rel = np.sort(rng.uniform(0.05, 1.0, 6))[::-1]
        rel[0] = 1.0
        vector = [Hit(f"c{i}", float(c)) for i, c in enumerate(cos)]
        keyword = _keyword(float(rng.uniform(0.5, 200.0)), [(f"c{2 * i}", float(r)) for i, r in enumerate(rel)])
        assert all(0.0 <= f.score <= 1.0 for f in fuse_absolute(vector, keyword, vector_scale=E5))


def test_a_chunk_only_bm25_found_counts_at_a_full_vector_lists_floor() -> None:
    # e5 on a terse Chinese keyword query: every cosine high and close (calibrated 0.57 down to 0.31 where the pool
    # cut the list), the passage "p" BM25 found first (29 points) missing from the vector list, a weak keyword match
    # "k2" (12 points) in both. Counted at 0 for its missing cosine, "p" fell below "k2" (the rule before the floor,
    # units 40 and 44 alike); at the floor, the most cosine the full list leaves it, it leads.
    vector = [Hit(cid, 0.77 + 0.2 * c) for cid, c in (("v1", 0.57), ("v2", 0.55), ("k2", 0.50), ("v3", 0.31))]
    keyword = _keyword(29.0, [("p", 1.0), ("k2", 12.0 / 29.0)])
    fused = fuse_absolute(vector, keyword, vector_scale=E5, vector_floor=True)
    assert [f.chunk_id for f in fused] == ["p", "k2", "v1", "v2", "v3"]
    scores = {f.chunk_id: f.score for f in fused}
    wv, wk = 0.7 * 0.57**VECTOR_EVIDENCE_POWER, 0.3 * 29.0 / KEYWORD_UNIT
    assert scores["p"] == pytest.approx((wv * 0.31 + wk) / (wv + wk))
    assert scores["v3"] == pytest.approx(wv * 0.31 / (wv + wk))  # a vector hit's own score is unchanged
    for unit in (40.0, 44.0):
        before = fuse_absolute(vector, keyword, vector_scale=E5, keyword_unit=unit)  # a list the threshold cut
        assert [f.chunk_id for f in before][:2] == ["k2", "p"]
        assert {f.chunk_id: f.score for f in before}["p"] == pytest.approx(0.3 * 29.0 / unit / (wv + 0.3 * 29.0 / unit))
    # Below the scale's zero the floor is 0, as every calibrated cosine there: nothing changes.
    cut = [Hit("v1", 0.9), Hit("v2", 0.7)]
    assert [(f.chunk_id, f.score) for f in fuse_absolute(cut, keyword, vector_scale=E5, vector_floor=True)] == [
        (f.chunk_id, f.score) for f in fuse_absolute(cut, keyword, vector_scale=E5)
    ]


def test_fuse_absolute_without_an_absolute_scale_ranks_as_adaptive() -> None:
    keyword = _keyword(30.0, [("c", 1.0), ("d", 0.6), ("a", 0.4)])
    adaptive = [(f.chunk_id, f.score) for f in fuse_adaptive(V, keyword)]
    assert [(f.chunk_id, f.score) for f in fuse_absolute(V, keyword, vector_scale=None)] == adaptive
    # An index that reports no raw BM25 (raw 0): no keyword scale to read.
    assert [(f.chunk_id, f.score) for f in fuse_absolute(V, K)] == [(f.chunk_id, f.score) for f in fuse_adaptive(V, K)]
    assert [(f.chunk_id, f.score) for f in fuse_absolute(V, [])] == [("a", 0.9), ("b", 0.8), ("c", 0.5)]
    assert [f.chunk_id for f in fuse_absolute([], keyword)] == ["c", "d", "a"]


def test_the_search_stage_reads_the_query_models_declared_scale(tmp_path: Path) -> None:
    from ragstep.bench.quality import ScaledPrecomputedEmbedder
    from ragstep.context import Clients
    from ragstep.settings import Settings
    from ragstep.stages.search.retrievers import vector_scale

    ctx = Clients(Settings(data_dir=tmp_path)).context()
    unit = {"x": np.array([1.0, 0.0])}
    ctx.register_embedder(ScaledPrecomputedEmbedder("precomputed:e5", unit, E5))
    ctx.register_embedder(ScaledPrecomputedEmbedder("precomputed:e5-copy", unit, E5))
    ctx.register_embedder(PrecomputedEmbedder("precomputed:minilm", unit))
    assert vector_scale(ctx, ["precomputed:e5"]) == E5
    assert vector_scale(ctx, ["precomputed:e5", "precomputed:e5-copy"]) == E5  # two models, one scale
    # No declared scale (a provider's model): none assumed, fusion reads the cosines relative to one another. This
    # read MiniLM's scale before, and e5 vectors served undeclared lost 0.1 nDCG@10 (issue 32).
    assert vector_scale(ctx, ["precomputed:minilm"]) is None
    ctx.register_embedder(ScaledPrecomputedEmbedder("precomputed:common", unit, COMMON_SCALE))
    assert vector_scale(ctx, ["precomputed:common"]) == COMMON_SCALE  # declared as the common scale
    assert vector_scale(ctx, []) == COMMON_SCALE  # keyword search only: nothing to read
    # Cosines of two scales merged in one list by raw value: no scale reads them all (fusion falls back).
    assert vector_scale(ctx, ["precomputed:e5", "precomputed:minilm"]) is None
