"""The embedded default chat model: no language model, an answer quoted from the retrieved passages.

It quotes the sentences of the grounding passages that answer the question, each with the ``[n]`` citation of its
passage, up to ``max_chars``, or says that the passages do not answer. Which sentences, and whether any, is decided
by :mod:`ragstep.retrieval.answer_span` (the method and why: its docstring): the sentence is selected by meaning
(the question and each sentence embedded by the configured embedding model, which the grounding carries), the
question's rare words a sentence shares, the passage's retrieval score and the question's type; the decision to
answer is taken apart, and also asks that the sentence hold the kind of value the question asks for (a depth, a
duration, a year) and that its passage hold the names the question asks about. A quoted sentence that cannot be read
alone comes with its neighbour in the paragraph ("However, ..." with the sentence before; an option's or a
function's first sentence with the detail after: :mod:`ragstep.retrieval.answer_window`). A table row is quoted with
its column headers, a heading that states a fact as the heading, and a question asking which items a section lists
is answered with the list under the heading that names it, cut at a whole item when it is longer than the answer
may be (:mod:`ragstep.retrieval.answer_layout`). The question is read up to
:data:`~ragstep.retrieval.answer_span.MAX_QUESTION_CHARS` characters. Its name,
``extractive``, travels in every response and trace, so a quoted answer is never mistaken for a generated one.
A decline says why (:mod:`ragstep.retrieval.answer_decline`: the kind of value asked for that no sentence states, a
name of the question the passage lacks, or the closest sentence and its support under the threshold): the response's
``decline``, which the answer stage writes in its trace row and the answer's note; its text is the same whatever the
reason.

A follow-up the pipeline resolved without a model (searched with the subject it leaves out) is answered by the
user's own words, the subject only helping to read them, and not with the sentence that answered the previous
question when it holds nothing of the new ask, nor from another document than the one that answer quoted
(:mod:`ragstep.retrieval.follow_up_answer`; the grounding carries the query as searched, the previous turn and each
passage's document).

The sentence vectors it computes are kept (a bounded cache on the instance, :data:`~ragstep.retrieval.answer_span
.CACHE_SIZE` sentences): the same passages asked about again cost one query embedding.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping, Sequence

import numpy as np

from ragstep.models import Language, language_of
from ragstep.models.llm import SentenceEncoder
from ragstep.models.message_language import MessageLanguage, message_language_of
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.ports import ChatDelta, ChatGrounding, ChatMessage, ChatOptions, ChatResponse, ChatUsage
from ragstep.retrieval.answer_decline import Decline
from ragstep.retrieval.answer_span import (
    ANSWER_THRESHOLD,
    MAX_QUESTION_CHARS,
    MIN_SENTENCE_COVERAGE,
    Assessment,
    Quote,
    assess,
)
from ragstep.retrieval.follow_up_answer import assess_follow_up
from ragstep.retrieval.sentences import split_sentences
from ragstep.retrieval.tokens import count_messages, count_tokens, truncate_to_tokens

__all__ = [
    "NAME",
    "NO_ANSWER",
    "NO_CONTEXT",
    "ExtractiveChatModel",
    "extract",
    "extract_answer",
    "render_quotes",
    "split_sentences",
]

NAME = "extractive"

#: The decline, in the question's language (:func:`~ragstep.models.message_language.message_language_of`).
NO_ANSWER: dict[MessageLanguage, str] = {
    "en": "The retrieved passages do not answer this question.",
    "zh": "检索到的资料中没有能回答这个问题的内容。",
    "fr": "Les passages trouvés ne répondent pas à cette question.",
    "de": "Die gefundenen Textstellen beantworten diese Frage nicht.",
    "es": "Los pasajes recuperados no responden a esta pregunta.",
}
NO_CONTEXT: dict[MessageLanguage, str] = {
    "en": "There are no retrieved passages to answer from.",
    "zh": "没有检索到可用于回答的资料。",
    "fr": "Aucun passage n'a été trouvé sur lequel fonder une réponse.",
    "de": "Es wurden keine Textstellen gefunden, auf die sich eine Antwort stützen könnte.",
    "es": "No se ha recuperado ningún pasaje en el que basar una respuesta.",
}


def extract_answer(
    question: str,
    passages: Sequence[str],
    max_chars: int,
    *,
    scores: Sequence[float] = (),
    encoder: SentenceEncoder | None = None,
    scale: ScoreScale = COMMON_SCALE,
    vectors: MutableMapping[str, np.ndarray] | None = None,
    searched: str = "",
    previous: tuple[str, str] = ("", ""),
    documents: Sequence[str] = (),
) -> list[str]:
    """The answer's pieces (each a quoted sentence and its citation), or one sentence saying there is none.

    A follow-up (``searched``: the question with the subject retrieval added; ``previous``: the turn before's question
    and answer) is answered as :func:`~ragstep.retrieval.follow_up_answer.assess_follow_up` says."""
    return extract(
        question,
        passages,
        max_chars,
        scores=scores,
        encoder=encoder,
        scale=scale,
        vectors=vectors,
        searched=searched,
        previous=previous,
        documents=documents,
    )[0]


def extract(
    question: str,
    passages: Sequence[str],
    max_chars: int,
    *,
    scores: Sequence[float] = (),
    encoder: SentenceEncoder | None = None,
    scale: ScoreScale = COMMON_SCALE,
    vectors: MutableMapping[str, np.ndarray] | None = None,
    searched: str = "",
    previous: tuple[str, str] = ("", ""),
    documents: Sequence[str] = (),
) -> tuple[list[str], dict[str, object] | None]:
    """:func:`extract_answer`'s pieces, and when it declines why (:func:`why`, as a trace row's detail; a
    follow-up's from the assessment that decided it: :func:`~ragstep.retrieval.follow_up_answer.assess_follow_up`)."""
    language = language_of(question[:MAX_QUESTION_CHARS])
    if not any(p.strip() for p in passages):
        return [NO_CONTEXT[message_language_of(question[:MAX_QUESTION_CHARS])]], None
    if searched:
        quotes, a = assess_follow_up(
            question,
            passages,
            searched=searched,
            previous=previous,
            scores=scores,
            encoder=encoder,
            scale=scale,
            vectors=vectors,
            documents=documents,
        )
    else:
        a = assess(question, passages, scores=scores, encoder=encoder, scale=scale, vectors=vectors)
        quotes = a.quotes if a.answers(ANSWER_THRESHOLD) else []
    reason = None if quotes else why(a, ANSWER_THRESHOLD)
    decline = None if reason is None else reason.as_detail()
    if not quotes:
        return [NO_ANSWER[message_language_of(question[:MAX_QUESTION_CHARS])]], decline
    return render_quotes(quotes, max_chars, language), None


