"""Moving the state across a size-limited transport (Step Functions: 256 KiB per payload).

:func:`encode` is the one place the limit is enforced: when the JSON would exceed it, the largest result lists are
written to the blob store and replaced by a reference (the claim-check pattern); :func:`decode` puts them back.
Handlers call both, so stages never see a reference.

Both work for any state model: the query pipeline's :class:`~ragstep.models.PipelineState` (the default) and the
ingest pipeline's :class:`~ragstep.models.IngestState`, which has nothing to offload (its stages keep their products
in the blob store themselves), so for it the limit is only checked.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, TypeVar

from pydantic import BaseModel

from ragstep.errors import StateTooLargeError
from ragstep.models import DEFAULT_TENANT, RESULT_FIELDS, PipelineState, SearchResult
from ragstep.ports import BlobStore

StateT = TypeVar("StateT", bound=BaseModel)

# Every offloadable field is a list[SearchResult]: the state's result lists.
OFFLOADABLE = RESULT_FIELDS
OFFLOAD_PREFIX = "state/"


def tenant_of(payload: dict[str, Any] | str | bytes) -> str:
    """The tenant a wire state belongs to (read before decoding: its offloaded results are in that tenant's store)."""
    try:
        data = json.loads(payload) if isinstance(payload, (str, bytes)) else payload
    except ValueError:
        return DEFAULT_TENANT  # not JSON: decoding it says so
    tenant = data.get("tenant_id", DEFAULT_TENANT) if isinstance(data, dict) else DEFAULT_TENANT
    return tenant if isinstance(tenant, str) else DEFAULT_TENANT


def _size(data: dict[str, Any]) -> int:
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def encode(state: BaseModel, blobs: BlobStore | None, limit: int) -> dict[str, Any]:
    """The state as a JSON-ready dict no larger than ``limit`` bytes, offloading result lists when needed."""
    data = state.model_dump(mode="json")
    if _size(data) <= limit:
        return data
    fields = sorted((f for f in OFFLOADABLE if data.get(f)), key=lambda f: -_size({f: data[f]}))
    for name in fields:
        if blobs is None:
            break
        body = json.dumps(data[name], ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        digest = hashlib.sha256(body).hexdigest()[:16]
        key = f"{OFFLOAD_PREFIX}{data['request_id']}/{name}-{digest}.json"
        blobs.put(key, body, "application/json")
        data[name] = []
        data["offloaded"][name] = key
        if _size(data) <= limit:
            return data
    if "offloaded" not in data:  # a state with nothing to offload (IngestState keeps its products in blobs)
        raise StateTooLargeError(
            f"{data.get('pipeline', 'pipeline')} state is {_size(data)} bytes, over the {limit}-byte limit"
        )
    raise StateTooLargeError(
        f"pipeline state is {_size(data)} bytes after offloading results, over the {limit}-byte limit; "
        "shorten the query or lower embedding_top_k"
    )


def decode(
    payload: dict[str, Any] | str | bytes,
    blobs: BlobStore | None,
    model: type[StateT] = PipelineState,  # type: ignore[assignment]
) -> StateT:
    """Validate a state of type ``model`` and load any offloaded result lists back into it."""
    state = model.model_validate_json(payload) if isinstance(payload, (str, bytes)) else model.model_validate(payload)
    if not getattr(state, "offloaded", None):
        return state
    if blobs is None:
        raise StateTooLargeError("state references offloaded results but no blob store is configured")
    restored: dict[str, Any] = {"offloaded": {}}
    for name, key in state.offloaded.items():  # type: ignore[attr-defined]
        items = json.loads(blobs.get(key))
        restored[name] = [SearchResult.model_validate(i) for i in items]
    return state.model_copy(update=restored)
