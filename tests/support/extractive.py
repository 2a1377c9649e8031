"""The model-free answerer asked directly over passages, as the answer tests ask it: no index, no pipeline, the
passages given with one retrieval score each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragstep.adapters.chat.extractive import ExtractiveChatModel
from ragstep.ports import ChatGrounding, ChatOptions

if TYPE_CHECKING:  # the model is loaded by the test module that asks, after it checked it is installed
    from ragstep.adapters.embedders.local import LocalEmbedder

#: The retrieval score each passage is given when a test names none: a well-retrieved passage.
RETRIEVED = 0.8


def ask(encoder: LocalEmbedder, question: str, passages: Sequence[str], scores: Sequence[float] | None = None) -> str:
    """The extractive answer to ``question`` over ``passages`` (``scores``: each passage's, else :data:`RETRIEVED`)."""
    return answer(encoder, question, passages, scores)[0]


def answer(
    encoder: LocalEmbedder, question: str, passages: Sequence[str], scores: Sequence[float] | None = None
) -> tuple[str, dict[str, object] | None]:
    """:func:`ask`'s answer and, when it declined, why (the response's ``decline`` detail)."""
    grounding = ChatGrounding(
        question,
        tuple(passages),
        scores=tuple(scores if scores is not None else [RETRIEVED] * len(passages)),
        encoder=encoder,
        encoder_scale=encoder.score_scale,
    )
    response = ExtractiveChatModel().complete([], ChatOptions(), grounding)
    return response.content, response.decline