def render_quotes(quotes: Sequence[Quote], max_chars: int, language: Language) -> list[str]:
    """The quotes as the answer's pieces: best first as many as fit in ``max_chars`` (a quote whose neighbour does
    not fit is quoted as its sentence alone), then back into context order to read naturally, each followed by its
    passage's ``[n]``. A sentence two passages both hold (the licence paragraph of two manual pages, an overlap)
    is quoted once, from the best: said twice it reads as a glitch."""
    chosen: list[Quote] = []
    seen: set[str] = set()
    used = 0
    for q in quotes:
        said = " ".join(q.text.split())
        if said in seen:
            continue
        seen.add(said)
        cost = len(q.text) + len(f" [{q.passage}]") + 1
        if q.sentence and used + cost > max_chars:
            q = Quote(q.passage, q.position, q.sentence, q.score)
            cost = len(q.text) + len(f" [{q.passage}]") + 1
        if chosen and used + cost > max_chars:
            continue
        chosen.append(q)
        used += cost
    chosen.sort(key=lambda q: (q.passage, q.position))
    joiner = "" if language == "zh" else " "
    pieces = []
    for i, q in enumerate(chosen):
        text = q.text if len(q.text) <= max_chars else _cut(q.text, max_chars)
        pieces.append(f"{joiner if i else ''}{text} [{q.passage}]")
    return pieces


