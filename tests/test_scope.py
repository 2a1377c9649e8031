"""The request's knowledge bases and documents are read once, when the state is made, and carried in it.

No stage reads the catalog for them again (on AWS every stage is another Lambda: three catalog reads per knowledge
base per search before). ``knowledge_ids`` narrow the search to those documents inside the named knowledge bases.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ragstep.app.ingest import ingest_file
from ragstep.app.search import new_state
from ragstep.context import Clients, Context
from ragstep.errors import InputError, NotFoundError
from ragstep.models import KnowledgeBase, PipelineState, SearchRequest
from ragstep.pipeline import run_pipeline, transport


def _ingest(ctx: Context, kb: KnowledgeBase, folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    result = ingest_file(path, kb, ctx)
    assert result.status == "indexed", result
    return result.knowledge_id


@pytest.fixture
def two_docs(ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path) -> dict[str, str]:
    kb = make_kb("handbook")
    other = make_kb("other")
    return {
        "kb": kb.id,
        "other_kb": other.id,
        "espresso": _ingest(ctx, kb, tmp_path, "espresso.md", "Espresso needs finely ground coffee and pressure."),
        "tea": _ingest(ctx, kb, tmp_path, "tea.md", "Green tea is steeped, not pressed; coffee is not involved."),
        "elsewhere": _ingest(ctx, other, tmp_path, "beans.md", "Coffee beans are roasted before grinding."),
    }


class CatalogClosed(AssertionError):
    pass


def test_stages_never_read_the_catalog_for_the_request(
    ctx: Context, two_docs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = new_state(SearchRequest(query="coffee", knowledge_base_ids=["handbook"]), ctx)
    assert [kb.name for kb in state.knowledge_bases] == ["handbook"]
    assert state.request.knowledge_base_ids == [two_docs["kb"]]  # names become ids

    def closed(self: Clients, tenant_id: str) -> None:
        raise CatalogClosed(f"a stage read the catalog of {tenant_id!r}")

    monkeypatch.setattr(Clients, "catalog", closed)
    # Through the wire format too, as between two Lambda functions: the resolution travels in the state.
    final = run_pipeline("knowledge_search", state, ctx, check_transport=True)
    assert final.final_results
    assert {r.knowledge_base_id for r in final.final_results} == {two_docs["kb"]}


def test_knowledge_ids_limit_the_search_to_those_documents_inside_the_knowledge_base(
    ctx: Context, two_docs: dict[str, str]
) -> None:
    request = SearchRequest(query="coffee", knowledge_base_ids=["handbook"], knowledge_ids=[two_docs["espresso"]])
    final = run_pipeline("knowledge_search", new_state(request, ctx), ctx)
    assert final.final_results
    assert {r.knowledge_id for r in final.final_results} == {two_docs["espresso"]}


def test_a_document_of_another_knowledge_base_is_an_error_not_a_wider_search(
    ctx: Context, two_docs: dict[str, str]
) -> None:
    request = SearchRequest(query="coffee", knowledge_base_ids=["handbook"], knowledge_ids=[two_docs["elsewhere"]])
    with pytest.raises(InputError, match="not in the knowledge base"):
        new_state(request, ctx)
    alone = run_pipeline(
        "knowledge_search", new_state(SearchRequest(query="coffee", knowledge_ids=[two_docs["elsewhere"]]), ctx), ctx
    )
    assert {r.knowledge_id for r in alone.final_results} == {two_docs["elsewhere"]}


def test_unknown_names_fail_up_front_and_name_nothing_else(ctx: Context, two_docs: dict[str, str]) -> None:
    with pytest.raises(NotFoundError) as err:
        new_state(SearchRequest(query="coffee", knowledge_base_ids=["nope"]), ctx)
    assert "handbook" not in str(err.value) and "other" not in str(err.value)
    with pytest.raises(NotFoundError, match="unknown knowledge item"):
        new_state(SearchRequest(query="coffee", knowledge_ids=["missing-doc"]), ctx)


def test_a_state_written_by_hand_is_resolved_by_the_search_stage_once(ctx: Context, two_docs: dict[str, str]) -> None:
    raw = PipelineState(request=SearchRequest(query="coffee", knowledge_base_ids=["handbook"]))
    wire = transport.decode(raw.model_dump(mode="json"), ctx.blobs)
    final = run_pipeline("knowledge_search", wire, ctx)
    assert [kb.id for kb in final.knowledge_bases] == [two_docs["kb"]]
    assert final.final_results
