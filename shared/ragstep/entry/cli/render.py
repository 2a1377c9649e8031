"""How a search reads in the terminal: the ranked results, then one row per trace event."""

from __future__ import annotations

import re

from ragstep.entry.cli.console import clip, table
from ragstep.models import PipelineState

# The markers parsers leave in a passage (``<!-- page 3 -->``, ``<!-- ocr page 1 -->``): in a 60-column preview they
# took a third of it, and said nothing the source column does not.
_MARKER = re.compile(r"<!--.*?-->", re.S)


def render_results(state: PipelineState) -> str:
    lines = [f"query: {state.request.query}"]
    if not state.final_results:
        lines.append("no results")
    rows = [
        (
            i + 1,
            f"{r.score:.4f}",
            r.match_type,
            clip(r.knowledge_filename or r.knowledge_id, 24),
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
