"""Which sentences of the retrieved passages answer a question, or none: the model-free answerer's choice.

The ``extractive`` answerer (:mod:`ragstep.adapters.chat.extractive`) quotes what this module chooses. People do not
ask in the words of the document ("How often should I feed a sourdough starter?" over "feed it once a day"), so the
choice rests on meaning first and shared words second. It is two steps, kept apart: *selection* (which sentence
answers best) and the *decision* (does it answer at all).

**Selection.** Each candidate sentence's fit is

    semantic + LEX_WEIGHT x lexical + PRIOR_WEIGHT x passage score +/- TYPE_WEIGHT (type held / not held)

* **semantic**: the cosine of the question (embedded as a query) and the sentence (as a passage; e5's ``query:`` /
  ``passage:`` prefixes come from the embedder's own ``embed_query`` / ``embed``), read on the common scale (the
  embedder's :class:`~ragstep.models.scale.ScoreScale`). A sentence is embedded under its heading and after the start
  of its passage's opening sentence: on its own it often does not say what it is about ("Its average depth is
  about 21 m.").
* **lexical**: the share of the question's terms the sentence holds, each weighted by its rarity among the passages
  (``ln(1 + (N + 1) / (df + 0.5))``, keyword search's tokenisation; English inflections and an attribute's adjective
  and noun -- deep / depth -- count as one term).
* **passage score**: the pipeline's own judgement of the passage against the whole question (0-1; retrieval reads
  it against this knowledge base's background, :mod:`ragstep.retrieval.background`).
* **type**: what the question asks for -- how often (a frequency), how long / 多久 (a duration), how deep / tall /
  far / 多深 / 多高 (a length: "4,583 km²" is an area), how heavy (a weight), which year / when was / 哪一年 (a
  date), how many / 多少 (a number). When any sentence holds that kind of value, the best of those is selected.

**Decision.** The selected sentence answers only when (1) it holds the kind of value the question asks for; (2) its
passage holds every *name* of the question (:func:`names`: capitalised words and words with digits -- "Docker",
"Liwx", "ext4"; a question about the same tool on another system is not answered by the tool's page); and (3) its
*support* reaches :data:`ANSWER_THRESHOLD`. The support is the fit less :data:`BACKGROUND_WEIGHT` x the question's
background, the median semantic similarity of the retrieved sentences to it (:func:`background`): most of them are
about the question's topic without answering it, and where they sit moves with the corpus and the language (on the
common scale Chinese sentences sit ~0.1 higher than English ones), which a fixed threshold on the fit does not follow.
The answer quotes the selected sentence and up to :data:`MAX_QUOTES` - 1 more within :data:`NEAR_BEST` of its fit
(holding the asked type too), each with its passage's ``[n]``.

Why these numbers: the weights are round values (semantic similarity leads, words and the retriever's score break
its ties); the operating point is read off the trade-off curve in BENCHMARKS.md ("Answering without a model"):
answered-correctly rate against the decline rate on questions the corpus does not answer, over the threshold, on the
English manual-page set (bench-sets/answer-en and answer-en-heldout) and a sample of cmrc2018-zh; 0.85 is the lowest
threshold at which both decline >= 0.8 of the questions they do not answer (cmrc2018-zh: the question's document
removed; it gets there at 0.80, the manual pages at 0.85). The held-out
checks are bench-sets/answer-en-docs (FAQs and READMEs, built for that and run once the choice was made) and the
cmrc2018-zh questions beyond the sample. Tried and left out: the cosine centred on the retrieved sentences' mean
(meant to cancel the shared topic; it ranked the answering sentence first less often), and a minimum share of the
question's terms in the passage (it declined paraphrased questions: 高铁 / 高速铁路).

Without an embedding model (``RAGSTEP_EMBEDDING_PROVIDER=none``) there is no meaning to compare: the decision falls
back to words alone (the type and names checks, and the best sentence must hold :data:`MIN_SENTENCE_COVERAGE` of the
question's weighted terms, a passage :data:`MIN_PASSAGE_COVERAGE`).

Cost: one query embedding (the question read up to :data:`MAX_QUESTION_CHARS` characters) and one batch of at most
:data:`MAX_SENTENCES` sentences (over that, those sharing the most of the question's weighted terms in the
best-ranked passages); a sentence seen before comes from the caller's cache (``vectors``), so a follow-up over the
same passages embeds only the question.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragstep.models.llm import SentenceEncoder
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.retrieval.sentences import sentences_under_headings
from ragstep.retrieval.text import query_terms, token_set

#: Weight of the rarity-weighted share of the question's terms a sentence holds (0-1).
LEX_WEIGHT = 0.6
#: Weight of the passage's retrieval score (0-1).
PRIOR_WEIGHT = 0.3
#: Added to a sentence that holds what the question's type asks for (a number, a duration, a length...), subtracted
#: from one that does not.
TYPE_WEIGHT = 0.25
#: Share of the question's background (:func:`background`) taken off the best fit before the threshold.
BACKGROUND_WEIGHT = 0.5
#: The background of a grounding of fewer than MIN_BACKGROUND sentences: where retrieved sentences that do not
#: answer sit for English on the common scale (the median of the per-question medians on answer-en: 0.33).
DEFAULT_BACKGROUND = 0.3
#: The best fit less the background must reach this, or there is no answer (the curve's operating point).
ANSWER_THRESHOLD = 0.85
#: Quote sentences whose fit is within this share of the best one's...
NEAR_BEST = 0.15
#: ...and at most this many.
MAX_QUOTES = 3
#: The question text read (a longer one is cut: a rewritten query of 100,000 characters must not cost more).
MAX_QUESTION_CHARS = 2000
#: Fewer sentences than this have no background of their own (their median is about themselves).
MIN_BACKGROUND = 6
#: Sentences embedded per question (over that, those sharing the most weighted terms in the best-ranked passages).
MAX_SENTENCES = 32
#: The start of the passage's opening sentence, embedded with a sentence as its context (longer costs embedding
#: time).
CONTEXT_CHARS = 120
#: Entries a caller's sentence-vector cache keeps (oldest dropped first).
CACHE_SIZE = 4096
#: Words-only fallback (no embedding model): the best sentence's and its passage's share of the weighted terms.
MIN_SENTENCE_COVERAGE = 0.45
MIN_PASSAGE_COVERAGE = 0.5

# What a question asks for, and what a sentence that answers it holds. The first kind that matches decides.
_EN_NUMBER_WORDS = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|hundred|"
    r"thousand|million|billion|half|dozen|single|double|several|few"
)
_NUMBER = rf"\d|[零一二两三四五六七八九十百千万亿半]|\b(?:{_EN_NUMBER_WORDS})\b"
_DURATION_UNITS = (
    r"second|minute|hour|day|night|week|month|year|decade|century|ms\b|秒|分钟|小时|钟头|天|日|周|星期|个月|年|世纪"
)
_DURATION = rf"(?:{_NUMBER}).{{0,12}}(?:{_DURATION_UNITS})|{_DURATION_UNITS}"
_FREQUENCY = (
    r"once|twice|times|daily|weekly|monthly|yearly|annually|hourly|every|each|per\b|always|never|often|"
    r"whenever|regularly|每|次|经常|总是"
)
# A length is a number directly followed by a unit of length: "4,583 km²" and "4583平方公里" are areas, not depths.
_LENGTH = (
    r"(?:\d[\d.,]*|\b(?:" + _EN_NUMBER_WORDS + r"))\s*-?\s*(?:mm|cm|m|km|metres?|meters?|kilometres?|kilometers?|"
    r"feet|foot|ft|inch(?:es)?|miles?|yards?|nm)\b(?![²³2^])|[\d零一二两三四五六七八九十百千万]\s*(?:毫米|厘米|公分|米|公里|千米|英尺|英里|海里)"
)
_WEIGHT = (
    r"(?:\d[\d.,]*|\b(?:" + _EN_NUMBER_WORDS + r"))\s*-?\s*"
    r"(?:mg|g|kg|grams?|kilograms?|kilos?|tons?|tonnes?|pounds?|lbs?|ounces?|oz)\b|[\d零一二两三四五六七八九十百千万]\s*(?:毫克|克|公斤|千克|斤|吨)"
)
_YEAR = r"\b(?:1[0-9]{3}|20[0-9]{2})\b|[0-9〇零一二三四五六七八九十]{2,4}\s*年|世纪|年代|朝"
_DATE = (
    _YEAR + r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\b|\b\d{1,2}[/-]\d{1,2}\b"
    r"|[0-9一二三四五六七八九十]+\s*[月日号]"
    r"|\b(?:ago|since|yesterday|today|tomorrow)\b|时期|期间|之前|之后|以前|以后|时候"
)
_KINDS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (re.compile(question, re.IGNORECASE), re.compile(answer, re.IGNORECASE))
    for question, answer in (
        (r"\bhow\s+often\b|\bhow\s+frequently\b|多久一次|多长时间一次|几次|频率", _FREQUENCY + "|" + _NUMBER),
        (
            r"\bhow\s+(?:deep|tall|wide|far)\b|\bwhat\s+(?:depth|height|width|distance)\b|多深|多宽|多远|深度|宽度",
            _LENGTH,
        ),
        (r"\bhow\s+high\b|多高|海拔", _LENGTH + r"|%|percent|百分"),
        (r"\bhow\s+heavy\b|\bhow\s+much\s+does\s+\S+\s+weigh\b|多重|重量", _WEIGHT),
        (r"\bhow\s+long\s+(?:is|are|was|were)\b|多长(?!时间)", _LENGTH + "|" + _DURATION),
        (
            r"\bhow\s+long\b|\bfor\s+how\s+long\b|多久|多长时间|几个小时|几天|几年|多少天|多少年|多少小时",
            _DURATION,
        ),
        (
            r"\bwhat\s+year\b|\bwhich\s+year\b|\bin\s+what\s+year\b|\bwhat\s+date\b|\bwhen\s+(?:was|were|did)\b"
            r"|哪一年|哪年|何年|哪个年代|什么年代|什么时候|何时|几月|哪天|哪一天",
            _DATE,
        ),
        (
            r"\bhow\s+(?:many|much|old|big|large|fast)\b|\bwhat\s+(?:percentage|percent|number|size|age)\b"
            r"|多少|多大|几",
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


def expected_answer(question: str) -> re.Pattern[str] | None:
    """What a sentence that answers ``question`` must hold, when its type says (how often: a frequency; how long /
    多久: a duration; how many / 多少: a number; when: a time), else None."""
    for asks, holds in _KINDS:
        if asks.search(question):
            return holds
    return None


_NAME = re.compile(r"[\w][\w.+-]*[\w]|\w")


def names(question: str) -> list[str]:
    """The names a question asks about (case-folded): words written with a capital inside the question ("Docker",
    "SSH", "Liwx", "Btrfs") and words with a digit ("ext4", "2025", "7"). A passage that does not hold one of them
    is about something else, however close its meaning: "How do I use it with Docker?" is not answered by a
    sentence about the same tool without Docker. The question's first word is capitalised as any sentence's is."""
    out = []
    for k, match in enumerate(_NAME.finditer(question[:MAX_QUESTION_CHARS])):
        word = match.group(0)
        if not word.isascii() or word == "I":
            continue
        if any(c.isdigit() for c in word) or (k > 0 and any(c.isupper() for c in word)):
            out.append(word.casefold())
    return list(dict.fromkeys(out))


def term_weights(terms: frozenset[str], passages: Sequence[frozenset[str]]) -> dict[str, float]:
    """Each term's rarity among the passages: an IDF over the grounding (a term none holds weighs the most)."""
    n = len(passages)
    return {t: math.log(1 + (n + 1) / (sum(t in p for p in passages) + 0.5)) for t in terms}


