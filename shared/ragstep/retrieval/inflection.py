"""Which of an index's words a keyword-search term also matches: its English inflections (pure functions).

Keyword tokens keep every word as written (:mod:`ragstep.retrieval.text`), so "Who approves big purchases?" met no
chunk of a handbook that writes "Any single purchase ... requires a purchase order approved by Finance": "purchases"
and "purchase", "approves" and "approved" were different words to BM25. Stemming the stored tokens would fix that for
new documents only (and change what every index holds); instead a query term is read, at search time, as the group
of the words the index holds that share its light stem (:func:`light_stem`): "purchases" matches "purchase",
"purchased" and "purchasing" where the index holds them, and nothing it does not.

The word as written keeps its own BM25 score; the group's other forms score as one term (their frequencies summed,
the chunks holding any of them counted once), at half their score while the written word is held
(:mod:`ragstep.adapters.index._keyword`: a variant is weaker evidence of what the question means). Scored as one
term of a stemmed index instead, a group was as common as its commonest form: in an FAQ on vaccines, where most
entries write "vaccine" or "vaccines", the word counted for next to nothing. Query terms that share a stem ("hotel
hotels") make one group: each written word in full, the forms neither writes once. A term whose group is itself
alone scores exactly as before.

The stem is light (plural and third-person ``-s`` / ``-es`` / ``-ies``, ``-ed`` / ``-ied``, ``-ing``, a final
``-e``, a doubled final consonant): it conflates the inflections of one word, not derivations ("approval",
"purchaser" stay apart). A final ``-e`` goes only where it cannot tell two words apart: "care" and "car", "note"
and "not", "made" and "mad", "code" and "cod", "site" and "sit" differ in nothing else, so a short word whose one
vowel the ``e`` lengthens keeps it, and its ``-ed`` / ``-ing`` forms get it back (:func:`_silent_e`). It reads
lower-case ASCII words of four letters or more (Latin letters are folded to ASCII before: "hôtels" is "hotels");
other scripts and words with digits are their own group (Chinese tokens, Russian words). A form is matched only
when the index holds it and its stem is the term's, so a rule that would misread a word ("news") can only join it
to another word the index holds with the same stem.

The model-free answerer compares a question's words with a sentence's by another, narrower form
(:mod:`ragstep.retrieval.english_stem`: no final ``-e`` rule, irregular verbs to their base). The two are kept apart
on purpose: finding a passage gains from joining more forms (BM25 then ranks by the whole passage), while choosing
the sentence that answers lost right answers with the wider rule (that module's docstring has the figures).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

#: Words shorter than this are their own stem: too short to tell a suffix from the word ("bed", "red", "is").
MIN_WORD = 4
#: A stem keeps at least this many letters ("need" is not "ne" + "-ed").
MIN_STEM = 3
_VOWELS = frozenset("aeiouy")
#: Consonants that are never doubled nor followed by a silent "e" in an inflection ("snowed", "fixed", "played").
_NO_SILENT_E = frozenset("wxy")


def _stemmable(word: str) -> bool:
    return len(word) >= MIN_WORD and word.isascii() and word.isalpha()


def _has_vowel(stem: str) -> bool:
    return any(c in _VOWELS for c in stem)


def _undouble(stem: str) -> str:
    """A doubled final consonant undone: "stopp" (from "stopped") -> "stop"; "fall", "pass", "buzz" keep theirs."""
    if len(stem) > MIN_STEM and stem[-1] == stem[-2] and stem[-1] not in "lsz" and stem[-1] not in _VOWELS:
        return stem[:-1]
    return stem


def _consonant(word: str, i: int) -> bool:
    """Porter's consonant: not a vowel, and a "y" only where a vowel does not precede it ("toy", not "ivy")."""
    if word[i] in "aeiou":
        return False
    return word[i] != "y" or i == 0 or not _consonant(word, i - 1)


def _measure(stem: str) -> int:
    """How many vowel-consonant sequences ``stem`` holds (Porter's *m*): 1 for "car", "rais", 2 for "purchas"."""
    kinds = "".join("c" if _consonant(stem, i) else "v" for i in range(len(stem)))
    return kinds.count("vc")


