"""A :class:`~ragstep.pipeline.definitions.Map` step's paths in a state: its items, one item's state, the results.

The in-process executor and the Lambda handler of a Map's first stage both go through these, so an item's state is
the same whichever runs it. Paths are dotted attribute names (``viking.plan.queries``); a value put at a path is
validated against the field's type, since on Step Functions it arrives as JSON.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from ragstep.errors import InputError
from ragstep.pipeline.definitions import Map

M = TypeVar("M", bound=BaseModel)


def get_path(state: BaseModel, path: str) -> Any:
    value: Any = state
    for part in path.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def set_path(state: M, path: str, value: Any) -> M:
    """``state`` with ``value`` (validated) at ``path``; every model on the way must already be there."""
    head, _, rest = path.partition(".")
    field = type(state).model_fields.get(head)
    if field is None:
        raise InputError(f"{type(state).__name__} has no field {head!r}")
    if rest:
        inner = getattr(state, head)
        if not isinstance(inner, BaseModel):
            raise InputError(f"the state has no {head} to set {rest} in; the step that writes {head} runs first")
        return state.model_copy(update={head: set_path(inner, rest, value)})
    try:
        checked = TypeAdapter[Any](field.annotation or Any).validate_python(value)
    except ValidationError as exc:
        raise InputError(f"{head}: {exc.errors()[0].get('msg', 'invalid value')}") from None
    return state.model_copy(update={head: checked})


def items_of(step: Map, state: BaseModel) -> list[Any]:
    items = get_path(state, step.items)
    if items is None:
        raise InputError(f"map {step.name!r}: the state has no {step.items} to iterate over")
    if len(items) > step.max_items:
        raise InputError(f"map {step.name!r}: {len(items)} items in {step.items}, at most {step.max_items}")
    return list(items)


def item_state(step: Map, state: M, item: Any) -> M:
    """The state one item's steps run on: ``state`` with ``item`` at ``step.item``."""
    return set_path(state, step.item, item)


def result_of(step: Map, state: BaseModel) -> Any:
    """What the Map keeps of an item's final state."""
    return get_path(state, step.result)


def with_results(step: Map, state: M, results: list[Any]) -> M:
    """The state the Map started from, with each item's result at ``step.results`` (the merge stage's input)."""
    return set_path(state, step.results, results)


def map_starting_with(stage_name: str) -> Map | None:
    """The Map of a deployed pipeline whose items start with ``stage_name`` (that stage's function receives
    ``{"state", "item"}`` from the Map state's ``ItemSelector``), None for any other stage."""
    from ragstep.pipeline.definitions import DEPLOYED_PIPELINES

    for pipeline in DEPLOYED_PIPELINES.values():
        for step in pipeline.steps:
            if isinstance(step, Map) and step.steps[0].name == stage_name:
                return step
    return None
