"""``stream_filter``: what of the model's output reaches the reader, and the fallback when nothing usable does.

* ``<think>...</think>`` is reasoning, not answer: it is moved to the reasoning channel, even when a tag is split
  across chunks (a partial tag at the end of a chunk is held back until the next one decides it).
* An answer that starts with the no-match prefix (WeKnora's ``NO_MATCH``, after any reasoning) means "the context
  does not answer": the text is held back until it is clear whether it starts with the prefix, and dropped if it does.
* When no usable answer came out (nothing, only reasoning, or the prefix), the fallback strategy answers instead:
  ``fixed`` (the fallback response) or ``model`` (the fallback prompt, sent to the chat model without the context).
  The default is ``model``, and ``fixed`` with a model that cannot generate freely (the extractive answerer).

Why this is not a stage of its own in the pipelines: a pipeline streams through one final ``Stream`` step, so the
filter runs inside ``chat_completion_stream`` (per chunk) and ``chat_completion`` (on the whole answer). It is
recorded as its own ``stream_filter`` row of the trace, so the stage table still shows what it did.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ragstep.models import FallbackStrategy, PipelineState, TraceEvent
from ragstep.models.message_language import message_language_of
from ragstep.ports import ChatDelta, ChatMessage
from ragstep.stages.chat import prompts
from ragstep.stages.chat.common import options

if TYPE_CHECKING:
    from ragstep.ports import ChatModel

STAGE = "stream_filter"
OPEN, CLOSE = "<think>", "</think>"


def _partial_tag(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag`` (0 if none)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class AnswerFilter:
    """Feed chunks in order; each call returns the (answer, reasoning) text that may be shown now."""

    def __init__(self, no_match_prefix: str = "NO_MATCH") -> None:
        self.prefix = no_match_prefix.strip()
        self._held = ""  # a possible partial tag
        self._in_think = False
        self._head = ""  # visible text not yet shown: it may still turn out to be the no-match prefix
        self._decided = not self.prefix
        self._started = False  # some answer text has been shown
        self.no_match = False
        # Parts, joined on demand: appending to one growing string copies it on every chunk.
        self._answer: list[str] = []
        self._reasoning: list[str] = []
        self.removed_think = 0

    @property
    def answer(self) -> str:
        return "".join(self._answer)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    def feed(self, text: str) -> tuple[str, str]:
        if not self._held and "<" not in text:  # the common chunk: no tag can start in it
            if self._in_think:
                self._reasoning.append(text)
                return "", text
            return self._show(text), ""
        buf = self._held + text
        self._held = ""
        visible: list[str] = []
        thought: list[str] = []
        while buf:
            tag = CLOSE if self._in_think else OPEN
            at = buf.find(tag)
            if at >= 0:
                (thought if self._in_think else visible).append(buf[:at])
                buf = buf[at + len(tag) :]
                self._in_think = not self._in_think
                self.removed_think += not self._in_think  # one more block closed
                continue
            keep = _partial_tag(buf, tag)
            (thought if self._in_think else visible).append(buf[: len(buf) - keep])
            self._held = buf[len(buf) - keep :]
            break
        reasoning = "".join(thought)
        self._reasoning.append(reasoning)
        return self._show("".join(visible)), reasoning

    def flush(self) -> tuple[str, str]:
        """The end of the stream: held text is released (a lone partial tag is ordinary text)."""
        held, self._held = self._held, ""
        if self._in_think:
            self._reasoning.append(held)
            return self._show("", final=True), held
        return self._show(held, final=True), ""

    def _show(self, text: str, final: bool = False) -> str:
        if self.no_match:
            return ""
        if not self._decided:
            self._head += text
            head = self._head.lstrip()
            if head.startswith(self.prefix):
                self.no_match, self._decided = True, True
                return ""
            if not final and self.prefix.startswith(head):
                return ""  # still undecided (possibly empty so far)
            self._decided, text, self._head = True, self._head, ""
        if not self._started:
            text = text.lstrip()  # the blank lines a model leaves after </think>
            self._started = bool(text)
        self._answer.append(text)
        return text

    @property
    def usable(self) -> bool:
        return not self.no_match and any(part.strip() for part in self._answer)


def strategy(state: PipelineState, model: ChatModel) -> FallbackStrategy:
    configured = state.chat.settings.fallback_strategy
    if not model.generative:
        return "fixed"  # it can only quote: a "model" fallback would quote nothing
    return configured or "model"


def fixed_response(state: PipelineState) -> str:
    return (
        state.chat.settings.fallback_response
        or prompts.FALLBACK_RESPONSE[message_language_of(state.request.query, state.chat.language)]
    )


def fallback_messages(state: PipelineState) -> list[ChatMessage]:
    template = state.chat.settings.fallback_prompt or prompts.FALLBACK_PROMPT[state.chat.language]
    return [ChatMessage("user", prompts.fill(template, query=state.request.query))]


def model_fallback(state: PipelineState, model: ChatModel) -> Iterator[ChatDelta]:
    """The fallback prompt's answer, streamed (the caller closes it if its reader goes)."""
    return model.stream(fallback_messages(state), options(state.chat.settings))


def trace(flt: AnswerFilter, fallback: FallbackStrategy | None, reason: str | None) -> TraceEvent:
    return TraceEvent(
        stage=STAGE,
        action="fallback" if fallback else "run",
        reason=reason,
        counts={
            "answer_chars": len(flt.answer),
            "reasoning_chars": len(flt.reasoning),
            "think_blocks": flt.removed_think,
        },
        detail={"strategy": fallback} if fallback else {},
    )


def no_answer_reason(flt: AnswerFilter) -> str:
    return "no_match" if flt.no_match else "empty_answer"
