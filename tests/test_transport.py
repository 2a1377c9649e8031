"""The 256 KiB guard: oversized states are offloaded to the blob store and restored transparently."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ragstep.adapters.blobs.local import LocalBlobStore
from ragstep.errors import InputError, NotFoundError, StateTooLargeError
from ragstep.models import PipelineState, SearchRequest, SearchResult
from ragstep.pipeline import transport

LIMIT = 256 * 1024


def result(i: int, size: int) -> SearchResult:
    return SearchResult(id=f"c{i}", content="字" * size, knowledge_id="k", knowledge_base_id="kb", score=1 / (i + 1))


def state_with(n: int, size: int) -> PipelineState:
    rows = [result(i, size) for i in range(n)]
    return PipelineState(
        request=SearchRequest(query="q", knowledge_base_ids=["kb"]), search_results=rows, final_results=rows[:3]
    )


def encoded_size(data: dict) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode())


def test_small_state_passes_through_untouched(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    state = state_with(5, 100)
    data = transport.encode(state, blobs, LIMIT)
    assert data["offloaded"] == {}
    assert blobs.list() == []
    assert transport.decode(data, blobs) == state


def test_large_state_is_offloaded_and_restored(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    state = state_with(100, 1500)  # ~450 KB of UTF-8 in search_results
    assert encoded_size(state.model_dump(mode="json")) > LIMIT
    data = transport.encode(state, blobs, LIMIT)
    assert encoded_size(data) <= LIMIT
    # Each result is once in the wire form's table, the largest part: it goes, and that was enough.
    assert set(data["offloaded"]) == {"chunks"} and "chunks" not in data
    assert data["search_results"][:2] == [["c0", 1.0], ["c1", 0.5]]  # the lists of ids and scores stay inline
    assert [entry[0] for entry in data["final_results"]] == ["c0", "c1", "c2"]
    key = data["offloaded"]["chunks"]
    assert key.startswith(f"state/{state.request_id}/") and blobs.exists(key)
    assert len(json.loads(blobs.get(key))) == 100
    # the payload crosses the transport as JSON text
    restored = transport.decode(json.dumps(data), blobs)
    assert restored == state
    assert restored.offloaded == {}


def test_a_version_2_state_with_offloaded_result_lists_is_still_read(tmp_path: Path) -> None:
    """An execution in flight during the deploy: the previous version offloaded whole result lists."""
    blobs = LocalBlobStore(tmp_path)
    state = state_with(3, 10).model_copy(update={"final_results": None})
    listed = state.model_dump(mode="json")["search_results"]
    blobs.put("state/r/search_results-0.json", json.dumps(listed).encode())
    old = state.model_dump(mode="json") | {"schema_version": "2", "search_results": [], "final_results": []}
    old["offloaded"] = {"search_results": "state/r/search_results-0.json"}
    restored = transport.decode(old, blobs)
    assert restored.search_results == state.search_results and restored.final_results is None  # version 2: not run
    assert restored.schema_version == "3" and restored.offloaded == {}


def test_an_offloaded_table_is_read_only_through_the_transport(tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path)
    data = transport.encode(state_with(100, 1500), blobs, LIMIT)
    with pytest.raises(ValueError, match="results table is offloaded"):
        PipelineState.model_validate(data)


def test_state_that_cannot_fit_is_an_error(tmp_path: Path) -> None:
    state = PipelineState(request=SearchRequest(query="q" * 4000, knowledge_base_ids=["kb"] * 2000))
    with pytest.raises(StateTooLargeError, match="over the 4096-byte limit"):
        transport.encode(state, LocalBlobStore(tmp_path), 4096)


def test_without_blob_store_oversize_is_an_error() -> None:
    with pytest.raises(StateTooLargeError):
        transport.encode(state_with(100, 1500), None, LIMIT)


def test_a_reference_outside_the_offload_area_is_refused(tmp_path: Path) -> None:
    """A state names only its own offloaded result lists: never another blob (an upload, another state's field)."""
    blobs = LocalBlobStore(tmp_path)
    blobs.put("uploads/kb/secret.md", b"[]")
    base = state_with(1, 10).model_dump(mode="json")
    for field, key, message in [
        ("search_results", "uploads/kb/secret.md", "offloaded parts are under state/"),
        ("chunks", "uploads/kb/secret.md", "offloaded parts are under state/"),
        ("request", "state/x/request.json", "only search_results, rerank_results"),
    ]:
        with pytest.raises(InputError, match=message):
            transport.decode({**base, "offloaded": {field: key}}, blobs)


def test_decode_event_reads_offloaded_results_from_the_states_tenant(tmp_path: Path) -> None:
    stores = {tenant: LocalBlobStore(tmp_path / tenant) for tenant in ("default", "acme")}
    state = state_with(100, 1500).model_copy(update={"tenant_id": "acme"})
    payload = transport.encode_for_lambda(state, stores["acme"], LIMIT)
    assert payload["offloaded"] and transport.wire_size(payload) <= LIMIT
    assert transport.tenant_of(payload) == "acme"
    assert transport.decode_event(json.dumps(payload), stores.__getitem__) == state
    with pytest.raises(NotFoundError):  # the default tenant's store does not have them
        transport.decode_event({**payload, "tenant_id": "default"}, stores.__getitem__)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        pytest.param([1], "must be a pipeline state (a JSON object), not list", id="list"),
        pytest.param("{", "not a valid pipeline state", id="not-json"),
        pytest.param({"request_id": "x"}, "not a valid pipeline state: request: Field required", id="no-request"),
        pytest.param(
            {"tenant_id": "../x", "request": {"query": "q", "knowledge_base_ids": ["kb"]}}, "tenant id", id="tenant"
        ),
    ],
)
def test_decode_event_says_what_is_wrong_with_an_event(tmp_path: Path, event: object, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        transport.decode_event(event, lambda tenant: LocalBlobStore(tmp_path / tenant))


@pytest.mark.parametrize(("runtime", "escaped"), [("AWS_Lambda_python3.11", True), ("AWS_Lambda_python3.12", False)])
def test_wire_size_is_what_the_runtime_writes(runtime: str, escaped: bool) -> None:
    payload = {"q": "字"}
    size = transport.wire_size(payload, {"AWS_EXECUTION_ENV": runtime})
    assert size == len('{"q": "\\u5b57"}' if escaped else '{"q": "字"}'.encode())
