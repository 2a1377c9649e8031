"""Which sentences of the retrieved passages answer a question, or none: the model-free answerer's choice.

The ``extractive`` answerer (:mod:`ragstep.adapters.chat.extractive`) quotes what this module chooses. People do not
ask in the words of the document ("How often should I feed a sourdough starter?" over "feed it once a day"), so the
choice rests on meaning first and shared words second. It is two steps, kept apart: *selection* (which sentence
answers best) and the *decision* (does it answer at all).

**Selection.** Each candidate sentence's fit is

    semantic + LEX_WEIGHT x lexical + PRIOR_WEIGHT x passage score +/- TYPE_WEIGHT (type held / not held)

* **semantic**: the cosine of the question (embedded as a query) and the sentence (as a passage; e5's ``query:`` /
  ``passage:`` prefixes come from the embedder's own ``embed_query`` / ``embed``), read on the common scale (the
  embedder's :class:`~ragstep.models.scale.ScoreScale`). A sentence is embedded under its heading and after its
  context: the first sentence of its paragraph or option ("-E, --conflict-exit-code number The exit status used
  when ... The default value is 1."), else the start of its passage's opening sentence; on its own it often does
  not say what it is about ("Its average depth is about 21 m."). A passage's title line (its first line, alone,
  without a sentence's end: "gzip(1) manual: compress or expand files") is context, not a candidate: it reads close
  to every question on its subject and answers none. Manual pages' options are read with their descriptions
  (:mod:`ragstep.retrieval.sentences`).
* **lexical**: the share of the question's terms the sentence holds, each weighted by its rarity among the passages
  (``ln(1 + (N + 1) / (df + 0.5))``, keyword search's tokenisation; English inflections and an attribute's adjective
  and noun -- deep / depth -- count as one term).
* **passage score**: the pipeline's own judgement of the passage against the whole question (0-1; retrieval reads
  it against this knowledge base's background, :mod:`ragstep.retrieval.background`).
* The words are read in the question's language (:mod:`ragstep.retrieval.answer_terms`): a French, German or
  Spanish question's function words are no terms, and its words meet their inflections by their first five letters.
  A sentence in another language than the question's (:mod:`ragstep.retrieval.answer_language`) has an embedding
  budget of its own, its similarity read against its own language's median, and (in the decision) the question's
  words it cannot hold credited as an answering sentence holds them; a Chinese question's dotted name (琴娜·杜普洛)
  is asked of Chinese passages (:func:`~ragstep.retrieval.answer_terms.transliterated`); a Chinese passage is not
  asked for a transliterated name.
* **type**: what the question asks for -- how often (a frequency), how long / 多久 (a duration), how deep / tall /
  far / 多深 / 多高 (a length: "4,583 km²" is an area), how heavy (a weight), which year / when was / 哪一年 (a
  date), how many / 多少 (a number), which option / flag (a command-line option); and a measured attribute the
  question names -- its area / 面积, population / 人口, price / 票价 ... -- must be stated by the sentence or its
  paragraph (the word, or a unit only that attribute is measured in: :func:`~ragstep.retrieval.answer_attributes
  .stated_attributes`); a count question names what it counts ("多少员工", "how many sick days"), which the
  sentence must hold as well (:mod:`ragstep.retrieval.answer_focus`; asked of a group the sources give no number
  for, "part-time employees", the sentence stating the group's rule holds it: "... receive vacation pro rata to
  their contracted hours"), and which option may be a configuration table's row (:mod:`ragstep.retrieval
  .answer_checks`). When any sentence holds what is asked, the
  best of those is selected. "Where is X installed / stored / kept?" prefers a sentence naming a path; a value only
  code states ("What is the size of CHUNK?": "#define CHUNK 16384") is a candidate when the question names the
  identifier as code writes it (:mod:`ragstep.retrieval.answer_candidates`); so are a table row (with its column
  headers), a heading stating a fact, and, asked which items a section lists, the list under the heading naming it,
  selected first as a definition is (:mod:`ragstep.retrieval.answer_layout`).
  "What is X?" / "X是什么？" asks for what X is (:func:`~ragstep.retrieval.answer_types.definition_of`): the
  best sentence that defines X ("bc is a language that ...", a manual page's "bc - An arbitrary precision
  calculator language") is selected when one was retrieved, but none is required to answer. "Who wrote X?" takes
  the by-line ("Written by ...", "Écrit par ...", "Geschrieben von ...") before a copyright holder, its words read
  from its passage (a by-line never names X); "how do I ...?" takes an option's entry within :data:`NEAR_BEST` of
  the best fit (:func:`best_candidate`). Asked how or which option, a manual page's option entries are embedded
  besides the sentences the question's words rank (an option answers in a word or two of the question's:
  :func:`~ragstep.retrieval.answer_candidates.option_entries`), and are no part of the background; a sentence of an
  option's description speaks for its option (it holds the option asked for and is quoted from the option's term:
  "-I[FMT], --iso-8601[=FMT] ... Example: 2006-08-14T02:34:56-06:00"). Question words are English, Chinese, French,
  German and Spanish.

**Decision.** The selected sentence answers only when (1) it holds the kind of value the question asks for (and the
measured attribute it names: "西宁市的面积是多少？" over a passage that states the city's population is
declined; so is "What is the libsodium license?" over a README that states none, or "What is zstd's maximum
compression level?" over sentences on compression ratios: the evidence that the sources do not answer is that no
sentence states the attribute asked for, a licence or a bound included); (2) its passage holds every *name* of the
question (:func:`~ragstep.retrieval.answer_terms.passages_naming`: capitalised words and words with digits --
"Docker", "Liwx", "ext4" --, the owner of what is asked -- "zstd's" --, and code identifiers -- "json.loads"; in
German, where every noun is capitalised, only a capital a noun does not have; a number given as an option's value,
"-n 5", is none; a question about the same tool on another system is not answered by the tool's page; a qualifier
of a "what is X?" subject, "GNU bc", may be held by another passage of the grounding; the group an English quantity
question asks about, "do interns get", is asked as a name is), and the sentence is not about another thing of the kind
the question names ("The Austin office opened in 2021" for "When did the Lisbon office open?":
:mod:`ragstep.retrieval.answer_subject`); and (3) its *support* reaches :data:`ANSWER_THRESHOLD`. The support is the fit
less :data:`BACKGROUND_WEIGHT` x the question's background, the median semantic similarity of the retrieved sentences to
it (:func:`background`): most of them are about the question's topic without answering it, and where they sit moves with
the corpus and the language (on the common scale Chinese sentences sit ~0.1 higher than English ones), which a fixed
threshold on the fit does not follow.
The answer quotes the selected sentence and up to :data:`MAX_QUOTES` - 1 more within :data:`NEAR_BEST` of its fit
(holding the asked type too), each with its passage's ``[n]``, and each with the sentence of its unit it cannot be
read without (:mod:`ragstep.retrieval.answer_window`: the one before when it leans back -- "However, ...", "It ..."
-- and the one after when it leads in -- a colon, the head of an option's or a function's entry: "-E,
--conflict-exit-code number The exit status used when ... The default value is 1."). On the dev sets this turned
wrong quotes into right ones and no right one into a wrong one (answer-en 21 -> 23 of 38 quotes holding the
reference, answer-en-stdlib 34 -> 35 of 53); it has no constant.

Why these numbers: the weights are round values (semantic similarity leads, words and the retriever's score break
its ties); the operating point is read off the trade-off curve (``ragstep bench answer --set DIR --curve``: each
question's grounding is assessed once, :class:`Assessment`, and the threshold swept;
:mod:`ragstep.bench.answer_curve`), answered-correctly rate against the decline rate on questions the corpus does
not answer, on the dev sets (bench-sets/answer-en: manual pages; bench-sets/answer-en-stdlib: Python
standard-library docs; the first 300 cmrc2018-zh questions, unanswerable = their document removed). 0.85 is kept:
it is where cmrc2018-zh declines >= 0.8 (0.86); the English sets reach 0.8 only at 0.90-1.15, where they answer
under a quarter of their questions, and below 0.85 they decline under two thirds -- on English no threshold meets
both targets, and the curve says so. The held-out checks are bench-sets/answer-en-heldout and answer-en-docs (run
once the choice was made; BENCHMARKS.md, which also lists what was tried and left out: a centred cosine, a minimum
share of the question's terms, a question word's weight, a token-by-token match, readings of an option's support).
An option the question names ("what does the -r option of grep do?": :func:`~ragstep.retrieval.answer_types
.named_option`) is its entry, selected first and answering at any threshold (:attr:`Assessment.outright`) when a
passage holding the question's names has it: the question's own subject, found as the page writes it.

Without an embedding model (``RAGSTEP_EMBEDDING_PROVIDER=none``) there is no meaning to compare: the decision falls
back to words alone (the type and names checks, and the best sentence must hold :data:`MIN_SENTENCE_COVERAGE` of the
question's weighted terms, a passage :data:`MIN_PASSAGE_COVERAGE`).

Cost: one query embedding (the question read up to :data:`MAX_QUESTION_CHARS` characters) and one batch of at most
:data:`MAX_SENTENCES` sentences (over that, those sharing the most of the question's weighted terms in the
best-ranked passages); a sentence seen before comes from the caller's cache (``vectors``), so a follow-up over the
same passages embeds only the question.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragstep.models.llm import SentenceEncoder
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.retrieval.answer_attributes import states_default, states_value
from ragstep.retrieval.answer_candidates import candidates as candidates_of
from ragstep.retrieval.answer_candidates import code_names, option_entries
from ragstep.retrieval.answer_checks import asked_held, named_held, stating_default
from ragstep.retrieval.answer_decline import Failed, failed_check
from ragstep.retrieval.answer_language import aligned, embedding_budget, read_across, sentence_languages
from ragstep.retrieval.answer_layout import listed
from ragstep.retrieval.answer_terms import Coverage
from ragstep.retrieval.answer_terms import names as names  # importable here as before
from ragstep.retrieval.answer_terms import term_weights as term_weights  # the IDF, importable here as before
from ragstep.retrieval.answer_types import (
    MAX_QUESTION_CHARS,
    asks_how,
    asks_option,
    default_field,
    definition_of,
    is_option_entry,
    named_option,
    place_of,
    preferred_answer,
)
from ragstep.retrieval.answer_types import expected_answer as expected_answer  # importable here as before
from ragstep.retrieval.answer_window import Explains, explanation_asked, joined, window
from ragstep.retrieval.sentence_vectors import CACHE_SIZE as CACHE_SIZE  # importable here as before
from ragstep.retrieval.sentence_vectors import sentence_vectors
from ragstep.retrieval.sentences import sentences_in_units
from ragstep.retrieval.text import token_set

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
#: Fewer sentences than this have no background of their own (their median is about themselves).
MIN_BACKGROUND = 6
#: Sentences embedded per question (over that, those sharing the most weighted terms in the best-ranked passages).
MAX_SENTENCES = 32
#: Words-only fallback (no embedding model): the best sentence's and its passage's share of the weighted terms.
MIN_SENTENCE_COVERAGE = 0.45
MIN_PASSAGE_COVERAGE = 0.5


@dataclass(frozen=True, slots=True)
class Quote:
    """A sentence chosen to answer, with its passage (1-based: the ``[n]`` it is cited with) and its fit. ``text`` is
    what is quoted (the sentence with the neighbour it cannot be read without, from ``position``); ``sentence`` is
    the chosen sentence alone, quoted instead when the answer has no room for the neighbour ("": ``text`` is it)."""

    passage: int
    position: int
    text: str
    score: float
    sentence: str = ""


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
    #: "What is X?": which candidates define X; "who wrote X?": which hold a by-line (None when none does, or the
    #: question asks no such thing: :func:`~ragstep.retrieval.answer_types.preferred_answer`). The selection and the
    #: quotes take those; the decision does not ask for one (a definition may be phrased in ways no pattern knows).
    defining: np.ndarray | None = None
    #: "How do I ...?": which candidates open an option's entry (None when the question asks no such thing).
    options: np.ndarray | None = None
    #: Option entries embedded beyond the budget (:func:`~ragstep.retrieval.answer_candidates.option_entries`):
    #: no part of the background, which they would lower (they are many, terse and mostly off the question).
    extra: np.ndarray | None = None
    #: What each candidate's share of the question's terms is credited for the words its language cannot hold (0 in
    #: the question's language: :func:`~ragstep.retrieval.answer_language.read_across`); read by the decision only.
    unread: np.ndarray | None = None
    #: ``defining`` marks the entries of the option the question names ("what does the -r option of grep do?"):
    #: the question's own subject, found as a manual page writes it, answers it outright.
    entry: bool = False


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
    candidates, leads = candidates_of(passages, code_names(question), question)
    if not candidates:
        return None
    coverage = Coverage(question, passages)
    lexical = np.array([coverage.of(token_set(text)) for n, _, text, _ in candidates], dtype=np.float32)
    passage_coverage = np.array([coverage.by_passage[n - 1] for n, _, _, _ in candidates], dtype=np.float32)
    prior = np.array(
        [min(max(scores[n - 1], 0.0), 1.0) if n - 1 < len(scores) else 0.0 for n, _, _, _ in candidates],
        dtype=np.float32,
    )
    # A sentence in another language than the question's is read by what crosses languages (answer_language).
    languages = sentence_languages([(c[0], c[2]) for c in candidates], passages, coverage.language)
    typed, expects = asked_held(question, candidates, leads, languages)  # the kind of value asked (answer_checks)
    which = asks_option(question)  # a sentence of an option's description holds its option
    entry = None if expects else named_option(question)
    definition = preferred_answer(question) if expects else entry or definition_of(question) or place_of(question)
    defining = None if definition is None else np.array([bool(definition.search(c[2])) for c in candidates])
    lists = listed(question, passages, candidates, coverage)  # "what changed in X?": the list under X's heading
    defining = defining if lists is None else lists
    fields = default_field(question)
    stated = None if fields is None else np.array([bool(fields.search(c[2])) for c in candidates])
    if stated is not None and stated.any():  # "**Default**: `origin`" is read with its setting's description
        read = [coverage.of(token_set(f"{lead} {c[2]}")) for c, lead in zip(candidates, leads, strict=True)]
        lexical = np.where(stated, np.maximum(lexical, read), lexical).astype(np.float32)
    if expects and defining is not None:
        defining &= typed
        # A by-line ("Written by Paul Rubin, David MacKenzie ...") never names what was written; its passage does
        # (the manual page's name, the README's title): its words are read from its passage.
        lexical = np.where(defining, np.maximum(lexical, passage_coverage), lexical).astype(np.float32)
    named = named_held(question, passages, candidates, coverage.language)  # the question's names (answer_checks)
    # A sentence of an option's description ("Example: 2006-08-14T02:34:56-06:00") speaks for its option.
    entries = [is_option_entry(c[2]) or is_option_entry(lead) for c, lead in zip(candidates, leads, strict=True)]
    # Asked how: an option entry near the best fit is preferred; asked for a default, the field stating it.
    options = np.array(entries) if asks_how(question) else stated if stated is not None and stated.any() else None
    zeros = np.zeros(len(candidates), dtype=np.float32)
    if encoder is None:
        return Features(
            candidates, zeros, lexical, prior, typed, passage_coverage, named, expects, _any(defining), options
        )
    # Embedding is the cost: over MAX_SENTENCES, the sentences that share the most of the question's weighted terms
    # in the best-ranked passages are embedded (a long grounding's other sentences are unlikely answers).
    # A sentence's lead counts here (its option's name, its paragraph's subject), not in its fit: the quote is the
    # sentence, and "The default value is 1." is the answer when its lead shares the question's words.
    led = [
        coverage.of(token_set(f"{lead} {c[2]}")) if lead else lexical[k]
        for k, (c, lead) in enumerate(zip(candidates, leads, strict=True))
    ]
    foreign = [language != coverage.language for language in languages]
    unread = read_across(coverage, [token_set(c[2]) for c in candidates], languages, coverage.language)
    keys = [led[k] + prior[k] for k in range(len(candidates))]
    kept = embedding_budget(keys, foreign, MAX_SENTENCES)
    more = option_entries(candidates, keys, kept) if options is not None or which else []
    if stated is not None:  # asked for a default, the fields stating one, however few words they share
        more += [int(k) for k in np.flatnonzero(stated) if k not in kept and k not in more][:MAX_SENTENCES]
    if defining is not None and entry is not None:  # the named option's entry, however few words it shares
        more += [int(k) for k in np.flatnonzero(defining) if k not in kept and k not in more][:MAX_SENTENCES]
    kept = sorted(kept + more)
    query = np.asarray(encoder.embed_query(question), dtype=np.float32)
    matrix = sentence_vectors(encoder, [candidates[k][3] for k in kept], vectors)
    cosines = matrix @ query
    semantic = np.array([scale.calibrate(float(c)) for c in cosines], dtype=np.float32)
    semantic = aligned(semantic, [languages[k] for k in kept], coverage.language, MIN_BACKGROUND)
    index = np.array(kept)
    return Features(
        [candidates[k] for k in kept],
        semantic,
        lexical[index],
        prior[index],
        typed[index],
        passage_coverage[index],
        named[index],
        expects,
        None if defining is None else _any(defining[index]),
        None if options is None else options[index],
        _any(np.isin(index, more)),
        unread[index],
        entry is not None,
    )


def _any(mask: np.ndarray | None) -> np.ndarray | None:
    """``mask`` when it marks any candidate, else None."""
    return mask if mask is not None and mask.any() else None


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
    semantic = f.semantic if f.extra is None else f.semantic[~f.extra]
    if len(semantic) < MIN_BACKGROUND:
        return DEFAULT_BACKGROUND
    return float(np.median(semantic))


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
    when any does (how deep: the sentence with a length, however close in meaning the one with the area reads). A
    "how do I ...?" question takes the best option entry within :data:`NEAR_BEST` of the best fit, when there is
    one: a manual page's way to do a thing is an option, and the prose near it reads as close while describing
    the program. The support is then read from the option: on the dev sets this turned four wrong answers
    (two to unanswerable questions) into declines and no right answer into a miss. Asked for a default, the field
    stating one ("**Default**: `origin`", "Defaults to ...") is preferred the same way over its setting's
    description."""
    wanted = f.defining if f.defining is not None else f.typed if f.expects else None
    if wanted is not None and wanted.any():
        held = np.flatnonzero(wanted)
        return int(held[int(np.argmax(fit[held]))])
    best = int(np.argmax(fit))
    if f.options is not None:
        near = np.flatnonzero(f.options & (fit >= fit[best] - NEAR_BEST * abs(float(fit[best]))))
        if len(near):
            return int(near[int(np.argmax(fit[near]))])
    return best


