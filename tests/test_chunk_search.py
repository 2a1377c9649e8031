"""The chunk_search stage: pools, scoped thresholds, grouping by embedding model, dedupe, degradation."""

from __future__ import annotations

import hashlib
import re
import socket
from collections.abc import Callable

import numpy as np
import pytest

from ragstep.adapters.embedders import OpenAIEmbedder, PrecomputedEmbedder
from ragstep.app.search import new_state
from ragstep.bench.quality import ScaledPrecomputedEmbedder
from ragstep.context import Context
from ragstep.models import Chunk, Knowledge, KnowledgeBase, MatchType, SearchRequest
from ragstep.models.scale import COMMON_SCALE
from ragstep.retrieval.fusion import Fused
from ragstep.stages.search import chunk_search
from ragstep.stages.search.chunk_search import candidate_pool, content_key
from ragstep.stages.search.hydrate import HYDRATE_SPARE, hydrate

DIM = 8


def unit(axis: int) -> np.ndarray:
    """One-hot vectors: cosines are exactly 1, 0 or -1, so every expectation below is exact."""
    v = np.zeros(DIM, dtype=np.float32)
    v[axis] = 1.0
    return v


def add_doc(ctx: Context, kb: KnowledgeBase, kid: str, texts: list[str], vectors: np.ndarray | None) -> None:
    ctx.catalog.put_knowledge(Knowledge(id=kid, knowledge_base_id=kb.id, filename=f"{kid}.md", status="completed"))
    chunks = [
        Chunk(id=f"{kid}-{i}", knowledge_id=kid, knowledge_base_id=kb.id, content=t, chunk_index=i, tag_id=f"tag-{kid}")
        for i, t in enumerate(texts)
    ]
    ctx.index.replace_knowledge(kid, chunks, vectors, kb.embedding_model if vectors is not None else None)


def run(ctx: Context, **request: object):
    return chunk_search.run(new_state(SearchRequest(**request), ctx), ctx)


@pytest.mark.parametrize(
    ("match_count", "n_kbs", "pool"), [(30, 1, 150), (5, 1, 50), (30, 2, 300), (30, 4, 500), (1, 3, 150), (200, 1, 500)]
)
def test_candidate_pool(match_count: int, n_kbs: int, pool: int) -> None:
    assert candidate_pool(match_count, n_kbs) == pool


def test_content_key_normalises_case_and_whitespace() -> None:
    assert content_key("Hello   World\n") == content_key("hello world")
    assert content_key("hello world") != content_key("hello worlds")


def test_content_key_knows_the_whitespace_the_regex_knew() -> None:
    # Unicode spaces, separators and control characters that str.split() and re's \s both treat as whitespace.
    text = "\u00a0 Tab\there\u2003em\u3000ideo\x1cfs\x85nel\u2028line \x0bvt\x0cff\r\n"
    regex = hashlib.md5(re.sub(r"\s+", " ", text.lower()).strip().encode("utf-8")).hexdigest()
    assert content_key(text) == regex == content_key("tab here em ideo fs nel line vt ff")


