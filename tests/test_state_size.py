"""``ragstep bench state-size``: each step's state measured in both forms, the wire form never the larger, and the
claim-check count per question."""

from __future__ import annotations

from pathlib import Path

from ragstep.app.ingest import ingest_file
from ragstep.bench.state_size import PIPELINES, measure, render
from ragstep.context import Clients
from ragstep.models import KnowledgeBase
from ragstep.settings import Settings

TEXT = "Hybrid search fuses keyword and vector results. " * 30


def test_each_step_is_measured_in_both_forms(tmp_path: Path) -> None:
    ctx = Clients(Settings(data_dir=tmp_path / "data", embedder="none")).context()
    kb = ctx.catalog.create_kb(KnowledgeBase(id="kb1", name="docs", embedding_model="none"))
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text(f"# {name}\n\n{TEXT}\n\n{TEXT}", encoding="utf-8")
        assert ingest_file(tmp_path / name, kb, ctx).status == "indexed"
    result = measure(ctx, kb.id, ["how are keyword and vector results fused?"])
    assert set(result) == set(PIPELINES)
    for pipeline, row in result.items():
        assert row["questions"] == 1 and row["claim_checked_wire"] <= row["claim_checked_expanded"] == 0
        last = list(row["steps"].values())[-1]
        # the results are in several lists by the last step: each is once on the wire
        assert last["wire_max"] < last["expanded_max"], (pipeline, row["steps"])
    assert list(result["knowledge_search"]["steps"]) == ["chunk_search", "chunk_rerank", "chunk_merge", "filter_top_k"]
    text = render({"runtime": "AWS_Lambda_python3.12", "sets": {"tiny": result}, "skipped": {"gone": "absent"}})
    assert "tiny / rag: per-state limit 87379 bytes" in text and "gone: skipped (absent)" in text
