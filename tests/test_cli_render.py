"""How ``ragstep search`` shows its results in a terminal."""

from __future__ import annotations

from ragstep.entry.cli.render import render_results
from ragstep.models import MatchType, PipelineState, SearchRequest, SearchResult


def test_a_passages_preview_leaves_out_the_parsers_page_markers() -> None:
    """A scanned page's passage opened with "<!-- ocr page 1 -->", a third of the 60-column preview."""
    hit = SearchResult(
        id="c0",
        content="<!-- ocr page 1 -->\nAviso: el almacén cierra a las 20:00 horas.\n<!-- page 2 -->\nSalida.",
        knowledge_id="k",
        knowledge_base_id="kb",
        knowledge_filename="aviso.png",
        score=1.0,
        match_type=MatchType.HYBRID,
    )
    state = PipelineState(request=SearchRequest(query="almacén", knowledge_base_ids=["kb"]), final_results=[hit])
    text = render_results(state)
    assert "Aviso: el almacén cierra a las 20:00 horas. Salida." in text and "<!--" not in text