def support(f: Features, best: int, fit: np.ndarray) -> float:
    """The best sentence's fit above this question's background (:func:`background`, weighted by
    :data:`BACKGROUND_WEIGHT`), with its credit for the question's words its language cannot hold
    (:attr:`Features.unread`): what the threshold is compared with."""
    unread = 0.0 if f.unread is None else LEX_WEIGHT * float(f.unread[best])
    return float(fit[best]) + unread - BACKGROUND_WEIGHT * background(f)


@dataclass(frozen=True, slots=True)
class Assessment:
    """The choice and what the decision reads, before any threshold: the quotes the answer would be, whether the
    best sentence passes the checks that do not depend on the threshold (``eligible``: the asked kind of value, the
    question's names), and its ``support`` (:func:`support`; the weighted term coverage without an encoder). An
    answer is given when ``eligible`` and ``support >= threshold``: the trade-off curve of ``ragstep bench answer
    --curve`` sweeps the threshold over assessments made once."""

    quotes: list[Quote]
    eligible: bool
    support: float
    semantic: bool
    #: The best sentence is the entry of the option the question names (:attr:`Features.entry`): an answer at any
    #: threshold.
    outright: bool = False
    #: The decision's check the best sentence failed, when one did (:mod:`~ragstep.retrieval.answer_decline`: why).
    failed: Failed | None = None

    def answers(self, threshold: float = ANSWER_THRESHOLD) -> bool:
        if not self.eligible or not self.quotes:
            return False
        return self.outright or self.support >= (threshold if self.semantic else MIN_SENTENCE_COVERAGE)


