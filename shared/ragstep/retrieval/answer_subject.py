"""Whom or what a question asks about, read from its grammar, and whether a sentence is about something else: three
rules of the model-free answerer (:mod:`ragstep.retrieval.answer_span`), the first two English only.

**The group a quantity is asked of** (:func:`asked_group`). "How many vacation days do interns get?" asks the count
for a group: the subject after the auxiliary ("do", "did", "can", "should" ...), a plural noun in lower case with
the words qualifying it ("part-time employees"; "do" agrees with a plural; a capital is a name, which
:func:`~ragstep.retrieval.answer_terms.names` reads; "I", "you", "we" are no group). A document states a quantity
for a group it names ("Full-time employees receive 25 days ..."), so a passage that never mentions the group asked
about does not say what that group gets, however close it reads: the group is asked of the passages as a name is
(:func:`group_names`, in the singular or the plural: "intern" / "interns"), and a question about interns over a
handbook that does not mention them is declined, the group named as what no passage mentions. A group the passages
do name narrows the count's sentence to those about it (:mod:`ragstep.retrieval.answer_focus`). The cost: a
question naming the group in other words than the document ("staff" for "employees") is declined.

**Another thing of the same kind** (:func:`about_other`). "When did the Lisbon office open?" names its subject by a
name written between a determiner and its noun ("the Lisbon office", "a Docker container"). A passage about the
company's offices names each ("The Austin office opened in 2021 ..."): a sentence that writes the same noun after
another name, and not the question's, is about that other one, and states nothing of the one asked about; its
passage holding the question's name elsewhere does not make it an answer. The sentence-initial capital and the
function words ("The", "Our") are no name.

**Another program's version** (:func:`other_version`). "What's the minimum python version pipx supports?" and
"canal-adapter 的 ES 适配器支持 Elasticsearch 哪个版本" ask for the version of a program they name. A sentence that
writes a version number after another program's name ("Minimum supported rust version is now 1.77.2", "canal 1.1.1版本
之后") states that program's version, not the one asked about, unless it names the one asked about too. A number
after a function word ("since 2.7", "升级到 1.2") is no other program's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragstep.retrieval.text import stopwords

#: The group is within this many words after the auxiliary (a determiner, up to two qualifiers and the noun).
GROUP_WORDS = 4

# "how many / how much ... <auxiliary> <group> <verb>": the auxiliary of a question whose subject may be plural.
_QUANTITY_OF = re.compile(
    r"(?i:\bhow\s+(?:many|much)\b).*?\b(?i:do|did|can|could|will|would|should|must|may|might)\s+(.*)$"
)
_DETERMINERS = frozenset({"the", "all", "our", "your", "their", "most", "some", "these", "those"})
# A plural in lower case: ends in "s", not "ss", "us" or "is" ("class", "status", "analysis" are singular).
_PLURAL = re.compile(r"[a-z][a-z-]{2,}[^\Wsui]s")
_WORD = re.compile(r"[A-Za-z][\w'-]*")


@dataclass(frozen=True, slots=True)
class Group:
    """The group a quantity is asked of: its noun (a plural, as the question writes it) and its qualifiers."""

    head: str
    qualifiers: tuple[str, ...] = ()


def asked_group(question: str) -> Group | None:
    """The group an English quantity question asks about ("How many vacation days do part-time employees get?":
    "employees", qualified by "part-time"), None when it asks of none (module docstring)."""
    match = _QUANTITY_OF.search(question)
    if match is None:
        return None
    words = _WORD.findall(match.group(1))
    if words and words[0].casefold() in _DETERMINERS:
        words = words[1:]
    stop = stopwords()
    for k, word in enumerate(words[: GROUP_WORDS - 1]):
        if not word.islower() or word in stop:
            return None  # a name, a pronoun or a function word: no group of common nouns
        if _PLURAL.fullmatch(word) and k + 1 < len(words):  # the group's noun, and the verb after it
            return Group(word, tuple(words[:k]))
    return None


def singular(word: str) -> str:
    """``word`` (a plural in lower case) without its plural ending: "interns" -> "intern", "companies" ->
    "company", "boxes" -> "box", "employees" -> "employee"."""
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("es") and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
        return word[:-2]
    return word[:-1] if word.endswith("s") else word


def group_pattern(word: str) -> re.Pattern[str]:
    """``word`` (a plural) in the singular or the plural, as a whole word (case-folded text)."""
    forms = sorted({singular(word), word}, key=len, reverse=True)
    return re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(f) for f in forms) + r")(?![\w-])")


def group_names(question: str) -> dict[str, re.Pattern[str]]:
    """The group a quantity question asks about, as a name its passage must hold (module docstring): its noun as
    the question writes it, with what a passage holding it holds. Empty when it asks of no group."""
    group = asked_group(question)
    return {} if group is None else {group.head: group_pattern(group.head)}


# A name written before its noun, after a determiner: one to three capitalised words, then a lower-case word ("the
# Lisbon office", "a Docker container"; "Does Docker run ...?" names no noun).
_NAMED_NOUN = re.compile(
    r"\b(?i:the|a|an|this|that|our|your|their|its|each|every)\s+((?:[A-Z][\w.&'-]*\s+){1,3})([a-z][a-z-]{2,})\b"
)


def named_subjects(question: str) -> list[tuple[str, str]]:
    """The (name, noun) pairs ``question`` writes as "<determiner> <Name> <noun>" ("the Lisbon office": ("Lisbon",
    "office"))."""
    stop = stopwords()
    return [
        (" ".join(m.group(1).split()), m.group(2))
        for m in _NAMED_NOUN.finditer(question)
        if m.group(2) not in stop and not any(w.casefold() in stop for w in m.group(1).split())
    ]


def about_other(question: str, sentence: str) -> tuple[str, str] | None:
    """When ``sentence`` is about another thing of the kind ``question`` names ("The Austin office opened in 2021"
    for "When did the Lisbon office open?"), the question's and the sentence's "<Name> <noun>" (or, asked a
    program's version, the two programs: :func:`other_version`); else None (module docstring)."""
    folded = sentence.casefold()
    stop = stopwords()
    version = other_version(question, sentence)
    if version is not None:
        return version
    for name, noun in named_subjects(question):
        if name.casefold() in folded:
            continue
        kind = re.escape(singular(noun) if noun.endswith("s") else noun)
        for match in re.finditer(rf"((?:[A-Z][\w.&'-]*\s+){{1,3}}){kind}s?\b", sentence):
            other = [w for w in match.group(1).split() if w.casefold() not in stop]
            if other:
                return f"{name} {noun}", f"{' '.join(other)} {noun}"
    return None


_QUALIFIERS = (
    r"(?:(?:minimum|maximum|min|max|latest|oldest|newest|lowest|highest|earliest|required|supported|current|stable"
    r"|first|last)\s+)*"
)
# The program a version is asked of: "which python version", "what's the minimum python version", "the version of
# SQLite", "Elasticsearch 哪个版本".
_VERSION_OF = (
    re.compile(
        rf"\b(?:which|what)(?:'s|\s+is|\s+are)?\s+(?:the\s+)?{_QUALIFIERS}([A-Za-z][\w.+-]*)\s+(?:versions?|releases?)\b",
        re.IGNORECASE,
    ),
    re.compile(r"\b(?:versions?|releases?)\s+of\s+(?:the\s+)?([A-Za-z][\w.+-]*)", re.IGNORECASE),
    re.compile(
        r"(?<![A-Za-z0-9_])([A-Za-z][A-Za-z0-9_.+-]*)\s*(?:的)?\s*(?:哪个|什么|哪一个|哪一|哪些|最低|最新|最高)\s*版本"
    ),
)
# A program's name written before its version number: "canal 1.1.1", "rust version is now 1.77.2", "Python 3.8".
_NAMED_VERSION = re.compile(
    r"(?<![A-Za-z0-9_])([A-Za-z][A-Za-z0-9_+-]*)\s+(?:(?:versions?|releases?)\s+(?:is\s+|are\s+|was\s+)?(?:now\s+|still\s+)?)?v?\d+(?:\.\d+)+",
    re.IGNORECASE,
)
# Words that are no program before a version number: what a version is called, and the verbs of releasing.
_NOT_PROGRAM_WORDS = (
    "version versions release releases v since until before after from to in of upgrade upgraded update updated "
    "requires require required needs need supported support supports minimum maximum newer older later earlier"
)
_NOT_A_PROGRAM = frozenset(_NOT_PROGRAM_WORDS.split())


def asked_version_of(question: str) -> str | None:
    """The program ``question`` asks the version of ("What's the minimum python version pipx supports?": "python"),
    None when it asks no version or names no program."""
    stop = stopwords()
    for pattern in _VERSION_OF:
        match = pattern.search(question)
        if match and match.group(1).casefold() not in stop and match.group(1).casefold() not in _NOT_A_PROGRAM:
            return match.group(1)
    return None


def other_version(question: str, sentence: str) -> tuple[str, str] | None:
    """When ``sentence`` states the version of another program than the one ``question`` asks the version of
    ("Minimum supported rust version is now 1.77.2" for "What's the minimum python version pipx supports?"), the
    two programs' names; else None (module docstring)."""
    program = asked_version_of(question)
    if program is None or program.casefold() in sentence.casefold():
        return None
    stop = stopwords()
    for match in _NAMED_VERSION.finditer(sentence):
        other = match.group(1)
        if other.casefold() not in stop and other.casefold() not in _NOT_A_PROGRAM:
            return program, other
    return None
