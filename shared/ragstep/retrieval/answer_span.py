"""Which sentences of the retrieved passages answer a question, or none: the model-free answerer's decision.

The ``extractive`` answerer (:mod:`ragstep.adapters.chat.extractive`) quotes what this module chooses. People do not
ask in the words of the document ("How often should I feed a sourdough starter?" over "feed it once a day"), so the
choice rests on meaning first and shared words second. A sentence's fit is

    semantic + LEX_WEIGHT x lexical + PRIOR_WEIGHT x passage score - (TYPE_PENALTY when the type is wrong)

* **semantic**: the cosine of the question (embedded as a query) and the sentence (as a passage; e5's ``query:`` /
  ``passage:`` prefixes come from the embedder's own ``embed_query`` / ``embed``), read on the common scale (the
  embedder's :class:`~ragstep.models.scale.ScoreScale`: unrelated text ~0, a relevant passage ~0.5), so the numbers
  below hold for any embedding model. A sentence is embedded under its heading and after the end of the sentence
  before it: on its own it often does not say what it is about ("It removes cold starts...").
* **lexical**: the share of the question's terms the sentence holds, each weighted by its rarity among the passages
  (``ln(1 + (N + 1) / (df + 0.5))``, keyword search's tokenisation): a name or number the question shares with one
  sentence says which sentence it is about; a term every passage holds says little.
* **passage score**: the pipeline's own judgement of the passage against the whole question (0-1): a sentence of the
  passage ranked first is likelier the answer than an equally close sentence of the tenth.
* **type**: a question that asks how often, how long / 多久, how many / 多少 is not answered by a sentence without a
  frequency, a duration or a number: such sentences lose :data:`TYPE_PENALTY`.

It answers when the best fit reaches :data:`ANSWER_THRESHOLD`, else it says the passages do not answer. It quotes the
best sentence and at most :data:`MAX_QUOTES` - 1 more within :data:`NEAR_BEST` x the best, each with its passage's
``[n]``: the smallest span that answers is a sentence (or a clause: ``;`` ends one too).

Why these numbers: the weights are round values chosen by what each signal is (semantic similarity leads, words and
the retriever's score break its ties), not fitted per set. The threshold is the operating point of the trade-off
curve in BENCHMARKS.md ("Answering without a model"): answered-correctly rate on answerable questions against the
decline rate on questions the corpus does not answer, over the threshold, on an English set of manual pages
(bench-sets/answer-en) and cmrc2018-zh, with a held-out part of each reported apart.

Without an embedding model (``RAGSTEP_EMBEDDING_PROVIDER=none``) there is no meaning to compare: the decision falls
back to words alone (the best sentence must hold :data:`MIN_SENTENCE_COVERAGE` of the question's weighted terms, its
passage :data:`MIN_PASSAGE_COVERAGE`).

Cost: one query embedding and one batch of at most :data:`MAX_SENTENCES` sentences (over that, those sharing the most
of the question's weighted terms in the best-ranked passages); a sentence seen before comes from the caller's cache
(``vectors``), so a follow-up over the same passages embeds only the question.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragstep.models.llm import SentenceEncoder
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.retrieval.text import query_terms, token_set

#: Weight of the rarity-weighted share of the question's terms a sentence holds (0-1).
LEX_WEIGHT = 0.3
#: Weight of the passage's retrieval score (0-1).
PRIOR_WEIGHT = 0.3
#: Subtracted from a sentence that lacks what the question's type asks for (a number, a duration, a frequency).
TYPE_PENALTY = 0.25
#: The best sentence's fit must reach this, or there is no answer (the curve's operating point).
ANSWER_THRESHOLD = 0.9
#: Quote sentences whose fit is at least this share of the best one's...
NEAR_BEST = 0.9
#: ...and at most this many.
MAX_QUOTES = 2
#: Sentences embedded per question (over that, those sharing the most weighted terms in the best-ranked passages).
MAX_SENTENCES = 32
#: The end of the sentence before, embedded with a sentence as its context (longer costs embedding time).
CONTEXT_CHARS = 120
#: Entries a caller's sentence-vector cache keeps (oldest dropped first).
CACHE_SIZE = 4096
#: Words-only fallback (no embedding model): the best sentence's and its passage's share of the weighted terms.
MIN_SENTENCE_COVERAGE = 0.45
MIN_PASSAGE_COVERAGE = 0.5

# A sentence ends at CJK or Latin terminal punctuation (kept) or at a line break. A "." inside a word or number
# (2.5, a URL) and the "!" of a Markdown image link do not end one.
_SENTENCE = re.compile(r"(?:[^。！？!?；;.\n]|\.(?!\s|$)|!(?=\[))+(?:[。！？!?；;]+|\.+(?=\s|$))?")
_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
#: CJK ideographs, CJK punctuation and full-width forms (code point ranges). Compared as numbers: the same class as
#: a regular expression costs ~3 ms to compile, in every new environment before its first answer.
_HAN_RANGES = ((0x3400, 0x9FFF), (0xF900, 0xFAFF), (0x3000, 0x303F), (0xFF00, 0xFFEF))
# What a question asks for, and what a sentence that answers it holds. The first kind that matches decides.
_EN_NUMBER_WORDS = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|hundred|"
    r"thousand|million|billion|half|dozen|single|double|several|few"
)
_NUMBER = rf"\d|[零一二两三四五六七八九十百千万亿半]|\b(?:{_EN_NUMBER_WORDS})\b"
_DURATION_UNITS = (
    r"second|minute|hour|day|night|week|month|year|decade|century|ms\b|秒|分钟|小时|钟头|天|日|周|星期|个月|年|世纪"
)
_FREQUENCY = (
    r"once|twice|times|daily|weekly|monthly|yearly|annually|hourly|every|each|per\b|always|never|often|"
    r"whenever|regularly|每|次|经常|总是"
)
_KINDS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (re.compile(question, re.IGNORECASE), re.compile(answer, re.IGNORECASE))
    for question, answer in (
        (r"\bhow\s+often\b|\bhow\s+frequently\b|多久一次|多长时间一次|几次|频率", _FREQUENCY + "|" + _NUMBER),
        (
            r"\bhow\s+long\b|\bfor\s+how\s+long\b|多久|多长时间|几个小时|几天|几年|多少天|多少年|多少小时",
            rf"(?:{_NUMBER}).{{0,12}}(?:{_DURATION_UNITS})|{_DURATION_UNITS}",
        ),
        (
            r"\bhow\s+(?:many|much|old|big|large|far|fast|tall|high|deep|wide|heavy)\b"
            r"|\bwhat\s+(?:percentage|percent|number|size|year|age)\b|\bwhich\s+year\b|多少|多大|多高|多远|多重|多深|多宽|几",
            _NUMBER,
        ),
    )
)


@dataclass(frozen=True, slots=True)
class Quote:
    """A sentence chosen to answer, with its passage (1-based: the ``[n]`` it is cited with) and its fit."""

    passage: int
    position: int
    text: str
    score: float


def _units(text: str) -> list[tuple[str, str]]:
    """Paragraphs and list items of Markdown-ish text, with hard-wrapped lines joined back together, each with the
    heading it is under ("" before any); headings, table rows and code fences are not units (a title is not an
    answer, but it says what the sentences under it are about)."""
    units: list[tuple[str, str]] = []
    current: list[str] = []
    heading = ""

    def close() -> None:
        if current:
            units.append((heading, _join(current)))
            current.clear()

    in_code = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            close()
            in_code = not in_code
            continue
        if not in_code and (line.startswith("#") or _is_plain_heading(line)):
            close()
            heading = line.lstrip("#").strip()
            continue
        if in_code or not line or line.startswith("|"):
            close()
            continue
        if _ITEM.match(line):  # a list item starts a unit of its own
            close()
            line = _ITEM.sub("", line)
        current.append(line)
    close()
    return units


def _is_plain_heading(line: str) -> bool:
    """A plain-text heading: a short line of capitals without terminal punctuation ("EXIT STATUS", "NOTES"), the
    way manual pages and text files title their sections."""
    letters = [c for c in line if c.isalpha()]
    return 0 < len(line) <= 40 and len(letters) >= 3 and all(c.isupper() for c in letters) and line[-1] not in ".!?。"


def _join(lines: list[str]) -> str:
    out = lines[0]
    for line in lines[1:]:
        # Chinese wraps without a space (either side of the break in CJK); other scripts had one there.
        out += line if _is_han(out[-1:]) or _is_han(line[:1]) else " " + line
    return out


def _is_han(char: str) -> bool:
    """``char`` (one character, or none) is in :data:`_HAN_RANGES`."""
    return bool(char) and any(lo <= ord(char) <= hi for lo, hi in _HAN_RANGES)


def sentences_under_headings(text: str) -> list[tuple[str, str]]:
    """The sentences of ``text``, each with the Markdown heading it is under ("" before any); Markdown image links
    and bare URLs stay inside their sentence."""
    out: list[tuple[str, str]] = []
    for heading, unit in _units(text):
        for match in _SENTENCE.finditer(unit):
            sentence = match.group(0).strip(" \t>")
            if sentence:
                out.append((heading, sentence))
    return out


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (:func:`sentences_under_headings` without the headings)."""
    return [sentence for _, sentence in sentences_under_headings(text)]


