"""Moving the state across a size-limited transport (Step Functions: 256 KiB per payload): all state-size logic.

:func:`encode` is the one place the limit is enforced: when the JSON would exceed it, the largest result lists are
written to the blob store and replaced by a reference (the claim-check pattern); :func:`decode` puts them back.
Entry points call both, so stages never see a reference:

* the in-process executor and :mod:`ragstep.pipeline.remote` measure compact UTF-8 JSON (what they send);
* a Lambda handler returns its state through the runtime's own JSON encoder, which writes larger JSON (and, before
  python3.12, escapes every non-ASCII character), so it encodes with :func:`encode_for_lambda`, which measures
  :func:`wire_size`, and decodes its event with :func:`decode_event`, which turns a bad event into an
  :class:`~ragstep.errors.InputError` and reads offloaded results from the state's own tenant's blob store.

Both work for any state model: the query pipeline's :class:`~ragstep.models.PipelineState` (the default) and the
ingest pipeline's :class:`~ragstep.models.IngestState`, which has nothing to offload (its stages keep their products
in the blob store themselves), so for it the limit is only checked.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ragstep.errors import InputError, StateTooLargeError
from ragstep.models import DEFAULT_TENANT, RESULT_FIELDS, PipelineState, SearchResult, check_tenant
from ragstep.ports import BlobStore

StateT = TypeVar("StateT", bound=BaseModel)
Size = Callable[[dict[str, Any]], int]

# Every offloadable field is a list[SearchResult]: the state's result lists.
OFFLOADABLE = RESULT_FIELDS
OFFLOAD_PREFIX = "state/"
# Runtimes whose interface client writes non-ASCII characters as they are (awslambdaric checks AWS_EXECUTION_ENV);
# every other runtime, and any place off Lambda, is measured in the larger escaped form.
UNESCAPED_RUNTIMES = frozenset({"AWS_Lambda_python3.12", "AWS_Lambda_python3.13"})


def compact_size(data: dict[str, Any]) -> int:
    """Bytes of ``data`` as compact UTF-8 JSON: what the executors send to Step Functions."""
    return len(json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def wire_size(payload: dict[str, Any], environ: Mapping[str, str] | None = None) -> int:
    """Bytes of ``payload`` as the Lambda runtime serialises a handler's return value.

    The runtime writes JSON with ``", "``/``": "`` separators and, before python3.12, escapes non-ASCII characters
    (6 bytes for one Han character instead of 3).
    """
    env = os.environ if environ is None else environ
    ensure_ascii = env.get("AWS_EXECUTION_ENV", "") not in UNESCAPED_RUNTIMES
    return len(json.dumps(payload, ensure_ascii=ensure_ascii).encode("utf-8"))


def tenant_of(payload: dict[str, Any] | str | bytes) -> str:
    """The tenant a wire state belongs to, without decoding it (``default`` when it names none or no valid one:
    decoding such a state then says what is wrong with it)."""
    try:
        data = json.loads(payload) if isinstance(payload, (str, bytes)) else payload
    except ValueError:
        return DEFAULT_TENANT
    tenant = data.get("tenant_id", DEFAULT_TENANT) if isinstance(data, dict) else DEFAULT_TENANT
    try:
        return check_tenant(tenant)
    except ValueError:
        return DEFAULT_TENANT


# -- encoding -----------------------------------------------------------------------------------------------------


def encode(
    state: BaseModel, blobs: BlobStore | None, limit: int, *, size: Size = compact_size, sent_as: str = ""
) -> dict[str, Any]:
    """The state as a JSON-ready dict no larger than ``limit`` bytes (as ``size`` measures it), offloading result
    lists, largest first, when needed. ``sent_as`` says in an error how the size was measured."""
    data = state.model_dump(mode="json")
    if size(data) <= limit:
        return data
    fields = sorted((f for f in OFFLOADABLE if data.get(f)), key=lambda f: -size({f: data[f]}))
    for name in fields:
        if blobs is None:
            break
        body = json.dumps(data[name], ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        digest = hashlib.sha256(body).hexdigest()[:16]
        key = f"{OFFLOAD_PREFIX}{data['request_id']}/{name}-{digest}.json"
        blobs.put(key, body, "application/json")
        data[name] = []
        data["offloaded"][name] = key
        if size(data) <= limit:
            return data
    measured = f"{size(data)} bytes{sent_as}"
    if "offloaded" not in data:  # a state with nothing to offload (IngestState keeps its products in blobs)
        raise StateTooLargeError(f"{data.get('pipeline', 'pipeline')} state is {measured}, over the {limit}-byte limit")
    where = "after offloading results" if blobs is not None else "and no blob store is configured to offload results"
    raise StateTooLargeError(
        f"pipeline state is {measured} {where}, over the {limit}-byte limit; shorten the query or lower embedding_top_k"
    )


def encode_for_lambda(state: BaseModel, blobs: BlobStore | None, limit: int) -> dict[str, Any]:
    """The state as a Lambda handler returns it: at most ``limit`` bytes as the runtime sends it (:func:`wire_size`),
    offloading results if needed."""
    return encode(state, blobs, limit, size=wire_size, sent_as=" as Lambda sends it")


# -- decoding -----------------------------------------------------------------------------------------------------


def decode(
    payload: dict[str, Any] | str | bytes,
    blobs: BlobStore | None,
    model: type[StateT] = PipelineState,  # type: ignore[assignment]
) -> StateT:
    """Validate a state of type ``model`` and load any offloaded result lists back into it."""
    return restore(_validate(payload, model), blobs)


def decode_event(
    payload: Any,
    blobs_of: Callable[[str], BlobStore],
    model: type[StateT] = PipelineState,  # type: ignore[assignment]
) -> StateT:
    """The state a Lambda handler receives, validated, with offloaded results read back from the blob store of the
    state's own tenant (``blobs_of(tenant_id)``). :class:`InputError` if it is not a valid state."""
    if not isinstance(payload, (dict, str, bytes)):
        raise InputError(f"the event must be a pipeline state (a JSON object), not {type(payload).__name__}")
    try:
        state = _validate(payload, model)
    except ValidationError as exc:
        raise InputError(f"the event is not a valid pipeline state: {_validation_message(exc)}") from exc
    if not getattr(state, "offloaded", None):
        return state
    # The tenant is read from the validated state, so only a well-formed tenant id ever selects a blob store.
    return restore(state, blobs_of(getattr(state, "tenant_id", DEFAULT_TENANT)))


