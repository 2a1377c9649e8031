"""The postings a keyword-search term reads in a snapshot: each query word as written, and the other forms of its
group (its inflections the snapshot holds, :func:`ragstep.retrieval.inflection.term_groups`) merged into one term.

A word as written scores as it always did (its own document frequency and frequency in the chunk). Its other forms
score as one term of their own (the chunks holding any of them, their summed frequency), counted at
:data:`OTHER_FORM_SHARE` of their score while the written word is held by the chunks searched: a chunk that writes
"vaccines" for the question's "vaccine" is found, but ranks below one that writes "vaccine", all else equal. Scored
as one stemmed term instead, the group was as common as its commonest form: in an FAQ where most entries write
"vaccine" or "vaccines", the word that set an answer apart from the others counted for next to nothing.

Used by the local index's keyword search, its per-part statistics (:meth:`LocalSearchIndex.bm25_stats`, which the
S3-snapshot index sums over its parts, keyed by the same keys: a written word by itself, other forms by
:data:`OTHER_FORMS` + the group's key) and its scores of named chunks
(:meth:`~ragstep.adapters.index._candidates.CandidateScoring.bm25_scores`), so all three score the same terms. Whether
the written word is held is read from the same document frequencies the terms are weighted with (the joint ones of
all parts, when given), so a part that does not hold it discounts its other forms as the others do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol

import numpy as np

from ragstep.retrieval.inflection import light_stem, term_groups

#: The share of the BM25 score a chunk gets for another form of a query word ("vaccines" for "vaccine") than the one
#: written, when the chunks searched hold the written one: a variant of a word is weaker evidence of the query's
#: meaning than the word as written. Half, as the common recipe of indexing a text twice, once as written (an exact
#: field) and once stemmed, and querying both fields scores it: a chunk with the word as written matches in both
#: fields, one with only a variant in the stemmed field alone, i.e. half.
OTHER_FORM_SHARE = 0.5
#: What the key of a group's other forms starts with (a query word, the key of its written form, never does).
OTHER_FORMS = "~"


class _Postings(Protocol):
    vocab: dict[str, int]
    indptr: np.ndarray
    post_rows: np.ndarray
    post_tf: np.ndarray


class TermPostings(NamedTuple):
    """One scored term: ``rows`` holding it (ascending, unique) and its frequency ``tf`` in each; ``written``: for
    the other forms of a query word, the query's words of that group, whose presence discounts them (:meth:`share`);
    empty for a word as written."""

    key: str
    rows: np.ndarray
    tf: np.ndarray
    written: tuple[str, ...] = ()

    def share(self, df: Mapping[str, int]) -> float:
        """The share of its BM25 score the term counts for, given the document frequencies of the search's terms:
        :data:`OTHER_FORM_SHARE` for other forms when a word of the group as written is held, else all of it."""
        return OTHER_FORM_SHARE if any(df.get(w, 0) > 0 for w in self.written) else 1.0

    def frequency(self, df: Mapping[str, int]) -> int:
        """The document frequency the term is weighted by: its own, and for other forms at least the written word's.
        A variant is no rarer a sign of the question's word than the word itself: "archivo" in one chunk of three
        must not outweigh "archivos" in all three for the question "archivos" (a rare form would otherwise carry
        the weight of a rare word)."""
        own = df.get(self.key, 0)
        return max([own, *(df.get(w, 0) for w in self.written)])


def _merged(snap: _Postings, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The rows holding any of ``words`` (ascending, unique) and their summed frequency in each; one word's postings
    as stored."""
    vocab, indptr = snap.vocab, snap.indptr
    parts = [(indptr[t], indptr[t + 1]) for t in (vocab[w] for w in words)]
    if len(parts) == 1:
        lo, hi = parts[0]
        return snap.post_rows[lo:hi], snap.post_tf[lo:hi]
    rows = np.concatenate([snap.post_rows[lo:hi] for lo, hi in parts])
    tf = np.concatenate([snap.post_tf[lo:hi] for lo, hi in parts])
    unique, at = np.unique(rows, return_inverse=True)
    summed = np.bincount(at, weights=tf, minlength=unique.size).astype(snap.post_tf.dtype)
    return unique.astype(snap.post_rows.dtype), summed


def term_postings(snap: _Postings, tokens: Sequence[str]) -> Iterator[TermPostings]:
    """The terms of ``tokens`` the snapshot holds: each query word as written, then the other forms of its group
    (module docstring). A word without other forms held scores exactly as the word alone."""
    asked = list(dict.fromkeys(tokens))
    for key, words in term_groups(asked, snap.vocab.__contains__).items():
        stem = light_stem(key)
        written = tuple(t for t in asked if light_stem(t) == stem)
        for word in (w for w in words if w in written):
            yield TermPostings(word, *_merged(snap, [word]))
        others = [w for w in words if w not in written]
        if others:
            yield TermPostings(OTHER_FORMS + key, *_merged(snap, others), written)


__all__ = ["OTHER_FORMS", "OTHER_FORM_SHARE", "TermPostings", "term_postings"]
