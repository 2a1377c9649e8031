"""Accent folding of Latin letters, for keyword search that matches "repertoires" to "répertoires".

People type French, Spanish, German, Portuguese, Vietnamese ... without their accents (a keyboard without them, a
phone's autocorrect off, habit), so :func:`ragstep.retrieval.text.tokenize` folds every Latin letter to its ASCII
base, in the text indexed and in queries alike, as Elasticsearch's ``asciifolding`` filter does:

* a letter with diacritics becomes its base letter: é è ê ë -> e, ñ -> n, ç -> c, å -> a, ü -> u, ő -> o, ş -> s,
  ệ -> e (Vietnamese loses its tones too: searching "pho" finds "phở");
* letters with a stroke, bar or hook, which Unicode does not decompose: ø -> o, ł -> l, đ -> d, ħ -> h, ƀ -> b;
* ligatures and letters with no one-letter base: æ -> ae, œ -> oe, ß (and ẞ) -> ss, þ -> th, ð -> d, ı -> i,
  ŋ -> n.

Only Latin letters fold: U+00C0-U+024F (Latin-1 Supplement, Extended-A and -B) and U+1E00-U+1EFF (Latin Extended
Additional). Other scripts keep their marks, which there change the word: Japanese kana with dakuten (が is not か),
Hangul syllables, Cyrillic й (not и), Greek, Devanagari, Thai and Arabic are left exactly as they were. A combining
mark that NFKC could not compose stays a separate character, as before: folding maps one letter to one or more ASCII
letters and nothing else, so a text's words keep their boundaries and a folded token is the fold of the token the
tokenizer made before folding existed (which is what lets an index written before upgrade in place:
:func:`fold_stored_tokens`).

Speed: ASCII text is never looked at (``str.isascii`` is O(1)); other text is searched once for a letter of the two
blocks (a C scan); only then are its non-ASCII words folded, each through a cache (words repeat).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable

__all__ = ["fold_stored_tokens", "fold_text", "fold_word", "has_latin_extended", "spelled_umlauts", "umlaut_forms"]

#: The blocks folded: Latin-1 Supplement to Latin Extended-B, and Latin Extended Additional.
_LATIN_BLOCKS = ((0x00C0, 0x0250), (0x1E00, 0x1F00))
_LATIN_CLASS = "[\u00c0-\u024f\u1e00-\u1eff]"


# The patterns compile on first use: a process that only ever sees ASCII never needs them (cold starts).
@functools.cache
def _latin_extended() -> re.Pattern[str]:
    return re.compile(_LATIN_CLASS)


@functools.cache
def _foldable_word() -> re.Pattern[str]:
    """A word (as tokenize cuts words) holding at least one letter of the two blocks."""
    return re.compile(f"[^\\W_]*{_LATIN_CLASS}[^\\W_]*")


@functools.cache
def _named_base() -> re.Pattern[str]:
    """ "LATIN SMALL LETTER O WITH STROKE": a letter Unicode does not decompose but names after its base letter."""
    return re.compile(r"LATIN (?:SMALL|CAPITAL) LETTER ([A-Z])(?: WITH (?!SMALL LETTER).*)?")


#: Letters with no base letter in their decomposition or name, spelled as German, Danish, French, Icelandic and
#: Turkish spell them in ASCII.
_SPECIAL = {
    "æ": "ae", "Æ": "ae", "ǣ": "ae", "Ǣ": "ae", "ǽ": "ae", "Ǽ": "ae",
    "œ": "oe", "Œ": "oe",
    "ß": "ss", "ẞ": "ss",
    "þ": "th", "Þ": "th",
    "ð": "d", "Ð": "d",
    "ı": "i", "ȷ": "j", "ŋ": "n", "Ŋ": "n", "ſ": "s", "ẛ": "s",
}  # fmt: skip


def _base(ch: str) -> str | None:
    """The ASCII letters a Latin letter folds to, None for a character left as it is."""
    if ch in _SPECIAL:
        return _SPECIAL[ch]
    decomposed = unicodedata.normalize("NFKD", ch)
    base = "".join(c for c in decomposed if not unicodedata.combining(c))
    if base and base != ch and base.isascii() and base.isalpha():
        return base.lower()
    named = _named_base().fullmatch(unicodedata.name(ch, ""))
    return named.group(1).lower() if named else None


@functools.cache
def _table() -> dict[int, str]:
    """The ``str.translate`` table of every folded letter (built on first use: ASCII-only work never needs it)."""
    table: dict[int, str] = {}
    for lo, hi in _LATIN_BLOCKS:
        for cp in range(lo, hi):
            base = _base(chr(cp))
            if base is not None:
                table[cp] = base
    return table


def has_latin_extended(text: str) -> bool:
    """Whether ``text`` holds a character of the folded blocks (False at once for ASCII)."""
    return not text.isascii() and _latin_extended().search(text) is not None


@functools.lru_cache(maxsize=1 << 16)
def fold_word(word: str) -> str:
    """``word`` with its Latin letters folded (the tokens of a corpus repeat: cached)."""
    return word.translate(_table())


def fold_text(text: str) -> str:
    """``text`` with the Latin letters of its words folded, everything else as it was."""
    if not has_latin_extended(text):
        return text
    return _foldable_word().sub(_folded_match, text)


def _folded_match(match: re.Match[str]) -> str:
    return fold_word(match.group())


def fold_stored_tokens(tokens: str, is_stopword: Callable[[str], bool]) -> str:
    """Space-joined tokens written before folding, as the folding tokenizer writes the same text.

    Each token is folded, and dropped when its folded form is a stopword ("à" -> "a"): folding keeps word boundaries
    (module docstring) and the tokenizer drops stopwords after folding, so this equals tokenizing the text again,
    at a fraction of the cost (no jieba)."""
    if not has_latin_extended(tokens):
        return tokens
    out = []
    for token in tokens.split():
        if not token.isascii():
            token = fold_word(token)
            if is_stopword(token):
                continue
        out.append(token)
    return " ".join(out)


# -- German umlauts spelled out ------------------------------------------------------------------------------------
# German writes ä ö ü as ae oe ue where they cannot be typed (a keyboard without them, a name in a passport, a URL):
# "Mueller" is "Müller", "Groesse" is "Größe". Folding makes "Müller" the token "muller", so the two spellings are
# different tokens. The stored tokens stay as they are (changing them is a new tokenizer version, and every index
# written so far would need an upgrade): the query asks for both spellings instead
# (:func:`ragstep.retrieval.text.keyword_terms`). A form no document holds adds nothing to BM25; an English word the
# rule below reads as a spelled umlaut rarely maps onto another word (over the 5,000 MS MARCO passages' vocabulary:
# "guests" -> "gusts", besides the German "zuercher" -> "zurcher" and "roesti" -> "rosti" it is for).

_UMLAUTS = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "Ä": "Ae", "Ö": "Oe", "Ü": "Ue"})
#: Where "ae" / "oe" / "ue" may stand for an umlaut: not after a vowel ("Feuer", "Dauer": eu and au are diphthongs),
#: nor after q ("queue", "Quelle"), and before a consonant (an umlaut is: "Mueller", "Koeln", "Jaeger"). That leaves
#: out the English and Latin words whose ending would lose a letter ("due" -> "du", "larvae" -> "larva").
_SPELLED = re.compile(r"(?<![aeiouq])([aou])e(?=[b-df-hj-np-tv-z])")
#: Shorter words are too often English ("poem" -> "pom", "coed" -> "cod"); German names and nouns are longer.
_MIN_SPELLED = 5


def spelled_umlauts(text: str) -> str | None:
    """``text`` with ä ö ü written ae oe ue, as German spells them without the letters; None when it has none."""
    spelled = text.translate(_UMLAUTS)
    return spelled if spelled != text else None


def umlaut_forms(terms: list[str]) -> list[str]:
    """The folded umlaut form of each ASCII term that may spell one out ("mueller" -> "muller", the token of
    "Müller"; "groesse" -> "grosse", that of "Größe"); terms that cannot are left out."""
    out = []
    for term in terms:
        if len(term) >= _MIN_SPELLED and term.isascii() and "e" in term:
            form = _SPELLED.sub(r"\1", term)
            if form != term:
                out.append(form)
    return out
