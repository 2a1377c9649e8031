"""Two tenants side by side on the embedded backends: neither ever sees the other's data.

The tenant travels from the entry point in the state (``tenant_id``) down to the adapters, which :class:`Clients`
builds per tenant. These tests run two tenants at once in one process, with knowledge bases of the same name, and
look for any crossing: catalog, index, blobs, history, offloaded state and the executor's own guard.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ragstep.app.ingest import ingest_file
from ragstep.app.search import knowledge_search, new_state
from ragstep.context import Clients, Context
from ragstep.errors import InputError, NotFoundError
from ragstep.models import DEFAULT_TENANT, KnowledgeBase, PipelineState, SearchRequest, Turn
from ragstep.models.wire import WIRE
from ragstep.pipeline import run_pipeline, transport
from ragstep.settings import Settings

DOCS = {
    "acme": "Acme rockets use a liquid oxygen engine. The roadrunner test range is in the desert.",
    "globex": "Globex builds hammocks for volcano lairs. Hank Scorpio approves every hammock design.",
}


def _tenant_with_docs(clients: Clients, tenant: str, folder: Path) -> tuple[Context, KnowledgeBase]:
    ctx = clients.context(tenant)
    kb = ctx.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="docs", created_at=time.time()))
    path = folder / tenant / "notes.md"
    path.parent.mkdir(parents=True)
    path.write_text(f"# {tenant} notes\n\n{DOCS[tenant]}\n", encoding="utf-8")
    result = ingest_file(path, kb, ctx)
    assert result.status == "indexed", result
    return ctx, kb


@pytest.fixture
def two_tenants(tmp_path: Path) -> tuple[Clients, dict[str, tuple[Context, KnowledgeBase]]]:
    clients = Clients(Settings(data_dir=tmp_path / "data"))
    with ThreadPoolExecutor(max_workers=2) as pool:  # side by side, at the same time
        futures = {t: pool.submit(_tenant_with_docs, clients, t, tmp_path / "in") for t in DOCS}
        return clients, {t: f.result() for t, f in futures.items()}


def _ids(state: PipelineState) -> set[str]:
    return {r.knowledge_base_id for r in state.final_results}


def test_each_tenant_finds_only_its_own_documents(two_tenants: tuple[Clients, dict]) -> None:
    _, tenants = two_tenants
    (acme, acme_kb), (globex, globex_kb) = tenants["acme"], tenants["globex"]
    # Same knowledge base name in both tenants: the name resolves to each tenant's own.
    found = knowledge_search(SearchRequest(query="liquid oxygen engine", knowledge_base_ids=["docs"]), acme)
    assert found.final_results and _ids(found) == {acme_kb.id}
    assert found.tenant_id == "acme"
    crossing = knowledge_search(SearchRequest(query="liquid oxygen engine", knowledge_base_ids=["docs"]), globex)
    assert all("oxygen" not in r.content for r in crossing.final_results)
    assert _ids(crossing) <= {globex_kb.id}
    hammock = knowledge_search(SearchRequest(query="hammock volcano", knowledge_base_ids=["docs"]), globex)
    assert hammock.final_results and _ids(hammock) == {globex_kb.id}


def test_a_knowledge_base_or_document_of_another_tenant_does_not_exist(two_tenants: tuple[Clients, dict]) -> None:
    _, tenants = two_tenants
    (acme, acme_kb), (globex, _) = tenants["acme"], tenants["globex"]
    assert [kb.id for kb in acme.catalog.list_kbs()] == [acme_kb.id]
    with pytest.raises(NotFoundError) as err:
        globex.require_kb(acme_kb.id)
    assert "docs" not in str(err.value).replace(acme_kb.id, "")  # names nothing of the other tenant
    (doc,) = acme.catalog.list_knowledge(acme_kb.id)
    assert globex.catalog.get_knowledge(doc.id) is None
    with pytest.raises(NotFoundError):
        new_state(SearchRequest(query="rockets", knowledge_ids=[doc.id]), globex)
    chunk_ids = [c.id for c in acme.index.knowledge_chunks(doc.id, 10)]
    assert chunk_ids and acme.index.fetch(chunk_ids)
    assert globex.index.fetch(chunk_ids) == {}


def test_each_tenant_has_its_own_files_and_the_default_tenant_sees_none(
    two_tenants: tuple[Clients, dict], tmp_path: Path
) -> None:
    clients, tenants = two_tenants
    data = tmp_path / "data"
    for tenant in DOCS:
        assert (data / "tenants" / tenant / "catalog.sqlite").is_file()
        assert tenants[tenant][0].blobs.list("sources/")
    default = clients.context()
    assert default.tenant_id == DEFAULT_TENANT
    assert default.catalog.list_kbs() == []
    assert default.blobs.list() == []


def test_history_and_offloaded_state_stay_with_their_tenant(two_tenants: tuple[Clients, dict]) -> None:
    _, tenants = two_tenants
    (acme, acme_kb), (globex, _) = tenants["acme"], tenants["globex"]
    acme.history.append(Turn(session_id="s1", created_at=time.time(), query="q", answer="acme answer"))
    assert [t.answer for t in acme.history.recent("s1")] == ["acme answer"]
    assert globex.history.recent("s1") == []

    request = SearchRequest(query="rockets", knowledge_base_ids=["docs"])
    state = run_pipeline("knowledge_search", new_state(request, acme), acme)
    limit = transport.compact_size(state.model_dump(mode="json", context=WIRE)) - 1  # the results go to the blobs
    payload = transport.encode(state, acme.blobs, limit)
    assert payload["offloaded"]
    assert transport.tenant_of(payload) == "acme"
    assert not any(key in globex.blobs.list("state/") for key in payload["offloaded"].values())
    restored = transport.decode(payload, acme.blobs)
    assert [r.id for r in restored.final_results] == [r.id for r in state.final_results]
    assert acme_kb.id in _ids(restored)


def test_a_state_never_runs_on_another_tenants_adapters(two_tenants: tuple[Clients, dict]) -> None:
    _, tenants = two_tenants
    acme, globex = tenants["acme"][0], tenants["globex"][0]
    state = new_state(SearchRequest(query="rockets", knowledge_base_ids=["docs"]), acme)
    with pytest.raises(InputError, match="tenant"):
        run_pipeline("knowledge_search", state, globex)


@pytest.mark.parametrize("bad", ["", "../etc", "a/b", "-x", "x" * 65, "名字", "a b"])
def test_tenant_ids_that_could_name_a_path_or_key_are_refused(tmp_path: Path, bad: str) -> None:
    clients = Clients(Settings(data_dir=tmp_path))
    with pytest.raises(ValueError, match="tenant id"):
        clients.context(bad)
    with pytest.raises(ValueError, match="tenant id"):
        PipelineState(tenant_id=bad, request=SearchRequest(query="q", knowledge_base_ids=["k"]))


def test_a_process_keeps_the_adapters_of_a_bounded_number_of_tenants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clients keeps each tenant's adapters for reuse, but only the most recently used MAX_TENANTS_KEPT tenants':
    a process serving ever more tenants does not grow without end, and a dropped tenant's data is intact when its
    adapters are built again."""
    import ragstep.context as context_module

    monkeypatch.setattr(context_module, "MAX_TENANTS_KEPT", 3)
    clients = Clients(Settings(data_dir=tmp_path))
    first = clients.context("t0")
    catalog = first.catalog
    catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="kept", created_at=time.time()))
    assert first.catalog is catalog and first.blobs is clients.blobs("t0")  # reused while kept
    for n in range(1, 4):
        clients.context(f"t{n}").catalog  # noqa: B018 -- builds t1..t3's catalogs: t0 is the least recently used
    assert list(clients._scoped) == ["t1", "t2", "t3"]
    clients.catalog("t1")  # used again: t2 is now the oldest
    clients.catalog("t4")
    assert list(clients._scoped) == ["t3", "t1", "t4"]
    rebuilt = clients.context("t0").catalog
    assert rebuilt is not catalog and [kb.name for kb in rebuilt.list_kbs()] == ["kept"]
