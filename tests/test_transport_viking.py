"""The claim check for the viking part of the state (issue 21): its matches, passages and layers, and each typed
query's outcome, go to the blob store when the state outgrows its share of the Step Functions quota, and come back
on decode. An outcome keeps its own references, since a Map iteration returns the outcome alone (its ``OutputPath``)
and the merge receives the outcomes the Map assembled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragstep.adapters.blobs.local import LocalBlobStore
from ragstep.context import Context
from ragstep.entry.aws import runtime
from ragstep.errors import InputError, StateTooLargeError
from ragstep.models import PipelineState, SearchRequest, SearchResult
from ragstep.models.viking import (
    LayeredContext,
    LayeredItem,
    MatchedContext,
    QueryPlan,
    TypedQuery,
    TypedQueryOutcome,
    VikingPart,
)
from ragstep.pipeline import Pipeline, run_pipeline, transport
from ragstep.pipeline.definitions import VIKING_RETRIEVAL, payload_limit
from test_handlers import data_dir, invoke, load_event  # noqa: F401  (data_dir: the Lambda-like environment fixture)
from test_viking_map import demo_trees  # noqa: F401  (the demo knowledge base ingested with layers)

QUOTA = 256 * 1024
SHARE = payload_limit("viking", QUOTA)
QUERIES = [TypedQuery(query=f"typed query {i}", priority=i + 1) for i in range(5)]


def match(i: int, size: int) -> MatchedContext:
    uri = f"ragstep://kb/guide/doc-{i}.md"
    return MatchedContext(uri=uri, is_leaf=True, abstract="检" * size, score=1 / (i + 1), knowledge_id=f"k{i}")


def outcome(seed: int, n: int, size: int) -> TypedQueryOutcome:
    matches = [match(seed * 100 + i, size) for i in range(n)]
    return TypedQueryOutcome(matches=matches, passages={m.uri: ["段" * size, "落" * size] for m in matches})


def viking_state(part: VikingPart, **fields: Any) -> PipelineState:
    request = SearchRequest(query="how are results fused?", knowledge_base_ids=["kb"])
    return PipelineState(pipeline="viking", request=request, viking=part, **fields)


def test_a_large_viking_part_is_offloaded_and_restored(tmp_path: Path) -> None:
    """The largest fields go first, whichever part of the state holds them; small ones stay inline."""
    blobs = LocalBlobStore(tmp_path)
    merged = outcome(0, 40, 300)  # ~36 KB of matches, ~72 KB of passages
    items = [LayeredItem(uri=m.uri, layer="L2", text="层" * 500, tokens=500, score=m.score) for m in merged.matches]
    part = VikingPart(
        plan=QueryPlan(queries=QUERIES[:2], source="llm"),
        matches=merged.matches,
        passages=merged.passages,
        layered=LayeredContext(budget=20_000, used=20_000, items=items),  # ~60 KB
    )
    results = [SearchResult(id=f"c{i}", content="果" * 100, knowledge_id="k", knowledge_base_id="kb") for i in range(3)]
    state = viking_state(part, final_results=results)
    assert transport.compact_size(state.model_dump(mode="json")) > 150_000
    data = transport.encode(state, blobs, 60_000)
    assert transport.compact_size(data) <= 60_000
    # passages (72 KB) then layered (60 KB) were enough: the matches and the small result list stay inline.
    assert transport.offloaded_fields(data) == ["viking.passages", "viking.layered"]
    assert data["viking"]["passages"] == {} and data["viking"]["layered"] is None
    assert data["offloaded"] == {} and data["final_results"] and data["viking"]["matches"]
    for key in data["viking"]["offloaded"].values():
        assert key.startswith(f"state/{state.request_id}/viking.") and blobs.exists(key)
    restored: PipelineState = transport.decode(json.dumps(data), blobs)
    assert restored == state
    assert restored.viking is not None and restored.viking.offloaded == {}


def test_map_outcomes_carry_their_own_claim_checks(tmp_path: Path) -> None:
    """Five iterations, each over its share with its outcome: each outcome, cut out of its iteration's state as the
    Map's OutputPath does, holds its references; the Map's output (its input and the five outcomes) fits the quota,
    and the merge's decode reads every outcome back."""
    blobs = LocalBlobStore(tmp_path)
    started = viking_state(VikingPart(plan=QueryPlan(queries=QUERIES, source="llm")))
    map_input = transport.encode_for_lambda(started, blobs, SHARE)
    part = started.viking
    assert part is not None
    originals, cuts = [], []
    for i, query in enumerate(QUERIES):
        found = outcome(i, 30, 400)  # ~110 KB as Lambda sends it, over the ~37 KB share
        item = started.model_copy(update={"viking": part.model_copy(update={"query": query, "outcome": found})})
        assert transport.wire_size(item.model_dump(mode="json")) > SHARE
        payload = transport.encode_for_lambda(item, blobs, SHARE)
        assert transport.wire_size(payload) <= SHARE
        # The claim check is in the outcome itself: the state's and the part's references would be cut away.
        assert payload["offloaded"] == {} and payload["viking"]["offloaded"] == {}
        assert set(payload["viking"]["outcome"]["offloaded"]) <= {"matches", "passages"}
        originals.append(found)
        cuts.append(payload["viking"]["outcome"])  # OutputPath $.viking.outcome
    map_output = json.loads(json.dumps(map_input))
    map_output["viking"]["outcomes"] = cuts  # ResultPath $.viking.outcomes
    assert transport.wire_size(map_output) <= QUOTA
    assert "viking.outcomes.4.passages" in transport.offloaded_fields(map_output)
    merged_input: PipelineState = transport.decode_event(map_output, lambda tenant: blobs)
    assert merged_input.viking is not None and merged_input.viking.outcomes == originals


