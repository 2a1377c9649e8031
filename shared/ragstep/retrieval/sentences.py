"""Sentences of Markdown-ish text, each with the heading it is under: the units the model-free answerer
(:mod:`ragstep.retrieval.answer_span`) chooses from and quotes. Headings, table rows and code fences are not
sentences; hard-wrapped lines are joined back (without a space between CJK characters); a "." inside a word or a
number and the "!" of a Markdown image link do not end a sentence.
"""

from __future__ import annotations

import re

# A sentence ends at CJK or Latin terminal punctuation (kept) or at a line break. A "." inside a word or number
# (2.5, a URL) and the "!" of a Markdown image link do not end one.
_SENTENCE = re.compile(r"(?:[^。！？!?；;.\n]|\.(?!\s|$)|!(?=\[))+(?:[。！？!?；;]+|\.+(?=\s|$))?")
_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
#: CJK ideographs, CJK punctuation and full-width forms (code point ranges). Compared as numbers: the same class as
#: a regular expression costs ~3 ms to compile, in every new environment before its first answer.
_HAN_RANGES = ((0x3400, 0x9FFF), (0xF900, 0xFAFF), (0x3000, 0x303F), (0xFF00, 0xFFEF))


def _units(text: str) -> list[tuple[str, str]]:
    """Paragraphs and list items of Markdown-ish text, with hard-wrapped lines joined back together, each with the
    heading it is under ("" before any); headings, table rows and code fences are not units (a title is not an
    answer, but it says what the sentences under it are about)."""
    units: list[tuple[str, str]] = []
    current: list[str] = []
    heading = ""

    def close() -> None:
        if current:
            units.append((heading, _join(current)))
            current.clear()

    in_code = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            close()
            in_code = not in_code
            continue
        if not in_code and (line.startswith("#") or _is_plain_heading(line)):
            close()
            heading = line.lstrip("#").strip()
            continue
        if in_code or not line or line.startswith("|"):
            close()
            continue
        if _ITEM.match(line):  # a list item starts a unit of its own
            close()
            line = _ITEM.sub("", line)
        current.append(line)
    close()
    return units


def _is_plain_heading(line: str) -> bool:
    """A plain-text heading: a short line of capitals without terminal punctuation ("EXIT STATUS", "NOTES"), the
    way manual pages and text files title their sections."""
    letters = [c for c in line if c.isalpha()]
    return 0 < len(line) <= 40 and len(letters) >= 3 and all(c.isupper() for c in letters) and line[-1] not in ".!?。"


def _join(lines: list[str]) -> str:
    out = lines[0]
    for line in lines[1:]:
        # Chinese wraps without a space (either side of the break in CJK); other scripts had one there.
        out += line if _is_han(out[-1:]) or _is_han(line[:1]) else " " + line
    return out


def _is_han(char: str) -> bool:
    """``char`` (one character, or none) is in :data:`_HAN_RANGES`."""
    return bool(char) and any(lo <= ord(char) <= hi for lo, hi in _HAN_RANGES)


def sentences_under_headings(text: str) -> list[tuple[str, str]]:
    """The sentences of ``text``, each with the Markdown heading it is under ("" before any); Markdown image links
    and bare URLs stay inside their sentence."""
    out: list[tuple[str, str]] = []
    for heading, unit in _units(text):
        for match in _SENTENCE.finditer(unit):
            sentence = match.group(0).strip(" \t>")
            if sentence:
                out.append((heading, sentence))
    return out


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (:func:`sentences_under_headings` without the headings)."""
    return [sentence for _, sentence in sentences_under_headings(text)]