def expected_answer(question: str) -> re.Pattern[str] | None:
    """What a sentence that answers ``question`` must hold, when its type says (how often: a frequency; how long /
    多久: a duration; how many / 多少: a number; when: a time), else None."""
    for asks, holds in _KINDS:
        if asks.search(question):
            return holds
    return None


def term_weights(terms: frozenset[str], passages: Sequence[frozenset[str]]) -> dict[str, float]:
    """Each term's rarity among the passages: an IDF over the grounding (a term none holds weighs the most)."""
    n = len(passages)
    return {t: math.log(1 + (n + 1) / (sum(t in p for p in passages) + 0.5)) for t in terms}


_SUFFIX = re.compile(r"(?<=[a-z]{3})(?:ing|ed|es|s)$")


def _stems(tokens: Iterable[str]) -> frozenset[str]:
    """English words without their commonest inflection ("logs" / "log", "ships" / "ship", "stayed" / "stay"): a
    question and its answer seldom use the same form. Other scripts are left as they are."""
    return frozenset(_SUFFIX.sub("", t) if t.isascii() else t for t in tokens)


class _Coverage:
    """The rarity-weighted share of the question's terms a text holds (0 when the question has no terms)."""

    def __init__(self, question: str, passages: Sequence[str]) -> None:
        self.terms = _stems(query_terms(question))
        self.passage_terms = [_stems(token_set(p)) for p in passages]
        self.weight = term_weights(self.terms, self.passage_terms)
        self.total = sum(self.weight.values())

    def of(self, tokens: frozenset[str]) -> float:
        if not self.total:
            return 0.0
        return sum(self.weight[t] for t in self.terms & _stems(tokens)) / self.total