def test_only_declared_fields_under_the_offload_area_are_read_back(tmp_path: Path) -> None:
    """A viking part or an outcome names only its own offloadable fields, under state/: never another blob."""
    blobs = LocalBlobStore(tmp_path)
    blobs.put("uploads/kb/secret.md", b"[]")
    blobs.put("state/x/plan.json", b"{}")
    base = viking_state(VikingPart(plan=QueryPlan(queries=QUERIES[:1]), outcomes=[TypedQueryOutcome()]))
    data = base.model_dump(mode="json")
    bad_part = json.loads(json.dumps(data))
    bad_part["viking"]["offloaded"] = {"plan": "state/x/plan.json"}
    with pytest.raises(InputError, match=r"only viking\.matches, viking\.passages, viking\.layered are offloaded"):
        transport.decode(bad_part, blobs)
    bad_outcome = json.loads(json.dumps(data))
    bad_outcome["viking"]["outcomes"][0]["offloaded"] = {"matches": "uploads/kb/secret.md"}
    with pytest.raises(InputError, match=r"viking\.outcomes\.0\.matches -> 'uploads/kb/secret\.md'"):
        transport.decode_event(bad_outcome, lambda tenant: blobs)
    with pytest.raises(StateTooLargeError, match="no blob store"):
        transport.decode(bad_outcome, None)


def test_a_viking_part_over_the_limit_without_a_blob_store_is_an_error() -> None:
    state = viking_state(VikingPart(matches=outcome(0, 30, 400).matches))
    with pytest.raises(StateTooLargeError, match="no blob store is configured"):
        transport.encode(state, None, SHARE)


# -- the Lambda functions, as the viking machine chains them, under a small quota ---------------------------------


def test_the_viking_functions_offload_what_outgrows_a_small_quota(
    demo_trees: Context,  # noqa: F811  (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five typed queries over the demo documents with a quota whose share (7000 bytes as Lambda sends it) is under
    each iteration's state and the merged state (though over what cannot be offloaded: the request, the plan, five
    search rows in the trace): every function offloads, the Map's output of five cut outcomes fits the quota, and the
    answer is the in-process executor's."""
    quota = 6 * 7000 + 2 * 6
    monkeypatch.setenv("RAGSTEP_STATE_LIMIT_BYTES", str(quota))
    runtime.reset()
    share = payload_limit("viking", quota)
    assert share == 7000
    planned = invoke("viking_intent", load_event("viking_intent"))
    questions = [
        "How are keyword and vector results fused?",
        "hybrid search score fusion",
        "混合检索 向量 关键词 融合",
        "Lambda cold start and provisioned concurrency",
        "How is the service deployed on AWS?",
    ]
    planned["viking"]["plan"]["queries"] = [TypedQuery(query=q).model_dump(mode="json") for q in questions]
    assert transport.wire_size(planned) <= share

    outcomes = []
    for item in planned["viking"]["plan"]["queries"]:
        out = invoke("viking_query", {"state": planned, "item": item})  # the Map's ItemSelector
        assert transport.wire_size(out) <= share
        outcomes.append(out["viking"]["outcome"])  # the iteration's OutputPath
    assert all(o["offloaded"] for o in outcomes), "every outcome must outgrow the share for this test"
    after_map = json.loads(json.dumps(planned))
    after_map["viking"]["outcomes"] = outcomes  # the Map's ResultPath
    assert transport.wire_size(after_map) <= quota

    merged = invoke("viking_merge", after_map)
    assert transport.wire_size(merged) <= share and merged["viking"]["outcomes"] == []
    assert {"viking.matches", "viking.passages"} & set(transport.offloaded_fields(merged))
    laid = invoke("viking_layered", merged)
    assert transport.wire_size(laid) <= share and transport.offloaded_fields(laid)

    local = run_pipeline(
        Pipeline("typed_queries_on", VIKING_RETRIEVAL[1:], deployed=False),
        PipelineState.model_validate(planned),
        demo_trees,
    )
    remote: PipelineState = transport.decode(laid, demo_trees.blobs)
    assert remote.final_results and remote.final_results == local.final_results
    assert remote.viking == local.viking
    assert [(t.stage, t.action) for t in remote.trace] == [(t.stage, t.action) for t in local.trace]


def test_viking_merge_refuses_an_outcome_that_names_another_blob(demo_trees: Context) -> None:  # noqa: F811
    event = load_event("viking_merge")
    event["viking"]["outcomes"][0]["offloaded"] = {"passages": "uploads/demo-docs/hybrid-search.md"}
    with pytest.raises(InputError, match=r"viking\.outcomes\.0\.passages"):
        invoke("viking_merge", event)
