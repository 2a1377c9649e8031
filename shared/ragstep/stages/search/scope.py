"""What a search may look at, read from the catalog once per request and carried in the state.

``resolve_scope`` runs where the state is made (the use case in :mod:`ragstep.app.search`), so no stage, in any
Lambda, reads the catalog for the request's knowledge bases again. A state written by hand (a sample event) may
arrive unresolved; ``chunk_search`` resolves it then, once.

Rules (a demanding user's): knowledge bases are named by id or name; ``knowledge_ids`` narrow the search to those
documents, and when knowledge bases are named too, each document must belong to one of them (``--kb X --knowledge
ID`` searches that document inside X, never the rest of X). Unknown names fail with an error that names only what the
caller asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError, NotFoundError
from ragstep.models import KnowledgeBase, PipelineState

if TYPE_CHECKING:
    from ragstep.context import Context


def resolve_scope(state: PipelineState, ctx: Context) -> PipelineState:
    """The state with ``request.knowledge_base_ids`` as ids, ``knowledge_bases`` and ``knowledge_scope`` filled."""
    request = state.request
    named: dict[str, KnowledgeBase] = {}
    for ref in dict.fromkeys(request.knowledge_base_ids):
        kb = ctx.require_kb(ref)
        named[kb.id] = kb
    scope: dict[str, str] = {}
    involved = dict(named)
    for kid in dict.fromkeys(request.knowledge_ids):
        item = ctx.catalog.get_knowledge(kid)
        if item is None:
            raise NotFoundError(f"unknown knowledge item {kid!r}")
        if named and item.knowledge_base_id not in named:
            names = ", ".join(kb.name for kb in named.values())
            raise InputError(f"knowledge item {kid!r} is not in the knowledge base(s) searched ({names})")
        if item.knowledge_base_id not in involved:
            involved[item.knowledge_base_id] = ctx.require_kb(item.knowledge_base_id)
        scope[kid] = item.knowledge_base_id
    return state.with_scope(list(named), list(involved.values()), scope)


def is_resolved(state: PipelineState) -> bool:
    request = state.request
    return bool(state.knowledge_bases) or not (request.knowledge_base_ids or request.knowledge_ids)
