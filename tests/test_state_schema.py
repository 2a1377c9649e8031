"""The state contract is versioned: the JSON schemas of the states the stages hand each other are committed
(``tests/data/state_schemas.json``), and a change to either schema without a new ``schema_version`` fails here.

A state machine execution may be in flight while a deploy replaces its functions, so a stage can receive a state
written by the previous version. A new stage reads the previous version's states (every field it added has a
default; ``schema_version`` accepts the previous value); an old stage refuses a newer state (``extra="forbid"``)
with a validation error, and the request fails rather than being misread. Regenerate the snapshot after bumping the
version: ``python tests/test_state_schema.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).resolve().parent / "data" / "state_schemas.json"


def current() -> dict[str, Any]:
    from ragstep.models import INGEST_SCHEMA_VERSION, SCHEMA_VERSION, IngestState, PipelineState
    from ragstep.models.wire import WIRE_SCHEMA

    return {
        "PipelineState": {"version": SCHEMA_VERSION, "schema": PipelineState.model_json_schema()},
        "PipelineState on the wire": {"version": SCHEMA_VERSION, "schema": WIRE_SCHEMA},
        "IngestState": {"version": INGEST_SCHEMA_VERSION, "schema": IngestState.model_json_schema()},
    }


def test_a_schema_change_comes_with_a_new_version() -> None:
    committed = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    for name, now in current().items():
        before = committed.get(name, {"version": None, "schema": None})
        if now["schema"] != before["schema"]:
            assert now["version"] != before["version"], (
                f"{name}'s schema changed but its schema_version is still {now['version']!r}: bump it "
                "(ragstep.models) and regenerate the snapshot with `python tests/test_state_schema.py`"
            )
        else:
            assert now["version"] == before["version"], f"{name}: a new version without a schema change"


def test_a_state_of_the_previous_versions_is_still_read() -> None:
    from ragstep.models import PipelineState

    old = {"schema_version": "1", "request": {"query": "cold starts", "knowledge_base_ids": ["kb"]}}
    state = PipelineState.model_validate(old)
    assert state.schema_version == "3" and state.profile == "standard"
    # Version 2 wrote every list in full, [] for a stage that had not run as for one that kept nothing, and read []
    # as "not run": so is its state read.
    result = {"id": "c1", "content": "x", "knowledge_id": "k", "knowledge_base_id": "kb", "score": 0.5}
    v2 = {
        **old,
        "schema_version": "2",
        "search_results": [result],
        "rerank_results": [],
        "query_embeddings": {"m": [0.5]},
    }
    state = PipelineState.model_validate(v2)
    assert state.search_results and state.search_results[0].id == "c1" and state.rerank_results is None
    assert state.final_results is None and state.query_embeddings == {"m": [0.5]}


def test_the_wire_form_round_trips_every_list_and_vector_exactly() -> None:
    """Each result once (the rerank's copy and the merge's stitched one as their changes), ``None`` and ``[]`` kept
    apart, vectors exact (float32 values as f32, others as f64), and the answer's references from the same table."""
    import json

    from ragstep.models import PipelineState, SearchRequest, SearchResult
    from ragstep.models.chat import ChatState, Reference
    from ragstep.models.wire import WIRE

    found = [
        SearchResult(id=f"c{i}", content=f"passage {i} " * 40, knowledge_id="k", knowledge_base_id="kb", score=i / 7)
        for i in range(6)
    ]
    reranked = [r.rescored(0.9 - i / 10, metadata={"rerank": {"model": 0.8}}) for i, r in enumerate(found[:3])]
    merged = [reranked[0].with_content(found[0].content + found[1].content), reranked[2]]
    references = [Reference(**merged[0].model_dump(), cited=True, positions=[3, 9])]
    passages = [f"{merged[0].knowledge_title}\n{merged[0].content}", "short"]
    message = f"Answer from these.\n[1] {passages[0]}\n[2] {passages[1]}\nQuestion: q"
    state = (
        PipelineState(request=SearchRequest(query="q", knowledge_base_ids=["kb"]))
        .with_results("search_results", found, query_embeddings={"f32": [0.5, -0.25], "f64": [0.1, 1 / 3]})
        .with_results("rerank_results", reranked)
        .with_results("merge_results", merged)
        .with_chat(ChatState(references=references, passages=passages, user_content=message))
    )
    wire = state.model_dump(mode="json", context=WIRE)
    assert sorted(wire["chunks"]) == [f"c{i}" for i in range(6)] and "final_results" not in wire  # None: left out
    assert wire["query_embeddings"]["f32"].startswith("f32:") and wire["query_embeddings"]["f64"].startswith("f64:")
    assert all(len(entry) == 2 for entry in wire["search_results"])
    assert wire["rerank_results"][0][2] == {"+metadata": {"rerank": {"model": 0.8}}}
    assert wire["merge_results"][0][2]["content"] == {"before": "", "after": found[1].content}  # stitched on
    assert wire["chat"]["user_content"] == {
        "with_passages": "Answer from these.\n[1] \x000\x00\n[2] short\nQuestion: q"
    }
    assert "tag_id" not in wire["chunks"]["c0"]  # fields at their defaults are left out
    # the passage is its reference's text with what into_chat_message put around it
    assert wire["chat"]["passages"] == [{"reference": 0, "before": "\n", "after": ""}, "short"]
    back = PipelineState.model_validate_json(json.dumps(wire))
    assert back == state and back.final_results is None and back.chat.references == references
    assert back.chat.user_content == message
    # The wire form leaves null fields out: so each of them must default to None.
    nullable = [n for n, f in PipelineState.model_fields.items() if f.is_required() is False and f.default is None]
    assert {"final_results", "error", "viking"} <= set(nullable)
    assert all(getattr(PipelineState.model_construct(), n) is None for n in nullable)
    for name in state.model_dump(mode="json"):
        if state.model_dump(mode="json")[name] is None:
            assert name in nullable, f"{name} is null but does not default to None"
    # found[2]'s text is in three lists: once on the wire
    assert json.dumps(state.model_dump(mode="json")).count(found[2].content) == 3
    assert json.dumps(wire).count(found[2].content) == 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shared"))
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
