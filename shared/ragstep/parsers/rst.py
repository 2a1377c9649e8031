"""``.rst`` (reStructuredText: Sphinx and docutils documentation, Python projects' READMEs) read as text, its
section titles made Markdown headings, so the chunker cuts at them and gives each chunk its ``Guide > Install``
breadcrumb as it does for Markdown.

A section title is a line of text directly under a blank line (or the file's start), underlined (and optionally
overlined) by one punctuation character repeated at least as many times as the title is long, three at the very
least: the docutils rule, a too-short underline aside (docutils only warns about it; here such a line stays text,
since ``Note\\n--`` in a paragraph is more often a dash than a title). The levels come as docutils gives them: each
new adornment style (character, with or without an overline) met in the file is one level deeper than the styles
met before it; past six levels a title is a level-6 heading.

Everything else is kept as written (directives, literal blocks, tables, inline markup): it is what a reader of the
citation recognises, and its words are what keyword search and the embedder read either way. A transition (a line of
punctuation between blank lines) has no title above it and stays as it is.
"""

from __future__ import annotations

import re

# One punctuation character (the docutils set: printable 7-bit ASCII that is neither a letter, a digit nor a space),
# repeated, and nothing else on the line but trailing blanks.
_ADORNMENT_RE = re.compile(r"""^([!-/:-@\[-`{-~])\1{2,}[ \t]*$""")


def _adornment(line: str) -> str:
    """The adornment character of an underline / overline, or "" when the line is none."""
    match = _ADORNMENT_RE.match(line)
    return match.group(1) if match else ""


def _is_title(line: str) -> bool:
    """Text that can be a section title: not blank, not indented (an indented line is in a block quote)."""
    return bool(line.strip()) and not line[0].isspace()


def rst_to_markdown(text: str) -> tuple[str, int]:
    """``text`` with its section titles as ``#`` headings (module docstring) and how many titles it had."""
    lines = text.replace("\r\n", "\n").split("\n")
    styles: list[tuple[str, bool]] = []  # adornment styles in the order met: their index is the level - 1
    out: list[str] = []
    titles = 0
    i = 0
    last_title = -1  # the index in ``out`` of the last title: a subtitle may follow it without a blank line
    while i < len(lines):
        line = lines[i]
        starts_block = not out or not out[-1].strip() or last_title == len(out) - 1
        heading = _title_at(lines, i) if starts_block else None
        if heading is None:
            out.append(line)
            i += 1
            continue
        title, style, used = heading
        if style not in styles:
            styles.append(style)
        level = min(styles.index(style) + 1, 6)
        last_title = len(out)
        out.append("#" * level + " " + title)
        titles += 1
        i += used
    return "\n".join(out), titles


def _title_at(lines: list[str], i: int) -> tuple[str, tuple[str, bool], int] | None:
    """The section title starting at line ``i``: its text, its style (character, overlined) and how many lines it
    takes; None when none starts there."""
    line = lines[i]
    over = _adornment(line)
    if over and i + 2 < len(lines):  # overline, title (it may be inset under an overline), underline
        title = lines[i + 1].strip()
        long_enough = min(len(line.rstrip()), len(lines[i + 2].rstrip())) >= len(title)
        if title and long_enough and _adornment(lines[i + 2]) == over and not _adornment(lines[i + 1]):
            return title, (over, True), 3
    if i + 1 < len(lines) and _is_title(line) and not over:
        under = _adornment(lines[i + 1])
        if under and len(lines[i + 1].rstrip()) >= len(line.rstrip()):
            return line.strip(), (under, False), 2
    return None