def _candidates(passages: Sequence[str]) -> list[tuple[int, int, str, str]]:
    """(passage number, position, sentence, the text embedded for it) of the passages, in order. A sentence is
    embedded under its heading and after the sentence before it ("Hybrid search: ... ragstep searches two ways at
    once.", "A sourdough starter is ... Feed it once a day."): on its own it often does not name what it is about."""
    out: list[tuple[int, int, str, str]] = []
    for n, passage in enumerate(passages, start=1):
        before = ""
        for i, (heading, sentence) in enumerate(sentences_under_headings(passage)):
            context = " ".join(t for t in (f"{heading}:" if heading else "", before[-CONTEXT_CHARS:]) if t)
            out.append((n, i, sentence, f"{context} {sentence}" if context else sentence))
            before = sentence
    return out


def _sentence_vectors(
    encoder: SentenceEncoder, texts: list[str], vectors: MutableMapping[str, np.ndarray] | None
) -> np.ndarray:
    """The passage-side vectors of ``texts``, the uncached ones embedded in one batch (and cached)."""
    cache = vectors if vectors is not None else {}
    missing = list(dict.fromkeys(t for t in texts if t not in cache))
    if missing:
        for text, vector in zip(missing, encoder.embed(missing), strict=True):
            if vectors is not None and len(cache) >= CACHE_SIZE:
                cache.pop(next(iter(cache)), None)
            cache[text] = vector
    return np.vstack([cache[t] for t in texts])


