"""The two checks of the model-free answerer's decision (:mod:`ragstep.retrieval.answer_span`), read for each
candidate sentence: whether it holds what the question asks for (:func:`asked_held`) and whether it is about what
the question names (:func:`named_held`).

* **What is asked**: the kind of value of the question's type (:func:`~ragstep.retrieval.answer_types
  .expected_answer`: a number, a date, an option ...), each measured attribute it names, and what a count counts
  (:mod:`ragstep.retrieval.answer_focus`). Which option is also answered by a configuration table's row, named by
  its first cell written as code ("`compression` — Default: gzip; Description: `gzip`, `zstd` or `none`":
  :mod:`ragstep.retrieval.answer_layout`). A count asked of a group that no sentence gives a number for is answered
  by the sentence stating the group's rule ("Part-time employees receive vacation pro rata to their contracted
  hours.": :func:`~ragstep.retrieval.answer_focus.group_rule_held`).
* **What is named**: its passage holds every name of the question (:func:`~ragstep.retrieval.answer_terms
  .passages_naming`, across languages :func:`~ragstep.retrieval.answer_language.naming_across`), and, asked in
  English about "the Lisbon office", the sentence is not about another office (:func:`~ragstep.retrieval
  .answer_subject.about_other`).
* **A default asked for is stated** (:func:`stating_default`): asked for a default, the answer quotes a sentence
  that states one ("Defaults to \"5s\".", "**Default**: `origin`", "maxsize=128", "If no FILE is given, ..."); a
  sentence about the setting that states none ("Sets the log format for direnv outputs.") does not answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from ragstep.models.message_language import MessageLanguage
from ragstep.retrieval.answer_attributes import (
    default_keys,
    default_subject,
    names_measure,
    stated_attributes,
    states_default,
)
from ragstep.retrieval.answer_focus import focus_held, group_rule_held
from ragstep.retrieval.answer_language import naming_across
from ragstep.retrieval.answer_subject import about_other, other_version
from ragstep.retrieval.answer_terms import passages_naming
from ragstep.retrieval.answer_types import (
    asks_option,
    default_field,
    expected_answer,
    holds_asked,
    is_option_entry,
)


def asked_held(
    question: str, candidates: Sequence[tuple[int, int, str, str]], leads: Sequence[str], languages: Sequence[str]
) -> tuple[np.ndarray, bool]:
    """Which candidates hold what ``question`` asks for (module docstring; a sentence of an option's description
    read with its option's term, a measured attribute and a count's focus with its lead), and whether it asks for
    anything (when not, every candidate holds it)."""
    expected = expected_answer(question)
    which = asks_option(question)  # a sentence of an option's description holds its option
    attributes = stated_attributes(question)
    # What a count counts ("the maximum number of devices": a bound of a count is still of devices).
    focus = None if names_measure(question) else focus_held(question, candidates, leads, languages)
    unasked = _unasked(question)  # a value the question writes itself is no answer to it
    typed = np.array(
        [
            (
                expected is None
                or holds_asked(
                    expected, unasked(f"{lead} {c[2]}" if which and is_option_entry(lead) else c[2]), question
                )
            )
            and all(a.search(unasked(f"{lead} {c[2]}")) for a in attributes)
            and (focus is None or focus[k])
            for k, (c, lead) in enumerate(zip(candidates, leads, strict=True))
        ],
        dtype=bool,
    )
    if focus is not None and not typed.any():  # no number for the group asked about: the sentence of its rule
        rule = group_rule_held(question, [c[2] for c in candidates])
        if rule is not None:
            typed = np.array([r and language == "en" for r, language in zip(rule, languages, strict=True)], dtype=bool)
    return typed, expected is not None or bool(attributes) or focus is not None


# A value as a question writes it: a token with a digit ("jdk21", "2.0", "0.19.1", "-n5").
_VALUE_TOKEN = re.compile(r"(?<![\w.+-])[A-Za-z0-9_.+-]*\d[A-Za-z0-9_.+-]*")


def _unasked(question: str) -> Callable[[str], str]:
    """A sentence without the values ``question`` writes: what the sentence states of its own. "easyexcel
    哪个版本开始支持 jdk21" is not answered by "支持`jdk21`", whose only version is the question's."""
    own = sorted({m.group(0).rstrip(".") for m in _VALUE_TOKEN.finditer(question)} - {""}, key=len, reverse=True)
    if not own:
        return lambda text: text
    pattern = re.compile(r"(?<![\w.+-])(?:" + "|".join(re.escape(v) for v in own) + r")(?![\w+-]|\.\w)")
    return lambda text: pattern.sub(" ", text)


def named_held(
    question: str,
    passages: Sequence[str],
    candidates: Sequence[tuple[int, int, str, str]],
    language: MessageLanguage,
) -> np.ndarray:
    """Which candidates are about what ``question`` (read in ``language``) names (module docstring)."""
    held = naming_across(question, passages, passages_naming(question, passages, language), language)
    # What a default asked for is of: the words English grammar names, else a configuration key the question writes.
    defaulted = (default_subject(question) if language == "en" else None) or default_keys(question)
    return np.array(
        [
            held[n - 1]
            and (about_other(question, text) if language == "en" else other_version(question, text)) is None
            and (defaulted is None or defaulted.search(read) is not None)
            for n, _, text, read in candidates
        ],
        dtype=bool,
    )


def stating_default(
    question: str, candidates: Sequence[tuple[int, int, str, str]], eligible: np.ndarray, fit: np.ndarray
) -> int | None:
    """Asked for a default, the ``eligible`` candidate (about what the question names) that states one: a setting's
    field stating it ("**Default**: `number_of_cores + 4`", "Defaults to ...") before prose, then by ``fit``; None
    when none does."""
    field = default_field(question)
    stating = [k for k, c in enumerate(candidates) if eligible[k] and states_default(c[2])]
    if field is None or not stating:
        return None
    return max(stating, key=lambda k: (field.search(candidates[k][2]) is not None, float(fit[k])))