def test_hydrate_reads_past_duplicates_to_fill_the_results(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    """The first read holds ``limit + HYDRATE_SPARE`` candidates; when duplicates (and a deleted chunk) leave the
    results short, the rest of the over-fetched head is read, in the fused order."""
    kb = make_kb("hydrate")
    limit = 3
    first = limit + HYDRATE_SPARE
    texts = ["One Text", "Two text"] + [f"{'one' if i % 2 else 'two'}   TEXT" for i in range(first - 3)]
    texts += [f"distinct {i}" for i in range(6)]
    add_doc(ctx, kb, "d", texts, None)
    ids = [f"d-{i}" for i in range(len(texts))]
    order = [ids[0], "deleted", *ids[1:]]  # the first read: 2 distinct contents, a deleted id and duplicates
    fused = [Fused(cid, 1 - i / 100, MatchType.KEYWORD, keyword_rank=i + 1) for i, cid in enumerate(order)]
    results = hydrate(fused, ctx, limit)
    assert [r.id for r in results] == [ids[0], ids[1], ids[first - 1]]
    assert [r.content for r in results] == ["One Text", "Two text", "distinct 0"]
    assert [r.metadata["retrieval"]["keyword_rank"] for r in results] == [1, 3, first + 1]
    # Without duplicates the first read fills them all.
    clean = [f for f in fused if f.chunk_id in {ids[0], ids[1], *ids[first - 1 :]}]
    assert [r.content for r in hydrate(clean, ctx, limit)] == ["One Text", "Two text", "distinct 0"]


@pytest.fixture
def hybrid(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> KnowledgeBase:
    """A knowledge base embedded with a precomputed model: query 'q-vec' points at chunk v-0."""
    kb = make_kb("hybrid", embedding_model="precomputed:test")
    texts = ["alpha topic about vectors", "beta topic about keywords", "gamma unrelated words"]
    vecs = np.stack([unit(1), unit(2), unit(3)])
    add_doc(ctx, kb, "v", texts, vecs)
    ctx.register_embedder(
        PrecomputedEmbedder("precomputed:test", {"keywords please": unit(1), "nothing matches": -unit(1)})
    )
    return kb


def test_hybrid_fuses_both_retrievers(ctx: Context, hybrid: KnowledgeBase) -> None:
    state = run(ctx, query="keywords please", knowledge_base_ids=[hybrid.id])
    by_id = {r.id: r for r in state.search_results}
    # v-0 comes from the vector side (identical vector), v-1 from the keyword side
    assert by_id["v-0"].match_type in (MatchType.VECTOR, MatchType.HYBRID)
    assert by_id["v-1"].match_type in (MatchType.KEYWORD, MatchType.HYBRID)
    assert state.search_results[0].id == "v-0"  # vector weight 0.7 > keyword weight 0.3 at equal rank
    assert by_id["v-0"].metadata["retrieval"]["vector_rank"] == 1
    assert "precomputed:test" in state.query_embeddings  # computed once, kept for later stages
    row = next(t for t in state.trace if t.stage == "chunk_search" and t.action == "run")
    assert row.counts["vector_hits"] >= 1 and row.counts["keyword_hits"] == 1
    assert row.detail["pool"] == 150


def test_thresholds_apply_to_whole_kb_search_but_not_to_scoped(ctx: Context, hybrid: KnowledgeBase) -> None:
    # the query vector is the opposite of v-0's: cosines are -1 (v-0) and 0 (v-1, v-2); no keyword matches
    whole = run(ctx, query="nothing matches", knowledge_base_ids=[hybrid.id], overrides={"vector_threshold": 0.99})
    assert whole.search_results == []
    scoped = run(ctx, query="nothing matches", knowledge_ids=["v"], overrides={"vector_threshold": 0.99})
    # thresholds forced to 0: cosine 0 passes, the opposite vector (-1) still does not
    assert {r.id for r in scoped.search_results} == {"v-1", "v-2"}
    tagged = run(
        ctx,
        query="nothing matches",
        knowledge_base_ids=[hybrid.id],
        tag_ids=["tag-v"],
        overrides={"vector_threshold": 0.99},
    )
    assert {r.id for r in tagged.search_results} == {"v-1", "v-2"}


def test_embedding_failure_degrades_to_keywords(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kb = make_kb("broken", embedding_model="openai:dead-model")
    add_doc(ctx, kb, "d", ["keyword search still works"], np.ones((1, DIM)))
    ctx.register_embedder(
        OpenAIEmbedder("dead-model", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_base_s=0.01)
    )
    state = run(ctx, query="keyword search", knowledge_base_ids=[kb.id])
    assert [r.id for r in state.search_results] == ["d-0"]
    assert state.search_results[0].match_type == MatchType.KEYWORD
    degrade = [t for t in state.trace if t.action == "degrade"]
    assert len(degrade) == 1 and "keyword search only" in (degrade[0].reason or "")


def test_bm25_only_kb_says_so_in_the_trace(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("plain")
    add_doc(ctx, kb, "p", ["plain keyword document"], None)
    state = run(ctx, query="keyword", knowledge_base_ids=[kb.id])
    assert [r.id for r in state.search_results] == ["p-0"]
    assert any(t.action == "skip" and "BM25" in (t.reason or "") for t in state.trace)


def test_duplicates_by_content_are_dropped(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("dupes")
    add_doc(ctx, kb, "a", ["Same Text here", "other words"], None)
    add_doc(ctx, kb, "b", ["same   text HERE"], None)
    state = run(ctx, query="same text", knowledge_base_ids=[kb.id])
    assert len([r for r in state.search_results if "same" in r.content.lower()]) == 1


def test_two_embedding_models_each_embed_the_query_once(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb1 = make_kb("m1", embedding_model="precomputed:one")
    kb2 = make_kb("m2", embedding_model="precomputed:two")
    add_doc(ctx, kb1, "x", ["first model doc"], unit(5)[None, :])
    add_doc(ctx, kb2, "y", ["second model doc"], unit(6)[None, :])
    ctx.register_embedder(PrecomputedEmbedder("precomputed:one", {"model doc": unit(5)}))
    ctx.register_embedder(PrecomputedEmbedder("precomputed:two", {"model doc": unit(6)}))
    state = run(ctx, query="model doc", knowledge_base_ids=[kb1.id, kb2.id])
    assert set(state.query_embeddings) == {"precomputed:one", "precomputed:two"}
    assert {r.id for r in state.search_results} == {"x-0", "y-0"}
    assert all(r.match_type == MatchType.HYBRID for r in state.search_results)
    row = next(t for t in state.trace if t.action == "run")
    assert row.detail["targets"] == 2 and row.detail["pool"] == 300  # two knowledge bases


def test_keyword_search_ranks_knowledge_bases_of_different_models_on_one_scale(
    ctx: Context, make_kb: Callable[..., KnowledgeBase]
) -> None:
    # A keyword-only knowledge base and one with vectors are two targets; their BM25 hits come from one search with
    # the joint statistics. "apple" is in every chunk of the small one (per-base statistics weighed it ~0.2 there
    # against ~1.8 in the large one, where it is rare, and each list's best scored 1.0 whatever its raw score).
    small, large = make_kb("small"), make_kb("large", embedding_model="precomputed:l")
    add_doc(ctx, small, "s", ["apple pie", "apple tart crust"], None)
    add_doc(ctx, large, "l", ["apple orchard harvest time", *(f"pear plum fig {i}" for i in range(7))],
            np.stack([unit(1 + i % 7) for i in range(8)]))  # fmt: skip
    ctx.register_embedder(PrecomputedEmbedder("precomputed:l", {"apple": unit(0)}))  # orthogonal: no vector hits
    state = run(ctx, query="apple", knowledge_base_ids=[small.id, large.id])
    found = [(r.id, r.metadata["retrieval"]["keyword_rank"]) for r in state.search_results]
    assert found == [("s-0", 1), ("s-1", 2), ("l-0", 3)]  # shorter chunks first, one ranking across both
    assert next(t for t in state.trace if t.action == "run").detail["targets"] == 2


def test_rewritten_query_is_searched_and_original_kept(ctx: Context, hybrid: KnowledgeBase) -> None:
    state = new_state(SearchRequest(query="zzz", knowledge_base_ids=[hybrid.id]), ctx)
    state = state.model_copy(update={"rewritten_query": "gamma unrelated"})
    ctx.register_embedder(PrecomputedEmbedder("precomputed:test", {"gamma unrelated": unit(3)}))
    out = chunk_search.run(state, ctx)
    assert out.search_results[0].id == "v-2"
    row = next(t for t in out.trace if t.action == "run")
    assert row.detail["query"] == "gamma unrelated" and row.detail["original_query"] == "zzz"


def test_a_keyword_only_chunk_counts_at_its_own_cosine_whatever_cut_it(
    ctx: Context, make_kb: Callable[..., KnowledgeBase]
) -> None:
    """A chunk only BM25 found is read at its exact cosine (the local index scores named chunks), whether the pool
    or the similarity threshold cut it from the vector list. Before issue 32's fifth pass a knowledge base this
    small fell back to the declared-scale rule, which lent such a chunk the list's lowest cosine where the pool cut
    the list (``fuse_absolute``'s floor, tested in test_fusion.py); now it is read against its own four chunks."""
    kb = make_kb("floor", embedding_model="precomputed:floor")
    texts = ["alpha first", "beta second", "delta third", "gamma keywords"]
    vecs = np.stack(
        [0.8 * unit(1) + 0.6 * unit(2), 0.6 * unit(1) + 0.8 * unit(3), 0.4 * unit(1) + np.sqrt(0.84) * unit(4), unit(5)]
    )  # cosines to the query 0.8, 0.6, 0.4 and 0 (below the threshold): the last one only BM25 finds
    add_doc(ctx, kb, "f", texts, vecs)
    # Declared on the common scale: the cosines are read as they are (a model without a declared scale is fused
    # relative, without a floor to lend).
    ctx.register_embedder(ScaledPrecomputedEmbedder("precomputed:floor", {"keywords please": unit(1)}, COMMON_SCALE))

    def scores(pool: int) -> dict[str, float]:
        overrides = {"embedding_top_k": 3, "candidate_pool_min": pool, "candidate_pool_multiplier": 1}
        state = run(ctx, query="keywords please", knowledge_base_ids=[kb.id], overrides=overrides)
        row = next(t for t in state.trace if t.stage == "chunk_search" and t.action == "run")
        assert row.detail["pool"] == pool and row.counts["vector_hits"] == 3
        return {r.id: r.score for r in state.search_results}

    full, cut = scores(3), scores(4)  # the same three vector hits: the pool cut the first list, the threshold the other
    # Either way f-3 counts at its own cosine (0: no vector evidence), and its one weak term leaves it last.
    assert list(full) == list(cut) == ["f-0", "f-1", "f-2", "f-3"][: len(full)]
    assert full == pytest.approx(cut)
