"""How a search reads in the terminal: the ranked results, then one row per trace event."""

from __future__ import annotations

import re

from ragstep.entry.cli.console import clip, display_width, table
from ragstep.models import PipelineState

# The markers parsers leave in a passage (``<!-- page 3 -->``, ``<!-- ocr page 1 -->``): in a 60-column preview they
# took a third of it, and said nothing the source column does not.
_MARKER = re.compile(r"<!--.*?-->", re.S)


def source_label(filename: str, title: str, knowledge_id: str, width: int) -> str:
    """What a result's source column shows: its file name; for source code and configuration, whose title is their
    path (``myrepo/src/__init__.py``: :func:`ragstep.app.ingest.title_of`), the end of that path that fits, since a
    repository has many ``__init__.py`` (``…src/ragstep/__init__.py``)."""
    if filename and title.endswith("/" + filename):
        path = " ".join(title.split())
        if display_width(path) <= width:
            return path
        tail: list[str] = []
        used = 1  # the ellipsis
        for ch in reversed(path):
            if used + display_width(ch) > width:
                break
            tail.append(ch)
            used += display_width(ch)
        return "…" + "".join(reversed(tail))
    return clip(filename or title or knowledge_id, width)


def render_results(state: PipelineState) -> str:
    lines = [f"query: {state.request.query}"]
    if not state.final_results:
        lines.append("no results")
    rows = [
        (
            i + 1,
            f"{r.score:.4f}",
            r.match_type,
            source_label(r.knowledge_filename, r.knowledge_title, r.knowledge_id, 24),
            clip(_MARKER.sub(" ", r.content), 60),
        )
        for i, r in enumerate(state.results("final_results"))
    ]
    if rows:
        lines.append(table(("#", "score", "match", "source", "content"), rows))
    lines.append("")
    lines.append(render_trace(state))
    return "\n".join(lines)


def render_trace(state: PipelineState) -> str:
    rows = [
        (
            t.stage,
            t.action,
            f"{t.duration_ms:.1f}",
            " ".join(f"{k}={v}" for k, v in t.counts.items()),
            clip(t.reason or "", 48),
        )
        for t in state.trace
    ]
    return table(("stage", "action", "ms", "counts", "note"), rows)
