"""The rerank stage: text cleaning, threshold chain and degradation, composite arithmetic, MMR, and the stage against
a real rerank server on 127.0.0.1 and with the local token/vector reranker."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.embedders import PrecomputedEmbedder
from ragstep.app.ingest import ingest_file
from ragstep.app.search import new_state
from ragstep.bench.quality import ScaledPrecomputedEmbedder
from ragstep.context import Clients, Context
from ragstep.models import (
    Chunk,
    ChunkType,
    ImageInfo,
    Knowledge,
    KnowledgeBase,
    MatchType,
    RetrievalSettings,
    SearchRequest,
)
from ragstep.models import SearchResult as R
from ragstep.models.scale import COMMON_SCALE
from ragstep.pipeline import run_stage
from ragstep.retrieval.calibration import BASE_WEIGHT, MODEL_WEIGHT, RerankCalibration, RerankScale, rerank_calibration
from ragstep.retrieval.text import token_set
from ragstep.settings import Settings
from ragstep.stages.search.chunk_rerank import (
    clean_markdown,
    composite,
    mmr,
    normalise,
    position_prior,
    rerank_text,
    score_scales,
    threshold_chain,
    vector_evidence,
)
from support.scripted_http import ScriptedHTTPServer, ScriptedResponse


def res(cid: str, content: str = "x", score: float = 0.5, **kw: object) -> R:
    return R(id=cid, content=content, knowledge_id="k", knowledge_base_id="kb", score=score, **kw)


def test_markdown_noise_is_stripped_and_code_kept() -> None:
    md = (
        "# Install guide\n"
        "- **Step one**: see [the docs](https://example.com/docs) and ![diagram](img/d.png)\n"
        "1. Run `pip install x` <br/> then _wait_\n"
        "| col a | col b |\n|---|---|\n| 1 | 2 |\n"
        "```python\nprint('kept')\n```\n"
        "Visit https://example.com now. ~~old~~\n"
    )
    assert clean_markdown(md) == (
        "Install guide\n"
        "Step one: see the docs and diagram\n"
        "Run pip install x then wait\n"
        "col a col b\n"
        "1 2\n"
        "print('kept')\n"
        "Visit now. old"
    )


def test_rerank_text_adds_captions_ocr_and_generated_questions() -> None:
    r = res(
        "a",
        "Body **text**",
        image_info=[ImageInfo(url="u", caption="a cat", ocr_text="MEOW")],
        metadata={"generated_questions": ["What is shown?"]},
    )
    assert rerank_text(r) == "Body text\na cat\nMEOW\nWhat is shown?"


@pytest.mark.parametrize(
    ("scores", "threshold", "kept", "rule"),
    [
        ([0.9, 0.2, 0.5], 0.3, [0, 2], "score >= 0.3"),
        ([0.5, 0.6], 0.8, [1], "relaxed: score >= 0.56"),  # max(0.3, 0.7 x 0.8)
        ([0.35, 0.32], 0.4, [0, 1], "relaxed: score >= 0.3"),  # max(0.3, 0.28)
        ([0.2, 0.1], 0.8, [0], "best only: score 0.200 >= 0.15"),
        ([0.2, 0.25], 0.3, [1], "best only: score 0.250 >= 0.15"),  # threshold not above 0.3: no relaxed step
        ([0.1, 0.05], 0.8, [], "nothing passed"),
    ],
)
def test_threshold_chain(scores: list[float], threshold: float, kept: list[int], rule: str) -> None:
    assert threshold_chain(scores, RetrievalSettings(rerank_threshold=threshold)) == (kept, rule)


def test_composite_arithmetic() -> None:
    assert normalise([0.016, 0.012, 0.008]) == pytest.approx([1.0, 0.5, 0.0])
    assert normalise([0.3, 0.3]) == [1.0, 1.0]
    mid = res("m", start_at=50_000, end_at=50_512)  # deep in a long document: under the +0.05 clamp
    prior = 1 + (1 - 50_000 / 50_513)
    assert 1.0 < prior < 1.05
    assert position_prior(mid) == pytest.approx(prior)
    assert composite(0.8, 0.5, mid) == pytest.approx((0.6 * 0.8 + 0.3 * 0.5 + 0.1) * prior)
    top = res("t", start_at=0, end_at=400)
    assert position_prior(top) == pytest.approx(1.05)  # clamped at +0.05
    web = res("w", start_at=0, end_at=10, match_type=MatchType.WEB)
    assert composite(1.0, 1.0, web) == pytest.approx(min(0.6 + 0.3 + 0.1 * 0.95, 1.0) * 1.05)
    assert composite(1.0, 1.0, top) == pytest.approx(1.0 * 1.05)  # clamp01 before the prior
    assert position_prior(res("n", start_at=-1)) == 1.0


def test_mmr_prefers_a_distinct_chunk_over_a_near_copy() -> None:
    a = token_set("hybrid search fuses keyword and vector results")
    a_copy = token_set("hybrid search fuses keyword and vector results quickly")
    b = token_set("lambda cold starts load the tokenizer dictionary")
    # after a: a_copy = 0.7 x 0.85 - 0.3 x 0.86 = 0.34; b = 0.7 x 0.6 = 0.42
    assert mmr([0.9, 0.85, 0.6], [a, a_copy, b], 3, 0.7) == [0, 2, 1]
    assert mmr([0.9, 0.85, 0.6], [a, a_copy, b], 3, 1.0) == [0, 1, 2]  # lambda 1: pure relevance
    assert mmr([0.9, 0.85, 0.6], [a, a_copy, b], 2, 0.7) == [0, 2]


# -- the stage -------------------------------------------------------------------------------------------------------


@pytest.fixture
def docs(ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path) -> KnowledgeBase:
    kb = make_kb("docs")
    folder = tmp_path / "docs"
    folder.mkdir()
    texts = {
        "fusion.md": "Reciprocal rank fusion merges keyword and vector rankings. Rank fusion needs no score scale.",
        "cold.md": "Lambda cold starts load the tokenizer dictionary once per execution environment.",
        "ranking.md": "A ranking of documents; fusion of opinions; reciprocal favours between neighbours.",
    }
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
        assert ingest_file(folder / name, kb, ctx).status == "indexed"
    return kb


def searched(ctx: Context, kb: KnowledgeBase, query: str, **overrides: object):
    state = new_state(SearchRequest(query=query, knowledge_base_ids=[kb.id], overrides=overrides), ctx)
    return run_stage("chunk_search", state, ctx)


def test_local_reranker_prefers_the_exact_phrase(ctx: Context, docs: KnowledgeBase) -> None:
    state = searched(ctx, docs, "reciprocal rank fusion", rerank_threshold=0.0)
    assert {r.knowledge_filename for r in state.search_results} >= {"fusion.md", "ranking.md"}
    out = run_stage("chunk_rerank", state, ctx)
    assert out.rerank_results[0].knowledge_filename == "fusion.md"
    top = out.rerank_results[0]
    assert top.metadata["rerank"]["model"] > 0.5
    row = next(t for t in out.trace if t.stage == "chunk_rerank" and t.action == "run")
    assert row.detail["reranker"] == "none" and row.counts["input"] == len(state.search_results)


def test_http_reranker_scores_drive_the_order(tmp_path: Path, make_kb: Callable[..., KnowledgeBase]) -> None:
    with ScriptedHTTPServer() as server:
        ctx = Clients(
            Settings(
                data_dir=tmp_path / "d",
                reranker="http",
                rerank_model="test-reranker",
                rerank_url=f"{server.url}/v1/rerank",
                rerank_flavour="jina",
                provider_max_retries=0,
            )
        ).context()
        kb = ctx.catalog.create_kb(KnowledgeBase(id="kb1", name="docs"))
        folder = tmp_path / "docs"
        folder.mkdir()
        for name, text in {
            "a.md": "alpha topic words",
            "b.md": "beta topic words",
            "c.md": "gamma topic words",
        }.items():
            (folder / name).write_text(text, encoding="utf-8")
            ingest_file(folder / name, kb, ctx)
        state = searched(ctx, kb, "topic words")
        texts = [r.content for r in state.search_results]

        def answer(request):  # the model likes "gamma" best, "beta" a little, "alpha" not at all
            docs = request.json["documents"]
            scores = {"gamma": 0.9, "beta": 0.4, "alpha": 0.1}
            results = [{"index": i, "relevance_score": scores[d.split()[0]]} for i, d in enumerate(docs)]
            return ScriptedResponse(200, {"results": results})

        server.add(answer)
        out = run_stage("chunk_rerank", state, ctx)
        assert server.requests[-1].json["documents"] == texts
        assert [r.knowledge_filename for r in out.rerank_results] == ["c.md", "b.md"]  # alpha is under 0.3

        # the provider fails: results pass through un-reranked, and the trace says why
        server.set_fallback(ScriptedResponse(500, {"error": "overloaded"}))
        degraded = run_stage("chunk_rerank", state, ctx)
        assert [r.id for r in degraded.rerank_results] == [r.id for r in state.search_results]
        row = next(t for t in degraded.trace if t.action == "degrade")
        assert row.stage == "chunk_rerank" and "un-reranked" in (row.reason or "")


def test_a_rejection_by_the_reranker_stands_to_the_end(tmp_path: Path, make_kb: Callable[..., KnowledgeBase]) -> None:
    """The rerank model scores every candidate under the threshold chain: the rerank keeps nothing, and neither the
    merge nor the final cut puts the search's candidates back (WeKnora's "search nothing"); the trace says which
    list each stage read."""
    with ScriptedHTTPServer() as server:
        ctx = Clients(
            Settings(
                data_dir=tmp_path / "d",
                reranker="http",
                rerank_model="test-reranker",
                rerank_url=f"{server.url}/v1/rerank",
                rerank_flavour="jina",
                provider_max_retries=0,
            )
        ).context()
        kb = ctx.catalog.create_kb(KnowledgeBase(id="kb1", name="docs"))
        (tmp_path / "a.md").write_text("alpha topic words", encoding="utf-8")
        ingest_file(tmp_path / "a.md", kb, ctx)
        server.add(
            lambda request: ScriptedResponse(
                200, {"results": [{"index": i, "relevance_score": 0.01} for i in range(len(request.json["documents"]))]}
            )
        )
        state = searched(ctx, kb, "topic words")
        assert state.search_results
        for stage in ("chunk_rerank", "chunk_merge", "filter_top_k"):
            state = run_stage(stage, state, ctx)
    assert state.rerank_results == [] and state.merge_results == [] and state.final_results == []
    rows = {t.stage: t for t in state.trace if t.action in ("run", "skip")}
    assert rows["chunk_rerank"].detail["rule"] == "nothing passed"
    assert rows["chunk_merge"].detail["source"] == "rerank_results"
    assert rows["filter_top_k"].detail["source"] == "merge_results"


def test_faq_boost_and_empty_input(ctx: Context, docs: KnowledgeBase) -> None:
    state = searched(ctx, docs, "reciprocal rank fusion")
    faq = state.search_results[0].model_copy(update={"chunk_type": ChunkType.FAQ})
    with_faq = state.model_copy(update={"search_results": [faq, *state.search_results[1:]]})
    plain = run_stage("chunk_rerank", with_faq, ctx)
    boosted_state = with_faq.model_copy(
        update={"retrieval": with_faq.retrieval.model_copy(update={"faq_priority_enabled": True})}
    )
    boosted = run_stage("chunk_rerank", boosted_state, ctx)
    score = {r.id: r.score for r in plain.rerank_results}[faq.id]
    assert {r.id: r.score for r in boosted.rerank_results}[faq.id] == pytest.approx(min(score * 1.2, 1.0))
    empty = run_stage("chunk_rerank", state.model_copy(update={"search_results": []}), ctx)
    assert empty.rerank_results == [] and any(t.action == "skip" for t in empty.trace)


# -- score scales (issue 17) ----------------------------------------------------------------------------------------


def test_token_scale_is_exempt_from_the_threshold_chain() -> None:
    cfg = RetrievalSettings(rerank_threshold=0.5)
    assert threshold_chain([0.1, 0.05], cfg, [True, True]) == (
        [0, 1],
        "no threshold on the token scale (keyword_threshold cut already)",
    )
    # Mixed knowledge bases: the token-scale candidate passes, the others meet the threshold chain.
    kept, rule = threshold_chain([0.1, 0.6, 0.2], cfg, [True, False, False])
    assert kept == [0, 1] and rule == "score >= 0.5; token scale unthresholded"
    assert threshold_chain([0.1, 0.6], cfg, [False, False]) == threshold_chain([0.1, 0.6], cfg)


def test_keyword_only_candidates_are_all_kept_and_ordered_by_the_search(ctx: Context, docs: KnowledgeBase) -> None:
    # A keyword-only knowledge base: the local reranker has no vectors, its score is on the token scale.
    state = searched(ctx, docs, "reciprocal rank fusion", keyword_threshold=0.0, rerank_threshold=0.99)
    out = run_stage("chunk_rerank", state, ctx)
    row = next(t for t in out.trace if t.stage == "chunk_rerank" and t.action == "run")
    assert row.detail["scales"] == ["token"]
    assert row.counts["passed"] == row.counts["input"] == len(state.search_results) >= 2  # 0.99 cut nothing
    top = out.rerank_results[0]
    rerank = top.metadata["rerank"]
    calibration = rerank_calibration("token", 0.99)
    assert calibration.threshold is None
    assert top.score == pytest.approx(composite(rerank["model"], rerank["base"], top, calibration), abs=1e-6)


def test_weak_vector_evidence_moves_the_composite_toward_the_search_score(
    ctx: Context, make_kb: Callable[..., KnowledgeBase]
) -> None:
    # Issue 17 read the candidates' best calibrated cosine (0.5 here) as the model-free reranker's share of the
    # composite (0.6 x 0.5^1.5); issue 32 takes the rest of the way: its share is 0, the search score decides.
    kb = make_kb("vectors", embedding_model="precomputed:evidence")
    texts = ["reciprocal rank fusion merges rankings", "cold starts load a dictionary", "rank fusion once more"]
    vectors = np.eye(4, dtype=np.float32)[:3]
    ctx.catalog.put_knowledge(Knowledge(id="k", knowledge_base_id=kb.id, filename="k.md", status="completed"))
    chunks = [Chunk(id=f"k-{i}", knowledge_id="k", knowledge_base_id=kb.id, content=t, chunk_index=i)
              for i, t in enumerate(texts)]  # fmt: skip
    ctx.index.replace_knowledge("k", chunks, vectors, kb.embedding_model)
    query = np.array([0.5, 0.0, 0.0, math.sqrt(0.75)], dtype=np.float32)  # cosine 0.5 with k-0, 0 with the rest
    # Declared on the common scale: a model that declares none has no absolute evidence (token_relative scale).
    ctx.register_embedder(ScaledPrecomputedEmbedder("precomputed:evidence", {"rank fusion": query}, COMMON_SCALE))
    overrides = {"vector_threshold": 0.0, "keyword_threshold": 0.0, "rerank_threshold": 0.0}
    state = searched(ctx, kb, "rank fusion", **overrides)
    assert len(state.search_results) >= 2
    scales: list[RerankScale] = ["token_vector"] * len(state.search_results)
    assert vector_evidence(state, ctx, scales) == pytest.approx([0.5] * len(scales))
    no_vectors: list[RerankScale] = ["token"] * len(scales)
    assert vector_evidence(state, ctx, no_vectors) == [None] * len(scales)
    out = run_stage("chunk_rerank", state, ctx)
    row = next(t for t in out.trace if t.stage == "chunk_rerank" and t.action == "run")
    assert row.detail["scales"] == ["token_vector"]
    calibration = rerank_calibration("token_vector", 0.0, 0.5)
    assert calibration.model_weight == 0.0
    fixed = RerankCalibration("token_vector", 0.0, MODEL_WEIGHT, BASE_WEIGHT)
    for r in out.rerank_results:
        rerank = r.metadata["rerank"]
        assert r.score == pytest.approx(composite(rerank["model"], rerank["base"], r, calibration), abs=1e-6)
    # The fixed 0.6 / 0.3 would have scored them otherwise.
    assert any(
        abs(r.score - composite(r.metadata["rerank"]["model"], r.metadata["rerank"]["base"], r, fixed)) > 0.01
        for r in out.rerank_results
    )


def test_a_model_without_a_declared_scale_is_reranked_on_relative_cosines(
    ctx: Context, make_kb: Callable[..., KnowledgeBase]
) -> None:
    # Issue 32: a provider's model declares no scale. Its cosines (e5-like here, all ~0.8-0.9) were read on MiniLM's
    # scale: every candidate passed the threshold on the cosine floor and the words decided. Now they are read
    # relative to one another (token_relative: no threshold, fixed weights), and the vectors' best leads.
    kb = make_kb("undeclared", embedding_model="precomputed:undeclared")
    texts = ["wind turbines wind turbines on a ridge", "offshore generation of electricity", "a recipe for bread"]
    ctx.catalog.put_knowledge(Knowledge(id="u", knowledge_base_id=kb.id, filename="u.md", status="completed"))
    chunks = [Chunk(id=f"u-{i}", knowledge_id="u", knowledge_base_id=kb.id, content=t, chunk_index=i)
              for i, t in enumerate(texts)]  # fmt: skip

    def at(cos: float, axis: int) -> np.ndarray:
        v = np.zeros(4, dtype=np.float32)
        v[0], v[axis] = cos, math.sqrt(1 - cos * cos)
        return v

    ctx.index.replace_knowledge("u", chunks, np.stack([at(0.80, 1), at(0.88, 2), at(0.77, 3)]), kb.embedding_model)
    ctx.register_embedder(PrecomputedEmbedder("precomputed:undeclared", {"wind turbines": at(1.0, 1)}))
    state = searched(ctx, kb, "wind turbines", keyword_threshold=0.0)
    scales = score_scales(state, ctx)
    assert set(scales) == {"token_relative"} and vector_evidence(state, ctx, scales) == [None] * len(scales)
    out = run_stage("chunk_rerank", state, ctx)
    row = next(t for t in out.trace if t.stage == "chunk_rerank" and t.action == "run")
    assert row.detail["scales"] == ["token_relative"] and row.counts["passed"] == len(state.search_results)
    best = max(out.rerank_results, key=lambda r: r.metadata["rerank"]["model"])
    assert best.id == "u-1"  # the vectors' best, which holds none of the query's words