_SUFFIX = re.compile(r"(?<=[a-z]{3})(?:ing|ed|es|s)$")


#: An attribute is asked with its adjective and stated with its noun ("how deep" / "an average depth of"): both
#: count as one term.
_ATTRIBUTES = {
    "deep": "depth",
    "high": "height",
    "tall": "height",
    "wide": "width",
    "long": "length",
    "heavy": "weight",
    "weigh": "weight",
    "old": "age",
    "far": "distance",
    "fast": "speed",
    "big": "size",
    "large": "size",
    "often": "frequency",
    "strong": "strength",
}


def _stems(tokens: Iterable[str]) -> frozenset[str]:
    """English words without their commonest inflection ("logs" / "log", "ships" / "ship", "stayed" / "stay"), and
    an attribute's adjective as its noun ("deep" / "depth"): a question and its answer seldom use the same form.
    Other scripts are left as they are."""
    out = set()
    for t in tokens:
        if t.isascii():
            t = _SUFFIX.sub("", t)
            t = _ATTRIBUTES.get(t, t)
        out.add(t)
    return frozenset(out)


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
    embedded under its heading and after its passage's opening sentence ("Hybrid search: ... ragstep searches two
    ways at once.", "Qinghai Lake is the largest lake in China. ... Its average depth is about 21 m."): on its own it
    often does not name what it is about, and a passage's opening sentence usually does (the sentence just before
    it seldom: "... home to thousands of birds. Its average depth is about 21 m." reads as far from "How deep is
    Qinghai Lake?" as an unrelated sentence). A question is no answer: in a FAQ it is the context of the sentences
    that follow it, in place of the opening sentence, and not a candidate itself."""
    out: list[tuple[int, int, str, str]] = []
    for n, passage in enumerate(passages, start=1):
        opening = asked = ""
        for i, (heading, sentence) in enumerate(sentences_under_headings(passage)):
            if sentence.endswith(("?", "？")):
                asked = sentence
                continue
            topic = (asked or opening)[:CONTEXT_CHARS]
            context = " ".join(t for t in (f"{heading}:" if heading else "", topic) if t)
            out.append((n, i, sentence, f"{context} {sentence}" if context else sentence))
            opening = opening or sentence
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


@dataclass(frozen=True, slots=True)
class Features:
    """What the choice reads, one entry per candidate sentence (the same order as ``candidates``)."""

    candidates: list[tuple[int, int, str, str]]
    semantic: np.ndarray
    lexical: np.ndarray
    prior: np.ndarray
    typed: np.ndarray
    #: The share of the question's weighted terms each candidate's passage holds (its heading included).
    passage_coverage: np.ndarray
    #: Whether each candidate's passage holds every name of the question (:func:`names`).
    named: np.ndarray
    expects: bool


def features(
    question: str,
    passages: Sequence[str],
    *,
    scores: Sequence[float] = (),
    encoder: SentenceEncoder | None = None,
    scale: ScoreScale = COMMON_SCALE,
    vectors: MutableMapping[str, np.ndarray] | None = None,
) -> Features | None:
    """Every candidate sentence's features (None when the passages have no sentence); without an encoder, the
    semantic ones are zero."""
    question = question[:MAX_QUESTION_CHARS]
    candidates = _candidates(passages)
    if not candidates:
        return None
    coverage = _Coverage(question, passages)
    lexical = np.array([coverage.of(token_set(text)) for _, _, text, _ in candidates], dtype=np.float32)
    by_passage = [coverage.of(terms) for terms in coverage.passage_terms]
    passage_coverage = np.array([by_passage[n - 1] for n, _, _, _ in candidates], dtype=np.float32)
    prior = np.array(
        [min(max(scores[n - 1], 0.0), 1.0) if n - 1 < len(scores) else 0.0 for n, _, _, _ in candidates],
        dtype=np.float32,
    )
    expected = expected_answer(question)
    typed = np.array([expected is None or bool(expected.search(c[2])) for c in candidates], dtype=bool)
    wanted = names(question)
    held = [all(name in passage.casefold() for name in wanted) for passage in passages]
    named = np.array([held[n - 1] for n, _, _, _ in candidates], dtype=bool)
    zeros = np.zeros(len(candidates), dtype=np.float32)
    if encoder is None:
        return Features(candidates, zeros, lexical, prior, typed, passage_coverage, named, expected is not None)
    # Embedding is the cost: over MAX_SENTENCES, the sentences that share the most of the question's weighted terms
    # in the best-ranked passages are embedded (a long grounding's other sentences are unlikely answers).
    kept = sorted(range(len(candidates)), key=lambda k: (-(lexical[k] + prior[k]), k))[:MAX_SENTENCES]
    kept.sort()
    query = np.asarray(encoder.embed_query(question), dtype=np.float32)
    matrix = _sentence_vectors(encoder, [candidates[k][3] for k in kept], vectors)
    cosines = matrix @ query
    semantic = np.array([scale.calibrate(float(c)) for c in cosines], dtype=np.float32)
    index = np.array(kept)
    return Features(
        [candidates[k] for k in kept],
        semantic,
        lexical[index],
        prior[index],
        typed[index],
        passage_coverage[index],
        named[index],
        expected is not None,
    )


def fit_scores(f: Features, *, semantic: bool = True) -> np.ndarray:
    """Each candidate's fit (module docstring): what selects the sentence that answers."""
    if not semantic:
        return f.lexical.copy()
    fit = f.semantic + LEX_WEIGHT * f.lexical + PRIOR_WEIGHT * f.prior
    if f.expects:  # a sentence holding the kind of value asked for is likelier the answer; one without, unlikelier
        fit = fit + np.where(f.typed, TYPE_WEIGHT, -TYPE_WEIGHT)
    return fit


