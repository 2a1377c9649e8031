"""Issue 32: where the index can score named chunks exactly (the local index), fusion reads the cosine of a chunk
only BM25 found instead of reading it as 0 (or as the pool's floor)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.index_capabilities import candidate_scores
from ragstep.models import Chunk, MatchType
from ragstep.ports import Hit, SearchFilter
from ragstep.retrieval.background import QueryBackground
from ragstep.retrieval.fusion import fuse_evidence, tail_surprise

BG = QueryBackground(mean=0.5, sd=0.1)


def test_a_keyword_only_candidate_gets_its_exact_cosine() -> None:
    # "k" is the keyword list's best; the vector list's threshold cut it although its cosine (0.8, z = 3) is far out
    # of the crowd: read as no vector evidence, it ranked under "both"; with its cosine it ranks first.
    vector = [Hit("v", 0.85, 0.85), Hit("both", 0.75, 0.75)]
    keyword = [Hit("k", 1.0, 10.0), Hit("both", 0.8, 8.0)]
    before = {f.chunk_id: f for f in fuse_evidence(vector, keyword, background=BG)}
    after = {f.chunk_id: f for f in fuse_evidence(vector, keyword, background=BG, cosines={"k": 0.8})}
    total = tail_surprise(3.5) + 10.0 / 2.5
    assert before["k"].score == pytest.approx((10.0 / 2.5) / total)
    assert after["k"].score == pytest.approx((tail_surprise(3.0) + 10.0 / 2.5) / total)
    assert before["k"].score < before["both"].score < after["k"].score
    assert fuse_evidence(vector, keyword, background=BG, cosines={"k": 0.8})[0].chunk_id == "k"
    # What each retriever found is still said as it was: the exact cosine informs the ranking, not the match type.
    assert after["k"].match_type is MatchType.KEYWORD and after["k"].vector_score is None
    # A cosine the vector list holds wins over one given for the same chunk.
    same = fuse_evidence(vector, keyword, background=BG, cosines={"both": 0.0, "v": 0.0})
    assert [f.chunk_id for f in same] == [f.chunk_id for f in fuse_evidence(vector, keyword, background=BG)]


def test_an_exact_cosine_replaces_the_pools_floor() -> None:
    # The pool cut the vector list (vector_floor): a keyword-only chunk used to count at the list's lowest D.
    vector = [Hit("a", 0.9, 0.9), Hit("b", 0.75, 0.75)]
    keyword = [Hit("k", 1.0, 2.5)]
    floor = {f.chunk_id: f.score for f in fuse_evidence(vector, keyword, background=BG, vector_floor=True)}
    exact = {
        f.chunk_id: f.score
        for f in fuse_evidence(vector, keyword, background=BG, vector_floor=True, cosines={"k": 0.3})
    }
    assert floor["k"] > floor["b"]  # at the floor: b's own D plus a BM25 point
    assert exact["k"] < exact["b"]  # at its own cosine, two standard deviations below the mean


def test_the_local_index_scores_named_chunks_as_its_searches_do(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    texts = ["apple banana", "apple apple cherry", "durian", "banana split with cherry", "elderberry"]
    chunks = [Chunk(id=f"d{i}", knowledge_id="k1", knowledge_base_id="kb1", content=t) for i, t in enumerate(texts)]
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(len(chunks), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    idx.replace_knowledge("k1", chunks, vecs, "m")
    scorer = candidate_scores(idx)
    assert scorer is not None
    flt = SearchFilter(knowledge_base_ids=("kb1",))
    terms = ["apple", "cherry"]
    searched = {h.chunk_id: h.raw_score for h in idx.keyword_search(terms, flt, 10, 0.0)}
    scored = scorer.bm25_scores(terms, flt, ["d4", "d3", "d1", "d0", "nope"])
    assert scored.keys() == {"d0", "d1", "d3"}  # d4 holds neither term, "nope" is no chunk
    assert scored == pytest.approx({cid: searched[cid] for cid in scored}, rel=1e-6)
    q = 3.0 * vecs[2] + 0.5 * vecs[4]  # not unit: cosines are of its direction
    found = {h.chunk_id: h.score for h in idx.vector_search(q, "m", flt, 10, -1.0)}
    cos = scorer.cosines(q, "m", ["d2", "d4", "nope"])
    assert cos == pytest.approx({"d2": found["d2"], "d4": found["d4"]}, rel=1e-5)
    assert scorer.cosines(q, "other space", ["d2"]) == {}
