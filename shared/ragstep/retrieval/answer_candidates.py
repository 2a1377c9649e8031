"""The sentences of the retrieved passages the model-free answerer (:mod:`ragstep.retrieval.answer_span`) chooses
from, each with the text it is embedded as (the sentence read under its heading and after its context).

A passage's sentences are its prose (:func:`~ragstep.retrieval.sentences.sentences_in_units`): a title line, a
question (a FAQ's) and a manual page's running header are context, not candidates. Code is no prose, but one kind of
code line states a value outright: the line that gives a name its value ("#define CHUNK 16384"). Such a line is a
candidate when the question asks about that name as the code writes it ("What is the size of CHUNK in zpipe.c?":
the prose beside the code says what CHUNK is for, only the code says how big it is). A name that reads as an
ordinary word ("name", "timeout") is no evidence that the question asks about the code, so it must be written as
identifiers are: with a capital, an underscore or a digit.

A manual page's option entry ("-k --keep Keep (don't delete) input files") is a candidate like a sentence, with two
differences: it is no context of the sentences after it (a chunk that opens inside the options list would read
every option under the first one), and asked how to do a thing or which option does it, the entries are embedded
even when few of the question's words rank them (:func:`option_entries`).

What a document's layout states is a candidate too: a table row read with its column headers, a heading that
carries a fact (a date, a parenthesised statement), and, asked which items a section lists, the list under a
heading (:mod:`ragstep.retrieval.answer_layout`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from ragstep.retrieval.answer_layout import layout_candidates
from ragstep.retrieval.answer_types import is_option_entry
from ragstep.retrieval.sentences import (
    code_definitions,
    is_option_term,
    is_page_furniture,
    is_setting,
    sentences_in_units,
)

#: The start of the passage's opening sentence, embedded with a sentence as its context (longer costs embedding
#: time).
CONTEXT_CHARS = 120

_WORD = re.compile(r"[A-Za-z_][\w.]*\w|[A-Za-z_]")


def code_names(question: str) -> frozenset[str]:
    """The identifiers ``question`` writes as code does (a capital after the first letter, an underscore, a digit:
    "CHUNK", "Z_BUF_ERROR", "max_retries", "sha256"), as written: a code line defining one is a candidate."""
    out = set()
    for k, match in enumerate(_WORD.finditer(question)):
        word = match.group(0)
        if (
            "_" in word
            or any(c.isdigit() for c in word)
            or any(c.isupper() for c in word[1:])
            or (k > 0 and len(word) > 1 and word.isupper())
        ):
            out.add(word)
    return frozenset(out)


def candidates(
    passages: Sequence[str], defined: frozenset[str] = frozenset(), question: str = ""
) -> tuple[list[tuple[int, int, str, str]], list[str]]:
    """(passage number, position, sentence, the text embedded for it) of the passages, in order, and each one's
    lead: the first sentence of its unit (its option's term and first line, its paragraph's first sentence) when it
    is not that sentence itself. Then the code lines that define a name of ``defined`` (:func:`code_names`), and the
    passage's table rows, its headings that carry a fact and (when ``question`` asks which items a section lists)
    the lists under its headings (:mod:`ragstep.retrieval.answer_layout`), at positions after the passage's
    sentences.

    A sentence is embedded under its heading and after its context ("Hybrid search: ... ragstep searches two ways at
    once.", "Qinghai Lake is the largest lake in China. ... Its average depth is about 21 m."): on its own it often
    does not name what it is about. The context is its lead when it has one ("-E, --conflict-exit-code number The
    exit status used when ... The default value is 1.": what the value is of), else its passage's opening sentence,
    which usually names the subject (the sentence just before it seldom: "... home to thousands of birds. Its
    average depth is about 21 m." reads as far from "How deep is Qinghai Lake?" as an unrelated sentence). A
    question is no answer: in a FAQ it is the context of the sentences that follow it, in place of the opening
    sentence, and not a candidate itself; nor is any sentence of a unit a "Q:" opens (:data:`_ASKED`).

    A list's item without a lead of its own is led by the sentence that introduces the list ("The chage command
    exits with the following values:" for "15 can't find the shadow password file"): what the decision's checks
    read of it (an exit status is stated in its own words), not its context. The list ends at a paragraph of prose
    or under another heading. A field of a setting's section ("**Default**: `origin`" under "## remote_name") is
    read and embedded after the setting's description, its section's first sentence that is not a field: alone it
    says nothing of which setting it is the default of."""
    out: list[tuple[int, int, str, str]] = []
    leads: list[str] = []
    for n, passage in enumerate(passages, start=1):
        opening = asked = ""
        first: dict[int, str] = {}
        units = sentences_in_units(passage)
        sizes = Counter(unit for _, unit, _ in units)
        intro, intro_at = "", (-1, "")  # the sentence a list's items follow ("... exits with these values:")
        described: dict[str, str] = {}  # each heading's first sentence not a field: a setting's description
        for heading, _, sentence in units:
            if heading and not _FIELD.match(sentence):
                described.setdefault(heading, sentence)
        asking = -1  # the unit a FAQ's "Q:" opens: every sentence of it is the question
        for i, (heading, unit, sentence) in enumerate(units):
            if unit != asking and _ASKED.match(sentence):
                asking, asked = unit, ""
            elif unit == asking and _ANSWERED.match(sentence):  # "Q: ...?" and "A: ..." in one paragraph
                asking = -1
            if unit == asking or sentence.endswith(("?", "？")):
                asked = f"{asked} {sentence}".strip() if unit == asking else sentence
                continue
            if is_page_furniture(sentence) or not any(ch.isalpha() for ch in _LINK_TARGET.sub("", sentence)):
                # a running header; a fragment without a word ("7.", "61.00).", a link's rest "](#size-limit)")
                continue
            if i == 0 and _is_title(sentence, units):
                opening = sentence  # the passage's subject, no answer
                continue
            lead = first.setdefault(unit, sentence)
            lead = "" if lead == sentence else lead
            if intro and (unit == intro_at[0] or heading != intro_at[1] or sizes[unit] > 1):
                intro = ""  # the list ends at a paragraph of prose or under another heading
            checked = intro if intro and not lead and not is_option_entry(sentence) else lead
            field = ""
            if not checked and heading and _FIELD.match(sentence):
                # "**Default**: `origin`" is the default of its section's setting: read and embedded after the
                # setting's description, as an option's description is after its option.
                checked = field = described.get(heading, "")
            if sentence.endswith((":", "：")) and not is_option_entry(sentence):
                intro, intro_at = sentence, (unit, heading)
            topic = (lead or field or asked or opening)[:CONTEXT_CHARS]
            context = " ".join(t for t in (f"{heading}:" if heading else "", topic) if t)
            out.append((n, i, sentence, f"{context} {sentence}" if context else sentence))
            leads.append(checked)  # the list's introduction is what its item's checks read, not its context
            if not is_option_entry(sentence):  # another option's entry says nothing of what this one is about
                opening = opening or sentence
        if defined:
            for j, (heading, name, line) in enumerate(code_definitions(passage)):
                if name in defined:
                    context = " ".join(t for t in (f"{heading}:" if heading else "", opening[:CONTEXT_CHARS]) if t)
                    out.append((n, len(units) + j, line, f"{context} {line}" if context else line))
                    leads.append("")
        position = len(units) + len(code_definitions(passage)) if defined else len(units)
        for j, (quote, embedded) in enumerate(dict.fromkeys(layout_candidates(passage, question))):
            out.append((n, position + j, quote, embedded))
            leads.append("")
    return out, leads


# A field of a setting's section, as Markdown writes one: its name in bold ("**Default**: `origin`", "**Type**:
# string") or its value as code ("Windows: `%APPDATA%\\pypoetry`"). A manual page's "EXIT status: 124 if ..." is prose.
_FIELD = re.compile(r"^(?:\*\*[^*\n]{1,25}\*\*\s*[:：]|\*\*[^*\n]{1,25}[:：]\*\*|[A-Za-z][A-Za-z ]{0,24}[:：]\s*`)")
# Where a Markdown link points ("](#size-limit)", "(https://...)"): no words of the sentence.
_LINK_TARGET = re.compile(r"\]?\((?:#|[a-z]+://|\.{0,2}/)[^)\s]*\)|\b[a-z]+://\S+")
# A FAQ's question marker: "Q:  The default build of liblzma is too big. How can I make it smaller?" states the
# problem before it asks, and the statement reads closer to a question about it than the answer under it does.
_ASKED = re.compile(r"(?:Q|Question)\s*[:.]\s|问[:：]")
_ANSWERED = re.compile(r"(?:A|Answer)\s*[:.]\s|答[:：]")


#: Asked how to do a thing or which option does it, up to this many option entries are embedded besides the
#: sentences the question's words rank (:func:`option_entries`).
MAX_OPTION_ENTRIES = 16


def option_entries(
    candidates: Sequence[tuple[int, int, str, str]], keys: Sequence[float], kept: Sequence[int]
) -> list[int]:
    """The option entries of ``candidates`` not ``kept``, best ``keys`` first, up to :data:`MAX_OPTION_ENTRIES`. A
    manual page's option answers "how do I ...?" in a word or two of the question's ("How do I compress a file but
    keep the original?": "-k --keep Keep (don't delete) input files"), so the share of the question's terms that
    ranks the sentences to embed ranks it below the page's prose about the same words."""
    chosen = set(kept)
    order = sorted(range(len(keys)), key=lambda k: (-keys[k], k))
    return [k for k in order if k not in chosen and is_option_entry(candidates[k][2])][:MAX_OPTION_ENTRIES]


_TERMINAL = (".", "。", "!", "！", "?", "？", ";", "；", ")", "）", '"', "”")


def _is_title(sentence: str, units: list[tuple[str, int, str]]) -> bool:
    """A passage's first line is its title when it is a unit of its own without a sentence's end and not an option
    ("gzip(1) manual: compress or expand files", "Installation guide"): it says what the passage is about, and
    reads close to every question about that subject without answering any. A JSON record, a ``[section]`` or a
    setting opening a passage is data, no title ("{"summary": "Login outage caused by ..."}" was passed over)."""
    alone = len(units) < 2 or units[1][1] != units[0][1]
    data = sentence.startswith(("{", "[", '"')) or is_setting(sentence)  # a record, a section, a setting: no title
    return alone and not data and not sentence.endswith(_TERMINAL) and not is_option_term(sentence.split(" ", 3)[0])