def background(f: Features) -> float:
    """Where this question's sentences sit: the median semantic similarity of the retrieved sentences to it (most
    of them are about its topic without answering it), or :data:`DEFAULT_BACKGROUND` for fewer than
    :data:`MIN_BACKGROUND` sentences. It moves with the corpus and the language (Chinese sentences sit ~0.1 higher
    on the common scale than English ones: e5 reads Chinese text as closer), which a fixed threshold cannot."""
    if len(f.semantic) < MIN_BACKGROUND:
        return DEFAULT_BACKGROUND
    return float(np.median(f.semantic))


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
    f = features(question, passages, scores=scores, encoder=encoder, scale=scale, vectors=vectors)
    if f is None:
        return []
    fit = fit_scores(f, semantic=encoder is not None)
    return [Quote(n, i, text, float(x)) for (n, i, text, _), x in zip(f.candidates, fit, strict=True)]


def best_candidate(f: Features, fit: np.ndarray) -> int:
    """The selection: the candidate of the highest fit among those holding the kind of value the question asks for,
    when any does (how deep: the sentence with a length, however close in meaning the one with the area reads)."""
    if f.expects and f.typed.any():
        typed = np.flatnonzero(f.typed)
        return int(typed[int(np.argmax(fit[typed]))])
    return int(np.argmax(fit))


