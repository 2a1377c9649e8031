"""Why the model-free answerer declines, read from the checks its decision already made
(:mod:`ragstep.retrieval.answer_span`): no check of its own, and no other question answered or declined.

The decision declines when the selected sentence fails one of its checks; this says which, and with what the user can
act on:

* ``kind_not_stated``: the question asks for a kind of value (a date, a duration, a number, an option ...; a measured
  attribute it names -- its area, its licence --; what a count counts) and no sentence read states it: the kinds are
  named (:func:`asked_kinds`).
* ``name_not_held``: the selected sentence's passage lacks a name of the question ("Docker", "ext4"): the names it
  lacks are named, and whether any retrieved passage holds them.
* ``about_another``: the selected sentence is about another thing of the kind the question names ("The Austin
  office opened in 2021" for "When did the Lisbon office open?": :func:`~ragstep.retrieval.answer_subject
  .about_other`): the two are named.
* ``under_threshold``: the sentence passes the checks but its support is under the threshold: the sentence the
  decision read is given, with its passage's ``[n]``, as a hint of what the sources say closest to the question.
* ``few_words`` (no embedding model): the passages share too few of the question's words; ``no_sentence``: the
  passages have no sentence to quote; ``outside_subject``: a follow-up's sentence is outside the documents of the
  conversation's subject.

The reason travels as a dict (:meth:`Decline.as_detail`): the answer stage's trace row carries its ``reason`` and
``detail``, and the answer's note is written from them in the question's language
(:mod:`ragstep.stages.chat.notes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ragstep.retrieval import answer_types
from ragstep.retrieval.answer_attributes import ATTRIBUTE_KINDS, default_words
from ragstep.retrieval.answer_focus import counted, english_count
from ragstep.retrieval.answer_subject import about_other, group_names, other_version
from ragstep.retrieval.answer_terms import holds_name, identifiers, question_language
from ragstep.retrieval.answer_terms import names as names_of

if TYPE_CHECKING:
    import numpy as np


class Checked(Protocol):
    """What :func:`failed_check` reads of the answerer's features (:class:`~ragstep.retrieval.answer_span.Features`,
    which imports this module: a protocol, not that class)."""

    @property
    def candidates(self) -> Sequence[tuple[int, int, str, str]]: ...
    @property
    def expects(self) -> bool: ...
    @property
    def typed(self) -> np.ndarray: ...
    @property
    def named(self) -> np.ndarray: ...


#: The kind of value each of :mod:`~ragstep.retrieval.answer_types`'s question types asks for, in its order.
_KIND_NAMES = (
    "option",
    "author",
    "setting",
    "ratio",
    "frequency",
    "time_before",
    "length",
    "length",
    "weight",
    "length",
    "duration",
    "deadline",
    "year",
    "date",
    "number",
)


@dataclass(frozen=True, slots=True)
class Failed:
    """The check of the decision the selected sentence failed (``check``: a reason of the module docstring) and what
    it asked for: the kinds of value (:func:`asked_kinds`), or the names its passage lacks (as the question writes
    them); ``passage`` is the selected sentence's (1-based) and ``anywhere`` whether another passage holds the names."""

    check: str
    what: tuple[str, ...] = ()
    passage: int = 0
    anywhere: bool = False


@dataclass(frozen=True, slots=True)
class Decline:
    """Why an assessment declines: the failed check, or (``under_threshold``) the support under the threshold with
    the sentence the decision read and its passage."""

    reason: str
    what: tuple[str, ...] = ()
    passage: int = 0
    anywhere: bool = False
    sentence: str = ""
    support: float = 0.0
    threshold: float = 0.0

    def as_detail(self) -> dict[str, object]:
        """The reason as a trace row's detail (and what the note is written from): only what it says."""
        out: dict[str, object] = {"reason": self.reason}
        if self.what:
            out["what"] = list(self.what)
        if self.passage:
            out["passage"] = self.passage
        if self.reason == "name_not_held":
            out["anywhere"] = self.anywhere
        if self.sentence:
            out["sentence"] = self.sentence
        if self.reason in ("under_threshold", "few_words") and self.sentence:
            out["support"] = round(self.support, 3)
            out["threshold"] = self.threshold
        return out


def asked_kinds(question: str) -> tuple[str, ...]:
    """The kinds of value ``question`` asks for: its type's (``date``, ``duration``, ``number`` ...: a code the note
    names in the question's language), the attributes it names (as it writes them: "area", "license", "面积") and
    what a count counts ("sick days", "员工")."""
    kinds: list[str] = []
    expected = answer_types.expected_answer(question)
    if expected is not None:
        index = next((k for k, (_, holds) in enumerate(answer_types._KINDS) if holds is expected), None)
        known = index is not None and len(_KIND_NAMES) == len(answer_types._KINDS)
        kinds.append(_KIND_NAMES[index] if known and index is not None else "value")
    for asks, _ in ATTRIBUTE_KINDS:
        match = asks.search(question)
        if match is not None:
            kinds.append(f'"{match.group(0)}"')
    count = english_count(question)
    noun = " ".join([*count[1], count[0]]) if count is not None else counted(question)
    if noun:
        kinds.append(f'"{noun}"')
    return tuple(dict.fromkeys(kinds)) or ("value",)


def failed_check(
    question: str, passages: Sequence[str], f: Checked, best: int, inside: np.ndarray, *, words: bool = False
) -> Failed:
    """Which check the selected sentence (``f.candidates[best]``) failed, in the decision's order: the kind of value,
    the question's names, a follow-up's subject (``inside``), and without an embedding model (``words``) the share
    of the question's words. Called only when the decision's checks failed."""
    n = f.candidates[best][0]
    if f.expects and not f.typed[best]:
        return Failed("kind_not_stated", asked_kinds(question), n)
    if not f.named[best]:
        language = question_language(question)
        forms = group_names(question) if language == "en" else {}
        wanted = list(dict.fromkeys(names_of(question, language) + identifiers(question) + list(forms)))
        passage = passages[n - 1].casefold() if n - 1 < len(passages) else ""
        missing = [w for w in wanted if not holds_name(passage, w, forms)]
        other = (about_other if language == "en" else other_version)(question, f.candidates[best][2])
        if not missing and other is not None:
            return Failed("about_another", other, n)
        if not missing:  # the sentence is not about what the default asked for is of ("keyring.enabled")
            defaulted = default_words(question)
            missing = [w for w in defaulted if not holds_name(passage, w, forms)] or defaulted
        anywhere = bool(missing) and any(all(holds_name(p.casefold(), w, forms) for w in missing) for p in passages)
        return Failed("name_not_held", tuple(_as_asked(question, w) for w in missing), n, anywhere)
    if inside.any() and not inside[best]:
        return Failed("outside_subject", (), n)
    return Failed("few_words" if words else "under_threshold", (), n)


def _as_asked(question: str, name: str) -> str:
    """``name`` (case-folded) as the question writes it."""
    at = question.casefold().find(name)
    return question[at : at + len(name)] if at >= 0 and len(question) == len(question.casefold()) else name
