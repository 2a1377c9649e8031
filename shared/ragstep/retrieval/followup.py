"""Follow-up questions without a language model: is a question elliptical, and what should retrieval search for it.

A follow-up in a conversation leaves its subject out ("它的面积有多大？", "and how much memory does it need to
decompress?", "时间呢？"); searched alone it finds whatever matches its few remaining words. Without a model to
rewrite it, the question is searched together with the subject it leaves out: the content words of the previous
question(s) of the conversation.

When is a question a follow-up? Signals from grammar, not from any topic, in English and Chinese, and in French,
German and Spanish (questions are asked in them over documents in any language):

* it refers back -- a third-person or demonstrative pronoun / determiner (it, its, they, this, 它, 其, 这, cette,
  son, diese, seine, esto, su ...), an adverb of time that places the ask after or before what was said and names
  no event of its own (afterwards, beforehand, ensuite, danach, vorher: "can I go back afterwards?" after "how do
  I upgrade?"; not "after the upgrade", which names it), or a word that points back in one use and not in
  another, read by the words around it (:mod:`ragstep.retrieval.demonstratives`: "who led *that* release?" but
  not "files *that* changed", "*the same* option", French "*ce* fichier", German "wie lange dauert *das*?", Chinese
  "*该*版本", "*那次*");
* it continues -- it opens with a conjunction or "what about" (and, also, 那, 还有, et, und, y, qu'en est-il ...),
  ends with a particle that adds to or replaces what was asked (too, as well, instead, aussi, también: "how do I
  number the empty lines too?") or with the Chinese elliptical particle 呢 ("时间呢？");
* it has no content word of its own ("What about them?", "为什么？", "Et -r ?" has "r").

Pronouns that also open ordinary questions are left out: French "il" ("faut-il", "y a-t-il"), German "es" / "sie" ("gibt
es", the polite "Sie"), Spanish "es" (a verb) and "lo" before que/mismo/más ("lo que": "¿quién lo escribió?" counts).

A question with history but none of these signals is a new topic, searched as asked. A signal counts even when the
question shares a word with the previous one: the shared word is seldom the subject ("What does comm print in its
third column?" -> "can I change the separator between the columns?" shares "column", not "comm"), the subject's
words added are only those the question lacks, and the answer is chosen by the follow-up's own words
(:mod:`ragstep.retrieval.follow_up_answer`).

The word classes are closed grammatical classes (pronouns, conjunctions, particles), the same for every topic; the
content words come from the tokenizer retrieval uses (:func:`ragstep.retrieval.text.tokenize`, stopwords removed),
accents kept: the word lists tell "él" (he) from "el" (the).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragstep.models.message_language import message_language_of
from ragstep.retrieval.demonstratives import points_back
from ragstep.retrieval.text import tokenize

# Third-person and demonstrative pronouns / determiners: words that point back to something said before.
# Not "that" (a relative pronoun in many a standalone question: "files that changed") nor "one" (a numeral).
_ANAPHORS_EN = frozenset(
    {"it", "its", "itself", "they", "them", "their", "theirs", "themselves", "this", "these", "those"}
    | {"he", "him", "his", "she", "her", "hers"}
    # Adverbs of time that place the ask after or before what was said ("can I go back afterwards?").
    | {"afterwards", "afterward", "beforehand", "thereafter"}
)
_ANAPHORS_ZH = frozenset(("它们", "它", "他们", "她们", "他", "她", "其", "这个", "那个", "这些", "那些", "这", "此"))
_ANAPHORS_FR = frozenset(
    {"cela", "ça", "ceci", "celui", "celle", "ceux", "celles", "cette", "cet", "ces", "son", "sa", "ses", "leur"}
    | {"leurs", "lui", "elle", "elles", "ils", "eux", "ensuite", "auparavant"}
)
_ANAPHORS_DE = frozenset(
    {"dies", "diese", "dieser", "dieses", "diesem", "diesen", "dessen", "deren", "er", "ihn", "ihm", "ihnen"}
    | {"seine", "seinen", "seinem", "seiner", "seines", "ihre", "ihren", "ihrem", "ihrer", "ihres"}
    | {"dafür", "dazu", "davon", "darauf", "dabei", "dagegen", "daran", "danach", "davor", "nachher", "vorher"}
)
_ANAPHORS_ES = frozenset(
    {"esto", "eso", "ello", "este", "esta", "estos", "estas", "ese", "esa", "esos", "esas", "su", "sus"}
    | {"él", "ella", "ellos", "ellas", "aquel", "aquella"}
)
_ANAPHORS = _ANAPHORS_EN | _ANAPHORS_ZH | _ANAPHORS_FR | _ANAPHORS_DE | _ANAPHORS_ES
# Pronouns that are English words too ("my son", "ER diagrams", "su -", "the process dies"): they count only in a
# question not read as English.
_ENGLISH_TOO = frozenset({"son", "sa", "er", "su", "dies"})
# After these, Spanish "lo" is not a pronoun: "lo que", "lo mismo", "lo más".
_LO_NOT_IT = frozenset({"que", "qué", "mismo", "más", "cual", "cuál"})
# Openers that continue the previous question rather than ask a new one (one to three words).
_OPENERS_EN = ("and", "also", "but", "so", "then", "what about", "how about", "what else", "anything else")
_OPENERS_FR = ("et", "aussi", "mais", "alors", "donc", "puis", "ensuite", "quant à", "qu'en est il", "qu'en est")
_OPENERS_DE = ("und", "auch", "aber", "dann", "sowie", "was ist mit", "wie ist es mit", "wie steht es mit")
_OPENERS_ES = ("y", "también", "pero", "entonces", "además", "qué hay de", "qué pasa con")
_OPENERS = frozenset(_OPENERS_EN + _OPENERS_FR + _OPENERS_DE + _OPENERS_ES)
# Closers that add to or replace what was asked before ("how do I number the empty lines too?", "what should I use
# instead?", "et les fichiers aussi ?"): additive and substitutive focus particles, the last one or two words.
_CLOSERS = frozenset(
    ("too", "as well", "either", "instead", "aussi", "non plus", "plutôt", "stattdessen", "también", "tampoco")
)
# Words of closed classes (articles, prepositions, auxiliaries, question words) in French, German and Spanish, which
# the tokenizer's English stopwords let through: sharing one ("de", "der") does not make a question name the previous
# one's subject, and they are not the subject to add. Not dropped from the index: this module's own reading. Words that
# are English content words too (die, man, mit, con, sin, son) are not in it.
_FUNCTION_WORDS_FR = (
    "le la les l un une des du de d au aux à en et ou est sont que qu qui quoi quel quelle quels quelles comment "
    "pourquoi où combien je tu il on nous vous ce se sur dans par pour avec sans pas ne faut fait peut"
)
_FUNCTION_WORDS_DE = (
    "der das den dem des ein eine einen einem einer und oder ist sind wie was wer wo warum wann welche welcher "
    "welches ich du wir ihr von zu zum zur im in auf für aus bei nicht kann muss wird werden es sie"
)
_FUNCTION_WORDS_ES = (
    "el los las lo una unos unas del y o es qué que cómo como por para se su en no cuál cuáles dónde cuándo cuánto "
    "puedo yo tú"
)
_FUNCTION_WORDS = frozenset(
    word for words in (_FUNCTION_WORDS_FR, _FUNCTION_WORDS_DE, _FUNCTION_WORDS_ES) for word in words.split()
)
# Whole first words (jieba's): 那曲 (a place) or 再生纸 start with these characters without continuing anything.
_OPENERS_ZH = frozenset(("那么", "那", "还有", "另外", "而且", "并且", "以及", "那它"))
_ZH_ELLIPSIS = re.compile(r"呢\s*[?？!！。.]*\s*$")
# An opener is read from the raw words ("and", "so" are stopwords), apostrophes kept: "qu'en est-il".
_RAW_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*")
#: At most this many words of the previous questions are added (the subject, not a second question).
MAX_ADDED_TERMS = 8


@dataclass(frozen=True)
class FollowUp:
    """Why the question is a follow-up (``reason``) and the query retrieval searches (``query``)."""

    reason: str
    query: str
    added: tuple[str, ...]


def _content(text: str) -> list[str]:
    """The content words retrieval would search for ``text``, without French, German and Spanish function words."""
    return [t for t in tokenize(text, fold=False) if t not in _FUNCTION_WORDS]


def _raw_words(question: str) -> list[str]:
    return _RAW_WORD.findall(question.strip().lower().replace("\u2019", "'"))  # ’: the typographic apostrophe


def _refers_back(question: str) -> bool:
    # Whole words only: jieba keeps 这里 ("here") or 其他 ("other") whole, so only a pronoun standing alone counts.
    language = message_language_of(question)
    tokens = tokenize(question, keep_stopwords=True, fold=False)
    if any(word in _ANAPHORS and not (language == "en" and word in _ENGLISH_TOO) for word in tokens):
        return True
    words = _raw_words(question)
    # Spanish "lo" before a verb is "it" ("¿quién lo escribió?"), before que/mismo/más it is not.
    if any(w == "lo" and (i + 1 == len(words) or words[i + 1] not in _LO_NOT_IT) for i, w in enumerate(words)):
        return True
    # Words that point back in one use and not in another ("who led that release?" / "files that changed"):
    # told apart by the closed-class words around them.
    return points_back(question, words, tokens, language)


def _continues(question: str) -> bool:
    words = _raw_words(question)
    if any(" ".join(words[:n]) in _OPENERS for n in (1, 2, 3) if len(words) >= n):
        return True
    if any(" ".join(words[-n:]) in _CLOSERS for n in (1, 2) if len(words) > n):
        return True
    stripped = question.strip()
    first = tokenize(stripped, keep_stopwords=True, fold=False)[:1]
    return (bool(first) and first[0] in _OPENERS_ZH) or bool(_ZH_ELLIPSIS.search(stripped))


def follow_up_reason(question: str, previous: str) -> str | None:
    """Why ``question`` needs ``previous`` to be understood (``refers_back``, ``continues``, ``too_short``), or None
    when it stands alone (it shows no sign of leaning on it).

    A word that points back or continues counts even when the question shares a word with ``previous``: the shared
    word is often not the subject (module docstring)."""
    terms = set(_content(question))
    if not _content(previous):
        return None
    if _refers_back(question):
        return "refers_back"
    if _continues(question):
        return "continues"
    if not terms:
        return "too_short"
    return None


def resolve(question: str, earlier: Sequence[str]) -> FollowUp | None:
    """The query for ``question`` searched with the subject of the conversation (``earlier``: the previous questions,
    oldest first), or None when it stands alone.

    The subject is the content words of the latest earlier question that stood alone (an earlier follow-up leaned
    on the one before it: "它的面积有多大？" then "那它的深度呢？" both lean on "青海湖在哪里？"), those the question
    does not already have, at most :data:`MAX_ADDED_TERMS`."""
    if not earlier:
        return None
    reason = follow_up_reason(question, earlier[-1])
    if reason is None:
        return None
    subject = earlier[-1]
    for i in range(len(earlier) - 1, 0, -1):
        if follow_up_reason(earlier[i], earlier[i - 1]) is None:
            break
        subject = earlier[i - 1]
    have = set(tokenize(question, fold=False))
    added = _longest_first_unique([t for t in dict.fromkeys(_content(subject)) if t not in have])[:MAX_ADDED_TERMS]
    if not added:
        return None
    return FollowUp(reason=reason, query=f"{question.strip()} {' '.join(added)}", added=tuple(added))


def _longest_first_unique(terms: list[str]) -> list[str]:
    """``terms`` in order without those inside a longer one (jieba's search mode gives 青海 and 青海湖)."""
    return [t for t in terms if not any(t != u and t in u for u in terms)]
