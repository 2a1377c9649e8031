"""The merge stage: offset stitching, containment, consecutive joins, FAQ rendering, short-context expansion,
partial duplicates and history references."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from ragstep.app.search import new_state
from ragstep.context import Context
from ragstep.models import (
    Chunk,
    ChunkType,
    ImageInfo,
    KnowledgeBase,
    MatchType,
    PipelineState,
    SearchRequest,
    SearchResult,
    Turn,
)
from ragstep.stages.search import chunk_merge
from ragstep.stages.search.chunk_merge import drop_partial_duplicates, merge_adjacent, render_faq

TEXT = "".join(f"Sentence number {i:02d} talks about topic {i % 7}. " for i in range(60))  # ~2,600 chars


def span(start: int, end: int, score: float = 0.5, idx: int = 0, kid: str = "k", cid: str | None = None, **kw):
    return SearchResult(
        id=cid or f"{kid}-{idx}",
        content=TEXT[start:end],
        knowledge_id=kid,
        knowledge_base_id="kb",
        chunk_index=idx,
        start_at=start,
        end_at=end,
        score=score,
        **kw,
    )


def test_overlapping_spans_are_stitched_through_offsets() -> None:
    a = span(0, 100, 0.4, idx=0, image_info=[ImageInfo(url="u1", caption="a")])
    b = span(80, 200, 0.9, idx=1, image_info=[ImageInfo(url="u1", caption="b"), ImageInfo(url="u2")])
    (m,) = merge_adjacent([b, a])
    assert (m.start_at, m.end_at, m.content) == (0, 200, TEXT[0:200])
    assert m.score == 0.9 and m.id == "k-0"
    assert m.sub_chunk_ids == ["k-0", "k-1"]
    assert [(i.url, i.caption) for i in m.image_info] == [("u1", "a"), ("u2", "")]
    assert m.metadata["chunk_index_end"] == 1


def test_adjacent_spans_merge_and_apart_spans_do_not() -> None:
    merged = merge_adjacent([span(0, 100, idx=0), span(100, 150, idx=1), span(400, 500, idx=5)])
    assert sorted((m.start_at, m.end_at) for m in merged) == [(0, 150), (400, 500)]
    assert next(m for m in merged if m.start_at == 0).content == TEXT[0:150]


def test_different_documents_or_types_never_merge() -> None:
    merged = merge_adjacent(
        [span(0, 100, kid="a"), span(50, 150, kid="b"), span(60, 120, kid="a", chunk_type=ChunkType.SUMMARY)]
    )
    assert len(merged) == 3


def test_inexact_content_is_absorbed_on_containment_or_joined_when_consecutive() -> None:
    # content differs from the offsets (a repeated table header): offsets cannot be used to stitch
    header = "| h |\n|---|\n"
    outer = span(0, 300, 0.3, idx=2).model_copy(update={"content": header + TEXT[0:300]})
    inner = span(50, 120, 0.8, idx=3)
    (m,) = merge_adjacent([outer, inner])
    assert m.content == outer.content and m.score == 0.8 and set(m.sub_chunk_ids) == {"k-2", "k-3"}
    nxt = span(400, 500, 0.2, idx=3).model_copy(update={"content": header + TEXT[400:500]})
    first = span(300, 400, 0.1, idx=2).model_copy(update={"content": header + TEXT[300:400]})
    (joined,) = merge_adjacent([nxt, first])
    assert joined.content == f"{first.content}\n\n{nxt.content}"
    assert (joined.start_at, joined.end_at) == (300, 500)


def test_faq_entries_are_rendered_and_never_stitched() -> None:
    faq = SearchResult(
        id="f1",
        content="raw",
        knowledge_id="k",
        knowledge_base_id="kb",
        chunk_type=ChunkType.FAQ,
        end_at=3,
        metadata={"standard_question": "How?", "answers": ["One.", "Two."]},
    )
    assert render_faq(faq).content == "Q: How?\nAnswer:\n- One.\n- Two."
    other = faq.model_copy(update={"id": "f2", "chunk_index": 1})
    assert len(merge_adjacent([faq, other])) == 2


def test_partial_duplicates_lose_to_the_higher_score() -> None:
    big = span(0, 300, 0.5, cid="big")
    small = span(100, 200, 0.9, cid="small")  # contained in big, but scores higher: big goes
    near = SearchResult(id="near", content=TEXT[0:300] + " extra", knowledge_id="x", knowledge_base_id="kb", score=0.4)
    kept, dropped = drop_partial_duplicates([big, small, near], 0.85)
    assert [r.id for r in kept] == ["small"] and dropped == 2
    distinct = SearchResult(id="d", content="completely other words here", knowledge_id="y", knowledge_base_id="kb")
    kept, dropped = drop_partial_duplicates([small, distinct], 0.85)
    assert {r.id for r in kept} == {"small", "d"} and dropped == 0


# -- through the stage, with a real index and history ----------------------------------------------------------------


@pytest.fixture
def doc(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> KnowledgeBase:
    kb = make_kb("docs")
    bounds = [(i * 200, i * 200 + 200) for i in range(10)]  # 10 chunks of 200 chars, adjacent
    chunks = [
        Chunk(id=f"d-{i}", knowledge_id="d", knowledge_base_id=kb.id, content=TEXT[s:e], chunk_index=i,
              start_at=s, end_at=e)
        for i, (s, e) in enumerate(bounds)
    ]  # fmt: skip
    ctx.index.replace_knowledge("d", chunks)
    return kb


def result(i: int, score: float, kb: KnowledgeBase, **kw: object) -> SearchResult:
    return SearchResult(
        id=f"d-{i}",
        content=TEXT[i * 200 : i * 200 + 200],
        knowledge_id="d",
        knowledge_base_id=kb.id,
        chunk_index=i,
        start_at=i * 200,
        end_at=i * 200 + 200,
        score=score,
        **kw,
    )


def state_with(ctx: Context, kb: KnowledgeBase, results: list[SearchResult], **request: object) -> PipelineState:
    state = new_state(SearchRequest(query="topic 3 sentence", knowledge_base_ids=[kb.id], **request), ctx)
    return state.model_copy(update={"rerank_results": results})


def test_short_chunks_grow_with_previous_then_next(ctx: Context, doc: KnowledgeBase) -> None:
    out = chunk_merge.run(state_with(ctx, doc, [result(5, 0.7, doc)]), ctx)
    (m,) = out.merge_results
    # 200 chars < 350: previous chunk first (400 chars), then stop: 350 <= 400 <= 850
    assert (m.start_at, m.end_at) == (800, 1200)
    assert m.content == TEXT[800:1200]
    assert m.sub_chunk_ids == ["d-4", "d-5"] and m.id == "d-5" and m.score == 0.7
    capped = chunk_merge.run(
        state_with(ctx, doc, [result(0, 0.7, doc)]).model_copy(
            update={"retrieval": out.retrieval.model_copy(update={"short_context_min_chars": 700})}
        ),
        ctx,
    )
    (c,) = capped.merge_results
    # no previous chunk: grows forward, 200 -> 400 -> 600 -> 800 (>= 700), never past 850
    assert (c.start_at, c.end_at) == (0, 800)


def test_the_stage_merges_hits_and_reports_counts(ctx: Context, doc: KnowledgeBase) -> None:
    hits = [result(2, 0.9, doc), result(3, 0.4, doc), result(8, 0.6, doc)]
    out = chunk_merge.run(state_with(ctx, doc, hits), ctx)
    spans = sorted((m.start_at, m.end_at) for m in out.merge_results)
    assert spans[0] == (400, 800)  # 2 and 3 stitched: 400 chars, no expansion needed
    assert spans[1] == (1400, 1800)  # 8 grew with 7
    row = out.trace[-1]
    assert row.stage == "chunk_merge" and row.counts["input"] == 3 and row.counts["merged"] == 1


def test_history_references_come_back_discounted(ctx: Context, doc: KnowledgeBase) -> None:
    ref = lambda cid, text, score: SearchResult(  # noqa: E731
        id=cid, content=text, knowledge_id=f"old-{cid}", knowledge_base_id=doc.id, score=score, end_at=len(text)
    )
    ctx.history.append(
        Turn(session_id="s1", created_at=time.time() - 60, query="older", references=[ref("x", "topic 3 sentence", 1)])
    )
    ctx.history.append(
        Turn(
            session_id="s1",
            created_at=time.time() - 10,
            query="last",
            references=[
                ref("h1", "Topic 3 sentences describe the garden layout in detail", 0.9),  # Jaccard 0.25
                ref("h2", "Sentence three of topic 3 covers watering schedules", 0.5),  # 0.43
                ref("h3", "A sentence on topic 3 about pruning roses carefully", 0.8),  # 0.5
                ref("h4", "Topic 3 sentence list: fertiliser, compost, mulch", 0.5),  # 0.43
                ref("far", "nothing in common at all", 0.9),  # 0
            ],
        )
    )
    ctx.history.append(Turn(session_id="s1", created_at=time.time(), query="no refs"))
    out = chunk_merge.run(state_with(ctx, doc, [result(9, 0.7, doc)], session_id="s1"), ctx)
    history = [r for r in out.merge_results if r.match_type == MatchType.HISTORY]
    # the three with the most words in common with the query, from the latest turn that had references
    assert {r.id for r in history} == {"h2", "h3", "h4"}
    assert {r.id: r.score for r in history}["h3"] == pytest.approx(0.8 * 0.6)
    assert out.trace[-1].counts["history"] == 3
    none = chunk_merge.run(state_with(ctx, doc, [result(9, 0.7, doc)], session_id="other"), ctx)
    assert all(r.match_type != MatchType.HISTORY for r in none.merge_results)


def test_falls_back_to_search_results_without_rerank(ctx: Context, doc: KnowledgeBase) -> None:
    """No rerank ran (rerank_results None: a profile without it): the search's candidates are merged."""
    state = state_with(ctx, doc, []).model_copy(
        update={"search_results": [result(4, 0.5, doc)], "rerank_results": None}
    )
    out = chunk_merge.run(state, ctx)
    assert out.merge_results and out.trace[-1].detail["source"] == "search_results"


def test_a_rerank_that_kept_nothing_is_not_undone(ctx: Context, doc: KnowledgeBase) -> None:
    """The rerank ran and rejected every candidate (rerank_results []): nothing is put back, and the trace says so
    (issue 38: the merge used to take the search's candidates again)."""
    state = state_with(ctx, doc, []).model_copy(update={"search_results": [result(4, 0.5, doc)]})
    out = chunk_merge.run(state, ctx)
    assert out.merge_results == []
    row = out.trace[-1]
    assert row.detail["source"] == "rerank_results" and row.counts["input"] == 0
    assert row.reason == "the rerank kept none of the candidates"
