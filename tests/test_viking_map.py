"""OpenViking's retrieval as pipeline stages (issue 21): viking_intent -> the typed queries' Map (viking_query per
query) -> viking_merge -> viking_layered, in-process and as the viking state machine generates it: the Map state's
shape, each stage on its own (no queries, an unreadable plan, states that miss their part), the split stages against
the retrieval run in one go, and the Lambda functions chained as the Map state chains them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from ragstep.app.viking import refresh_hierarchy
from ragstep.context import Clients, Context
from ragstep.errors import InputError
from ragstep.models import ChatRequest, KnowledgeBase, PipelineState
from ragstep.models.viking import QueryPlan, TypedQuery, VikingPart
from ragstep.pipeline import Pipeline, asl, mapping, run_pipeline, run_stage, transport
from ragstep.pipeline.definitions import VIKING_RETRIEVAL, Map, get_pipeline, payload_limit
from ragstep.settings import Settings
from support.llm_server import LLMServer
from test_asl import EXPRESS_RETRIER, committed, task_order
from test_handlers import data_dir, invoke, load_event  # noqa: F401  (data_dir: the Lambda-like environment fixture)
from test_viking import DOCS, ROOT, Scripted, _llm_settings

RETRIEVAL = Pipeline("viking_retrieval", VIKING_RETRIEVAL, deployed=False)
MAP: Map = next(s for s in VIKING_RETRIEVAL if isinstance(s, Map))
QUESTION = "how long until a request gives up?"


def handbook(ctx: Context, folder: Path) -> KnowledgeBase:
    from ragstep.app.ingest import ingest_file
    from ragstep.app.knowledge_bases import create_knowledge_base

    kb = create_knowledge_base(ctx, "handbook", embedding_model="none", layers=True)
    for name, text in DOCS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
        assert ingest_file(folder / name, kb, ctx).status == "indexed"
    refresh_hierarchy(kb, ctx, [folder])
    return kb


def chat_state(ctx: Context, pipeline: str = "viking") -> PipelineState:
    from ragstep.app.chat import new_chat_state

    return new_chat_state(ChatRequest(query=QUESTION, knowledge_base_ids=["handbook"], pipeline=pipeline), ctx)


@pytest.fixture
def scripted(tmp_path: Path, plain_environment: None) -> Iterator[tuple[Context, Scripted]]:
    script = Scripted()
    with LLMServer(responder=script) as llm:
        ctx = Clients(_llm_settings(tmp_path / "data", llm)).context()
        handbook(ctx, tmp_path / "docs")
        yield ctx, script


def without_timing(state: PipelineState, stages: set[str]) -> list[dict[str, Any]]:
    return [t.model_dump(exclude={"duration_ms"}) for t in state.trace if t.stage in stages]


# -- the declaration and the state machine ---------------------------------------------------------------------


def test_the_viking_machine_runs_the_typed_queries_as_a_map_state() -> None:
    machine = committed(get_pipeline("viking"))
    assert task_order(machine) == get_pipeline("viking").stage_names()
    state = machine["States"]["typed_queries"]
    assert state["Type"] == "Map" and state["Next"] == "viking_merge"
    assert state["ItemsPath"] == "$.viking.plan.queries" and state["MaxConcurrency"] == 5
    assert state["ItemSelector"] == {"state.$": "$", "item.$": "$$.Map.Item.Value"}
    assert state["ResultPath"] == "$.viking.outcomes"
    assert state["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$", "Next": "typed_queries failed"}]
    processor = state["ItemProcessor"]
    assert processor["ProcessorConfig"] == {"Mode": "INLINE"} and processor["StartAt"] == "viking_query"
    query = processor["States"]["viking_query"]
    # The iteration's output is the outcome alone: the Map's output is its input plus at most 5 outcomes.
    assert query["OutputPath"] == "$.viking.outcome" and query["End"] is True
    assert query["Resource"] == "${VikingQueryFunctionArn}" and query["Retry"] == [EXPRESS_RETRIER]
    assert processor["States"][query["Catch"][0]["Next"]]["Type"] == "Fail"
    assert machine["States"]["viking_merge"]["Resource"] == "${VikingMergeFunctionArn}"
    assert asl.placeholders(get_pipeline("viking"))[:4] == [
        "VikingIntentFunctionArn",
        "VikingQueryFunctionArn",
        "VikingMergeFunctionArn",
        "VikingLayeredFunctionArn",
    ]


def test_the_map_shares_the_payload_quota_as_its_most_items() -> None:
    """The merge's input is the state and up to max_items outcomes, each cut from a state of one share."""
    quota = 256 * 1024
    share = payload_limit("viking", quota)
    assert (1 + MAP.max_items) * share + 2 * (1 + MAP.max_items) <= quota and share > quota // 7
    assert MAP.max_items == Settings.model_fields["viking_max_typed_queries"].metadata[-1].le


