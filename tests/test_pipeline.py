"""The executor: declared stages run in order, each is one trace row, parallel branches join, transport parity."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ragstep.app.ingest import ingest_file
from ragstep.app.search import knowledge_search, new_state
from ragstep.context import Context
from ragstep.errors import InputError, NotFoundError
from ragstep.models import KnowledgeBase, PipelineState, SearchRequest, SearchResult, TraceEvent
from ragstep.pipeline import PIPELINES, STAGES, get_pipeline, join_branches, load_stage, run_pipeline


def test_every_declared_stage_is_registered_and_importable() -> None:
    for pipe in PIPELINES.values():
        for name in pipe.stage_names():
            assert name in STAGES
            assert callable(load_stage(name))
    assert get_pipeline("knowledge_search").stage_names() == [
        "chunk_search",
        "chunk_rerank",
        "chunk_merge",
        "filter_top_k",
    ]
    with pytest.raises(InputError, match="unknown pipeline"):
        get_pipeline("nope")
    with pytest.raises(InputError, match="unknown stage"):
        load_stage("nope")


def test_every_registered_stage_is_run_by_a_pipeline_or_declared_standalone() -> None:
    """The other direction: a stage registered but run by no pipeline is dead code (or half wired) unless
    ``STANDALONE_STAGES`` says why it is registered."""
    from ragstep.pipeline.definitions import STANDALONE_STAGES, STREAM_STAGES

    used = {name for pipe in PIPELINES.values() for name in pipe.stage_names()}
    assert set(STAGES) - used == set(STANDALONE_STAGES), "registered, but no pipeline runs them"
    assert set(STANDALONE_STAGES) <= set(STAGES) and used >= STREAM_STAGES


@pytest.fixture
def docs_kb(ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path) -> KnowledgeBase:
    kb = make_kb("docs")
    folder = tmp_path / "docs"
    folder.mkdir()
    texts = {
        "lambda.md": "AWS Lambda runs code without servers. Cold starts happen when a new environment starts.",
        "bm25.md": "BM25 ranks documents by term frequency and inverse document frequency.",
        "北京.md": "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
    }
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
        assert ingest_file(folder / name, kb, ctx).status == "indexed"
    return kb


def test_knowledge_search_runs_stages_in_order(ctx: Context, docs_kb: KnowledgeBase) -> None:
    state = knowledge_search(SearchRequest(query="cold start of a lambda", knowledge_base_ids=["docs"]), ctx)
    assert state.final_results[0].knowledge_filename == "lambda.md"
    runs = [t for t in state.trace if t.action == "run"]
    assert [t.stage for t in runs] == get_pipeline("knowledge_search").stage_names()  # one row per stage
    assert all(t.duration_ms >= 0 for t in runs)
    assert runs[0].counts["results"] == len(state.search_results)
    assert state.request.knowledge_base_ids == [docs_kb.id]  # names resolved to ids
    zh = knowledge_search(SearchRequest(query="中国的首都在哪里", knowledge_base_ids=[docs_kb.id]), ctx)
    assert zh.final_results[0].knowledge_filename == "北京.md"


def test_transport_check_gives_the_same_answer(ctx: Context, docs_kb: KnowledgeBase) -> None:
    request = SearchRequest(query="term frequency ranking", knowledge_base_ids=[docs_kb.id])
    direct = run_pipeline("knowledge_search", new_state(request, ctx), ctx)
    checked = run_pipeline("knowledge_search", new_state(request, ctx), ctx, check_transport=True)
    assert [r.id for r in checked.final_results] == [r.id for r in direct.final_results]
    assert checked.final_results == direct.final_results


def test_unknown_knowledge_base_fails_before_any_stage(ctx: Context, docs_kb: KnowledgeBase) -> None:
    # new_state resolves the knowledge bases once, up front: the message names only what was asked for.
    with pytest.raises(NotFoundError) as info:
        new_state(SearchRequest(query="q", knowledge_base_ids=["docs", "missing"]), ctx)
    assert info.value.message == "unknown knowledge base 'missing'"


def test_stage_errors_carry_the_failing_state(ctx: Context) -> None:
    # A state written by hand (a sample event) arrives unresolved; chunk_search resolves it, and fails there.
    state = PipelineState(request=SearchRequest(query="q", knowledge_base_ids=["missing"]))
    with pytest.raises(NotFoundError, match="unknown knowledge base 'missing'") as info:
        run_pipeline("knowledge_search", state, ctx)
    failed = info.value.state
    assert isinstance(failed, PipelineState)
    assert failed.error is not None and failed.error.stage == "chunk_search"


def test_join_keeps_best_score_and_all_trace_rows() -> None:
    base = PipelineState(request=SearchRequest(query="q", knowledge_base_ids=["kb"]), trace=[TraceEvent(stage="s0")])

    def res(cid: str, score: float) -> SearchResult:
        return SearchResult(id=cid, content=cid, knowledge_id="k", knowledge_base_id="kb", score=score)

    a = base.model_copy(
        update={
            "search_results": [res("x", 0.2), res("y", 0.9)],
            "trace": [*base.trace, TraceEvent(stage="a")],
            "query_embeddings": {"m1": [1.0]},
        }
    )
    b = base.model_copy(update={"search_results": [res("x", 0.5)], "trace": [*base.trace, TraceEvent(stage="b")]})
    joined = join_branches(base, [a, b])
    assert [(r.id, r.score) for r in joined.search_results] == [("y", 0.9), ("x", 0.5)]
    assert [t.stage for t in joined.trace] == ["s0", "a", "b"]
    assert joined.query_embeddings == {"m1": [1.0]}
