"""The model-free answer to a follow-up: chosen by what the follow-up asks, the conversation's subject only to read it.

Without a model a follow-up is searched with the subject it leaves out (:mod:`ragstep.retrieval.followup`: "and how
do I cancel a job with a colon in its name?" + "default queue timeout"). That query finds the right document, but read
whole by the answerer (:mod:`ragstep.retrieval.answer_span`) the added words outweigh the follow-up's own: their
sentence -- usually the one the previous turn already quoted -- wins, or nothing reaches the threshold and the
question is declined. So the answer is chosen as follows:

* **Own words choose.** The words-based parts of the choice (the share of the question's terms a sentence holds, the
  kind of value asked for, the names the passage must hold) read the user's own question only.
* **The subject helps read them.** The question's meaning is read half on its own words and half with the subject
  (the query vector is the mean of the two embeddings, so each sentence's similarity is the mean of its similarity
  to each): "how do I list all of them?" after a question about kill's signals still means the signals, while the
  subject alone does not pull every sentence about kill ahead. The passages themselves, and their retrieval scores,
  come from the search with the subject: that is where it disambiguates (which page's ``-v``).
* **Not the same answer again.** The sentence that answered the previous question (the previous answer's only
  quote, or of several the one closest in meaning to the previous question: the others were quoted beside it) is
  stale for a new ask when it holds none of the words the follow-up adds to the previous question: it was chosen
  for the subject ("and can I undo it later?" answered again with the upgrade command). It is left out, and when
  nothing else was chosen the answer is the sentence that answers without it (the same decision, the same
  threshold), or none. A repeat that holds the new ask's words stands (one sentence may answer both questions), as
  does a sentence the previous answer quoted beside its answer ("who wrote it?" after an answer that quoted the
  by-line second).

The threshold is the standalone question's (:data:`~ragstep.retrieval.answer_span.ANSWER_THRESHOLD`): read on its own
words a follow-up's support sits lower than the same question asked whole (it shares fewer words with its sentence),
so a few answerable follow-ups are declined ("who led that release?" selects the release's by-line, below the
threshold); on the follow-up set this traded for declining every unanswerable follow-up, where the question as
searched answered them with the subject's sentences. Without an embedding model the question as searched is read,
as before.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping, Sequence

import numpy as np

from ragstep.models.llm import SentenceEncoder
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.retrieval.answer_span import Quote, choose
from ragstep.retrieval.text import token_set, tokenize

_MARKER = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")


class InContext:
    """An encoder whose query vector is the mean of the question's and of ``context``'s: a sentence's cosine with it
    is the mean of its cosines with each (passages are embedded as by ``encoder``)."""

    def __init__(self, encoder: SentenceEncoder, context: str) -> None:
        self.encoder = encoder
        self.context = context

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        own = np.asarray(self.encoder.embed_query(text), dtype=np.float32)
        if not self.context or self.context == text:
            return own
        return (own + np.asarray(self.encoder.embed_query(self.context), dtype=np.float32)) / 2


def _said(text: str) -> str:
    return " ".join(_MARKER.sub(" ", text).split()).casefold()


def _repeats(quote: Quote, said: str) -> bool:
    """Whether the previous answer (``said``, normalised) already quoted ``quote``'s sentence."""
    sentence = " ".join((quote.sentence or quote.text).split()).casefold()
    return bool(said) and bool(sentence) and sentence in said


def _without(passage: str, sentences: Sequence[str]) -> str:
    for sentence in sentences:
        words = sentence.split()
        if words:
            passage = re.sub(r"\s+".join(map(re.escape, words)), " ", passage)
    return passage


def _previous_answer_sentence(reader: SentenceEncoder | None, answer: str, before: str) -> str:
    """The sentence of the previous answer that answered the previous question ``before`` (normalised): its only
    quote, or of several the one that reads closest to ``before`` (the others were quoted beside it)."""
    pieces = [_said(p) for p in _MARKER.split(answer) if p.strip()]
    if len(pieces) < 2 or reader is None or not before:
        return pieces[0] if len(pieces) == 1 else ""
    vectors = np.asarray(reader.embed(pieces), dtype=np.float32)
    return pieces[int(np.argmax(vectors @ np.asarray(reader.embed_query(before), dtype=np.float32)))]


def _new_words(question: str, previous_question: str) -> set[str]:
    return set(tokenize(question)) - set(tokenize(previous_question))


def choose_follow_up(
    question: str,
    passages: Sequence[str],
    *,
    searched: str = "",
    previous: tuple[str, str] = ("", ""),
    scores: Sequence[float] = (),
    encoder: SentenceEncoder | None = None,
    scale: ScoreScale = COMMON_SCALE,
    vectors: MutableMapping[str, np.ndarray] | None = None,
) -> list[Quote]:
    """The sentences that answer the follow-up ``question`` (the user's own words), best first, or none (module
    docstring); ``searched`` is the question with its subject as retrieval searched it, ``previous`` the question
    and the answer of the turn before."""
    # The sentence that answered the previous question, and the words the follow-up asks with that the previous
    # question did not: that sentence again, holding none of them, was chosen for the subject, not for the new ask.
    answered = _previous_answer_sentence(encoder, previous[1], previous[0])
    new = _new_words(question, previous[0])

    def pick(asked: str, reader: SentenceEncoder | None, texts: Sequence[str]) -> list[Quote]:
        quotes = choose(asked, texts, scores=scores, encoder=reader, scale=scale, vectors=vectors)
        stale = [q for q in quotes if new and _repeats(q, answered) and not token_set(q.text) & new]
        kept = [q for q in quotes if q not in stale]
        if kept or not stale:
            return kept
        # All it found was said before for the subject: another sentence that answers the new ask, if one does.
        gone = [q.sentence or q.text for q in stale]
        return choose(
            asked, [_without(p, gone) for p in texts], scores=scores, encoder=reader, scale=scale, vectors=vectors
        )

    if encoder is None:  # no meaning to read the own words by: the words of the question as searched
        return pick(searched or question, None, passages)
    return pick(question, InContext(encoder, searched) if searched and searched != question else encoder, passages)