def test_the_streaming_pipeline_runs_the_same_stages_in_process() -> None:
    streamed = get_pipeline("viking_stream")
    assert not streamed.deployed
    assert streamed.stage_names()[1:5] == ["viking_intent", "viking_query", "viking_merge", "viking_layered"]
    assert get_pipeline("viking").stage_names()[:4] == streamed.stage_names()[1:5]


# -- in-process ---------------------------------------------------------------------------------------------------


def in_one_go(state: PipelineState, ctx: Context) -> PipelineState:
    """OpenViking's retrieval as one call (intent_analysis -> hierarchical_search -> layered_context on the viking
    state): what the split stages must add up to."""
    from ragstep.stages.viking import hierarchical_search, intent_analysis, layered_context
    from ragstep.stages.viking.common import laid_out, viking_state

    viking = viking_state(state, ctx)
    for stage in (intent_analysis, hierarchical_search, layered_context):
        viking = stage.run(viking, ctx)
    return state.with_results("final_results", laid_out(viking), *viking.trace)


def test_the_split_stages_give_what_the_retrieval_gives_in_one_go(scripted: tuple[Context, Scripted]) -> None:
    """Four typed queries (two resources, a skill and a memory, neither stored): the same results and the same viking
    rows as the retrieval run in one go, with the state crossing the wire between stages."""
    ctx, script = scripted
    script.plan = {
        "queries": [
            {"query": "request timeouts of the client", "context_type": "resource", "priority": 1},
            {"query": "proxy settings", "context_type": "resource", "priority": 2},
            {"query": "timeouts skill", "context_type": "skill"},
            {"query": "what the user prefers", "context_type": "memory"},
        ]
    }
    state = chat_state(ctx)
    split = run_pipeline(RETRIEVAL, state, ctx, check_transport=True)
    whole = in_one_go(state, ctx)
    assert split.final_results and split.final_results == whole.final_results
    viking_rows = {"intent_analysis", "hierarchical_search", "layered_context"}
    assert without_timing(split, viking_rows) == without_timing(whole, viking_rows)
    searched = [t for t in split.trace if t.stage == "hierarchical_search"]
    assert [t.detail["query"] for t in searched] == [q["query"] for q in script.plan["queries"]]
    assert [t.action for t in searched] == ["run", "run", "skip", "skip"]
    found = {r.metadata["viking_uri"] for r in split.final_results}
    assert {f"{ROOT}reference/api/client.md", f"{ROOT}guide/configure.md"} <= found  # one query each
    assert split.viking is not None and split.viking.outcomes == [] and split.viking.passages == {}
    assert split.viking.layered is not None and split.viking.layered.items


def test_no_typed_queries_retrieve_nothing(scripted: tuple[Context, Scripted]) -> None:
    ctx, script = scripted
    script.plan = {"queries": [], "reasoning": "a greeting"}
    state = run_pipeline(RETRIEVAL, chat_state(ctx), ctx)
    assert state.viking is not None and state.viking.plan is not None and state.viking.plan.queries == []
    assert state.viking.matches == [] and state.final_results == []
    (skip,) = [t for t in state.trace if t.stage == "hierarchical_search"]
    assert skip.action == "skip" and "no queries" in (skip.reason or "")
    assert next(t for t in state.trace if t.stage == "intent_analysis").reason == "no retrieval needed"


