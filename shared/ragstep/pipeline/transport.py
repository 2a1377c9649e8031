"""Moving the state across a size-limited transport (Step Functions: 256 KiB per payload): all state-size logic.

:func:`encode` writes a query state in its compact wire form (:mod:`ragstep.models.wire`: each result once, in a
table, and ids and scores per list; query embeddings as base64) and is the one place the limit is enforced: when the
JSON would exceed it, the largest of the parts that grow with the results are written to the blob store and replaced
by a reference (the claim-check pattern); :func:`decode` puts them back. Which parts those are is declared once, in
:func:`offloaded_on_write`: the state's results table, and the viking part's matches, passages and layers, each typed
query's outcome included (a version 2 state's offloaded result lists are still read back). Entry points call both, so
stages never see a reference:

* the in-process executor and :mod:`ragstep.pipeline.remote` measure compact UTF-8 JSON (what they send);
* a Lambda handler returns its state through the runtime's own JSON encoder, which writes larger JSON (and, before
  python3.12, escapes every non-ASCII character), so it encodes with :func:`encode_for_lambda`, which measures
  :func:`wire_size`, and decodes its event with :func:`decode_event`, which turns a bad event into an
  :class:`~ragstep.errors.InputError` and reads offloaded fields from the state's own tenant's blob store.

Both work for any state model: the query pipeline's :class:`~ragstep.models.PipelineState` (the default) and the
ingest pipeline's :class:`~ragstep.models.IngestState`, which has nothing to offload (its stages keep their products
in the blob store themselves), so for it the limit is only checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import types
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from ragstep.errors import InputError, StateTooLargeError
from ragstep.models import DEFAULT_TENANT, RESULT_FIELDS, PipelineState, check_tenant
from ragstep.models.base import BuiltOnFirstUse
from ragstep.models.wire import TABLE, WIRE
from ragstep.ports import BlobStore

StateT = TypeVar("StateT", bound=BaseModel)
Size = Callable[[dict[str, Any]], int]


@cache
def offloadable() -> dict[type[BaseModel], tuple[str, ...]]:
    """What may be read back after validation: per model that keeps claim checks (an ``offloaded`` field of its own),
    its fields that grow with the results (the query state's result lists: offloaded by version 2 only). Wherever
    such a model sits in a state (``viking``, ``viking.outcome``, each of ``viking.outcomes``) its fields are
    offloadable and its references stay in it, so a part cut out of the state carries its own: a Map iteration
    returns ``viking.outcome`` alone (its ``OutputPath``), and the merge stage receives the outcomes, references and
    all.

    A function, not a constant: the viking models are imported when a state is first encoded or decoded, not by the
    executor's import (a local search never loads them, issue #23)."""
    from ragstep.models.viking import TypedQueryOutcome, VikingPart

    return {
        PipelineState: RESULT_FIELDS,
        VikingPart: ("matches", "passages", "layered"),
        TypedQueryOutcome: ("matches", "passages"),
    }


#: What :func:`encode` offloads of a query state's wire form: its results table (no field of the model), then its
#: lists of ids and scores (with the changes of their copies: the merge's stitched text can be long). All are read
#: back before the state is validated (:func:`reclaim`): they are not in the form the model's fields validate.
WIRE_PARTS: tuple[str, ...] = (TABLE, *RESULT_FIELDS)


def offloaded_on_write() -> dict[type[BaseModel], tuple[str, ...]]:
    """What :func:`encode` offloads, per model that keeps claim checks: the parts that grow with the results."""
    return {**offloadable(), PipelineState: WIRE_PARTS}


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


# -- where offloadable fields are --------------------------------------------------------------------------------


def _model_in(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    """The model a field holds (``M``, ``M | None``) or holds a list of (``list[M]``), and whether it is a list."""
    origin = get_origin(annotation)
    if origin is Annotated:
        # A model named by its marker, not held (the state's viking part: Annotated[Any, BuiltOnFirstUse(mod, name)])
        named = [m.held() for m in annotation.__metadata__ if isinstance(m, BuiltOnFirstUse) and m.module]
        return _model_in(named[0] if named else get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        found = [m for m in map(_model_in, get_args(annotation)) if m is not None]
        return found[0] if len(found) == 1 else None
    if origin is list:
        inner = _model_in(get_args(annotation)[0]) if get_args(annotation) else None
        return (inner[0], True) if inner is not None and not inner[1] else None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None


def _reaches(model: type[BaseModel], seen: frozenset[type[BaseModel]] = frozenset()) -> bool:
    """Whether ``model`` or a model inside it has offloadable fields."""
    if model in offloadable():
        return True
    seen = seen | {model}
    held = (_model_in(f.annotation) for f in model.model_fields.values())
    return any(h is not None and h[0] not in seen and _reaches(h[0], seen) for h in held)


@cache
def _links(model: type[BaseModel]) -> tuple[tuple[str, type[BaseModel], bool], ...]:
    """The fields of ``model`` that lead to offloadable fields: (name, the model it holds, whether a list of them).
    Worked out once per state model, so walking a state visits only these (never its result lists' items)."""
    found = ((name, _model_in(field.annotation)) for name, field in model.model_fields.items())
    return tuple((name, *held) for name, held in found if held is not None and _reaches(held[0], frozenset({model})))


@cache
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    return TypeAdapter[Any](model.model_fields[name].annotation or Any)


def _holders(
    model: type[BaseModel], data: dict[str, Any], where: str = ""
) -> Iterator[tuple[type[BaseModel], dict[str, Any], str]]:
    """Each model with offloadable fields in ``data`` (a JSON dump of a ``model``): its type, its dict (edited in
    place by :func:`encode`) and where it is, as the prefix of its fields' names (``""``, ``"viking.outcome."``)."""
    if model in offloadable():
        yield model, data, where
    for name, held, many in _links(model):
        value = data.get(name)
        if many and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _holders(held, item, f"{where}{name}.{i}.")
        elif not many and isinstance(value, dict):
            yield from _holders(held, value, f"{where}{name}.")


def offloaded_fields(payload: dict[str, Any], model: type[BaseModel] = PipelineState) -> list[str]:
    """The fields a wire state (a ``model``) holds as references, by their path in it (``search_results``,
    ``viking.outcome.matches``): what a log line says was offloaded."""
    return [f"{where}{name}" for _, holder, where in _holders(model, payload) for name in holder.get("offloaded") or {}]


# -- encoding -----------------------------------------------------------------------------------------------------


def encode(
    state: BaseModel, blobs: BlobStore | None, limit: int, *, size: Size = compact_size, sent_as: str = ""
) -> dict[str, Any]:
    """The state as a JSON-ready dict, in its wire form, no larger than ``limit`` bytes (as ``size`` measures it),
    offloading the parts :func:`offloaded_on_write` names, largest first, when needed. ``sent_as`` says in an error
    how the size was measured."""
    data = state.model_dump(mode="json", context=WIRE)
    if size(data) <= limit:
        return data
    model = type(state)
    written = offloaded_on_write()
    fields = [
        (holder, held, name, f"{where}{name}")
        for held, holder, where in _holders(model, data)
        for name in written[held]
        if holder.get(name)
    ]
    fields.sort(key=lambda f: -size({f[3]: f[0][f[2]]}))
    for holder, held, name, path in fields:
        if blobs is None:
            break
        body = json.dumps(holder[name], ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        digest = hashlib.sha256(body).hexdigest()[:16]
        key = f"{OFFLOAD_PREFIX}{data['request_id']}/{path}-{digest}.json"
        blobs.put(key, body, "application/json")
        if name in held.model_fields:
            empty = held.model_fields[name].get_default(call_default_factory=True)
            holder[name] = _adapter(held, name).dump_python(empty, mode="json")
        else:  # a part of the wire form only (the results table): its claim stands in for it
            del holder[name]
        holder["offloaded"][name] = key
        if size(data) <= limit:
            return data
    measured = f"{size(data)} bytes{sent_as}"
    if not _reaches(model):  # a state with nothing to offload (IngestState keeps its products in blobs)
        raise StateTooLargeError(f"{data.get('pipeline', 'pipeline')} state is {measured}, over the {limit}-byte limit")
    where = "after offloading results" if blobs is not None else "and no blob store is configured to offload results"
    raise StateTooLargeError(
        f"pipeline state is {measured} {where}, over the {limit}-byte limit; shorten the query or lower embedding_top_k"
    )


def encode_for_lambda(state: BaseModel, blobs: BlobStore | None, limit: int) -> dict[str, Any]:
    """The state as a Lambda handler returns it: at most ``limit`` bytes as the runtime sends it (:func:`wire_size`),
    offloading fields if needed."""
    return encode(state, blobs, limit, size=wire_size, sent_as=" as Lambda sends it")


# -- decoding -----------------------------------------------------------------------------------------------------


def decode(
    payload: dict[str, Any] | str | bytes,
    blobs: BlobStore | None,
    model: type[StateT] = PipelineState,  # type: ignore[assignment]
) -> StateT:
    """Validate a state of type ``model`` and load any offloaded fields back into it."""
    if model is PipelineState:
        payload = reclaim(_as_dict(payload), blobs)
    return restore(_validate(payload, model), blobs)


def decode_event(
    payload: Any,
    blobs_of: Callable[[str], BlobStore],
    model: type[StateT] = PipelineState,  # type: ignore[assignment]
) -> StateT:
    """The state a Lambda handler receives, validated, with offloaded fields read back from the blob store of the
    state's own tenant (``blobs_of(tenant_id)``). :class:`InputError` if it is not a valid state."""
    if not isinstance(payload, (dict, str, bytes)):
        raise InputError(f"the event must be a pipeline state (a JSON object), not {type(payload).__name__}")
    if model is PipelineState:
        try:
            payload = _as_dict(payload)
        except ValueError as exc:
            raise InputError(f"the event is not a valid pipeline state: not JSON ({exc})") from exc
        if isinstance(payload, dict) and _wire_claims(payload):
            tenant = _valid_tenant(payload)
            if tenant is not None:  # an invalid tenant reads nothing: validation says what is wrong with it
                payload = reclaim(payload, blobs_of(tenant))
    try:
        state = _validate(payload, model)
    except ValidationError as exc:
        raise InputError(f"the event is not a valid pipeline state: {_validation_message(exc)}") from exc
    if not _has_claims(state):
        return state
    # The tenant is read from the validated state, so only a well-formed tenant id ever selects a blob store.
    return restore(state, blobs_of(getattr(state, "tenant_id", DEFAULT_TENANT)))


def reclaim(payload: Any, blobs: BlobStore | None) -> Any:
    """A query state's JSON with the parts :data:`WIRE_PARTS` it offloaded read back (a new dict; ``payload`` as it
    is when it offloaded none). A version 2 state's offloaded lists are read back the same way. Only keys under
    :data:`OFFLOAD_PREFIX` are read: a state can never name another blob."""
    claims = _wire_claims(payload) if isinstance(payload, dict) else {}
    if not claims:
        return payload
    if blobs is None:
        raise StateTooLargeError("state references offloaded results but no blob store is configured")
    out = dict(payload)
    for name, key in claims.items():
        if not isinstance(key, str) or not key.startswith(OFFLOAD_PREFIX):
            raise InputError(f"offloaded {name} -> {key!r}: offloaded parts are under {OFFLOAD_PREFIX}")
        out[name] = json.loads(blobs.get(key))
    out["offloaded"] = {k: v for k, v in payload["offloaded"].items() if k not in claims}
    return out


def _wire_claims(payload: dict[str, Any]) -> dict[str, Any]:
    claims = payload.get("offloaded")
    return {k: v for k, v in claims.items() if k in WIRE_PARTS} if isinstance(claims, dict) else {}


def _valid_tenant(payload: dict[str, Any]) -> str | None:
    try:
        return check_tenant(payload.get("tenant_id", DEFAULT_TENANT))
    except (TypeError, ValueError):
        return None


def _as_dict(payload: Any) -> Any:
    return json.loads(payload) if isinstance(payload, (str, bytes)) else payload


def restore(state: StateT, blobs: BlobStore | None) -> StateT:
    """``state`` with every field it offloaded (its own, its viking part's, each outcome's) read back from ``blobs``."""
    return _restored(state, blobs, "")


def _restored(model: StateT, blobs: BlobStore | None, where: str) -> StateT:
    update: dict[str, Any] = {}
    for name, _, many in _links(type(model)):
        value = getattr(model, name)
        if many and value:
            items = [_restored(item, blobs, f"{where}{name}.{i}.") for i, item in enumerate(value)]
            if any(new is not old for new, old in zip(items, value, strict=True)):
                update[name] = items
        elif not many and value is not None:
            inner = _restored(value, blobs, f"{where}{name}.")
            if inner is not value:
                update[name] = inner
    allowed = offloadable().get(type(model), ())
    claims: dict[str, str] = (getattr(model, "offloaded", None) or {}) if allowed else {}
    if claims:
        if blobs is None:
            raise StateTooLargeError("state references offloaded results but no blob store is configured")
        for name, key in claims.items():
            # Only declared fields, only from where encode puts them: a state can never name another blob to read.
            if name not in allowed or not key.startswith(OFFLOAD_PREFIX):
                raise InputError(
                    f"offloaded {where}{name} -> {key!r}: only {', '.join(where + f for f in allowed)} are offloaded, "
                    f"under {OFFLOAD_PREFIX}"
                )
            update[name] = _adapter(type(model), name).validate_json(blobs.get(key))
        update["offloaded"] = {}
    return model.model_copy(update=update) if update else model


def _has_claims(model: BaseModel) -> bool:
    if type(model) in offloadable() and getattr(model, "offloaded", None):
        return True
    for name, _, many in _links(type(model)):
        value = getattr(model, name)
        if any(_has_claims(v) for v in (value if many else [value]) if v is not None):
            return True
    return False


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
