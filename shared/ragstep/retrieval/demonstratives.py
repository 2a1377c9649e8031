"""Does a word that can point back point back here? Demonstratives that are also relative pronouns, articles or
modal verbs, told apart by grammar alone.

Some words point back to what was said before in one use and not in another:

* English **that**: a demonstrative ("who led *that* release?", "does *that* option work?", "how do I undo *that*?")
  or a relative pronoun / conjunction ("files *that* changed", "the option *that* sets ...", "check *that* the
  file exists"). A demonstrative *that* ends the question, or follows a word that cannot take a relative clause --
  a preposition ("in that case"), an auxiliary ("is that", "does that"), a verb (the word after a subject pronoun
  or a question word: "who *led* that", "can I *undo* that change") -- and is not followed by what opens a clause
  (an article, a pronoun, an auxiliary: "that the", "that it", "that is"). A noun before *that* ("files that",
  "an option that") is where a relative clause hangs: not pointing back.
* English **the same** before a noun or a verb ("the same option", "does the same apply"), not "the same as".
* French **ce** before a noun ("ce fichier"), not "ce que" / "ce qui" / "ce dont" / "est-ce".
* German **das**: the article before its noun ("das Release": German capitalises nouns), a relative pronoun after
  a comma, a demonstrative pronoun otherwise ("Wie lange dauert das?", "Wer hat das geleitet?"). In a question typed
  in lower case (its first word too) only a final "das" counts.
* Chinese **该** before a noun is "the said, that" (该版本), before a question word or a negation it is the modal
  "should" (该怎么升级？); 这 / 那 with a measure word (那次, 这种, 那项) is "this / that one".

Spanish has no such ambiguity (relative "que" and demonstrative "ese" are different words): its demonstratives are
plain anaphors (:mod:`ragstep.retrieval.followup`). The word lists are closed grammatical classes (articles,
pronouns, auxiliaries, prepositions, measure words), the same for every topic.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def _closed(words: str) -> frozenset[str]:
    """A closed word class written as one string of words."""
    return frozenset(words.split())


_PREPOSITIONS_EN = _closed(
    "about above after against along among around at before behind below beside besides between beyond by despite "
    "during except for from in inside into like near of off on onto out outside over past per since than through "
    "throughout to toward towards under unlike until upon via with within without"
)
_AUXILIARIES_EN = _closed(
    "am is are was were be been being do does did done has have had can could will would shall should may might "
    "must isn't aren't wasn't weren't doesn't don't didn't hasn't haven't can't couldn't won't wouldn't shouldn't "
    "'s 're"
)
_SUBJECTS_EN = _closed("i you we they he she it who what which one people")
_QUESTION_WORDS_EN = _closed("who what which when where why how whose whom")
# What opens a clause after a relative "that" / the conjunction "that": an article, a pronoun, an auxiliary, "not".
_CLAUSE_OPENERS_EN = (
    _closed("the a an my your our their his her its this these those there it i you we they he she not no")
    | _closed("all every each some any")
    | _AUXILIARIES_EN
)
_NOT_AFTER_CE = ("que", "qu", "qui", "quoi", "dont", "n", "sont", "soit", "serait", "sera", "fut", "faisant")
_ZH_MEASURE = frozenset("个些次种项条款本位篇份台类样回部件批")
_ZH_MODAL_NEXT = ("怎么", "怎样", "如何", "不", "是否", "咋", "用", "选", "去", "做", "要")
_DE_TOKEN = re.compile(r"[^\W\d_]+|[,;:]")


def _english_that(words: Sequence[str]) -> bool:
    for i, word in enumerate(words):
        if word != "that":
            continue
        if i + 1 == len(words):
            return True  # "how do I undo that?"
        after = words[i + 1]
        if after in _CLAUSE_OPENERS_EN:
            continue  # "files that are", "check that the", "that it"
        before = words[i - 1] if i else ""
        if not before or before in _PREPOSITIONS_EN or before in _AUXILIARIES_EN:
            return True  # "that release, ...", "in that case", "does that option ..."
        subject = words[i - 2] if i >= 2 else ""
        if subject in _SUBJECTS_EN or (i == 1 and before in _QUESTION_WORDS_EN):
            # "who led that release", "can I undo that change": the word before "that" is a verb. Unless a clause
            # follows ("verify that backups are ..."): then "that" is the conjunction.
            later = words[i + 2] if i + 2 < len(words) else ""
            if later not in _AUXILIARIES_EN:
                return True
    return False


def _english_same(words: Sequence[str]) -> bool:
    return any(
        word == "same"
        and i
        and words[i - 1] == "the"
        and i + 1 < len(words)
        and words[i + 1] not in _PREPOSITIONS_EN
        and words[i + 1] not in ("as", "thing", "way", "time")
        for i, word in enumerate(words)
    )


def _french_ce(words: Sequence[str]) -> bool:
    for i, word in enumerate(words):
        if word != "ce" or i + 1 == len(words):
            continue
        after = words[i + 1]
        if i and words[i - 1] in ("est", "qu'est"):
            continue  # "est-ce que", "qu'est-ce"
        if not after.startswith(_NOT_AFTER_CE):
            return True
    return False


def _german_das(question: str) -> bool:
    tokens = _DE_TOKEN.findall(question)
    cased = bool(tokens) and tokens[0][:1].isupper()  # a question typed in lower case tells no noun by its capital
    for i, token in enumerate(tokens):
        if token.casefold() != "das" or (i and tokens[i - 1] in ",;:"):
            continue
        rest = [t for t in tokens[i + 1 : i + 3] if t not in ",;:"]
        if not rest:
            return True  # "Wie lange dauert das?"
        if cased and not any(t[:1].isupper() for t in rest):
            return True  # "Wer hat das geleitet?"; not "das Release", "das neue Release"
    return False


def _chinese(tokens: Sequence[str]) -> bool:
    for i, token in enumerate(tokens):
        if token == "该":
            after = tokens[i + 1] if i + 1 < len(tokens) else ""
            if after and not after.startswith(_ZH_MODAL_NEXT):
                return True  # 该版本; not 该怎么升级
        elif len(token) == 2 and token[0] in "这那" and token[1] in _ZH_MEASURE:
            return True  # 那次, 这种
    return False


def points_back(question: str, words: Sequence[str], tokens: Sequence[str], language: str) -> bool:
    """Whether ``question`` holds a demonstrative that points back (module docstring); ``words`` are its raw words
    lower-cased (apostrophes kept), ``tokens`` its tokenizer tokens (jieba's words for Chinese), ``language`` its
    message language."""
    if language == "en":
        return _english_that(words) or _english_same(words)
    if language == "fr":
        return _french_ce(words)
    if language == "de":
        return _german_das(question)
    if language == "zh":
        return _chinese(tokens)
    return False