@pytest.mark.parametrize("answer", ["not json {", json.dumps({"queries": "everything"})])
def test_an_unreadable_plan_searches_the_question_as_asked(scripted: tuple[Context, Scripted], answer: str) -> None:
    ctx, script = scripted
    script.plan = answer
    state = run_pipeline(RETRIEVAL, chat_state(ctx), ctx)
    assert state.viking is not None and state.viking.plan is not None
    assert state.viking.plan.source == "fallback"
    assert [q.query for q in state.viking.plan.queries] == [QUESTION]
    assert state.final_results[0].metadata["viking_uri"] == f"{ROOT}reference/api/client.md"


def test_stages_refuse_states_without_their_part(tmp_path: Path, plain_environment: None) -> None:
    ctx = Clients(Settings(data_dir=tmp_path / "data")).context()
    handbook(ctx, tmp_path / "docs")
    state = chat_state(ctx)
    for stage in ("viking_query", "viking_merge", "viking_layered"):
        with pytest.raises(InputError, match=stage):
            run_stage(stage, state, ctx)
    planned = run_stage("viking_intent", state, ctx)
    with pytest.raises(InputError, match=r"viking\.query"):
        run_stage("viking_query", planned, ctx)
    with pytest.raises(InputError, match="0 outcomes for a plan of 1"):
        run_stage("viking_merge", planned, ctx)
    assert planned.viking is not None and planned.viking.plan is not None
    six = planned.viking.plan.model_copy(update={"queries": [TypedQuery(query=f"q{i}") for i in range(6)]})
    with pytest.raises(InputError, match="at most 5"):
        mapping.items_of(MAP, planned.model_copy(update={"viking": VikingPart(plan=six)}))
    with pytest.raises(InputError, match="query"):
        mapping.item_state(MAP, planned, {"query": "", "context_type": "resource"})
    with pytest.raises(InputError, match="viking"):
        mapping.item_state(MAP, state, {"query": "timeouts"})


# -- the Lambda functions, as the Map state chains them -------------------------------------------------------------


@pytest.fixture
def demo_trees(data_dir: Path) -> Context:  # noqa: F811  (the fixture imported above)
    """The knowledge base the viking sample events name, ingested with layers from the bundled demo documents."""
    ctx = Clients(Settings(data_dir=data_dir)).context()
    event = PipelineState.model_validate(load_event("viking_intent"))
    kb = KnowledgeBase(id=event.knowledge_bases[0].id, name="demo-docs", created_at=time.time(), layers=True)
    ctx.catalog.create_kb(kb)
    from ragstep.app.ingest import ingest_file

    with resources.as_file(resources.files("ragstep").joinpath("data", "demo", "docs")) as folder:
        for path in sorted(folder.glob("*.md")):
            assert ingest_file(path, kb, ctx).status == "indexed"
        refresh_hierarchy(kb, ctx, [folder])
    return ctx


def test_each_viking_function_runs_its_sample_event(demo_trees: Context) -> None:
    query = invoke("viking_query", load_event("viking_query"))
    assert query["viking"]["outcome"]["matches"] and query["viking"]["query"] is not None
    merged = invoke("viking_merge", load_event("viking_merge"))
    assert merged["viking"]["matches"] and merged["viking"]["outcomes"] == []
    layered = PipelineState.model_validate(invoke("viking_layered", load_event("viking_layered")))
    assert layered.final_results and layered.final_results[0].metadata["layer"] in ("L0", "L1", "L2")


