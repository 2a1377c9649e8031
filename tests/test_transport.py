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
    assert set(data["offloaded"]) == {"search_results"}  # the largest list goes first, and that was enough
    assert data["search_results"] == []
    assert data["final_results"]  # small lists stay inline
    key = data["offloaded"]["search_results"]
    assert key.startswith(f"state/{state.request_id}/") and blobs.exists(key)
    # the payload crosses the transport as JSON text
    restored = transport.decode(json.dumps(data), blobs)
    assert restored == state
    assert restored.offloaded == {}


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
    for field, key in [("search_results", "uploads/kb/secret.md"), ("request", "state/x/request.json")]:
        with pytest.raises(InputError, match="only search_results, rerank_results"):
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