def support(f: Features, best: int, fit: np.ndarray) -> float:
    """The best sentence's fit above this question's background (:func:`background`, weighted by
    :data:`BACKGROUND_WEIGHT`): what the threshold is compared with."""
    return float(fit[best]) - BACKGROUND_WEIGHT * background(f)


def answers(f: Features, best: int, fit: np.ndarray, *, threshold: float = ANSWER_THRESHOLD) -> bool:
    """The decision, apart from the choice: does the best sentence answer? It must hold the kind of value the
    question asks for (how deep: a length, not the area the passage states), its passage must hold every name the
    question asks about (:func:`names`), and its support (:func:`support`) must reach the operating point."""
    if (f.expects and not f.typed[best]) or not f.named[best]:
        return False
    return support(f, best, fit) >= threshold


def _words_only_answers(f: Features, best: int) -> bool:
    if (f.expects and not f.typed[best]) or not f.named[best]:
        return False
    if float(f.passage_coverage.max()) < MIN_PASSAGE_COVERAGE:
        return False
    return float(f.lexical[best]) >= MIN_SENTENCE_COVERAGE


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
    f = features(question, passages, scores=scores, encoder=encoder, scale=scale, vectors=vectors)
    if f is None:
        return []
    fit = fit_scores(f, semantic=encoder is not None)
    best = best_candidate(f, fit)
    decided = _words_only_answers(f, best) if encoder is None else answers(f, best, fit, threshold=threshold)
    if not decided:
        return []
    return _quotes(f, fit, best)


def _quotes(f: Features, fit: np.ndarray, best: int) -> list[Quote]:
    """The best sentence and, within :data:`NEAR_BEST` of its fit, up to :data:`MAX_QUOTES` - 1 more that hold
    what the question's type asks for (a second fact, or the same in another passage)."""
    margin = NEAR_BEST * max(abs(float(fit[best])), 1e-9)
    order = sorted(range(len(fit)), key=lambda k: (-fit[k], f.candidates[k][0], f.candidates[k][1]))
    chosen: list[Quote] = []
    for k in order:
        if len(chosen) == MAX_QUOTES or float(fit[best] - fit[k]) > margin:
            break
        n, i, text, _ = f.candidates[k]
        if (k == best or f.typed[k]) and all(text != c.text for c in chosen):
            chosen.append(Quote(n, i, text, float(fit[k])))
    return chosen
