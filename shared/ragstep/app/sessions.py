"""Chat sessions as an API manages them: opened before the first question, listed and read a page at a time, and a
running answer stopped on request.

The history store keeps turns, not sessions: a session exists while it has a live turn. Opening a session therefore
writes one *opening record* -- a turn with an empty question and answer, marked by its ``model`` -- so the session is
known (and refused to other tenants) before its first question. Nothing else sees it as a round: the history stage
drops rounds with an empty question or answer, and every function here leaves it out of counts and pages.

A running answer is stopped through :data:`RUNNING`, a per-process registry: the server streaming the answer
registers the session while it streams and checks the registration between events. A stop therefore reaches only
answers streamed by this process (one ``ragstep serve``, or one warm Lambda environment).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from ragstep.app.session_access import LIST_HINT, may_see, require_session
from ragstep.context import Context
from ragstep.errors import ConflictError, InputError
from ragstep.models import SessionSummary, Turn

#: The ``model`` of a session's opening record.
OPENING_MODEL = "ragstep:session-opened"
#: How many turns of one session are read to page through it (the history stores read newest first, no offset).
MAX_SESSION_TURNS = 10_000
MAX_PAGE = 100


def is_opening(turn: Turn) -> bool:
    return turn.model == OPENING_MODEL and not turn.query and not turn.answer


def open_session(ctx: Context) -> SessionSummary:
    """A new, empty session of the context's tenant."""
    now = time.time()
    opening = Turn(session_id=uuid.uuid4().hex, created_at=now, query="", answer="", model=OPENING_MODEL)
    ctx.history.append(opening)
    return SessionSummary(session_id=opening.session_id, turns=0, first_query="", created_at=now, updated_at=now)


def _summary(session_id: str, turns: list[Turn]) -> SessionSummary:
    """The summary of a session from its turns (oldest first), the opening record not counted as a turn."""
    questions = [t for t in turns if not is_opening(t)]
    return SessionSummary(
        session_id=session_id,
        turns=len(questions),
        first_query=questions[0].query if questions else "",
        created_at=turns[0].created_at,
        updated_at=turns[-1].created_at,
    )


def get_session(ctx: Context, session_id: str) -> SessionSummary:
    require_session(ctx, session_id, hint=LIST_HINT)
    return _summary(session_id, ctx.history.recent(session_id, limit=MAX_SESSION_TURNS))


def _check_page(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise InputError(f"limit must be between 1 and {MAX_PAGE}, got {limit}")


def sessions_page(ctx: Context, *, offset: int, limit: int) -> tuple[list[SessionSummary], bool]:
    """Sessions ``offset`` to ``offset + limit``, most recently active first, and whether more follow -- of those
    the context may see (:mod:`ragstep.app.session_access`: a knowledge-base-limited key sees fewer).

    A session that was opened empty has the opening record as its first turn in the store's summary; its count and
    first question are read from its turns instead (one read per such session on the page).
    """
    _check_page(limit)
    if offset < 0:
        raise InputError(f"offset must be 0 or more, got {offset}")
    if ctx.allowed_kbs is None:
        summaries = ctx.history.sessions(offset + limit + 1)
        page = summaries[offset : offset + limit]
        fixed = [
            _summary(s.session_id, ctx.history.recent(s.session_id, limit=MAX_SESSION_TURNS))
            if not s.first_query
            else s
            for s in page
        ]
        return fixed, len(summaries) > offset + limit
    visible = _visible_sessions(ctx, offset + limit + 1)
    return visible[offset : offset + limit], len(visible) > offset + limit


def _visible_sessions(ctx: Context, wanted: int) -> list[SessionSummary]:
    """The newest ``wanted`` sessions a knowledge-base-limited context may see (each session's turns read to
    decide; more of the store's list is read until enough are found or it ends)."""
    asked = wanted
    while True:
        summaries = ctx.history.sessions(asked)
        visible: list[SessionSummary] = []
        for summary in summaries:
            turns = ctx.history.recent(summary.session_id, limit=MAX_SESSION_TURNS)
            if turns and may_see(ctx, turns):
                visible.append(_summary(summary.session_id, turns))
                if len(visible) == wanted:
                    return visible
        if len(summaries) < asked:
            return visible
        asked *= 4


def list_sessions(ctx: Context, limit: int = MAX_PAGE) -> list[SessionSummary]:
    """The tenant's most recently active sessions (the CLI's ``sessions list``)."""
    return sessions_page(ctx, offset=0, limit=limit)[0]


def session_turns(ctx: Context, session_id: str, limit: int = 1000) -> list[Turn]:
    """A session's turns, oldest first, the opening record of an empty session left out."""
    require_session(ctx, session_id, hint=LIST_HINT)
    turns = [t for t in ctx.history.recent(session_id, limit=limit + 1) if not is_opening(t)]
    return turns[-limit:]


def turns_page(ctx: Context, session_id: str, *, before: float | None, limit: int) -> tuple[list[Turn], float | None]:
    """The session's turns created before ``before`` (all when None), newest first, at most ``limit``; and the
    ``before`` that reads the next (older) page, None when this page reaches the first turn."""
    _check_page(limit)
    require_session(ctx, session_id, hint=LIST_HINT)
    turns = [t for t in ctx.history.recent(session_id, limit=MAX_SESSION_TURNS) if not is_opening(t)]
    older = [t for t in reversed(turns) if before is None or t.created_at < before]
    page = older[:limit]
    return page, (page[-1].created_at if len(older) > limit else None)


class RunningAnswers:
    """The answers this process is streaming, by (tenant, session): what ``stop`` signals.

    Each stream registers a :class:`threading.Event` for its lifetime and stops at the next event once it is set.
    Several answers of one session (two browser tabs) are all stopped.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[tuple[str, str], list[threading.Event]] = {}

    def register(self, tenant_id: str, session_id: str) -> tuple[threading.Event, Callable[[], None]]:
        """A new stop signal for an answer of the session, and the function that unregisters it (idempotent)."""
        key = (tenant_id, session_id)
        event = threading.Event()
        with self._lock:
            self._running.setdefault(key, []).append(event)

        def unregister() -> None:
            with self._lock:
                events = self._running.get(key, [])
                if event in events:
                    events.remove(event)
                if not events:
                    self._running.pop(key, None)

        return event, unregister

    def stop(self, tenant_id: str, session_id: str) -> int:
        """Signal every running answer of the session; returns how many there were."""
        with self._lock:
            events = list(self._running.get((tenant_id, session_id), []))
        for event in events:
            event.set()
        return len(events)


RUNNING = RunningAnswers()


def stop_answer(ctx: Context, session_id: str) -> int:
    """Stop the session's running answers (the part streamed so far is saved, marked interrupted)."""
    require_session(ctx, session_id, hint=LIST_HINT)
    stopped = RUNNING.stop(ctx.tenant_id, session_id)
    if not stopped:
        raise ConflictError(f"no answer of session {session_id!r} is running on this server; nothing to stop")
    return stopped