def _cut(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` with "…": after its last whole line that fits when it is a list (a section's
    items: :mod:`ragstep.retrieval.answer_layout`), else mid-text."""
    head = text[: max_chars - 2]
    if "\n" in head:
        return head[: head.rindex("\n")] + "\n…"
    return text[: max_chars - 1] + "…"


#: A sentence a decline's hint quotes is cut to this many characters.
MAX_HINT_CHARS = 240


def why(assessment: Assessment, threshold: float) -> Decline | None:
    """Why ``assessment`` declines at ``threshold`` (None when it answers): the check its selected sentence failed
    (:attr:`~ragstep.retrieval.answer_span.Assessment.failed`), else its support under the threshold, with that
    sentence -- the one the decision read, quoted first -- and its passage as the hint."""
    if assessment.answers(threshold):
        return None
    if not assessment.quotes:
        return Decline("no_sentence")
    failed = assessment.failed
    if failed is not None:
        return Decline(failed.check, failed.what, failed.passage, failed.anywhere)
    best = assessment.quotes[0]
    text = " ".join((best.sentence or best.text).split())
    if len(text) > MAX_HINT_CHARS:
        text = text[: MAX_HINT_CHARS - 1] + "…"
    semantic = assessment.semantic
    bar = threshold if semantic else MIN_SENTENCE_COVERAGE
    reason = "under_threshold" if semantic else "few_words"
    return Decline(reason, (), best.passage, sentence=text, support=assessment.support, threshold=bar)


class ExtractiveChatModel:
    """Quotes the grounding passages; ``max_chars`` caps an answer's length.

    It answers as a model's API does in what a client can see: ``options.max_tokens`` cuts the answer (finish reason
    ``length``), and the usage is counted with ragstep's token estimator (:mod:`ragstep.retrieval.tokens`), marked
    ``estimated`` -- the messages it was given as the prompt, its answer as the completion -- not reported as zeros.
    """

    name = NAME
    generative = False

    def __init__(self, max_chars: int = 600) -> None:
        self.max_chars = max_chars
        self._vectors: dict[str, np.ndarray] = {}  # sentence -> vector, bounded by answer_span.CACHE_SIZE

    def _pieces(
        self, messages: Sequence[ChatMessage], grounding: ChatGrounding | None, max_tokens: int | None
    ) -> tuple[list[str], bool, dict[str, object] | None]:
        """The answer's pieces within ``max_tokens`` (estimated), whether they were cut to fit, and why it declined
        (:func:`extract`)."""
        if grounding is None:  # called without its material: answer from nothing rather than parse a prompt
            question = next((m.content for m in reversed(messages) if m.role == "user"), "")
            grounding = ChatGrounding(question=question)
        pieces, decline = extract(
            grounding.question,
            grounding.passages,
            grounding.max_chars or self.max_chars,
            scores=grounding.scores,
            encoder=grounding.encoder,
            scale=grounding.encoder_scale,
            vectors=self._vectors,
            searched=grounding.searched,
            previous=(grounding.previous_question, grounding.previous_answer),
            documents=grounding.documents,
        )
        if max_tokens is None:
            return pieces, False, decline
        kept: list[str] = []
        used = 0
        for piece in pieces:
            cost = count_tokens(piece)
            if used + cost > max_tokens:
                cut = truncate_to_tokens(piece, max_tokens - used)
                return [*kept, cut] if cut else kept, True, decline
            kept.append(piece)
            used += cost
        return kept, False, decline

    @staticmethod
    def _usage(messages: Sequence[ChatMessage], answer: str) -> ChatUsage:
        prompt, completion = count_messages(m.content for m in messages), count_tokens(answer)
        return ChatUsage(prompt, completion, prompt + completion, estimated=True)

    def complete(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> ChatResponse:
        pieces, cut, decline = self._pieces(messages, grounding, options.max_tokens)
        text = "".join(pieces)
        finish = "length" if cut else "stop"
        usage = self._usage(messages, text)
        return ChatResponse(content=text, usage=usage, model=NAME, finish_reason=finish, decline=decline)

    def stream(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> Iterator[ChatDelta]:
        pieces, cut, decline = self._pieces(messages, grounding, options.max_tokens)
        for piece in pieces:
            yield ChatDelta(content=piece)
        usage = self._usage(messages, "".join(pieces))
        yield ChatDelta(usage=usage, finish_reason="length" if cut else "stop", decline=decline)
