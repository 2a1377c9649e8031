"""Model-free rerank scoring: query terms and phrases counted in each candidate, blended with vector cosines.

:class:`TokenVectorReranker` is RAGFlow's token/vector hybrid with term frequency and exact-phrase credit (the
formula is in its docstring); ``RAGSTEP_RERANKER=none``, the default, uses it. Pure computation: no I/O, no model.
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from ragstep.errors import InputError
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.ports import RerankCandidate
from ragstep.retrieval.fusion import VECTOR_EVIDENCE_POWER
from ragstep.retrieval.latin_fold import fold_text
from ragstep.retrieval.text import jieba_tokenizer, query_terms, stopwords

__all__ = ["TOKEN_FORMULAS", "RerankCandidate", "TokenVectorReranker", "check_documents", "relative_cosines"]

#: Token similarities of the local reranker: ours (the default) and RAGFlow's presence-only original.
TOKEN_FORMULAS = ("ragstep", "ragflow")


def check_documents(documents: Sequence[str]) -> list[str]:
    """The documents of a ``rerank`` call as a list (a bare string is refused: it is a Sequence[str] too, and
    ranking it character by character would be a silent disaster)."""
    if isinstance(documents, str):
        raise InputError("rerank() takes a list of documents, not a single string")
    return list(documents)


_HAN_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # the ranges ragstep.retrieval.text hands to jieba
# A letter or digit that is not Han: what a non-Han token may not be preceded or followed by (tokenize() cuts
# words at Han characters, so "api文档" holds the token "api"). As a regex this is the class
# f"[^\\W_{_HAN_CHARS}]", which ``re`` is slow to compile, so it is never compiled: _is_latin() is the same
# test in Python (``re``'s Unicode \w is str.isalnum() or "_"), applied at the few places a term occurs.
_WORD = re.compile(r"[^\W_]+")
_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|「([^」]+)」|『([^』]+)』')


def _is_han(ch: str) -> bool:
    """Whether the character ``ch`` is in one of :data:`_HAN_CHARS`' ranges. Tested in Python: as a regex class
    ``re`` is slow to compile it (a range class this wide), which every process whose first search reranks paid,
    for a test of a few short terms and characters."""
    return "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf" or "\uf900" <= ch <= "\ufaff"


def _has_han(text: str) -> bool:
    return not text.isascii() and any(map(_is_han, text))


def _is_latin(ch: str) -> bool:
    """Whether the character ``ch`` is a letter or digit that is not Han (the class above)."""
    return ch.isalnum() and not _is_han(ch)


def _bounded(text: str, start: int, end: int, check_start: bool = True, check_end: bool = True) -> bool:
    """Whether ``text[start:end]`` stands as a whole word: no non-Han letter or digit just before or after it."""
    return (not check_start or start == 0 or not _is_latin(text[start - 1])) and (
        not check_end or end == len(text) or not _is_latin(text[end])
    )


def _count_words(text: str, word: str) -> int:
    """Non-overlapping occurrences of ``word`` in ``text`` that are whole words (see :func:`_bounded`).

    Scans like ``re.findall`` would: after a hit the search resumes at its end, after an occurrence inside a
    longer word at the next character.
    """
    n, hits = len(word), 0
    pos = text.find(word)
    while pos >= 0:
        if _bounded(text, pos, pos + n):
            hits += 1
            pos = text.find(word, pos + n)
        else:
            pos = text.find(word, pos + 1)
    return hits


# Characters NFKC leaves alone, or changes only from one punctuation mark or space to another (full-width
# "，" -> ","), which cannot change a word: ASCII, Han, kana, Hangul, Latin-1/Extended-A letters, Greek and
# Cyrillic letters, CJK, general and full-width punctuation, box drawing and symbols, Han extensions B-F.
_NFKC_INERT = (
    "\t\n\r\x20-\x7e\u00a1-\u00a7\u00a9\u00ab\u00ac\u00ae\u00b0\u00b1\u00b6\u00b7\u00bb\u00bf-\u0131"
    "\u0134-\u013e\u0141-\u0148\u014a-\u017e\u0391-\u03a1\u03a3-\u03a9\u03b1-\u03c9\u0400-\u045f"
    "\u2010-\u2027\u2190-\u21ff\u2500-\u26ff\u3000-\u3011\u3014-\u301f\u3041-\u3096\u30a1-\u30fe"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65"
    "\U00020000-\U0002ebef"
)


@cache
def _nfkc_matters() -> re.Pattern[str]:
    # Compiled on first use (a share of a new process's first search), only for text that NFKC would change: ASCII
    # never is, nor is English with a curly quote, a dash or an accent (unicodedata.is_normalized says so first).
    return re.compile(f"[^{_NFKC_INERT}]")


def _normalise(text: str, fold_case: bool = True) -> str:
    """:func:`ragstep.retrieval.text.tokenize`'s normalisation (NFKC, lower case, Latin letters folded to ASCII), as
    far as words are concerned.

    NFKC is slow on text it changes (~100 us for a 500-character Chinese chunk, whose full-width punctuation it
    rewrites); it is skipped when every character is one it leaves alone or only turns into other punctuation.
    ``fold_case=False`` skips lower-casing too, for queries without a cased letter (nothing they contain can
    match differently).
    """
    if not text.isascii() and not unicodedata.is_normalized("NFKC", text) and _nfkc_matters().search(text) is not None:
        text = unicodedata.normalize("NFKC", text)
    return fold_text(text.lower() if fold_case else text)


class _QueryMatcher:
    """A query compiled for counting its terms in candidate texts without tokenizing them.

    Han terms, which jieba may segment differently inside a chunk than in the query, count as substrings
    (``str.count``); other terms as whole words, as :func:`ragstep.retrieval.text.tokenize` would cut them
    (``str.count`` first: most terms are absent from most chunks; then each occurrence's two neighbouring
    characters are checked).
    The scans run in C, so a candidate costs a normalisation and a few scans instead of a jieba segmentation (the
    dominant cost per Chinese chunk otherwise). Nothing here compiles a regex per term, so a query new to the process
    costs no more than one seen before: each phrase is one small pattern without lookarounds (cheap to compile).
    """

    def __init__(self, query: str, *, phrases: bool = True) -> None:
        self.terms = query_terms(query)
        folded = _normalise(query)
        self.fold_case = folded != folded.upper()
        # (term, whether it counts as a whole word only); Han terms count as substrings.
        self._counters = [(term, not _has_han(term)) for term in self.terms]
        self.phrases: list[_Phrase] = []
        if not phrases:
            return
        quoted = ["".join(groups) for groups in _QUOTED.findall(query)]
        if quoted:
            texts = quoted
        elif len(self.terms) >= 2:
            texts = [query]
        else:
            texts = []  # a one-term query: "the whole query occurs" is just "the term occurs"
        self.phrases = [p for p in map(_phrase_pattern, texts) if p is not None]

    def counts(self, text: str) -> list[int]:
        """Occurrences of each term in the normalised ``text``."""
        out = []
        for term, whole_word in self._counters:
            hits = text.count(term)
            if hits and whole_word:
                hits = _count_words(text, term)
            out.append(hits)
        return out

    def found(self, texts: Iterable[str]) -> list[bool]:
        """For each phrase, whether it occurs in one of the normalised ``texts``."""
        texts = list(texts)
        return [any(p.occurs(t) for t in texts) for p in self.phrases]


def _trim_han_stopwords(piece: str, stop: frozenset[str], *, leading: bool) -> str:
    """Drop stopwords from one end of a run with Han characters ("如何重置密码" -> "重置密码"), cut by jieba so a
    word that merely ends in a stopword character ("配对") stays whole; "" when only stopwords are left."""
    if not _has_han(piece):
        return piece
    words = list(jieba_tokenizer().cut(piece))
    while words and words[0 if leading else -1] in stop:
        words.pop(0 if leading else -1)
    return "".join(words)


@dataclass(frozen=True, slots=True)
class _Phrase:
    """A phrase's words in order (``core``: literals and separators), and which of its ends must be a word
    boundary (the non-Han ones, checked with :func:`_bounded` rather than by lookarounds in the pattern)."""

    core: re.Pattern[str]
    check_start: bool
    check_end: bool

    def occurs(self, text: str) -> bool:
        """Whether the phrase occurs in ``text`` with its ends on word boundaries.

        Each piece of ``core`` starts and ends with a letter or digit and every separator matches only
        non-word characters, so a match is fixed by where it starts; trying the start positions of ``core``'s
        matches in order is what ``re.search`` with the boundary lookarounds inside the pattern would do.
        """
        search = self.core.search
        match = search(text)
        while match is not None:
            start, end = match.span()
            if _bounded(text, start, end, self.check_start, self.check_end):
                return True
            match = search(text, start + 1)
        return False


def _phrase_pattern(phrase: str) -> _Phrase | None:
    """What finds ``phrase`` in normalised text: its words in order, separated by any punctuation/space.

    Stopwords at the ends are dropped ("how to reset the password" -> "reset the password"), so question words
    do not stop the phrase from matching the sentence that answers it; non-Han ends must be word boundaries.
    """
    stop = stopwords()
    pieces = _WORD.findall(_normalise(phrase))
    while pieces and pieces[0] in stop:
        pieces.pop(0)
    while pieces and pieces[-1] in stop:
        pieces.pop()
    if pieces:
        pieces[0] = _trim_han_stopwords(pieces[0], stop, leading=True)
    if pieces:
        pieces[-1] = _trim_han_stopwords(pieces[-1], stop, leading=False)
    pieces = [p for p in pieces if p]
    if not pieces:
        return None
    parts = [re.escape(pieces[0])]
    for previous, piece in itertools.pairwise(pieces):
        # Between two Han characters a separator is optional (Chinese is written without spaces).
        joined_han = _is_han(previous[-1]) and _is_han(piece[0])
        parts += [r"[\W_]*" if joined_han else r"[\W_]+", re.escape(piece)]
    return _Phrase(
        re.compile("".join(parts)),
        check_start=not _is_han(pieces[0][0]),
        check_end=not _is_han(pieces[-1][-1]),
    )


class _FieldCache:
    """Term counts and phrase hits of the distinct values of one field (a title, a keyword list), by slot."""

    def __init__(self, matcher: _QueryMatcher, texts_of: Callable[[Any], list[str]]) -> None:
        self._matcher = matcher
        self._texts_of = texts_of
        self._slots: dict[Any, int] = {}
        self._counts: list[list[int]] = []
        self._found: list[list[bool]] = []

    def slot(self, value: Any) -> int:
        slot = self._slots.get(value)
        if slot is None:
            slot = self._slots[value] = len(self._counts)
            texts = self._texts_of(value) if value else []
            # Texts joined one per line, so a Han term never runs across two keywords.
            self._counts.append(self._matcher.counts("\n".join(texts)) if texts else [0] * len(self._matcher.terms))
            self._found.append(self._matcher.found(texts))
        return slot

    def counts(self) -> np.ndarray:
        return np.asarray(self._counts, dtype=np.float64).reshape(len(self._counts), len(self._matcher.terms))

    def found(self) -> np.ndarray:
        return np.asarray(self._found, dtype=bool).reshape(len(self._found), len(self._matcher.phrases))


def relative_cosines(cosine: np.ndarray) -> np.ndarray:
    """Cosines of a model without a declared scale, min-max normalised over the candidates that have one (NaN stays
    NaN; a single cosine, or equal ones, count 1: no ordering information, as in fusion's min-max)."""
    known = cosine[~np.isnan(cosine)]
    if known.size == 0:
        return cosine
    lo, hi = float(known.min()), float(known.max())
    if hi - lo <= 1e-12:
        return np.where(np.isnan(cosine), cosine, 1.0)
    return (cosine - lo) / (hi - lo)


class TokenVectorReranker:
    """RAGFlow's model-free rerank (``rag/nlp/search.py`` ``rerank``), with term frequency and phrase credit.

    For query ``q`` with distinct terms ``T`` (:func:`ragstep.retrieval.text.query_terms`: NFKC, lower case, Latin
    letters folded to ASCII, jieba for Han, stopwords dropped) and ``N`` candidates::

        f(t, d)  = tf(t, content) + title_weight x tf(t, title) + keyword_weight x tf(t, important keywords)
                   (title_weight 2, keyword_weight 5: RAGFlow's field weights)
        df(t)    = max(1, number of candidates with f(t, d) > 0)
        w(t)     = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))           BM25's IDF, over the candidate set
        m(t, d)  = 0.5 x [f(t, d) > 0] + 0.5 x f(t, d) / (f(t, d) + k1)       k1 = 1.2
        terms(d) = sum_t w(t) m(t, d) / sum_t w(t)
        phrase(d) = share of the phrases P found in d's content, title or keywords, where P is the quoted phrases
                   of the query ("...", “...”, 「...」), or else the whole query minus leading/trailing stopwords
                   when it has at least two terms, or else nothing
        token(d) = (1 - phrase_weight) x terms(d) + phrase_weight x phrase(d)   if P, else terms(d)
                   (phrase_weight 0.2)
        c(d)     = max(0, cos(query vector, d's vector)), on the common scale (``cosine_scale``)
        top      = max_d c(d): the query's best calibrated cosine among the candidates
        v        = vector_weight x top^vector_power                 (vector_power 1.5; 0 for "ragflow")
        score(d) = (token_weight x token(d) + v x c(d)) / (token_weight + v)
                   (token_weight 0.3, vector_weight 0.7) when both vectors exist with the same dimension and
                   non-zero length; otherwise token(d) alone.

    The vector half weighs by its own evidence, as the search stage's fusion weighs the vector list
    (:data:`ragstep.retrieval.fusion.VECTOR_EVIDENCE_POWER`): with a fixed 0.7 the reranker put back, for every
    query, the vector weight fusion takes off a query the embedding model found nothing close to (a terse keyword
    query), and the rerank stage ranked below its own candidates' order (BENCHMARKS.md, "Fusion by each list's
    evidence"). ``top`` = 1 is RAGFlow's fixed 0.3 / 0.7; the score stays in 0-1 for any ``top``.

    RAGFlow's token similarity is ``sum_{t in d} w(t) / sum_t w(t)``: presence only, so its x2 / x5 field weights
    change nothing and a chunk that repeats the query's keyword, or contains the exact phrase, ties with one
    that mentions each word once (RAGFlow issues #11759, #12013). Here presence keeps half of each term's credit
    (coverage of the query stays the main signal), the saturated frequency ``f / (f + k1)`` gives the other half
    (so repetition and the field weights count, with diminishing returns), and an exact phrase earns the bonus.
    A term that no candidate contains has ``df`` floored at 1, i.e. the weight of the rarest present term; IDF
    over the candidates themselves needs no corpus statistics. Terms are counted in each text without
    tokenizing it (see :class:`_QueryMatcher`): jieba on every candidate would cost a Chinese query two orders of
    magnitude more than these scans.

    ``formula="ragflow"`` scores with RAGFlow's presence-only token similarity instead, for comparison (``ragstep
    bench quality`` runs both): ``token(d) = sum_{t: f(t, d) > 0} w(t) / sum_t w(t)``, no frequency, no phrase.
    Everything else is shared: the same terms and matching (so a term found only in the title or a keyword counts
    as present, as it does in RAGFlow's token bag), the candidate-set IDF standing in for RAGFlow's term-weight
    dictionary, and the same vector part and weights, fixed as RAGFlow's (``vector_power`` 0) unless given.
    """

    name = "none"

    def __init__(
        self,
        *,
        token_weight: float = 0.3,
        vector_weight: float = 0.7,
        title_weight: float = 2.0,
        keyword_weight: float = 5.0,
        phrase_weight: float = 0.2,
        k1: float = 1.2,
        formula: str = "ragstep",
        vector_power: float | None = None,
    ) -> None:
        if formula not in TOKEN_FORMULAS:
            supported = ", ".join(TOKEN_FORMULAS)
            raise InputError(f"TokenVectorReranker: unknown formula {formula!r}; supported: {supported}")
        if min(token_weight, vector_weight, title_weight, keyword_weight) < 0 or token_weight + vector_weight <= 0:
            raise InputError("TokenVectorReranker: weights must be >= 0 and token_weight + vector_weight > 0")
        if not 0 <= phrase_weight <= 1 or k1 <= 0:
            raise InputError("TokenVectorReranker: phrase_weight must be in [0, 1] and k1 > 0")
        if vector_power is None:
            vector_power = 0.0 if formula == "ragflow" else VECTOR_EVIDENCE_POWER
        if not 0 <= vector_power <= 10:
            raise InputError("TokenVectorReranker: vector_power must be in [0, 10]")
        total = token_weight + vector_weight
        self._token_weight = token_weight / total
        self._vector_weight = vector_weight / total
        self._title_weight = title_weight
        self._keyword_weight = keyword_weight
        self._phrase_weight = phrase_weight
        self._k1 = k1
        self._vector_power = float(vector_power)
        self.formula = formula
        self._presence_only = formula == "ragflow"
        if self._presence_only:
            self.name = "none:ragflow"

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        return self.rerank_candidates(query, [RerankCandidate(doc) for doc in check_documents(documents)])

    def rerank_candidates(
        self,
        query: str,
        items: Sequence[RerankCandidate],
        query_vector: np.ndarray | Sequence[float] | None = None,
        *,
        cosine_scale: ScoreScale | None = COMMON_SCALE,
    ) -> list[float]:
        """Relevance in [0, 1] of each candidate, in input order (see the class docstring for the formula).

        ``cosine_scale`` is the embedding model's declared scale (:class:`ragstep.ports.ScaledEmbedder`): cosines
        are read on the common scale before they are weighed, so the 0.2 cut-off means the same for every model (raw
        e5 cosines of unrelated text, ~0.77, gave every candidate 0.7 x 0.77 = 0.54 before any term matched).
        None: the model declares no scale (a provider's model), and the cosines are read relative to one another,
        the best candidate's 1 and the worst's 0 (:func:`relative_cosines`). Read on MiniLM's scale instead, e5's
        cosines (all ~0.8-0.9) differed by a few hundredths while token similarities spread over 0-1, so the words
        alone ranked (msmarco-5k, e5 served undeclared, fell far below the search stage's order: ``ragstep bench
        quality --undeclared-scale``)."""
        items = list(items)
        if not items:
            return []
        token = self.token_similarity(query, items)
        cosine = _cosines(query_vector, items)
        if cosine_scale is None:
            cosine = relative_cosines(cosine)
        elif cosine_scale != COMMON_SCALE:
            cosine = np.clip((cosine - cosine_scale.zero) / cosine_scale.span, 0.0, 1.0)  # NaN stays NaN
        scores = np.where(np.isnan(cosine), token, self._blend(token, cosine))
        return np.clip(scores, 0.0, 1.0).tolist()

    def _blend(self, token: np.ndarray, cosine: np.ndarray) -> np.ndarray:
        """The candidates' token and (calibrated) vector parts weighed by the query's vector evidence (class
        docstring); NaN where a candidate has no cosine."""
        known = cosine[~np.isnan(cosine)]
        if known.size == 0:
            return np.full(cosine.shape, np.nan)
        top = float(known.max())  # 0 ** 0 is 1: power 0 is the fixed weights
        wt, wv = self._token_weight, self._vector_weight * top**self._vector_power
        return (wt * token + wv * cosine) / ((wt + wv) or 1.0)

    def token_similarity(self, query: str, items: Sequence[RerankCandidate]) -> np.ndarray:
        """``token(d)`` of the formula for each candidate, as a float array."""
        matcher = _QueryMatcher(query, phrases=not self._presence_only)
        n, n_terms = len(items), len(matcher.terms)
        if n == 0 or (n_terms == 0 and not matcher.phrases):
            return np.zeros(n)
        phrases = bool(matcher.phrases)
        content_counts: list[list[int]] = []
        content_found: list[list[bool]] = []
        # Titles and keyword lists are scored once each: the chunks of one document share its title.
        fold = matcher.fold_case
        titles = _FieldCache(matcher, lambda title: [_normalise(title, fold)])
        keyword_lists = _FieldCache(matcher, lambda keywords: [_normalise(k, fold) for k in keywords])
        title_at: list[int] = []
        keywords_at: list[int] = []
        for item in items:
            content = _normalise(item.content, fold)
            content_counts.append(matcher.counts(content))
            if phrases:
                content_found.append(matcher.found((content,)))
            raw = item.important_keywords
            title_at.append(titles.slot(item.title))
            keywords_at.append(keyword_lists.slot((raw,) if isinstance(raw, str) else tuple(raw)))
        terms = np.zeros(n)
        if n_terms:
            f = np.asarray(content_counts, dtype=np.float64)
            f += self._title_weight * titles.counts()[title_at]
            f += self._keyword_weight * keyword_lists.counts()[keywords_at]
            present = f > 0
            df = np.maximum(present.sum(axis=0), 1)
            w = np.log1p((n - df + 0.5) / (df + 0.5))
            if self._presence_only:  # RAGFlow: membership only (and no phrases: the matcher has none)
                return present.astype(np.float64) @ w / w.sum()
            terms = (0.5 * present + 0.5 * f / (f + self._k1)) @ w / w.sum()
        if not phrases:
            return terms
        found = np.asarray(content_found) | titles.found()[title_at] | keyword_lists.found()[keywords_at]
        phrase = found.mean(axis=1)
        return (1.0 - self._phrase_weight) * terms + self._phrase_weight * phrase


def _cosines(query_vector: np.ndarray | Sequence[float] | None, items: Sequence[RerankCandidate]) -> np.ndarray:
    """max(0, cosine) of each candidate's vector with the query's; NaN where there is none to compare."""
    out = np.full(len(items), np.nan)
    if query_vector is None:
        return out
    q = np.asarray(query_vector, dtype=np.float64).ravel()
    q_norm = float(np.linalg.norm(q))
    if q.size == 0 or not math.isfinite(q_norm) or q_norm == 0:
        return out
    rows = [i for i, item in enumerate(items) if item.vector is not None and np.size(item.vector) == q.size]
    if not rows:
        return out
    # One conversion for the whole matrix: a float64 copy of each row separately cost ~3 us a candidate.
    matrix = np.array([items[i].vector for i in rows], dtype=np.float64).reshape(len(rows), q.size)
    norms = np.linalg.norm(matrix, axis=1)
    usable = np.isfinite(norms) & (norms > 0)
    cos = matrix @ q / np.where(usable, norms * q_norm, 1.0)
    out[np.asarray(rows)[usable]] = np.clip(cos[usable], 0.0, 1.0)
    return out
