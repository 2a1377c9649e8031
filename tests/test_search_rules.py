"""The retrieval issue's rules, one by one: expansion strategies, FAQ iteration and negatives, FAQ priority,
zero-result fallback, and degradation when a retriever fails or is slow."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.embedders import PrecomputedEmbedder
from ragstep.app.ingest import ingest_file
from ragstep.app.search import new_state
from ragstep.context import Context
from ragstep.models import Chunk, Knowledge, KnowledgeBase, MatchType, RetrievalSettings, SearchRequest
from ragstep.pipeline import run_stage
from ragstep.retrieval.expansion import (
    expansion_variants,
    keyword_variant,
    quoted_phrases,
    segments,
    strip_question_words,
)
from ragstep.stages.search import chunk_search
from ragstep.stages.search.retrievers import run_concurrently

DIM = 8


def axis(i: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[i] = 1.0
    return v


def search(ctx: Context, **request: object):
    return chunk_search.run(new_state(SearchRequest(**request), ctx), ctx)


def events(state, action: str) -> list:
    return [t for t in state.trace if t.action == action]


# -- expansion strategies ----------------------------------------------------------------------------------------


def test_keyword_variant_drops_stopwords_and_single_characters() -> None:
    assert keyword_variant("What is the cold start of a Lambda?") == "cold start lambda"
    assert keyword_variant("北京是中国的首都吗") == "北京 中国 首都"


@pytest.mark.parametrize(
    ("query", "phrase"),
    [
        ('find "cold brew" ratio', "cold brew"),
        ("find 'cold brew' ratio", "cold brew"),
        ("查找「混合检索」的定义", "混合检索"),
        ("查找『混合检索』的定义", "混合检索"),
        ("查找“混合检索”的定义", "混合检索"),
        ("查找‘混合检索’的定义", "混合检索"),
    ],
)
def test_quoted_phrases_in_every_quote_style(query: str, phrase: str) -> None:
    assert quoted_phrases(query) == [phrase]


def test_segments_split_on_delimiters_and_keep_those_over_five_bytes() -> None:
    assert segments("北京，上海；广州、深圳。abc! defghi?") == ["北京", "上海", "广州", "深圳", "defghi"]
    assert segments("ab, abcdef") == ["abcdef"]  # "ab" is 2 bytes


@pytest.mark.parametrize(
    ("query", "stripped"),
    [
        ("什么是混合检索", "混合检索"),
        ("请告诉我冷启动的原因", "冷启动的原因"),
        ("我想了解向量数据库", "向量数据库"),
        ("为什么需要重排序？", "需要重排序"),
        ("How does fusion work?", "does fusion work"),
        ("WHERE is the config", "is the config"),
        ("plain statement", "plain statement"),
    ],
)
def test_leading_question_words_are_removed(query: str, stripped: str) -> None:
    assert strip_question_words(query) == stripped


def test_variants_are_distinct_long_enough_and_capped() -> None:
    variants = expansion_variants("什么是“混合检索”，它和向量检索有什么区别？")
    assert len(variants) == 5
    assert len(set(variants)) == 5
    assert all(len(v.encode()) >= 3 for v in variants)
    assert "混合检索" in variants  # the quoted phrase
    assert expansion_variants("RRF") == []  # nothing new to try
    assert len(expansion_variants("alpha, bravo1, charlie, delta1, echo12, foxtrot", limit=2)) == 2


# -- expansion in the stage --------------------------------------------------------------------------------------


@pytest.fixture
def docs(ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path) -> KnowledgeBase:
    kb = make_kb("docs")
    folder = tmp_path / "docs"
    folder.mkdir()
    texts = {
        "brew.md": "Cold brew steeps coffee grounds in cold water. Cold brew concentrate, cold brew ratio, cold brew.",
        "espresso.md": "An espresso shot pulls hot water through fine grounds under pressure.",
        "tea.md": "Green tea should steep in water below boiling for two minutes.",
    }
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
        assert ingest_file(folder / name, kb, ctx).status == "indexed"
    return kb


def test_expansion_adds_what_the_threshold_cut(ctx: Context, docs: KnowledgeBase) -> None:
    query = "cold brew concentrate ratio, espresso"
    plain = search(ctx, query=query, knowledge_base_ids=[docs.id], overrides={"enable_query_expansion": False})
    names = [r.knowledge_filename for r in plain.search_results]
    # "espresso" scores under 30 % of the cold-brew document's BM25, so the first pass drops it
    assert names == ["brew.md"]
    expanded = search(ctx, query=query, knowledge_base_ids=[docs.id])
    assert [r.knowledge_filename for r in expanded.search_results] == ["brew.md", "espresso.md"]
    (row,) = events(expanded, "expand")
    assert "espresso" in row.detail["variants"]
    assert row.counts["new_candidates"] >= 1
    # espresso.md is its variant's best hit (1.0 there), yet it scores below the first pass's last hit: fusion and
    # the rerank stage read scores, and must keep it behind what the whole query found.
    first, added = expanded.search_results
    assert added.metadata["retrieval"]["keyword_score"] < first.metadata["retrieval"]["keyword_score"]
    assert added.score < first.score
    reranked = run_stage("chunk_rerank", expanded, ctx).rerank_results
    assert [r.knowledge_filename for r in sorted(reranked, key=lambda r: -r.score)] == ["brew.md", "espresso.md"]


# -- FAQ ---------------------------------------------------------------------------------------------------------


def write_faq(path: Path, entries: list[dict]) -> Path:
    path.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    return path


def test_faq_negative_question_drops_the_entry(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    kb = make_kb("faq", kb_type="faq")
    faq = write_faq(
        tmp_path / "faq.json",
        [
            {
                "standard_question": "How much does the service cost?",
                "similar_questions": ["What is the price?"],
                "negative_questions": ["How much does OpenSearch cost?"],
                "answers": ["It is billed per request."],
            }
        ],
    )
    assert ingest_file(faq, kb, ctx).status == "indexed"
    hit = search(ctx, query="What is the price?", knowledge_base_ids=[kb.id])
    assert [r.match_type for r in hit.search_results] == [MatchType.FAQ]
    assert hit.search_results[0].metadata["answers"] == ["It is billed per request."]
    # a negative question matches by keywords ("how much ... cost") but must not return the entry
    neg = search(ctx, query="  how much does OPENSEARCH cost? ", knowledge_base_ids=[kb.id])
    assert neg.search_results == []
    row = next(t for t in neg.trace if t.action == "run")
    assert row.detail["faq_negative_dropped"] == 1


@pytest.fixture
def faq_vectors(ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path) -> KnowledgeBase:
    """3 FAQ entries x 31 phrasings, every phrasing's vector close to the query: k hits name only 3 entries."""
    kb = make_kb("faqvec", kb_type="faq", embedding_model="precomputed:faq")
    entries, mapping = [], {}
    rng = np.random.default_rng(0)
    for e in range(3):
        similar = [f"entry {e} phrasing {j}" for j in range(30)]
        entries.append({"id": f"e{e}", "standard_question": f"entry {e} standard", "similar_questions": similar,
                        "answers": [f"answer {e}"]})  # fmt: skip
        for text in [f"entry {e} standard", *similar]:
            mapping[text] = axis(0) + 0.05 * rng.standard_normal(DIM).astype(np.float32)
    mapping["the query"] = axis(0)
    ctx.register_embedder(PrecomputedEmbedder("precomputed:faq", mapping))
    assert ingest_file(write_faq(tmp_path / "f.json", entries), kb, ctx).chunks == 93
    return kb


