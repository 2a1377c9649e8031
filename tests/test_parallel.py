"""Parallel steps: rag_stream's branches ([rewrite_query || extract_entities], [chunk_search || entity_search]) and
their join -- the same state in-process and through the ``join`` Lambda handler, nested parts joined field by
field, conflicting branches refused, the joined state carried through the transport rules."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ragstep.app.chat import new_chat_state
from ragstep.app.ingest import ingest_file
from ragstep.app.knowledge_bases import create_knowledge_base
from ragstep.context import Clients, Context
from ragstep.entry.aws import runtime
from ragstep.entry.aws.stage import join_handler
from ragstep.models import ChatRequest, MatchType, PipelineState
from ragstep.models.graph import GraphExtraction, GraphNode, GraphRelation
from ragstep.models.wire import WIRE
from ragstep.pipeline import get_pipeline, run_pipeline, run_stage
from ragstep.pipeline.definitions import Parallel, Pipeline, Stage
from ragstep.pipeline.join import BranchConflictError, join_branches
from ragstep.settings import Settings

#: What the Python runtime passes a handler (the attributes Powertools reads).
LAMBDA_CONTEXT = SimpleNamespace(
    function_name="ragstep-join",
    memory_limit_in_mb=1024,
    invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:ragstep-join",
    aws_request_id="00000000-0000-0000-0000-000000000000",
    function_version="$LATEST",
    log_group_name="/aws/lambda/ragstep-join",
    log_stream_name="2025/11/20/[$LATEST]0123456789abcdef",
    get_remaining_time_in_millis=lambda: 30_000,
)
DOCS = {
    "bridge.md": "Maria Vass designed the Orinoco Bridge, which links Ciudad Bolivar to Soledad.",
    "career.md": "She was educated in Caracas and retired in 1990 after forty years of practice.",
}


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Context]:
    """A graph knowledge base with two documents and their graph, in a Lambda-like environment (the join handler
    builds its clients from the environment)."""
    for name in [k for k in os.environ if k.startswith(("RAGSTEP_", "POWERTOOLS_", "AWS_LAMBDA_"))]:
        monkeypatch.delenv(name)
    data = tmp_path / "data"
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(data))
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "ragstep-test")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "ragstep-test")
    runtime.reset()
    runtime.logger().registered_handler.stream = sys.stdout
    context = Clients(Settings(data_dir=data)).context()
    kb = create_knowledge_base(context, "people", embedding_model="none", graph=True)
    folder = tmp_path / "docs"
    folder.mkdir()
    chunk_of: dict[str, str] = {}
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
        ingested = ingest_file(folder / name, kb, context)
        chunk_of[name] = context.index.knowledge_chunks(ingested.knowledge_id, 1)[0].id
        # What the chat model would extract at ingest (the extractive default skips it): written as ingest_graph does.
    context.graph.replace_knowledge(
        kb.id, "k-bridge", GraphExtraction(
            nodes=[GraphNode(name="Maria Vass", chunk_ids=[chunk_of["bridge.md"]]),
                   GraphNode(name="Orinoco Bridge", chunk_ids=[chunk_of["bridge.md"]])],
            relations=[GraphRelation(source="Maria Vass", target="Orinoco Bridge", type="designed")],
        ),
    )  # fmt: skip
    context.graph.replace_knowledge(
        kb.id, "k-career", GraphExtraction(nodes=[GraphNode(name="Maria Vass", chunk_ids=[chunk_of["career.md"]])])
    )
    yield context
    runtime.reset()


def _base(ctx: Context, query: str = "What do we know about Maria Vass?") -> PipelineState:
    state = new_chat_state(ChatRequest(query=query, knowledge_base_ids=["people"]), ctx)
    return run_stage("load_history", state, ctx).with_entities(["Maria Vass"])


def _step(name: str) -> Parallel:
    return next(s for s in get_pipeline("rag_stream").steps if isinstance(s, Parallel) and s.name == name)


def _without_timings(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "trace": [{**t, "duration_ms": 0.0} for t in data["trace"]]}


def test_rag_stream_declares_both_parallel_steps() -> None:
    steps = get_pipeline("rag_stream").steps
    assert [s.name for s in steps[:3]] == ["load_history", "understand_query", "search"]
    assert _step("understand_query").branches == ((Stage("rewrite_query"),), (Stage("extract_entities"),))
    assert _step("search").branches == ((Stage("chunk_search"),), (Stage("entity_search"),))


def test_the_join_is_the_same_in_process_and_through_the_join_handler(ctx: Context) -> None:
    base = _base(ctx)
    in_process = run_pipeline(Pipeline("search_only", (_step("search"),), deployed=False), base, ctx)
    # Step Functions: each branch on its own Lambda, then the join task gets [input, branch 1, branch 2].
    branches = [run_stage("chunk_search", base, ctx), run_stage("entity_search", base, ctx)]
    event = [json.loads(s.model_dump_json()) for s in (base, *branches)]
    joined = join_handler(event, LAMBDA_CONTEXT)
    assert _without_timings(joined) == _without_timings(in_process.model_dump(mode="json", context=WIRE))
    assert joined == join_branches(base, branches).model_dump(mode="json", context=WIRE)
    # Both branches' results, each chunk once at its best score: the bridge chunk was found by both.
    kinds = {r.content: r.match_type for r in in_process.search_results}
    assert kinds[DOCS["career.md"]] == MatchType.GRAPH and len(kinds) == 2
    assert [t.stage for t in in_process.trace[len(base.trace) :]][:2] == ["chunk_search", "chunk_search"]


def test_nested_parts_join_field_by_field_and_conflicts_are_refused(ctx: Context) -> None:
    base = _base(ctx).with_entities([])
    rewritten = base.with_rewritten_query("Who is Maria Vass?")
    entities = base.with_entities(["Maria Vass"])
    chat_a = base.with_chat(base.chat.model_copy(update={"model": "a"}))
    joined = join_branches(base, [rewritten, entities, chat_a])
    assert joined.rewritten_query == "Who is Maria Vass?" and joined.entities == ["Maria Vass"]
    assert joined.chat.model == "a" and joined.chat.settings == base.chat.settings
    with pytest.raises(BranchConflictError, match="rewritten_query"):
        join_branches(base, [rewritten, base.with_rewritten_query("Who?")])
    with pytest.raises(BranchConflictError, match=r"chat\.model"):
        join_branches(base, [chat_a, base.with_chat(base.chat.model_copy(update={"model": "b"}))])


def test_the_joined_state_crosses_the_transport_like_any_other(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> None:
    base = _base(ctx)
    pipeline = Pipeline("parallel_search", (_step("understand_query"), _step("search")), deployed=False)
    plain = run_pipeline(pipeline, base, ctx)
    checked = run_pipeline(pipeline, base, ctx, check_transport=True)
    assert [r.id for r in checked.search_results] == [r.id for r in plain.search_results]
    assert checked.entities == plain.entities == ["Maria Vass"]
    stages = [t.stage for t in plain.trace[len(base.trace) :] if t.action == "run"]
    assert sorted(stages) == sorted(["rewrite_query", "extract_entities", "chunk_search", "entity_search"])
