"""Joining the branches of a :class:`~ragstep.pipeline.definitions.Parallel` step into one state.

The same function runs in the in-process executor and in the ``join`` Lambda that follows a Parallel state on Step
Functions, so both executors produce the same state from the same branch outputs. Every branch starts from the
same input (``base``); the join keeps what each one added:

* result lists: the union by result id, each result at its best score, best first (a chunk found by the knowledge
  bases and by the graph appears once); None (its stage ran in no branch, nor before) when every input is None;
* the trace: the input's events, then each branch's new events in branch order;
* ``query_embeddings``: the union;
* any other field (``rewritten_query``, ``entities``, the chat part ...): the value the one branch that changed it
  set; nested models are joined field by field. Two branches setting one field to different values is a
  declaration error (branches must write disjoint parts of the state) and says which field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ragstep.models import RESULT_FIELDS, PipelineState, SearchResult

_SPECIAL = frozenset({*RESULT_FIELDS, "trace", "query_embeddings", "offloaded", "error"})


class BranchConflictError(ValueError):
    """Two parallel branches changed the same part of the state differently."""


def _joined(path: str, base: Any, values: list[Any]) -> Any:
    changed = [v for v in values if v != base]
    if not changed:
        return base
    if all(v == changed[0] for v in changed[1:]):
        return changed[0]
    if isinstance(base, BaseModel) and all(type(v) is type(base) for v in changed):
        update = {
            name: _joined(f"{path}.{name}", getattr(base, name), [getattr(v, name) for v in changed])
            for name in type(base).model_fields
        }
        return base.model_copy(update=update)
    raise BranchConflictError(f"parallel branches set {path} to different values; a branch must own what it writes")


def join_branches(base: PipelineState, outputs: list[PipelineState]) -> PipelineState:
    update: dict[str, Any] = {}
    for name in RESULT_FIELDS:
        lists: list[list[SearchResult]] = [
            found for found in (getattr(s, name) for s in (base, *outputs)) if found is not None
        ]
        if not lists:
            continue  # no branch ran the stage: the list stays None
        merged: dict[str, SearchResult] = {}
        for results in lists:
            for r in results:
                if r.id not in merged or r.score > merged[r.id].score:
                    merged[r.id] = r
        update[name] = sorted(merged.values(), key=lambda r: -r.score)
    trace = list(base.trace)
    embeddings = dict(base.query_embeddings)
    for out in outputs:
        trace.extend(out.trace[len(base.trace) :])
        embeddings.update(out.query_embeddings)
    update["trace"] = trace
    update["query_embeddings"] = embeddings
    update["error"] = base.error or next((out.error for out in outputs if out.error is not None), None)
    for field in type(base).model_fields:
        if field not in _SPECIAL:
            value = _joined(field, getattr(base, field), [getattr(out, field) for out in outputs])
            if value is not getattr(base, field):
                update[field] = value
    return base.model_copy(update=update)
