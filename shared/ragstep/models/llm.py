"""The value types a chat model takes and returns (the :class:`ragstep.ports.ChatModel` port's wire).

Plain frozen dataclasses, not pydantic models: they are built per token on the streaming path.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """Sampling settings of one call; None leaves the provider's default."""

    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    #: Ask for one JSON object: a provider with a JSON mode (OpenAI-compatible ``response_format``) is held to it;
    #: one without ignores it, and the prompt, which asks for JSON too, is all there is.
    json_object: bool = False


@dataclass(frozen=True, slots=True)
class ChatGrounding:
    """What the messages were built from: the question and the numbered passages (``[1]`` is ``passages[0]``).

    A language model reads all of it from the messages and ignores this; a model-free answerer cannot parse a
    prompt reliably, so it reads the same material here."""

    question: str
    passages: tuple[str, ...] = ()
    #: The answer's length cap for such an answerer (None: its own default).
    max_chars: int | None = None


@dataclass(frozen=True, slots=True)
class ChatUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ChatResponse:
    content: str
    reasoning: str = ""
    usage: ChatUsage | None = None
    #: The model that answered, as the provider names it.
    model: str = ""
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ChatDelta:
    """One piece of a streamed answer: answer text, reasoning text, or (usually last) usage and finish reason."""

    content: str = ""
    reasoning: str = ""
    usage: ChatUsage | None = None
    finish_reason: str | None = None
