"""The knowledge graph: lenient extraction parsing, name matching, the SQLite store, extraction at ingest against a
scripted LLM (batches, concurrency, cache; updates on re-ingest and delete), and entity search beside chunk_search
in ``rag_stream`` -- including a question about an entity whose chunk shares no keyword with it."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from ragstep.adapters.graph.dynamodb import DynamoGraphStore
from ragstep.adapters.graph.neo4j import (
    CREATE_NODES,
    CREATE_RELATIONS,
    DELETE_DOCUMENTS,
    Neo4jGraphStore,
    replace_statements,
)
from ragstep.adapters.graph.sqlite import SqliteGraphStore
from ragstep.app.chat import run_chat
from ragstep.app.ingest import delete_knowledge
from ragstep.app.search import knowledge_search
from ragstep.context import Clients
from ragstep.errors import InputError
from ragstep.models import ChatRequest, MatchType, SearchRequest
from ragstep.models.graph import GraphExtraction, GraphNode, GraphRelation
from ragstep.ports import GraphStore
from ragstep.retrieval.graph_extraction import parse_extraction
from ragstep.retrieval.graph_names import fuzzy_matches, normalise_name
from ragstep.settings import Settings
from support.llm_server import LLMServer, Received, Reply, completion, streamed

BRIDGE = "Maria Vass designed the Orinoco Bridge, which links Ciudad Bolivar to Soledad."
CAREER = "She was educated in Caracas and retired in 1990 after forty years of practice."
QUESTION = "What do we know about Maria Vass?"

EXTRACTIONS: dict[str, dict[str, Any]] = {
    BRIDGE: {
        "nodes": [{"name": "Maria Vass", "attributes": ["engineer"]}, {"name": "Orinoco Bridge"}, "Ciudad Bolivar"],
        "relations": [{"source": "Maria Vass", "target": "Orinoco Bridge", "type": "designed"}],
    },
    # The model resolves "She" from the document's context: this chunk never names her.
    CAREER: {
        "node": [{"entity": "maria vass", "attributes": "educated in Caracas"}, {"title": "Caracas"}],
        "relationships": [{"entity1": "Maria Vass", "entity2": "Caracas", "relation": "educated in"}],
    },
}


# -- pure parts ------------------------------------------------------------------------------------------------------


def test_extraction_answers_are_read_leniently() -> None:
    fenced = 'Sure! ```json\n{"nodes": [{"name": "“Verona”", "attributes": "a city"}], "relations": []}\n``` done'
    assert parse_extraction(fenced).nodes == [GraphNode(name="Verona", attributes=["a city"])]
    loose = '<think>hmm</think>{"entities": ["A", {"entity": "B"}, 3, {"x": 1}], "relation": [["A", "knows", "B"]]}'
    found = parse_extraction(loose)
    assert [n.name for n in found.nodes] == ["A", "B"]
    assert found.relations == [GraphRelation(source="A", target="B", type="knows")]
    # A relation's ends become nodes; a self-relation is dropped; duplicates fold.
    rel = '{"relations": [{"source": "C", "target": "D", "type": "t"}, {"source": "C", "target": "C"}, ' \
          '{"source": "C", "target": "D", "type": "t"}]}'  # fmt: skip
    assert [n.name for n in parse_extraction(rel).nodes] == ["C", "D"] and len(parse_extraction(rel).relations) == 1
    for junk in ("", "no json here", "[1, 2", '{"nodes": "x"}', "null"):
        assert parse_extraction(junk) == GraphExtraction()


def test_names_normalise_then_match_fuzzily() -> None:
    assert normalise_name("  《Romeo  and Juliet》. ") == "romeo and juliet" == normalise_name("ROMEO and juliet")
    names = ["william shakespeare", "juliet capulet", "verona", "jul"]
    assert fuzzy_matches("Shakespear, William", names) == [] and fuzzy_matches("William Shakespear", names) == [
        "william shakespeare"
    ]
    assert fuzzy_matches("Juliet", names) == ["juliet capulet"]  # a whole word run of a longer name
    assert fuzzy_matches("Ver", names) == []  # too short to count as contained


# -- the store -------------------------------------------------------------------------------------------------------


def _doc(*nodes: tuple[str, list[str]], relations: tuple[tuple[str, str], ...] = ()) -> GraphExtraction:
    return GraphExtraction(
        nodes=[GraphNode(name=n, chunk_ids=c) for n, c in nodes],
        relations=[GraphRelation(source=s, target=t, type="r") for s, t in relations],
    )


@pytest.fixture(params=["sqlite", "dynamodb", "neo4j"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GraphStore]:
    if request.param == "sqlite":
        yield SqliteGraphStore(tmp_path / "graph.sqlite")
        return
    if request.param == "neo4j":
        # A live server: RAGSTEP_TEST_NEO4J_URL (and _USERNAME / _PASSWORD), e.g. a throwaway neo4j container.
        url = os.environ.get("RAGSTEP_TEST_NEO4J_URL")
        if not url:
            pytest.skip("set RAGSTEP_TEST_NEO4J_URL to run the Neo4j store against a server")
        pytest.importorskip("neo4j")
        user, password = (
            os.environ.get("RAGSTEP_TEST_NEO4J_USERNAME", ""),
            os.environ.get("RAGSTEP_TEST_NEO4J_PASSWORD", ""),
        )
        live = Neo4jGraphStore(url, user, password, tenant_id=f"t{uuid.uuid4().hex[:12]}")  # a tenant of its own
        yield live
        live.delete_knowledge_base("kb")
        live.delete_knowledge_base("other")
        return
    moto = pytest.importorskip("moto")
    import boto3

    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
                        "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
                        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    with moto.mock_aws():
        keys = [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}]
        attrs = [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}]
        boto3.client("dynamodb", region_name="us-east-1").create_table(
            TableName="graph", BillingMode="PAY_PER_REQUEST", KeySchema=keys, AttributeDefinitions=attrs
        )
        yield DynamoGraphStore("graph", tenant_id="acme")


def test_store_keeps_each_documents_part(store: GraphStore) -> None:
    assert isinstance(store, GraphStore)
    store.replace_knowledge(
        "kb", "d1", _doc(("Maria Vass", ["c1"]), ("Bridge", ["c1"]), relations=(("Maria Vass", "Bridge"),))
    )
    store.replace_knowledge(
        "kb", "d2", _doc(("maria vass", ["c2"]), ("Caracas", ["c2"]), relations=(("Caracas", "Maria Vass"),))
    )
    store.replace_knowledge("other", "d3", _doc(("Maria Vass", ["c3"])))
    (node,) = store.lookup(["kb"], ["maria vass"])
    assert node.name == "Maria Vass" and node.chunk_ids == ["c1", "c2"]  # one node, both documents' chunks
    assert store.neighbours(["kb"], ["maria vass"]) == ["bridge", "caracas"]  # both directions
    assert store.names(["kb"]) == ["bridge", "caracas", "maria vass"]
    # Re-ingesting d1 replaces its part only.
    store.replace_knowledge("kb", "d1", _doc(("Maria Vass", ["c9"])))
    assert sorted(store.lookup(["kb"], ["maria vass"])[0].chunk_ids) == ["c2", "c9"]
    assert store.neighbours(["kb"], ["maria vass"]) == ["caracas"] and store.lookup(["kb"], ["bridge"]) == []
    assert store.delete_knowledge(["d2"]) == 2
    assert (
        store.lookup(["kb"], ["maria vass"])[0].chunk_ids == ["c9"] and store.neighbours(["kb"], ["maria vass"]) == []
    )
    assert (
        store.delete_knowledge_base("kb") == 1
        and store.names(["kb"]) == []
        and store.names(["other"]) == ["maria vass"]
    )


def test_neo4j_replaces_a_document_in_one_transaction_of_these_statements() -> None:
    graph = GraphExtraction(
        nodes=[GraphNode(name="Maria Vass", attributes=["engineer"], chunk_ids=["c1"]),
               GraphNode(name="maria  vass", attributes=["engineer", "retired"], chunk_ids=["c2"]),
               GraphNode(name="Orinoco Bridge", chunk_ids=["c1"]), GraphNode(name="  ", chunk_ids=["c3"])],
        relations=[GraphRelation(source="Maria Vass", target="Orinoco Bridge", type="designed"),
                   GraphRelation(source="Maria Vass", target="Nobody", type="knows")],
    )  # fmt: skip
    (delete, d_params), (create, c_params), (relate, r_params) = replace_statements("acme", "kb1", "doc1", graph)
    assert (delete, create, relate) == (DELETE_DOCUMENTS, CREATE_NODES, CREATE_RELATIONS)
    assert d_params == {"tenant": "acme", "knowledge_ids": ["doc1"]}
    assert c_params["nodes"] == [
        {"key": "maria vass", "name": "Maria Vass", "attributes": ["engineer", "retired"], "chunk_ids": ["c1", "c2"]},
        {"key": "orinoco bridge", "name": "Orinoco Bridge", "attributes": [], "chunk_ids": ["c1"]},
    ]
    assert {k: c_params[k] for k in ("tenant", "kb", "knowledge_id")} == {
        "tenant": "acme",
        "kb": "kb1",
        "knowledge_id": "doc1",
    }
    # A relation to a node the document does not have is dropped; every statement is scoped to the tenant.
    assert r_params["relations"] == [{"source": "maria vass", "target": "orinoco bridge", "type": "designed"}]
    assert all("tenant: $tenant" in q for q in (delete, create, relate))
    # An empty extraction only deletes: re-ingesting a document whose chunks name nothing empties its part.
    assert [q for q, _ in replace_statements("acme", "kb1", "doc1", GraphExtraction())] == [DELETE_DOCUMENTS]
    with pytest.raises(InputError, match="RAGSTEP_NEO4J_URL"):
        Neo4jGraphStore("", "", "", tenant_id="acme")


# -- ingest and chat against a scripted LLM --------------------------------------------------------------------------


class ScriptedModel:
    """Answers the extraction prompts from :data:`EXTRACTIONS` (by the text after "Text:"), the question's with
    ``question_entities``, and anything else with a streamed answer; counts calls per kind."""

    def __init__(self, question_entities: list[str]) -> None:
        self.question_entities = question_entities
        self.calls: dict[str, int] = {"text": 0, "question": 0, "answer": 0}
        self.lock = threading.Lock()
        self.fail_questions = False

    def __call__(self, received: Received) -> Reply:
        body = received.json or {}
        last = body.get("messages", [{}])[-1].get("content", "")
        kind = "text" if last.startswith("Text:\n") else "question" if last.startswith("Question:\n") else "answer"
        with self.lock:
            self.calls[kind] += 1
        if kind == "text":
            found = EXTRACTIONS.get(last.removeprefix("Text:\n"), {"nodes": []})
            return Reply(body=completion(json.dumps(found)))
        if kind == "question":
            if self.fail_questions:
                return Reply(500, {"error": {"message": "overloaded"}})
            return Reply(body=completion(json.dumps({"nodes": [{"name": n} for n in self.question_entities]})))
        if body.get("stream"):
            return Reply(chunks=streamed("She designed the Orinoco Bridge [1] and was educated in Caracas [2]."))
        return Reply(body=completion("She designed the Orinoco Bridge [1] and was educated in Caracas [2]."))


def _settings(data: Path, llm: LLMServer, **more: Any) -> Settings:
    return Settings(data_dir=data, chat_provider="openai", chat_model="m", chat_base_url=llm.url, chat_max_retries=0,
                    **more)  # fmt: skip


@pytest.fixture
def graph_kb(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, plain_environment: None
) -> tuple[Path, Path]:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bridge.md").write_text(BRIDGE, encoding="utf-8")
    (folder / "career.md").write_text(CAREER, encoding="utf-8")
    data = tmp_path / "data"
    assert (
        run_cli(capsys, "--data-dir", str(data), "kb", "create", "people", "--graph", "--embedding-model", "none")[0]
        == 0
    )
    return data, folder


def _ingest(
    capsys: pytest.CaptureFixture[str], data: Path, folder: Path, llm: LLMServer, mp: pytest.MonkeyPatch
) -> str:
    for key, value in {"RAGSTEP_CHAT_PROVIDER": "openai", "RAGSTEP_CHAT_MODEL": "m", "RAGSTEP_CHAT_BASE_URL": llm.url,
                       "RAGSTEP_CHAT_MAX_RETRIES": "0"}.items():  # fmt: skip
        mp.setenv(key, value)
    code, out, err = run_cli(capsys, "--data-dir", str(data), "ingest", str(folder), "--kb", "people")
    assert code == 0, err
    return out


def test_ingest_builds_the_graph_and_keeps_it_in_step(
    graph_kb: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, folder = graph_kb
    model = ScriptedModel([])
    with LLMServer(responder=model) as llm:
        _ingest(capsys, data, folder, llm, monkeypatch)
        ctx = Clients(_settings(data, llm)).context()
        kb = ctx.require_kb("people")
        assert kb.graph and model.calls["text"] == 2
        (vass,) = ctx.graph.lookup([kb.id], ["maria vass"])
        assert sorted(vass.attributes) == ["educated in Caracas", "engineer"] and len(vass.chunk_ids) == 2
        assert ctx.graph.neighbours([kb.id], ["maria vass"]) == ["caracas", "orinoco bridge"]

        # Re-ingest an edited document: its part of the graph is replaced with the new chunks'.
        (folder / "bridge.md").write_text("Maria Vass designed the Angostura Bridge.", encoding="utf-8")
        EXTRACTIONS["Maria Vass designed the Angostura Bridge."] = {
            "nodes": ["Maria Vass", "Angostura Bridge"],
            "relations": [{"source": "Maria Vass", "target": "Angostura Bridge", "type": "designed"}],
        }
        try:
            _ingest(capsys, data, folder, llm, monkeypatch)
        finally:
            del EXTRACTIONS["Maria Vass designed the Angostura Bridge."]
        assert model.calls["text"] == 3  # the unchanged file is not extracted again
        assert ctx.graph.lookup([kb.id], ["orinoco bridge"]) == []
        assert ctx.graph.neighbours([kb.id], ["maria vass"]) == ["angostura bridge", "caracas"]
        live = {
            c
            for item in ctx.catalog.list_knowledge(kb.id)
            for c in (ch.id for ch in ctx.index.knowledge_chunks(item.id, 10))
        }
        assert set(ctx.graph.lookup([kb.id], ["maria vass"])[0].chunk_ids) == live  # no node points at an old chunk

        # Deleting a document removes its part.
        career = next(k for k in ctx.catalog.list_knowledge(kb.id) if k.filename == "career.md")
        delete_knowledge(career, ctx)
        assert ctx.graph.lookup([kb.id], ["caracas"]) == []
        assert ctx.graph.neighbours([kb.id], ["maria vass"]) == ["angostura bridge"]


def test_a_graph_kb_answers_about_an_entity_its_chunk_never_names(
    graph_kb: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, folder = graph_kb
    model = ScriptedModel(["Maria Vass"])
    with LLMServer(responder=model) as llm:
        _ingest(capsys, data, folder, llm, monkeypatch)
        ctx = Clients(_settings(data, llm)).context()
        # Keywords alone cannot find the career chunk: it shares no word with the question.
        plain = knowledge_search(SearchRequest(query=QUESTION, knowledge_base_ids=["people"]), ctx)
        assert all(CAREER not in r.content for r in plain.final_results)

        state = run_chat(ChatRequest(query=QUESTION, knowledge_base_ids=["people"]), ctx)
    references = state.chat.references
    career = [r for r in references if r.content == CAREER]
    assert (
        career
        and career[0].match_type == MatchType.GRAPH
        and normalise_name(career[0].metadata["graph"]["node"]) == "maria vass"
    )
    rows = {(t.stage, t.action) for t in state.trace}
    assert ("extract_entities", "run") in rows and ("entity_search", "run") in rows
    entity_row = next(t for t in state.trace if t.stage == "entity_search")
    assert entity_row.counts["matched_nodes"] == 1 and entity_row.counts["results"] >= 2
    assert state.entities == ["Maria Vass"]


def test_skips_and_failures_never_fail_the_answer(
    graph_kb: tuple[Path, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, folder = graph_kb
    model = ScriptedModel([])
    with LLMServer(responder=model) as llm:
        _ingest(capsys, data, folder, llm, monkeypatch)
        ctx = Clients(_settings(data, llm)).context()
        state = run_chat(ChatRequest(query=QUESTION, knowledge_base_ids=["people"]), ctx)  # the model finds nothing
        assert next(t for t in state.trace if t.stage == "extract_entities").reason == "no_entities"
        assert next(t for t in state.trace if t.stage == "entity_search").reason == "no_entities"
        model.fail_questions = True
        state = run_chat(ChatRequest(query="Who is Maria Vass?", knowledge_base_ids=["people"]), ctx)
        failed = next(t for t in state.trace if t.stage == "extract_entities")
        assert failed.action == "degrade" and "HTTP 500" in failed.detail["error"] and state.chat.answer
    # The extractive answerer cannot extract: skipped with the reason, the knowledge bases still answer.
    extractive = Clients(Settings(data_dir=data, chat_provider="extractive")).context()
    state = run_chat(ChatRequest(query=QUESTION, knowledge_base_ids=["people"]), extractive)
    assert next(t for t in state.trace if t.stage == "extract_entities").reason == "model_not_generative"
    assert state.chat.answer and all(r.match_type != MatchType.GRAPH for r in state.final_results)
    # A knowledge base without a graph: both graph stages skip at once.
    assert run_cli(capsys, "--data-dir", str(data), "kb", "create", "plain", "--embedding-model", "none")[0] == 0
    state = run_chat(ChatRequest(query=QUESTION, knowledge_base_ids=["plain"]), extractive)
    skips = [
        (t.stage, t.reason)
        for t in state.trace
        if t.action == "skip" and t.stage in ("extract_entities", "entity_search")
    ]
    assert skips == [("extract_entities", "graph_off"), ("entity_search", "graph_off")]
