"""Plain-text tables for the terminal (no dependency: the CLI must start fast)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence


def display_width(text: str) -> int:
    """Terminal columns: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def clip(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` columns with an ellipsis."""
    flat = " ".join(text.split())
    if display_width(flat) <= width:
        return flat
    out, used = [], 0
    for ch in flat:
        w = display_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def clip_middle(text: str, width: int) -> str:
    """``text`` on one line, cut in its middle to ``width`` columns: for addresses and paths, whose start (the
    knowledge base) and end (the file) tell rows apart, and whose middle (the folders) they share."""
    flat = " ".join(text.split())
    if display_width(flat) <= width:
        return flat
    head = clip(flat, width // 3).removesuffix("…")
    tail: list[str] = []
    used = display_width(head) + 1
    for ch in reversed(flat):
        if used + display_width(ch) > width:
            break
        tail.append(ch)
        used += display_width(ch)
    return head + "…" + "".join(reversed(tail))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(display_width(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(c + " " * (w - display_width(c)) for c, w in zip(row, widths, strict=True)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])