def assess(
    question: str,
    passages: Sequence[str],
    *,
    scores: Sequence[float] = (),
    encoder: SentenceEncoder | None = None,
    scale: ScoreScale = COMMON_SCALE,
    vectors: MutableMapping[str, np.ndarray] | None = None,
    within: Sequence[bool] = (),
) -> Assessment:
    """The best sentence (and those quoted with it) and what the decision reads (:class:`Assessment`); selected
    among the passages ``within`` marks when one of them has a candidate (a follow-up's subject documents,
    :mod:`ragstep.retrieval.follow_up_answer`), the features and the background still read over every passage."""
    f = features(question, passages, scores=scores, encoder=encoder, scale=scale, vectors=vectors)
    if f is None:
        return Assessment([], False, 0.0, encoder is not None)
    fit = fit_scores(f, semantic=encoder is not None)
    inside = np.array([n - 1 < len(within) and within[n - 1] for n, _, _, _ in f.candidates], dtype=bool)
    if inside.any():
        fit = np.where(inside, fit, np.float32(-1e6)).astype(np.float32)  # below any fit: never selected
    best = best_candidate(f, fit)
    explains = explanation_asked(question)  # asked why, a sentence giving no reason runs on to the explanation
    gates = not (f.expects and not f.typed[best]) and bool(f.named[best]) and (inside[best] or not inside.any())
    if encoder is None:
        eligible = gates and float(f.passage_coverage.max()) >= MIN_PASSAGE_COVERAGE
        failed = None if eligible else failed_check(question, passages, f, best, inside, words=True)
        return Assessment(
            _quotes(f, fit, best, passages, explains), eligible, float(f.lexical[best]), False, failed=failed
        )
    quotes, held, unstated = _quotes(f, fit, best, passages, explains), support(f, best, fit), False
    if default_field(question) is not None and not any(states_default(q.text) for q in quotes):
        # Asked for a default, the quote states one: the candidate that does (its setting's field first), with the
        # support of the sentence it stands for when in its passage (a field is terse); none does: declined.
        held_kind = f.typed | (not f.expects)  # the default of the kind asked ("how many lines": a number)
        chosen = stating_default(question, f.candidates, f.named & held_kind & (inside | ~inside.any()), fit)
        unstated = chosen is None and gates and not any(states_value(q.text) for q in quotes)
        if chosen is not None:
            same = f.candidates[chosen][0] == f.candidates[best][0]
            best, gates = chosen, True
            held = max(held, support(f, best, fit)) if same else support(f, best, fit)
            quotes = _quotes(f, fit, best, passages, explains)
    outright = f.entry and f.defining is not None and bool(f.defining[best])
    failed = None if gates else failed_check(question, passages, f, best, inside)
    if unstated:
        failed = Failed("kind_not_stated", ("default",), f.candidates[best][0])
    return Assessment(quotes, gates and not unstated, held, True, outright, failed)