def test_the_functions_chained_as_the_map_state_chains_them_give_the_in_process_state(
    demo_trees: Context,
) -> None:
    """What the viking machine does: viking_intent, then per typed query the Map's ItemSelector {state, item} to
    viking_query and the item's OutputPath, the outcomes at the Map's ResultPath, then viking_merge and viking_layered
    on their functions; the same state as the in-process executor, every payload within its share of the quota."""
    definition = committed(get_pipeline("viking"))["States"]["typed_queries"]
    event = load_event("viking_intent")
    limit = payload_limit("viking", demo_trees.settings.state_limit_bytes)
    planned = invoke("viking_intent", event)

    def at(data: Any, path: str) -> Any:
        for part in path.removeprefix("$.").split("."):
            data = data[part]
        return data

    outcomes = []
    for item in at(planned, definition["ItemsPath"]):
        out = invoke("viking_query", {"state": planned, "item": item})
        outcomes.append(at(out, definition["ItemProcessor"]["States"]["viking_query"]["OutputPath"]))
    assert outcomes and all(transport.wire_size(o) <= limit for o in outcomes)
    after_map = json.loads(json.dumps(planned))
    at(after_map, "$.viking")["outcomes"] = outcomes  # ResultPath $.viking.outcomes
    assert definition["ResultPath"] == "$.viking.outcomes"
    laid = invoke("viking_layered", invoke("viking_merge", after_map))
    assert transport.wire_size(laid) <= limit

    local = run_pipeline(RETRIEVAL, PipelineState.model_validate(event), demo_trees)
    remote: PipelineState = transport.decode(laid, demo_trees.blobs)
    assert remote.final_results and remote.final_results == local.final_results
    assert remote.viking == local.viking
    assert [(t.stage, t.action) for t in remote.trace] == [(t.stage, t.action) for t in local.trace]


def test_viking_query_takes_the_map_item_or_a_state_that_holds_it(demo_trees: Context) -> None:
    plain = load_event("viking_query")
    wrapped_state = json.loads(json.dumps(plain))
    item = wrapped_state["viking"].pop("query")
    wrapped_state["viking"]["query"] = None
    a = invoke("viking_query", plain)
    b = invoke("viking_query", {"state": wrapped_state, "item": item})
    assert a["viking"]["outcome"]["matches"] == b["viking"]["outcome"]["matches"]
    with pytest.raises(InputError, match=r"viking\.query"):
        invoke("viking_query", wrapped_state)


def test_a_plan_in_the_state_is_plain_json() -> None:
    plan = QueryPlan(queries=[TypedQuery(query="timeouts", context_type="skill")], source="llm")
    state = PipelineState.model_validate(load_event("viking_intent")).model_copy(
        update={"viking": VikingPart(plan=plan)}
    )
    assert PipelineState.model_validate_json(state.model_dump_json()) == state


def test_a_query_keeps_only_the_passages_the_layers_can_use() -> None:
    """Passages past the budget are never laid out (select_layers stops at the first that overruns): left out of the
    outcome, so each Map item stays small, and the layered context is the same with or without them."""
    from ragstep.retrieval.hierarchy import LayerCandidate, select_layers
    from ragstep.retrieval.tokens import count_tokens
    from ragstep.stages.viking.viking_query import usable

    passages = [f"passage {i} " + "about request timeouts " * 20 for i in range(12)]
    kept = usable(passages, 200)
    assert 0 < len(kept) < len(passages) and kept == passages[: len(kept)]
    cost = sum(count_tokens(p) for p in kept) + len(kept) - 1
    assert cost <= 200 < cost + 1 + count_tokens(passages[len(kept)])
    assert usable(passages, None) == passages
    for budget in (50, 200, 1000):
        full = LayerCandidate(uri="u", score=1.0, abstract="client timeouts", overview="", passages=tuple(passages))
        cut = LayerCandidate(
            uri="u", score=1.0, abstract="client timeouts", overview="", passages=tuple(usable(passages, budget))
        )
        assert select_layers([full], budget, l1_top=3, l2_top=1) == select_layers([cut], budget, l1_top=3, l2_top=1)
