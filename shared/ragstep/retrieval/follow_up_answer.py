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
* **The subject's documents answer.** A follow-up asks about the same thing as the question before it, so when the
  previous answer quoted a sentence, the follow-up's answer is a sentence of the documents it quoted from
  (:func:`subject_documents`). Two tools' pages hold the same kind of option ("and can I set their permissions at the
  same time?" after an answer quoted from mkdir's page: install's "-m, --mode=MODE set permission mode" reads closer
  to the words than mkdir's "set file mode"): the subject, which the follow-up leaves out, is what tells them apart.
  The sentence is selected among the subject's documents' when they have any candidate; the features, the background
  and the threshold stay those of every retrieved sentence, so a sentence of another document is never quoted and the
  support read is never above the best sentence's of all. The cost: a fact only another document states about the
  same subject is declined. When the previous answer declined there is no such evidence and nothing is kept to: tried
  and left out on the follow-up sets, the document the previous search ranked first (a declined question was often
  searched off its subject: "how do I print the numbers from 1 to 10?" ranked numfmt's page above seq's), the one
  this search ranked first (cp's page above chown's for a chown follow-up), and the one holding most of the previous
  question's rare words, or a word no other document holds (incidental words, "side by side", singled out the wrong
  page): each turned as many right answers wrong as wrong ones right.
* **Not the same answer again.** The sentence that answered the previous question (the previous answer's only
  quote, or of several the one closest in meaning to the previous question: the others were quoted beside it) is
  stale for a new ask when it holds none of the words the follow-up adds to the previous question: it was chosen
  for the subject ("and can I undo it later?" answered again with the upgrade command). It is left out, and when
  nothing else was chosen the answer is the sentence that answers without it (the same decision, the same
  threshold), or none. A repeat that holds the new ask's words stands (one sentence may answer both questions:
  "when did it open?" after "where is the Austin office?" answered with "The Austin office opened in 2021 and is
  located at ..."), as does a sentence the previous answer quoted beside its answer ("who wrote it?" after an
  answer that quoted the by-line second). The words are compared as the answer's choice compares them, each as the
  one form of its inflections (:func:`~ragstep.retrieval.answer_terms.stems`: "open" / "opened", "freeze" /
  "frozen"), in the follow-up's language: a word the follow-up asks in another inflection than the previous
  question, or than the sentence states it, is the same word. "Who manages it?" after the same question holds no
  word of that sentence, which is not given again.

The threshold is the standalone question's (:data:`~ragstep.retrieval.answer_span.ANSWER_THRESHOLD`): read on its own
words a follow-up's support sits lower than the same question asked whole (it shares fewer words with its sentence),
so a few answerable follow-ups are declined ("who led that release?" selects the release's by-line, below the
threshold); on the follow-up set this traded for declining every unanswerable follow-up, where the question as
searched answered them with the subject's sentences. A follow-up's own lower threshold was read off the curve of two
development sets of two-turn conversations over manual pages (57 answerable last turns, 14 unanswerable): 0.80
answered 31 instead of 29, 0.75 34, both still declining 13-14 of 14; on held-out conversations they declined 1 of
5 and 1 of 2 unanswerable follow-ups (3 and 2 at 0.85): the standalone threshold is kept. Most answerable follow-ups
that are declined select the right sentence at a support of 0.77-0.85: what would separate them from the
unanswerable ones is not in these features. Without an embedding model the question as searched is read, as before.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping, Sequence

import numpy as np

from ragstep.models.llm import SentenceEncoder
from ragstep.models.message_language import MessageLanguage
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.retrieval.answer_span import ANSWER_THRESHOLD, Assessment, Quote, assess
from ragstep.retrieval.answer_terms import question_language, stems
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


def _new_words(question: str, previous_question: str) -> frozenset[str]:
    """The words ``question`` asks with that ``previous_question`` did not, each as the one form of its inflections
    (:func:`~ragstep.retrieval.answer_terms.stems`, in the follow-up's language): "open" after "where is the
    office?" is new, and held by "the office opened in 2021"."""
    language = question_language(question)
    return stems(tokenize(question), language) - stems(tokenize(previous_question), language)


def _holds_new(quote: Quote, new: frozenset[str], language: MessageLanguage) -> bool:
    """Whether ``quote``'s sentence (with the neighbour it is quoted with) holds a word of the new ask, in any of
    its inflections."""
    return bool(stems(token_set(quote.text), language) & new)


def subject_documents(
    passages: Sequence[str], documents: Sequence[str], previous_answer: str, answered: str = ""
) -> set[str]:
    """The documents the conversation is about, among ``documents`` (each passage's, in rank order): those the
    previous answer quoted from -- the passages holding ``answered`` (its sentence that answered the previous
    question, normalised), else any of its quotes. None when no passage holds a quote (it declined, or its passage
    was not found again) or a passage's document is unknown."""
    if not documents or len(documents) < len(passages):
        return set()
    said = [answered] if answered else []
    said += [p for p in (_said(piece).rstrip("…").strip() for piece in _MARKER.split(previous_answer)) if p]
    texts = [" ".join(p.split()).casefold() for p in passages]
    for quote in said:
        # A passage without a document id (a web result) names no document to keep to.
        found = {documents[i] for i, text in enumerate(texts) if documents[i] and quote and quote in text}
        if found:
            return found
    return set()


def assess_follow_up(
    question: str,
    passages: Sequence[str],
    *,
    searched: str = "",
    previous: tuple[str, str] = ("", ""),
    scores: Sequence[float] = (),
    encoder: SentenceEncoder | None = None,
    scale: ScoreScale = COMMON_SCALE,
    vectors: MutableMapping[str, np.ndarray] | None = None,
    documents: Sequence[str] = (),
) -> tuple[list[Quote], Assessment]:
    """The sentences that answer the follow-up ``question`` (the user's own words), best first, or none (module
    docstring); ``searched`` is the question with its subject as retrieval searched it, ``previous`` the question
    and the answer of the turn before, ``documents`` each passage's document (:func:`subject_documents`). With them,
    the assessment that decided them: when none answers, the one whose failed check or support says why the
    follow-up is declined (the choice without the previous answer's stale sentence, when that was all the first
    choice found)."""
    # The sentence that answered the previous question, and the words the follow-up asks with that the previous
    # question did not: that sentence again, holding none of them, was chosen for the subject, not for the new ask.
    answered = _previous_answer_sentence(encoder, previous[1], previous[0])
    new = _new_words(question, previous[0])
    language = question_language(question)
    subject = subject_documents(passages, documents, previous[1], answered)
    within = [bool(subject) and d in subject for d in documents]

    def pick(asked: str, reader: SentenceEncoder | None, texts: Sequence[str]) -> tuple[list[Quote], Assessment]:
        def among(texts: Sequence[str]) -> tuple[list[Quote], Assessment]:
            a = assess(asked, texts, scores=scores, encoder=reader, scale=scale, vectors=vectors, within=within)
            return (a.quotes if a.answers(ANSWER_THRESHOLD) else []), a

        quotes, a = among(texts)
        stale = [q for q in quotes if new and _repeats(q, answered) and not _holds_new(q, new, language)]
        kept = [q for q in quotes if q not in stale]
        if kept or not stale:
            return kept, a
        # All it found was said before for the subject: another sentence that answers the new ask, if one does.
        gone = [q.sentence or q.text for q in stale]
        return among([_without(p, gone) for p in texts])

    if encoder is None:  # no meaning to read the own words by: the words of the question as searched
        return pick(searched or question, None, passages)
    return pick(question, InContext(encoder, searched) if searched and searched != question else encoder, passages)