def choose(
    question: str,
    passages: Sequence[str],
    *,
    scores: Sequence[float] = (),
    encoder: SentenceEncoder | None = None,
    scale: ScoreScale = COMMON_SCALE,
    vectors: MutableMapping[str, np.ndarray] | None = None,
    threshold: float = ANSWER_THRESHOLD,
    within: Sequence[bool] = (),
) -> list[Quote]:
    """The sentences that answer ``question``, best first, or none when the passages do not answer it."""
    a = assess(question, passages, scores=scores, encoder=encoder, scale=scale, vectors=vectors, within=within)
    return a.quotes if a.answers(threshold) else []


def _quotes(f: Features, fit: np.ndarray, best: int, passages: Sequence[str], explains: Explains) -> list[Quote]:
    """The best sentence and, within :data:`NEAR_BEST` of its fit, up to :data:`MAX_QUOTES` - 1 more that hold
    what the question's type asks for (a second fact, or the same in another passage the retriever ranked at least
    as high: on the answer sets this kept every citation but a tenth of the wrong ones); each quoted with the
    sentence it cannot be read without (:func:`~ragstep.retrieval.answer_window.window`), a sentence already
    quoted not twice."""
    margin = NEAR_BEST * max(abs(float(fit[best])), 1e-9)
    order = sorted(range(len(fit)), key=lambda k: (k != best, -fit[k], f.candidates[k][0], f.candidates[k][1]))
    chosen: list[Quote] = []
    quoted: set[tuple[int, int]] = set()
    units = {n: sentences_in_units(passages[n - 1]) for n in {c[0] for c in f.candidates} if n <= len(passages)}
    for k in order:
        if len(chosen) == MAX_QUOTES or float(fit[best] - fit[k]) > margin:
            break
        n, i, text, _ = f.candidates[k]
        wanted = bool(f.typed[k]) and (f.defining is None or bool(f.defining[k]))
        if (k != best and not wanted) or (n, i) in quoted or any(text in c.text for c in chosen):
            continue
        if n != f.candidates[best][0] and f.prior[k] < f.prior[best]:
            continue  # a passage the retriever ranked below the chosen one's: a second citation likelier wrong
        inside = n in units and i < len(units[n])  # else a line of code, quoted alone
        start, end = window(units[n], i, explains=explains) if inside else (i, i)
        span = range(start, end + 1)
        if any((n, j) in quoted for j in span):
            start = end = i
            span = range(i, i + 1)
        quoted.update((n, j) for j in span)
        window_text = joined([units[n][j][2] for j in span]) if start != end else text
        chosen.append(Quote(n, start, window_text, float(fit[k]), "" if start == end else text))
    return chosen
