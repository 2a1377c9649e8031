"""What a finished chat state says about its answer, in the words every entry point formats (HTTP bodies and streams,
the command line, Slack, webhooks, event-driven retrieval): the results it is grounded on, the references it shows,
and the notes on how it was made. The rules are the chat stages' (:mod:`ragstep.stages.chat.common`,
:mod:`ragstep.stages.chat.notes`); entry points read them here, never from the stages."""

from __future__ import annotations

from ragstep.models import PipelineState, SearchResult
from ragstep.stages.chat.common import context_results
from ragstep.stages.chat.notes import notes


def grounding_results(state: PipelineState) -> list[SearchResult]:
    """The results the answer is grounded on (the passages its context was built from)."""
    return context_results(state)


def answer_references(state: PipelineState) -> list[SearchResult]:
    """The references an answer shows: those it cites when the answerer said which, else every result it is
    grounded on."""
    return list(state.chat.references) or context_results(state)


def answer_notes(state: PipelineState) -> list[str]:
    """One line for each thing a reader should know about how the answer was made (a fallback, a budget cut, a
    degraded stage ...)."""
    return notes(state)
