"""``viking_query``: one typed query through the knowledge bases' trees -- the item of the typed queries' Map.

The Map (``ragstep.pipeline.definitions.Map``) hands each item the whole state with one query of the plan in
``viking.query``; this stage answers it in ``viking.outcome`` (matches, passages, its ``hierarchical_search`` trace
row), which is all the Map keeps of the item. The search itself is
:func:`ragstep.stages.viking.hierarchical_search.search_query`, the same function the in-process
``hierarchical_search`` runs for each query.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError
from ragstep.models import PipelineState
from ragstep.models.viking import TypedQueryOutcome
from ragstep.retrieval.tokens import count_tokens
from ragstep.stages.viking.common import viking_state
from ragstep.stages.viking.hierarchical_search import search_query

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "viking_query"


def usable(passages: list[str], budget: int | None) -> list[str]:
    """The passages layered_context can use of a document: the longest prefix within ``budget`` tokens. Its
    selection (``select_layers``) stops at the first passage that overruns its room, which is never more than the
    budget, so the rest would never be read: left out, they never weigh on the Map's share of the payload quota."""
    if budget is None:
        return passages
    spent = 0
    for i, passage in enumerate(passages):
        spent += count_tokens(passage) + (1 if i else 0)
        if spent > budget:
            return passages[:i]
    return passages


def run(state: PipelineState, ctx: Context) -> PipelineState:
    part = state.viking
    if part is None or part.query is None:
        raise InputError(
            "viking_query runs one typed query: the state needs viking.query (the typed queries' Map sets it from "
            "viking.plan.queries, which viking_intent writes)"
        )
    viking = viking_state(state, ctx, part)
    found = search_query(part.query, viking, ctx)
    passages = {uri: usable(texts, viking.budget) for uri, texts in found.passages.items()}
    outcome = TypedQueryOutcome(
        matches=found.matches, passages=passages, trace=[found.event] if found.event is not None else []
    )
    return state.model_copy(update={"viking": part.model_copy(update={"outcome": outcome})})
