"""The value types a chat model takes and returns (the :class:`ragstep.ports.ChatModel` port's wire).

Plain frozen dataclasses, not pydantic models: they are built per token on the streaming path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ragstep.models.scale import COMMON_SCALE, ScoreScale

if TYPE_CHECKING:
    import numpy as np


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
    #: Each passage's retrieval score (the pipeline's final score, 0-1), in passage order; () when unknown.
    scores: tuple[float, ...] = ()
    #: An embedding model to compare the question with the passages' sentences by meaning (None: words only),
    #: given only to a model that is not generative, and the scale its cosines sit on.
    encoder: SentenceEncoder | None = None
    encoder_scale: ScoreScale = COMMON_SCALE
    #: A follow-up's question as retrieval searched it, with the subject it leans on ("" when searched as asked):
    #: ``question`` is then the user's own words, which choose the answer; this helps read what they refer to.
    searched: str = ""
    #: The conversation's previous question and answer: the answer not to be given again for a new ask.
    previous_question: str = ""
    previous_answer: str = ""
    #: Each passage's document (its knowledge id), in passage order; () when unknown: a follow-up's answer is read
    #: from the documents of the conversation's subject.
    documents: tuple[str, ...] = ()


class SentenceEncoder(Protocol):
    """What a model-free answerer needs of an embedding model (:class:`ragstep.ports.Embedder` has this shape):
    passages and queries embedded separately (e5 prefixes each), rows L2-normalised."""

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class ChatUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    #: Counted by ragstep's token estimator, not reported by a model (the extractive answerer has no tokenizer).
    estimated: bool = False


@dataclass(frozen=True, slots=True)
class ChatResponse:
    content: str
    reasoning: str = ""
    usage: ChatUsage | None = None
    #: The model that answered, as the provider names it.
    model: str = ""
    finish_reason: str | None = None
    #: Why a model-free answerer declined (its ``reason`` and what it read: the answer stage's trace row and note);
    #: None when it answered, or for a language model (its decline is its text).
    decline: dict[str, object] | None = None


@dataclass(frozen=True, slots=True)
class ChatDelta:
    """One piece of a streamed answer: answer text, reasoning text, or (usually last) usage and finish reason."""

    content: str = ""
    reasoning: str = ""
    usage: ChatUsage | None = None
    finish_reason: str | None = None
    #: Why a model-free answerer declined (as :attr:`ChatResponse.decline`), on the last delta.
    decline: dict[str, object] | None = None