def restore(state: StateT, blobs: BlobStore | None) -> StateT:
    """``state`` with the result lists it offloaded read back from ``blobs``."""
    offloaded: dict[str, str] = getattr(state, "offloaded", None) or {}
    if not offloaded:
        return state
    if blobs is None:
        raise StateTooLargeError("state references offloaded results but no blob store is configured")
    restored: dict[str, Any] = {"offloaded": {}}
    for name, key in offloaded.items():
        # Only result lists, only from where encode puts them: a state can never name another blob to read.
        if name not in OFFLOADABLE or not key.startswith(OFFLOAD_PREFIX):
            raise InputError(
                f"offloaded {name!r} -> {key!r}: only {', '.join(OFFLOADABLE)} are offloaded, under {OFFLOAD_PREFIX}"
            )
        restored[name] = [SearchResult.model_validate(i) for i in json.loads(blobs.get(key))]
    return state.model_copy(update=restored)


def _validate(payload: dict[str, Any] | str | bytes, model: type[StateT]) -> StateT:
    if isinstance(payload, (str, bytes)):
        return model.model_validate_json(payload)
    return model.model_validate(payload)


def _validation_message(exc: ValidationError) -> str:
    """The first validation error as ``where: what`` (and how many more), without pydantic's boilerplate."""
    errors = exc.errors()
    if not errors:
        return str(exc)
    err = errors[0]
    where = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return (f"{where}: {msg}" if where else msg) + more
