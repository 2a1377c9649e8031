"""A chat run's lifecycle, for entry points that stream an answer: started up to its first event (so that bad input
and a failed retrieval are an error the caller can answer with, not a stream that breaks at once), relayed until it
ends or its session's answer is stopped, and closed however the reader leaves (saving the part shown, marked
interrupted, and unregistering the stop signal).

The HTTP routes (OpenAI's chat completions, WeKnora's knowledge chat) and any other streaming entry point format the
events of one :class:`Run`; the rules of starting, stopping and closing are here once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

from ragstep.app.chat import run_chat, stream_chat, stream_stateless_chat
from ragstep.app.sessions import RUNNING
from ragstep.context import Context
from ragstep.models import ChatRequest, HistoryRound, PipelineState, StreamEvent
from ragstep.pipeline.executor import drain

Started = StreamEvent | PipelineState


@dataclass
class Run:
    """A started chat: its first event (or, for a pipeline that does not stream, its final state), the rest of its
    events, the stop signal of its session, and ``close`` -- closes the events (saving a partial answer) and
    unregisters the stop signal."""

    first: Started
    events: Generator[StreamEvent, None, PipelineState]
    stop: threading.Event | None
    close: Callable[[], None]


def start(request: ChatRequest, history: list[HistoryRound] | None, ctx: Context) -> Run:
    """Start the chat up to its first event: in its session (``history`` None: the session's history is read and
    the turn saved, and the session's stop signal can end it), or stateless with the ``history`` given."""
    stop: threading.Event | None = None
    unregister: Callable[[], None] = lambda: None  # noqa: E731
    if history is None and request.session_id is not None:
        stop, unregister = RUNNING.register(ctx.tenant_id, request.session_id)
    try:
        events = stream_chat(request, ctx) if history is None else stream_stateless_chat(request, history, ctx)
        try:
            first: Started = next(events)
        except StopIteration as done:
            first = done.value
    except BaseException:
        unregister()
        raise

    def close() -> None:
        try:
            events.close()
        finally:
            unregister()

    return Run(first=first, events=events, stop=stop, close=close)


def relay(run: Run) -> Generator[StreamEvent, None, PipelineState | None]:
    """The run's events; returns its final state, or None when its session's answer was stopped (the events are
    closed then, which saves the part shown, marked interrupted)."""
    if isinstance(run.first, PipelineState):
        return run.first
    yield run.first
    while run.stop is None or not run.stop.is_set():
        try:
            event = next(run.events)
        except StopIteration as done:
            final: PipelineState = done.value
            return final
        yield event
    run.events.close()
    return None


class Relayed:
    """The run's events (:func:`relay`) for a ``for`` loop; :attr:`final` is its final state once the loop has ended
    (None when its session's answer was stopped, or while it has not ended)."""

    def __init__(self, run: Run) -> None:
        self.final: PipelineState | None = None
        self._events = relay(run)

    def __iter__(self) -> Iterator[StreamEvent]:
        self.final = yield from self._events


def run_to_end(request: ChatRequest, history: list[HistoryRound] | None, ctx: Context) -> PipelineState:
    """The chat run to its end, for an entry point that answers at once: in its session (``history`` None), or
    stateless with the ``history`` given."""
    if history is None:
        return run_chat(request, ctx)
    return drain(stream_stateless_chat(request, history, ctx))
