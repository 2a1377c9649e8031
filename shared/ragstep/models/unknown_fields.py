"""What to say for a key a strict model does not have: the fields it accepts, in place of pydantic's "Extra inputs are
not permitted" (which names neither the mistake nor its fix).

The contract's models refuse unknown keys (a typo must not fall back to a default silently: :mod:`ragstep.models.base`).
pydantic's error holds only where the key was, so whoever reports it (the command line, the HTTP API, the MCP tools)
passes the model it validated against and :func:`explain_unknown_fields` rewrites those errors' messages: ``overrides.
rerank_topk: unknown field; overrides accepts rerank_top_k, ...``. Work done only for a request already refused.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["accepted_fields", "explain_unknown_fields", "first_problem", "model_named"]

_EXTRA = "extra_forbidden"


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's annotation holds: itself, or inside Optional / Union / list / dict / Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *marks = typing.get_args(annotation)
        held = [m.held() for m in marks if callable(getattr(m, "held", None))]  # BuiltOnFirstUse names its model
        return [m for m in held if isinstance(m, type) and issubclass(m, BaseModel)] or _models_in(base)
    if origin in (typing.Union, types.UnionType, list, tuple, set, frozenset, Sequence):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    if origin in (dict, Mapping):
        args = typing.get_args(annotation)
        return _models_in(args[1]) if len(args) == 2 else []
    return []


def _field(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias, info.validation_alias):
            return info.annotation
    return None


def accepted_fields(model: type[BaseModel], path: Sequence[str | int]) -> list[str] | None:
    """The keys the object at ``path`` inside ``model`` accepts (its fields, by the names a request uses), or None
    when the path leads to no model (a list index and a dict key lead through to the model of their items)."""
    current = [model]
    for part in path:
        if isinstance(part, int) or not current:
            continue  # an item of a list: the same models
        found = [a for m in current if (a := _field(m, part)) is not None]
        if found:
            current = [m for a in found for m in _models_in(a)]
        # else: a dict's key (or a union's tag): the models stay those of the dict's values
    if not current:
        return None
    names = [info.alias or name for m in current for name, info in m.model_fields.items()]
    return list(dict.fromkeys(names))


def explain_unknown_fields(
    errors: Sequence[Mapping[str, Any]], model: type[BaseModel] | None, *, root: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """``errors`` (pydantic's dicts) with each unknown key's message naming what its object accepts; ``root``: the
    location parts before the model's own fields (``("body",)`` for FastAPI's request errors)."""
    out = [dict(e) for e in errors]
    if model is None:
        return out
    for err in out:
        if err.get("type") != _EXTRA:
            continue
        loc = [p for p in err.get("loc", ()) if p != "__root__"]
        path = loc[len(root) :] if tuple(loc[: len(root)]) == root else loc
        accepted = accepted_fields(model, path[:-1])
        if accepted:
            holder = next((str(p) for p in reversed(path[:-1]) if isinstance(p, str)), None)
            # Imported here: a refused request's work, kept out of a function's cold start.
            import difflib

            close = difflib.get_close_matches(str(path[-1]) if path else "", accepted, n=1)
            guess = f" (did you mean {close[0]}?)" if close else ""
            err["msg"] = f"unknown field{guess}; {holder or 'the request'} accepts {', '.join(accepted)}"
    return out


def model_named(name: str) -> type[BaseModel] | None:
    """ragstep's model whose class is called ``name`` (a ValidationError's ``title``), None when there is none."""
    pending: list[type[BaseModel]] = [BaseModel]
    while pending:
        cls = pending.pop()
        if cls.__name__ == name and cls.__module__.startswith("ragstep."):
            return cls
        pending.extend(cls.__subclasses__())
    return None


def first_problem(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """``field.path: what is wrong`` of the first error of ``exc`` (an unknown key: what its object accepts), for the
    one-line messages every entry point gives. ``model``: the one validated (else the one ``exc`` names)."""
    err = explain_unknown_fields(exc.errors()[:1], model or model_named(exc.title))[0]
    where = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg
