"""Token budgets: what of the knowledge and the history fits the chat model's context window (RAGFlow's ``kb_prompt``
and ``message_fit_in``), counted with the one estimator (:mod:`ragstep.retrieval.tokens`).

* The answer's share (``max_tokens``, at most half the window) is set aside first: a long context must not leave
  the model no room to answer (RAGFlow reserves nothing and lets the answer be cut short).
* **Knowledge** fits in 97 % of what the rest of the window leaves after the system prompt, the history and the
  question: passages are taken best first and the first that does not fit ends the list (lower-ranked passages are
  dropped first, never cut mid-passage) -- unless not even the best passage fits, which is then cut to the budget.
* **Messages** fit in 95 % of the whole window: the oldest history rounds go first, then the knowledge, lowest
  ranked first; the system prompt and the question are never dropped (if they alone overflow, the request is
  refused with what to change). ``max_tokens`` is lowered to what the window has left.

Everything dropped is returned for the trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ragstep.errors import InputError
from ragstep.models import ChatSettings, HistoryRound, PipelineState, TraceEvent
from ragstep.retrieval.tokens import MESSAGE_OVERHEAD, count_messages, count_tokens, truncate_to_tokens

STAGE = "token_budget"
KNOWLEDGE_SHARE = 0.97
MESSAGE_SHARE = 0.95
#: Tokens a passage's label and separators cost in the context (``[12] `` and a blank line).
PASSAGE_OVERHEAD = 6


def output_reserve(settings: ChatSettings) -> int:
    return min(settings.max_tokens, settings.context_window // 2)


def history_contents(history: Sequence[HistoryRound]) -> list[str]:
    return [text for r in history for text in (r.query, r.answer)]


def knowledge_budget(settings: ChatSettings, system: str, history: Sequence[HistoryRound], frame: str) -> int:
    """Tokens the passages may take: 97 % of the window left after the answer's share, the system prompt, the
    history and the user message without its passages (``frame``)."""
    used = count_messages([system, *history_contents(history), frame])
    return max(0, int(KNOWLEDGE_SHARE * (settings.context_window - output_reserve(settings) - used)))


@dataclass(frozen=True)
class Fitted:
    """The passages kept (best first, the last possibly cut) and what was dropped."""

    passages: list[str]
    dropped: int = 0
    truncated: bool = False
    tokens: int = 0


def fit_passages(passages: Sequence[str], budget: int) -> Fitted:
    kept: list[str] = []
    used = 0
    for passage in passages:
        cost = count_tokens(passage) + PASSAGE_OVERHEAD
        if used + cost <= budget:
            kept.append(passage)
            used += cost
            continue
        if not kept:  # not even the best passage fits: the part of it that does
            cut = truncate_to_tokens(passage, budget - PASSAGE_OVERHEAD)
            if cut:
                return Fitted([cut], len(passages) - 1, True, count_tokens(cut) + PASSAGE_OVERHEAD)
        break
    return Fitted(kept, len(passages) - len(kept), False, used)


def message_limit(settings: ChatSettings) -> int:
    return int(MESSAGE_SHARE * settings.context_window)


@dataclass
class MessageFit:
    """The history rounds kept, how many passages must go, and the lowered ``max_tokens``."""

    history: list[HistoryRound]
    dropped_rounds: int = 0
    drop_passages: int = 0
    max_tokens: int = 0
    prompt_tokens: int = 0
    notes: dict[str, int] = field(default_factory=dict)


def fit_messages(
    settings: ChatSettings,
    system: str,
    history: Sequence[HistoryRound],
    user_frame: str,
    passage_costs: Sequence[int] = (),
) -> MessageFit:
    """Drop the oldest rounds, then the lowest-ranked passages (``passage_costs``, best first), until the messages
    take at most 95 % of the window. ``user_frame`` is the user message without its passages."""
    limit = message_limit(settings)
    rounds = list(history)
    costs = list(passage_costs)
    fixed = count_messages([system, user_frame])
    total = fixed + count_messages(history_contents(rounds)) + sum(costs)
    dropped_rounds = 0
    while total > limit and rounds:
        first = rounds.pop(0)
        total -= count_tokens(first.query) + count_tokens(first.answer) + 2 * MESSAGE_OVERHEAD
        dropped_rounds += 1
    drop = 0
    while total > limit and costs:
        total -= costs.pop()
        drop += 1
    if total > limit:
        raise InputError(
            f"the system prompt and the question take about {fixed} tokens, more than {MESSAGE_SHARE:.0%} of the chat "
            f"model's context window ({settings.context_window}); shorten them or raise RAGSTEP_CHAT_CONTEXT_WINDOW"
        )
    return MessageFit(
        history=rounds,
        dropped_rounds=dropped_rounds,
        drop_passages=drop,
        max_tokens=max(1, min(settings.max_tokens, settings.context_window - total)),
        prompt_tokens=total,
    )


def fit_state(state: PipelineState, system: str) -> tuple[PipelineState, TraceEvent | None]:
    """The state with the history and ``max_tokens`` fitted to the window (the knowledge was fitted when the message
    was built; the plain chat pipelines have none), and the trace of what was dropped (None when nothing was)."""
    settings = state.chat.settings
    frame = state.chat.user_content or state.request.query
    fit = fit_messages(settings, system, state.chat.history, frame)
    if not fit.dropped_rounds and fit.max_tokens == settings.max_tokens:
        return state, None
    chat = state.chat.model_copy()
    chat.history, chat.settings = fit.history, settings.with_max_tokens(fit.max_tokens)
    event = TraceEvent(
        stage=STAGE,
        action="degrade",
        reason="context_window",
        counts={"dropped_rounds": fit.dropped_rounds, "max_tokens": fit.max_tokens},
        detail={"context_window": settings.context_window, "prompt_tokens": fit.prompt_tokens},
    )
    return state.with_chat(chat), event
