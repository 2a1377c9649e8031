"""Which chat sessions a request may see.

A session belongs to its tenant: another tenant's session id is unknown (404). Within the tenant, an API key limited
to some knowledge bases (``--kb``) sees only the sessions whose answers drew on nothing else: every knowledge base a
turn searched (:attr:`~ragstep.models.Turn.knowledge_bases`) and every one its references came from must be one the
key may use. Any other session reads exactly as an unknown one, for listing, reading, deleting, stopping,
continuing a chat, searching with its id and remembering from it -- a limited key cannot learn through a session what
it could not search itself. A session with no answers yet (just opened) uses no knowledge base, so every key of the
tenant sees it. Web search results (knowledge base ``web``) are public pages, not the tenant's, and never hide one.

A key without a limit sees every session of its tenant; nothing extra is read for it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ragstep.context import Context
from ragstep.errors import InputError, NotFoundError
from ragstep.models import Turn, check_identifier

#: How many turns of one session are read to decide whether a limited key may see it.
MAX_CHECKED_TURNS = 10_000
#: The knowledge base id web search results carry (ragstep.stages.search.web_search.WEB_KB): public pages.
PUBLIC_KBS = frozenset({"web"})


def session_knowledge_bases(turns: Iterable[Turn]) -> set[str]:
    """The knowledge bases a session's turns searched or cited, web search left out."""
    found: set[str] = set()
    for turn in turns:
        found.update(turn.knowledge_bases)
        found.update(r.knowledge_base_id for r in turn.references if r.knowledge_base_id)
    return found - PUBLIC_KBS


def may_see(ctx: Context, turns: Iterable[Turn]) -> bool:
    """Whether ``ctx`` may see the session of ``turns`` (its tenant's; see the module docstring for the rule)."""
    if ctx.allowed_kbs is None:
        return True
    catalog = ctx.catalog  # the key's view: a knowledge base outside its limit is not found
    return all(catalog.get_kb(kb) is not None for kb in session_knowledge_bases(turns))


#: What to do about an unknown session when a request continues one (a chat, a search with its history).
CONTINUE_HINT = "omit the session to start a new one"
#: ... and when a request reads, deletes or stops one: starting a new session is no help there.
LIST_HINT = "`ragstep sessions list` or GET /v1/sessions lists the sessions there are"


def require_session(ctx: Context, session_id: str, *, hint: str = CONTINUE_HINT) -> None:
    """Refuse a session id ``ctx`` may not see: malformed (400), or not a live session of its tenant, or one whose
    answers used a knowledge base outside the key's limit (both 404, the same words, ending with ``hint``)."""
    try:
        check_identifier(session_id)
    except ValueError as exc:
        raise InputError(f"session id: {exc}") from None
    limit = 1 if ctx.allowed_kbs is None else MAX_CHECKED_TURNS
    turns = ctx.history.recent(session_id, limit=limit)
    if not turns or not may_see(ctx, turns):
        raise NotFoundError(f"unknown session {session_id!r}; {hint}")