def fits(
    question: str,
    passages: Sequence[str],
    *,
    scores: Sequence[float] = (),
    encoder: SentenceEncoder | None = None,
    scale: ScoreScale = COMMON_SCALE,
    vectors: MutableMapping[str, np.ndarray] | None = None,
) -> list[Quote]:
    """Every candidate sentence with its fit (module docstring); without an encoder, its weighted term coverage."""
    candidates = _candidates(passages)
    if not candidates:
        return []
    coverage = _Coverage(question, passages)
    lexical = [coverage.of(token_set(text)) for _, _, text, _ in candidates]
    if encoder is None:
        return [Quote(n, i, text, lex) for (n, i, text, _), lex in zip(candidates, lexical, strict=True)]

    def prior(n: int) -> float:
        return min(max(scores[n - 1], 0.0), 1.0) if n - 1 < len(scores) else 0.0

    # Embedding is the cost: over MAX_SENTENCES, the sentences that share the most of the question's weighted terms
    # in the best-ranked passages are embedded (a long grounding's other sentences are unlikely answers).
    kept = sorted(
        range(len(candidates)),
        key=lambda k: (-(LEX_WEIGHT * lexical[k] + PRIOR_WEIGHT * prior(candidates[k][0])), k),
    )[:MAX_SENTENCES]
    kept.sort()
    query = np.asarray(encoder.embed_query(question), dtype=np.float32)
    matrix = _sentence_vectors(encoder, [candidates[k][3] for k in kept], vectors)
    cosines = matrix @ query
    expected = expected_answer(question)
    out = []
    for k, cosine in zip(kept, cosines, strict=True):
        n, i, text, _ = candidates[k]
        fit = scale.calibrate(float(cosine)) + LEX_WEIGHT * lexical[k] + PRIOR_WEIGHT * prior(n)
        if expected is not None and not expected.search(text):
            fit -= TYPE_PENALTY
        out.append(Quote(n, i, text, fit))
    return out


def _words_only_answers(question: str, passages: Sequence[str], found: list[Quote]) -> bool:
    coverage = _Coverage(question, passages)
    if not coverage.total or max(coverage.of(p) for p in coverage.passage_terms) < MIN_PASSAGE_COVERAGE:
        return False
    return max(q.score for q in found) >= MIN_SENTENCE_COVERAGE


def choose(
    question: str,
    passages: Sequence[str],
    *,
    scores: Sequence[float] = (),
    encoder: SentenceEncoder | None = None,
    scale: ScoreScale = COMMON_SCALE,
    vectors: MutableMapping[str, np.ndarray] | None = None,
    threshold: float = ANSWER_THRESHOLD,
) -> list[Quote]:
    """The sentences that answer ``question``, best first, or none when the passages do not answer it."""
    found = fits(question, passages, scores=scores, encoder=encoder, scale=scale, vectors=vectors)
    if not found:
        return []
    best = max(found, key=lambda q: q.score)
    if encoder is None:
        if not _words_only_answers(question, passages, found):
            return []
    elif best.score < threshold:
        return []
    # Sentences nearly as good as the best may complete the answer (a second fact, or the same in another passage).
    near = [q for q in found if q.score >= NEAR_BEST * best.score]
    near.sort(key=lambda q: (-q.score, q.passage, q.position))
    chosen: list[Quote] = []
    for q in near:
        if len(chosen) == MAX_QUOTES:
            break
        if all(q.text != c.text for c in chosen):
            chosen.append(q)
    return chosen