def test_faq_search_widens_until_enough_entries(ctx: Context, faq_vectors: KnowledgeBase) -> None:
    state = search(
        ctx,
        query="the query",
        knowledge_base_ids=[faq_vectors.id],
        overrides={"embedding_top_k": 5, "enable_query_expansion": False},
    )
    row = next(t for t in state.trace if t.action == "run")
    # k = 15 -> 30 -> 60 -> 120: the 4th round returns all 93 rows (< k), so it stops there
    assert row.counts["faq_rounds"] == 4
    assert sorted(r.id.rsplit("-", 1)[-1] for r in state.search_results) == ["e0", "e1", "e2"]  # one per entry


def test_faq_rounds_are_capped(ctx: Context, faq_vectors: KnowledgeBase) -> None:
    state = search(
        ctx,
        query="the query",
        knowledge_base_ids=[faq_vectors.id],
        overrides={"embedding_top_k": 5, "faq_max_rounds": 2, "enable_query_expansion": False},
    )
    assert next(t for t in state.trace if t.action == "run").counts["faq_rounds"] == 2


def test_faq_priority_boosts_and_flags_direct_answers(ctx: Context, faq_vectors: KnowledgeBase) -> None:
    base = search(ctx, query="the query", knowledge_base_ids=[faq_vectors.id])
    boosted = search(
        ctx,
        query="the query",
        knowledge_base_ids=[faq_vectors.id],
        overrides={"faq_priority_enabled": True, "faq_score_boost": 1.5, "faq_direct_answer_threshold": 0.9},
    )
    before = {r.id: r.score for r in base.search_results}
    for r in boosted.search_results:
        assert r.score == pytest.approx(min(before[r.id] * 1.5, 1.0))
        assert r.metadata.get("faq_direct_answer") is (r.metadata["retrieval"]["vector_score"] >= 0.9 or None)
    assert any(r.metadata.get("faq_direct_answer") for r in boosted.search_results)


