"""The 256 KiB guard: oversized states are offloaded to the blob store and restored transparently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragstep.adapters.blobs.local import LocalBlobStore
from ragstep.errors import StateTooLargeError
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