def _silent_e(stem: str) -> bool:
    """Whether ``stem`` + "e" is the word rather than ``stem``: one vowel between single consonants ("car", "not",
    "mad", "cod", "sit", "don", "hop"; but no "w", "x", "y" at the end), where the "e" makes another word ("care",
    "note", "made", "code", "site", "done", "hope"), or a two-letter vowel + consonant ("us", "ag": "use", "age").

    This is the condition of Porter's "An algorithm for suffix stripping" (1980), steps 1b and 5a: a stem of measure
    1 ending consonant-vowel-consonant keeps its final "e" and takes it back when "-ed" / "-ing" leaves it
    ("caring" -> "care"), for English doubles the consonant of such a word that has no "e" ("stopped", "sitting").
    Longer stems lose the "e" in every form instead ("purchase", "purchased" -> "purchas"): without a dictionary
    "purchased" does not tell "purchase" + "-d" from "purchas" + "-ed", and a longer word and its "e"-less twin are
    seldom both words (the S-stemmer of Harman, 1991, and Lucene's minimal English stemmer never strip a bare "e"
    either, but they join no "-ed" / "-ing" form, which the handbook's "approved" needs)."""
    if len(stem) == 2:
        return stem[0] in "aeiou" and _consonant(stem, 1) and stem[1] not in _NO_SILENT_E
    n = len(stem)
    return (
        n >= MIN_STEM
        and _measure(stem) == 1
        and [_consonant(stem, i) for i in range(n - 3, n)] == [True, False, True]
        and stem[-1] not in _NO_SILENT_E
    )


def _strip_ending(stem: str) -> str:
    """What an "-ed" / "-ing" leaves, made a word's stem: a doubled final consonant undone ("stopp" -> "stop"), a
    silent "e" given back ("car" from "cared" -> "care", "us" from "used" -> "use")."""
    undoubled = _undouble(stem)
    if undoubled != stem:
        return undoubled
    return stem + "e" if _silent_e(stem) else stem


def light_stem(word: str) -> str:
    """The word's light stem: ``purchases``, ``purchase``, ``purchased``, ``purchasing`` -> ``purchas``; ``hotels``
    -> ``hotel``; ``applies``, ``applied``, ``applying`` -> ``apply``; ``cares``, ``cared``, ``caring`` -> ``care``
    (not ``car``); a word it does not read is itself."""
    if not _stemmable(word):
        return word
    w = word
    if w.endswith(("ies", "ied")) and len(w) > MIN_WORD:
        w = w[:-3] + "y"
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    elif w.endswith("eed"):  # "speed", "need", "proceed" are words, not "sp-", "n-", "proc-" + "-eed"
        pass
    elif w.endswith("ed") and _has_vowel(w[:-2]) and (len(w) - 2 >= MIN_STEM or _silent_e(w[:-2])):
        w = _strip_ending(w[:-2])
    elif w.endswith("ing") and _has_vowel(w[:-3]) and (len(w) - 3 >= MIN_STEM or _silent_e(w[:-3])):
        w = _strip_ending(w[:-3])
    # A final "e" goes where the word without it is no other word: a longer stem ("purchas", "approv", "vaccin")
    # or a short one the "e" does not lengthen ("rais" from "raise"); "care", "note", "site" keep theirs, and so do
    # words with no vowel before a consonant ("tree", "shoe": Porter's measure 0).
    if w.endswith("e") and len(w) > MIN_STEM and not _silent_e(w[:-1]) and _measure(w[:-1]) > 0:
        w = w[:-1]
    return w


def _forms(stem: str) -> list[str]:
    """The words whose stem may be ``stem``: its inflections, a superset (each is checked with :func:`light_stem`)."""
    roots = [stem, stem + "e"]
    if stem.endswith("e"):
        roots.append(stem[:-1])  # "care": "caring", "cared"; "use": "using"
    out = [*roots]
    for r in roots:
        out += [r + "s", r + "es", r + "d", r + "ed", r + "ing", r + r[-1] + "ed", r + r[-1] + "ing"]
    if stem.endswith("y"):
        out += [stem[:-1] + "ies", stem[:-1] + "ied"]
    return out


@functools.lru_cache(maxsize=16384)
def _candidates(term: str) -> tuple[str, ...]:
    """The term and the other words with its stem it may be written as (memoised: a query's words recur)."""
    stem = light_stem(term)
    if stem == term and not _stemmable(term):
        return (term,)
    return (term, *dict.fromkeys(f for f in _forms(stem) if f != term and light_stem(f) == stem))


def term_groups(terms: Sequence[str], known: Callable[[str], bool]) -> dict[str, list[str]]:
    """Each query term's group: the words ``known`` says the index holds among the term's forms (the term itself
    included when held), keyed by the first query term of its stem; a later term sharing that stem adds its forms
    to the first's group instead of making its own (module docstring)."""
    groups: dict[str, list[str]] = {}
    first_of: dict[str, str] = {}
    for term in dict.fromkeys(terms):
        stem = light_stem(term)
        key = first_of.setdefault(stem, term)
        group = groups.setdefault(key, [])
        for form in _candidates(term):
            if form not in group and known(form):
                group.append(form)
    return groups


__all__ = ["light_stem", "term_groups"]