def test_faq_direct_answers_read_the_cosine_on_the_models_scale() -> None:
    # An e5-like model (unrelated ~0.77): its raw 0.9 is a loose paraphrase, 0.65 on the common scale; a direct
    # answer needs the common scale's 0.9, i.e. a raw 0.95 here. A model on the common scale reads 0.9 as it is.
    from ragstep.models import ChunkType, SearchResult
    from ragstep.models.scale import ScoreScale

    def faq(kb: str, cosine: float) -> SearchResult:
        return SearchResult(id=f"{kb}-{cosine}", content="Q", knowledge_id="k", knowledge_base_id=kb, score=0.5,
                            chunk_type=ChunkType.FAQ, metadata={"retrieval": {"vector_score": cosine}})  # fmt: skip

    cfg = RetrievalSettings(faq_priority_enabled=True, faq_direct_answer_threshold=0.9)
    results = [faq("e5", 0.92), faq("e5", 0.96), faq("common", 0.92), faq("common", 0.85)]
    flagged, _ = chunk_search.apply_faq_rules(results, "q", cfg, {"e5": ScoreScale(zero=0.77, span=0.2)})
    assert {r.id for r in flagged if r.metadata.get("faq_direct_answer")} == {"e5-0.96", "common-0.92"}


# -- zero-result fallback ------------------------------------------------------------------------------------------


def test_relaxed_thresholds_when_nothing_survives(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("weak", embedding_model="precomputed:weak")
    ctx.catalog.put_knowledge(Knowledge(id="w", knowledge_base_id=kb.id, status="completed"))
    chunk = Chunk(id="w-0", knowledge_id="w", knowledge_base_id=kb.id, content="unrelated words entirely")
    ctx.index.replace_knowledge("w", [chunk], axis(0)[None, :], "precomputed:weak")
    cos = 0.15  # below the configured 0.2, above the relaxed min(0.17, 0.2 / 2) = 0.1
    q = cos * axis(0) + math.sqrt(1 - cos**2) * axis(1)
    ctx.register_embedder(PrecomputedEmbedder("precomputed:weak", {"zzqx": q}))
    state = search(ctx, query="zzqx", knowledge_base_ids=[kb.id])
    assert [r.id for r in state.search_results] == ["w-0"]
    assert state.search_results[0].metadata["retrieval"]["vector_score"] == pytest.approx(cos, abs=1e-5)
    (row,) = events(state, "fallback")
    assert "vector threshold 0.1" in (row.reason or "") and "keyword threshold 0.1" in (row.reason or "")
    # a query the relaxed pass cannot reach either stays empty, and says it tried
    ctx.register_embedder(PrecomputedEmbedder("precomputed:weak", {"zzqx": axis(1)}))
    empty = search(ctx, query="zzqx", knowledge_base_ids=[kb.id])
    assert empty.search_results == [] and len(events(empty, "fallback")) == 1


def test_scoped_search_falls_back_to_the_items_chunks(ctx: Context, docs: KnowledgeBase) -> None:
    tea = next(k for k in ctx.catalog.list_knowledge(docs.id) if k.filename == "tea.md")
    state = search(ctx, query="espresso pressure", knowledge_ids=[tea.id])
    assert [r.knowledge_id for r in state.search_results] == [tea.id]
    assert state.search_results[0].metadata["retrieval"] == {"fallback": "scoped_knowledge"}
    assert "chunks in order" in (events(state, "fallback")[0].reason or "")


# -- degradation ---------------------------------------------------------------------------------------------------


def test_a_failing_retriever_degrades_the_search(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("dims", embedding_model="precomputed:dims")
    ctx.catalog.put_knowledge(Knowledge(id="d", knowledge_base_id=kb.id, status="completed"))
    chunk = Chunk(id="d-0", knowledge_id="d", knowledge_base_id=kb.id, content="keyword match survives")
    ctx.index.replace_knowledge("d", [chunk], axis(0)[None, :], "precomputed:dims")
    # the model now answers with 4 dimensions while the index holds 8: the vector retriever raises
    ctx.register_embedder(PrecomputedEmbedder("precomputed:dims", {"keyword match": np.ones(4)}))
    state = search(ctx, query="keyword match", knowledge_base_ids=[kb.id])
    assert [r.id for r in state.search_results] == ["d-0"]
    (row,) = events(state, "degrade")
    assert "vector search #0 failed" in (row.reason or "") and "4 dimensions" in (row.reason or "")


def test_slow_retrievers_are_dropped_not_awaited(ctx: Context) -> None:
    cfg = RetrievalSettings(retriever_timeout_s=0.2)

    def slow() -> list:
        time.sleep(2)
        return ["late"]

    started = time.monotonic()
    found, degraded = run_concurrently(ctx, [("fast", lambda: ["ok"]), ("slow", slow)], cfg)
    assert time.monotonic() - started < 1.5
    assert found == {"fast": ["ok"]}
    assert len(degraded) == 1 and "slow slower than 0.2s" in (degraded[0].reason or "")


def test_single_task_failure_is_a_degrade_row(ctx: Context) -> None:
    def boom() -> list:
        raise RuntimeError("disk on fire")

    found, degraded = run_concurrently(ctx, [("only", boom)], RetrievalSettings())
    assert found == {} and "RuntimeError: disk on fire" in (degraded[0].reason or "")
