"""Markdown building blocks shared by the parsers: tables, image placeholders, block joining."""

from __future__ import annotations

import re
from collections.abc import Sequence

_SPACES_RE = re.compile(r"[ \t\r\f\v]+")
_BLANK_LINES_RE = re.compile(r"\n{3,}")


def cell(text: str) -> str:
    """One table cell: pipes escaped, line breaks as ``<br>``, runs of spaces collapsed."""
    lines = [_SPACES_RE.sub(" ", line).strip() for line in text.replace("\r\n", "\n").split("\n")]
    return "<br>".join(line for line in lines if line).replace("|", "\\|")


def table(rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table; the first row is the header. Short rows are padded, so every row has the same width."""
    cells = [[cell(c) for c in row] for row in rows if row]
    if not cells:
        return ""
    width = max(len(row) for row in cells)
    cells = [row + [""] * (width - len(row)) for row in cells]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + " --- |" * width]
    lines.extend("| " + " | ".join(row) + " |" for row in cells[1:])
    return "\n".join(lines)


def image(alt: str, target: str) -> str:
    """``![alt](target)`` with characters that would end the placeholder early removed."""
    alt = _SPACES_RE.sub(" ", re.sub(r"[\[\]\n]", " ", alt)).strip() or "image"
    target = re.sub(r"[\s()]", lambda m: "%20" if m.group().isspace() else f"%{ord(m.group()):02X}", target)
    return f"![{alt}]({target})"


def link(text: str, href: str) -> str:
    text = _SPACES_RE.sub(" ", re.sub(r"[\[\]\n]", " ", text)).strip()
    href = re.sub(r"[\s()]", lambda m: "%20" if m.group().isspace() else f"%{ord(m.group()):02X}", href.strip())
    return f"[{text or href}]({href})"


def join_blocks(blocks: Sequence[str]) -> str:
    """Blocks separated by one blank line; trailing spaces dropped, no runs of blank lines."""
    out = "\n\n".join(block.strip("\n") for block in blocks if block.strip())
    out = "\n".join(line.rstrip() for line in out.split("\n"))
    return _BLANK_LINES_RE.sub("\n\n", out).strip("\n")
