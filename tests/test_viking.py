"""Hierarchical retrieval end to end: folder paths and layers kept at ingest, ``find``, ``search --hierarchical``
with the extractive fallback and with a scripted LLM (real HTTP server), and ``POST /v1/find`` / ``/v1/search``."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import run_cli
from ragstep.app.viking import refresh_hierarchy
from ragstep.context import Clients
from ragstep.models import ChunkType, Turn
from ragstep.settings import Settings
from ragstep.stages.viking.tree import layer_knowledge_id, stored_hierarchy
from support.api_server import api_server
from support.llm_server import LLMServer, Received, Reply, completion, streamed

DOCS = {
    "index.md": "# Welcome\n\nThis is the handbook of the tool.\n",
    "guide/install.md": "# Installing the tool\n\nYou install the tool with pip. It needs Python 3.11.\n\n"
    "## Offline installation\n\nDownload the wheel files first, then install them with --no-index.\n",
    "guide/configure.md": "# Configuration\n\nSettings come from environment variables named TOOL_*.\n\n"
    "## Proxy settings\n\nSet HTTPS_PROXY to reach the internet through a corporate proxy.\n",
    "reference/api/client.md": "# Client API\n\nThe Client class opens a connection to the server.\n\n"
    "## Timeouts\n\nEvery request gives up after 30 seconds unless a timeout is passed.\n",
}
ROOT = "ragstep://handbook/"


@pytest.fixture
def handbook(tmp_path: Path, capsys: pytest.CaptureFixture[str], plain_environment: None) -> tuple[Path, Path]:
    folder = tmp_path / "docs"
    for name, text in DOCS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    data = tmp_path / "data"
    code, out, err = run_cli(capsys, "--data-dir", str(data), "kb", "create", "handbook", "--layers",
                             "--embedding-model", "none")  # fmt: skip
    assert code == 0 and "layers" in out, err
    code, _, err = run_cli(capsys, "--data-dir", str(data), "ingest", str(folder), "--kb", "handbook")
    assert code == 0, err
    return data, folder


def _cli_json(capsys: pytest.CaptureFixture[str], data: Path, *args: str) -> Any:
    code, out, err = run_cli(capsys, "--data-dir", str(data), *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_ingest_keeps_the_folders_and_indexes_every_nodes_layers(handbook: tuple[Path, Path]) -> None:
    data, _ = handbook
    ctx = Clients(Settings(data_dir=data)).context()
    kb = ctx.require_kb("handbook")
    tree = stored_hierarchy(kb, ctx)
    assert tree is not None and tree.root == ROOT
    assert sorted(tree.nodes) == sorted(
        [ROOT, f"{ROOT}guide/", f"{ROOT}reference/", f"{ROOT}reference/api/"] + [ROOT + n for n in DOCS]
    )
    install = tree.nodes[f"{ROOT}guide/install.md"]
    assert (
        install.parent == f"{ROOT}guide/" and install.path == "guide/install.md" and install.layers_by == "extractive"
    )
    assert install.abstract.startswith("Installing the tool: You install the tool with pip.")
    assert "Offline installation" in install.overview
    assert tree.nodes[f"{ROOT}reference/api/"].abstract == "api: client"
    # L0 and L1 are chunks of their own, typed and pointing at the node.
    chunks = ctx.index.knowledge_chunks(layer_knowledge_id(kb.id, f"{ROOT}guide/"), 10)
    assert [(c.chunk_type, c.metadata["viking_uri"]) for c in chunks] == [
        (ChunkType.ABSTRACT, f"{ROOT}guide/"),
        (ChunkType.OVERVIEW, f"{ROOT}guide/"),
    ]


def test_find_reaches_deep_documents_and_lays_out_context(
    handbook: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data, _ = handbook
    found = _cli_json(capsys, data, "find", "request timeout seconds", "--kb", "handbook", "--budget", "300")
    best = found["resources"][0]
    assert best["uri"] == f"{ROOT}reference/api/client.md" and best["is_leaf"]
    assert best["relations"][0]["uri"] == f"{ROOT}reference/api/"
    assert found["memories"] == found["skills"] == [] and "query_plan" not in found
    layered = found["layered"]
    assert layered["used"] <= 300 and layered["items"][0]["layer"] == "L2"
    assert "30 seconds" in layered["items"][0]["text"]
    trace = {e["stage"]: e for e in found["trace"]}
    assert trace["intent_analysis"]["action"] == "skip"
    assert trace["layered_context"]["detail"]["layers"][best["uri"]] == "L2"
    code, out, _ = run_cli(capsys, "--data-dir", str(data), "find", "proxy", "--kb", "handbook")
    assert code == 0 and out.splitlines()[3].split()[1] == f"{ROOT}guide/configure.md"
    code, _, err = run_cli(capsys, "--data-dir", str(data), "find", "  ", "--kb", "handbook")
    assert code == 2 and "query is empty" in err
    code, _, err = run_cli(capsys, "--data-dir", str(data), "find", "x", "--kb", "nope")
    assert code == 2 and "nope" in err


def test_a_reingest_regenerates_what_changed_bottom_up(
    handbook: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data, folder = handbook
    ctx = Clients(Settings(data_dir=data)).context()
    kb = ctx.require_kb("handbook")
    before = stored_hierarchy(kb, ctx)
    assert before is not None
    assert refresh_hierarchy(kb, ctx, [folder]).regenerated == []  # nothing changed: nothing rewritten
    (folder / "reference/api/client.md").write_text("# Client API\n\nThe Client retries failed requests.\n")
    (folder / "guide/install.md").unlink()
    code, _, err = run_cli(capsys, "--data-dir", str(data), "ingest", str(folder / "reference"), "--kb", "handbook")
    assert code == 0, err
    after = stored_hierarchy(kb, ctx)
    assert after is not None
    changed = {u for u in after.nodes if after.nodes[u].signature != before.nodes[u].signature}
    # The document, then its folder (a child's abstract changed); reference/ above reads api/'s abstract ("api:
    # client"), which did not change, so the regeneration stops there. Nothing beside them.
    assert changed == {f"{ROOT}reference/api/client.md", f"{ROOT}reference/api/"}
    assert "retries" in after.nodes[f"{ROOT}reference/api/client.md"].abstract
    # Ingested from reference/ this time, the document kept the place it had.
    assert after.nodes[f"{ROOT}reference/api/client.md"].path == "reference/api/client.md"
    # A deleted document's node and its layer chunks go at the next refresh.
    install = after.nodes[f"{ROOT}guide/install.md"]
    assert run_cli(capsys, "--data-dir", str(data), "delete", install.knowledge_id)[0] == 0
    report = refresh_hierarchy(kb, ctx)
    assert report.removed == [f"{ROOT}guide/install.md"]
    assert ctx.index.knowledge_chunks(layer_knowledge_id(kb.id, f"{ROOT}guide/install.md"), 5) == []
    assert f"{ROOT}guide/" in report.regenerated


def test_search_without_a_model_runs_the_question_as_one_resource_query(
    handbook: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data, _ = handbook
    found = _cli_json(capsys, data, "search", "offline installation wheels", "--kb", "handbook", "--hierarchical")
    plan = found["query_plan"]
    assert plan["source"] == "extractive" and len(plan["queries"]) == 1
    assert plan["queries"][0]["query"] == "offline installation wheels"
    assert "no chat model" in plan["reasoning"]
    assert found["resources"][0]["uri"] == f"{ROOT}guide/install.md"
    code, out, _ = run_cli(capsys, "--data-dir", str(data), "search", "proxy", "--kb", "handbook", "--hierarchical")
    assert code == 0 and out.startswith("[resource, priority 1] proxy")


class Scripted:
    """Answers layer prompts with a fixed summary, and intent prompts with ``plan`` (a string: sent as it is)."""

    def __init__(self) -> None:
        self.plan: Any = {"queries": []}
        self.intent_prompts: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, received: Received) -> Reply:
        messages = received.json["messages"]
        if received.json.get("stream"):  # the answer of a chat pipeline
            return Reply(chunks=streamed("Requests give up after 30 seconds [1]."))
        if messages[0]["content"].startswith("You plan retrieval"):
            with self.lock:
                self.intent_prompts.append(messages[-1]["content"])
            answer = self.plan if isinstance(self.plan, str) else json.dumps(self.plan)
            return Reply(body=completion(answer))
        name = messages[-1]["content"].splitlines()[0]
        return Reply(body=completion(json.dumps({"abstract": f"LLM abstract of {name}", "overview": "LLM overview"})))


def _llm_settings(data: Path, llm: LLMServer) -> Settings:
    return Settings(data_dir=data, chat_provider="openai", chat_model="m", chat_base_url=llm.url, chat_max_retries=0)


def test_search_with_a_model_plans_typed_queries(tmp_path: Path, plain_environment: None) -> None:
    script = Scripted()
    with LLMServer(responder=script) as llm:
        ctx = Clients(_llm_settings(tmp_path / "data", llm)).context()
        from ragstep.app.ingest import ingest_file
        from ragstep.app.knowledge_bases import create_knowledge_base
        from ragstep.app.viking import search

        kb = create_knowledge_base(ctx, "handbook", embedding_model="none", layers=True)
        folder = tmp_path / "docs"
        for name, text in DOCS.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
            assert ingest_file(folder / name, kb, ctx).status == "indexed"
        refresh_hierarchy(kb, ctx, [folder])
        tree = stored_hierarchy(kb, ctx)
        assert tree is not None
        node = tree.nodes[f"{ROOT}guide/"]
        assert node.layers_by == "openai:m" and node.abstract == "LLM abstract of Folder guide, its contents:"

        ctx.history.append(Turn(session_id="s1", created_at=time.time(), query="how do I set up the tool?",
                                answer="Install it with pip."))  # fmt: skip
        script.plan = {"reasoning": "install, offline", "queries": [
            {"query": "offline installation", "context_type": "resource", "intent": "how", "priority": 1},
            {"query": "user's operating system", "context_type": "memory", "intent": "platform", "priority": 3},
            {"query": "request timeouts", "context_type": "resource", "intent": "limits", "priority": 2},
        ]}  # fmt: skip
        result = search("and without internet?", ["handbook"], ctx, session_id="s1", budget=500)
        assert script.intent_prompts[-1].endswith("Current message:\nand without internet?")
        assert "user: how do I set up the tool?" in script.intent_prompts[-1]
        assert result.query_plan is not None and result.query_plan.source == "llm"
        assert [q.query for q in result.query_plan.queries] == [
            "offline installation", "request timeouts", "user's operating system"
        ]  # fmt: skip
        uris = [m.uri for m in result.resources]
        assert f"{ROOT}guide/install.md" in uris and f"{ROOT}reference/api/client.md" in uris
        skipped = [e for e in result.trace if e.stage == "hierarchical_search" and e.action == "skip"]
        assert len(skipped) == 1 and "no memories of user 'default' yet" in (skipped[0].reason or "")
        assert result.layered is not None and result.layered.used <= 500

        script.plan = {"reasoning": "a greeting", "queries": []}
        hello = search("hello!", ["handbook"], ctx)
        assert hello.total == 0 and hello.query_plan is not None and hello.query_plan.queries == []
        assert any(e.stage == "hierarchical_search" and e.action == "skip" for e in hello.trace)

        script.plan = "I think you want the install guide."
        unreadable = search("offline installation", ["handbook"], ctx)
        assert unreadable.query_plan is not None and unreadable.query_plan.source == "fallback"
        assert unreadable.resources[0].uri == f"{ROOT}guide/install.md"


def test_find_and_search_over_http(handbook: tuple[Path, Path]) -> None:
    data, _ = handbook
    clients = Clients(Settings(data_dir=data))
    with api_server(clients) as url, httpx.Client(base_url=url, timeout=30) as http:
        found = http.post("/v1/find", json={"query": "proxy", "knowledge_bases": ["handbook"], "budget": 200})
        assert found.status_code == 200, found.text
        body = found.json()
        assert body["resources"][0]["uri"] == f"{ROOT}guide/configure.md" and body["layered"]["used"] <= 200
        searched = http.post("/v1/search", json={"query": "client timeouts", "knowledge_bases": ["handbook"]})
        assert searched.status_code == 200 and searched.json()["query_plan"]["source"] == "extractive"
        missing = http.post("/v1/find", json={"query": "proxy", "knowledge_bases": ["nope"]})
        assert missing.status_code == 404 and "nope" in missing.json()["message"]
        blank = http.post("/v1/find", json={"query": "   ", "knowledge_bases": ["handbook"]})
        assert blank.status_code == 400 and blank.json()["error"]


def test_the_viking_stream_pipeline_answers_from_layered_context(tmp_path: Path, plain_environment: None) -> None:
    from ragstep.app.chat import run_chat
    from ragstep.models import ChatRequest

    script = Scripted()
    script.plan = {"queries": [{"query": "request timeouts of the client", "context_type": "resource"}]}
    with LLMServer(responder=script) as llm:
        ctx = Clients(_llm_settings(tmp_path / "data", llm)).context()
        from ragstep.app.ingest import ingest_file
        from ragstep.app.knowledge_bases import create_knowledge_base

        kb = create_knowledge_base(ctx, "handbook", embedding_model="none", layers=True)
        folder = tmp_path / "docs"
        for name, text in DOCS.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
            ingest_file(folder / name, kb, ctx)
        refresh_hierarchy(kb, ctx, [folder])
        state = run_chat(ChatRequest(query="how long until a request gives up?", knowledge_base_ids=["handbook"],
                                     pipeline="viking_stream"), ctx)  # fmt: skip
    stages = [t.stage for t in state.trace]
    assert stages.index("intent_analysis") < stages.index("hierarchical_search") < stages.index("layered_context")
    best = state.final_results[0]
    assert best.metadata["viking_uri"] == f"{ROOT}reference/api/client.md" and best.metadata["layer"] == "L2"
    assert "30 seconds" in best.content and best.chunk_type == ChunkType.TEXT
    layers = next(t for t in state.trace if t.stage == "layered_context").detail["layers"]
    assert layers[f"{ROOT}reference/api/client.md"] == "L2" and set(layers.values()) <= {"L0", "L1", "L2"}
    assert state.chat.answer  # the scripted model's answer, grounded on these passages


def test_http_uploads_deletes_and_disables_keep_the_tree_in_step(handbook: tuple[Path, Path]) -> None:
    data, _ = handbook
    clients = Clients(Settings(data_dir=data))
    kbs = "/v1/knowledge-bases/handbook"
    note = b"# Release notes\n\nVersion 2 adds a sandbox mode for untrusted plugins.\n"
    with api_server(clients) as url, httpx.Client(base_url=url, timeout=30) as http:
        accepted = http.post(f"{kbs}/documents", files=[("files", ("notes.md", note))])
        assert accepted.status_code == 202, accepted.text
        job = accepted.json()["jobs"][0]
        deadline = time.monotonic() + 60
        while job["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, job
            time.sleep(0.05)
            job = http.get(f"/v1/ingestion-jobs/{job['id']}").json()
        assert (job["status"], job["error"]) == ("indexed", ""), job
        ctx = clients.context()
        tree = stored_hierarchy(ctx.require_kb("handbook"), ctx)
        assert tree is not None
        # An upload has no folder: it sits at the root, with its layers, and the root's layers name it.
        assert tree.nodes[f"{ROOT}notes.md"].abstract.startswith("Release notes")
        assert "notes" in tree.nodes[ROOT].abstract.split(": ")[1].split(", ")  # the root lists its children
        found = http.post("/v1/find", json={"query": "sandbox plugins", "knowledge_bases": ["handbook"]}).json()
        assert found["resources"][0]["uri"] == f"{ROOT}notes.md"

        # Disabled: out of the tree; deleted: gone with its layer chunks.
        doc_id = job["knowledge_id"]
        assert http.patch(f"/v1/documents/{doc_id}", json={"enabled": False}).status_code == 200
        tree = stored_hierarchy(ctx.require_kb("handbook"), ctx)
        assert tree is not None and f"{ROOT}notes.md" not in tree.nodes
        assert http.patch(f"/v1/documents/{doc_id}", json={"enabled": True}).status_code == 200
        assert http.delete(f"/v1/documents/{doc_id}").status_code == 200
        kb = ctx.require_kb("handbook")
        tree = stored_hierarchy(kb, ctx)
        assert tree is not None and f"{ROOT}notes.md" not in tree.nodes
        assert ctx.index.knowledge_chunks(layer_knowledge_id(kb.id, f"{ROOT}notes.md"), 10) == []
        assert "notes" not in tree.nodes[ROOT].abstract.split(": ")[1].split(", ")


def test_the_intent_analyser_gets_the_sessions_compressed_summary(tmp_path: Path, plain_environment: None) -> None:
    script = Scripted()
    script.plan = {"queries": []}
    with LLMServer(responder=script) as llm:
        ctx = Clients(_llm_settings(tmp_path / "data", llm)).context()
        from ragstep.app.knowledge_bases import create_knowledge_base
        from ragstep.app.viking import search

        create_knowledge_base(ctx, "handbook", embedding_model="none", layers=True)
        for i, topic in enumerate(["installing offline", "proxy settings", "client timeouts", "logging levels"]):
            ctx.history.append(Turn(session_id="s2", created_at=time.time() + i, query=f"tell me about {topic}",
                                    answer=f"About {topic}: see the guide. More text."))  # fmt: skip
        search("and the defaults?", ["handbook"], ctx, session_id="s2")
    prompt = script.intent_prompts[-1]
    summary = prompt.split("Session summary:\n")[1].split("\n\nRecent messages:")[0]
    # The last 5 messages are turns 3-4 and turn 2's answer: turns 1-2 are summarised, the recent ones sent as is.
    assert summary.splitlines() == [
        "- asked: tell me about installing offline -> About installing offline: see the guide.",
        "- asked: tell me about proxy settings -> About proxy settings: see the guide.",
    ]
    recent = prompt.split("Recent messages:\n")[1].split("\n\nCurrent message:")[0].splitlines()
    assert recent[0].startswith("assistant: About proxy settings") and recent[-1].startswith("assistant: About logging")


def test_a_rerank_model_scores_the_starting_points(handbook: tuple[Path, Path]) -> None:
    from ragstep.app.viking import find
    from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

    def rerank(request: RecordedRequest) -> ScriptedResponse:
        docs = request.json["documents"]
        scores = [0.99 if "Client" in d else 0.01 for d in docs]
        return ScriptedResponse(200, {"results": [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]})

    data, _ = handbook
    with ScriptedHTTPServer(rerank) as server:
        settings = Settings(data_dir=data, reranker="http", rerank_url=f"{server.url}/v2/rerank",
                            rerank_model="m", rerank_flavour="cohere", provider_max_retries=0)  # fmt: skip
        ctx = Clients(settings).context()
        found = find("settings timeouts installation", ["handbook"], ctx)
        (request,) = server.requests
        # The global hits' abstracts went to the model, which put the client's first: a result at its score.
        assert request.json["query"] == "settings timeouts installation"
        assert any(d.startswith("Client API") for d in request.json["documents"])
        assert found.resources[0].uri == f"{ROOT}reference/api/client.md"
        assert found.resources[0].score >= 0.5 * 0.99  # half its rerank score, plus its folder's share
        row = next(e for e in found.trace if e.stage == "hierarchical_search")
        assert row.detail["rerank"] == "starting points reranked by cohere:m"

        server.set_fallback(lambda _r: ScriptedResponse(500, {"message": "down"}))
        degraded = find("settings timeouts installation", ["handbook"], ctx)
        row = next(e for e in degraded.trace if e.stage == "hierarchical_search")
        assert row.detail["rerank"].startswith("rerank failed") and degraded.resources


def test_the_ingest_machines_last_stage_refreshes_the_tree(handbook: tuple[Path, Path]) -> None:
    # On AWS an upload is ingested by the state machine; its last stage records the job (finish_job), and with it
    # the tree follows. The machine's stages run in-process here, as tests/test_http_knowledge.py runs them.
    import hashlib

    from ragstep.app.ingest import new_ingest_state
    from ragstep.app.jobs import queue_ingestion
    from ragstep.app.s3_jobs import finish_job
    from ragstep.pipeline import run_pipeline

    data, _ = handbook
    ctx = Clients(Settings(data_dir=data)).context()
    kb = ctx.require_kb("handbook")
    text = b"# Changelog\n\nVersion 3 drops the legacy importer.\n"
    digest = hashlib.sha256(text).hexdigest()
    key = f"uploads/{kb.id}/changelog.md"
    ctx.blobs.put(key, text, "text/markdown")
    job = queue_ingestion(ctx, kb, filename="changelog.md", blob_key=key, content_hash=digest, size=len(text))
    state = new_ingest_state(kb, knowledge_id=job.knowledge_id, blob_key=key, filename="changelog.md",
                             title="changelog", content_hash=digest, size=len(text))  # fmt: skip
    state = state.model_copy(update={"job_id": job.id})
    done = finish_job(ctx, run_pipeline("ingest", state, ctx))
    assert done is not None and (done.status, done.error) == ("indexed", "")
    tree = stored_hierarchy(kb, ctx)
    assert tree is not None and tree.nodes[f"{ROOT}changelog.md"].abstract.startswith("Changelog")


def test_sub_folders_are_reranked_by_the_name_the_question_gives() -> None:
    from ragstep.models.viking import HierarchyNode
    from ragstep.stages.viking.hierarchical_search import rerank_nodes

    def folder(name: str, children: str) -> HierarchyNode:
        uri = f"{ROOT}npm/{name}/"
        return HierarchyNode(uri=uri, parent=f"{ROOT}npm/", kind="directory", path=f"npm/{name}", title=name,
                             abstract=f"{name}: {children}")  # fmt: skip

    nodes = [
        folder("commands", "npm cache, npm config, npm install, npm link"),
        folder("configuring-npm", "folders, install, npmrc, package.json"),
        folder("using-npm", "config, scripts, workspaces"),
    ]
    scores = rerank_nodes("cpu (configuring npm)", nodes)
    assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores)
    assert max(range(3), key=scores.__getitem__) == 1  # "configuring" names one folder; "npm" is in all three


def test_a_folder_is_evidence_when_the_question_names_it_and_its_layers_matched() -> None:
    from ragstep.models.viking import HierarchyNode
    from ragstep.stages.viking.hierarchical_search import folder_evidence

    def node(path: str, kind: str = "directory") -> HierarchyNode:
        return HierarchyNode(uri=f"{ROOT}{path}", parent=ROOT, kind=kind, path=path.rstrip("/"))

    nodes = {n.uri: n for n in (node("using-npm/"), node("commands/"), node("command/"), node("npm.md", "document"))}
    own = {f"{ROOT}using-npm/": 0.4, f"{ROOT}commands/": 0.7, f"{ROOT}npm.md": 0.9}
    # using-npm/ is named ("npm") and scored; commands/ scored but is not named ("command" is not "commands");
    # command/ is named but its layers were not found; a document is never a folder's evidence.
    assert folder_evidence("omit (using npm)", nodes, own) == {f"{ROOT}using-npm/"}
    assert folder_evidence("npm cache add", nodes, own) == {f"{ROOT}using-npm/"}
    assert folder_evidence("Command Arguments", nodes, own) == set()
    assert folder_evidence("cache add", nodes, own) == set()


def test_a_copied_passage_is_evidence_for_one_document_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plain_environment: None
) -> None:
    from ragstep.stages.viking.hierarchical_search import node_scores

    shared = ("The standard whose features are requested to build this target. Supported values are 98, 11, 14, "
              "17, 20 and 23; a compiler without a notion of a standard level ignores this property.\n")  # fmt: skip
    docs = {
        "props/objc.md": f"# OBJC_STANDARD\n\n{shared}",
        "props/objcxx.md": f"# OBJCXX_STANDARD\n\n{shared}",
        "manual/features.md": "# Compile features\n\n## Supported compilers\n\nThe standard levels each compiler "
        "supports are listed per release.\n",
    }
    folder = tmp_path / "docs"
    for name, text in docs.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    data = tmp_path / "data"
    assert run_cli(capsys, "--data-dir", str(data), "kb", "create", "props", "--layers", "--embedding-model",
                   "none")[0] == 0  # fmt: skip
    assert run_cli(capsys, "--data-dir", str(data), "ingest", str(folder), "--kb", "props")[0] == 0
    ctx = Clients(Settings(data_dir=data)).context()
    kb = ctx.require_kb("props")
    tree = stored_hierarchy(kb, ctx)
    assert tree is not None
    own, passages = node_scores("supported standard values", [kb], {kb.id: tree}, ctx)
    copies = [u for u in ("ragstep://props/props/objc.md", "ragstep://props/props/objcxx.md") if u in own]
    # The two documents say the same: the better-scored one keeps the evidence, the copy gets none (no score, no
    # passage), while the document with text of its own is scored as before.
    assert len(copies) == 1
    assert set(passages) == {copies[0], "ragstep://props/manual/features.md"}
    assert own["ragstep://props/manual/features.md"] > 0 and own["ragstep://props/props/"] > 0


def test_find_shows_both_ends_of_a_long_uri() -> None:
    # Documents ingested from a deep folder share the uri's start and middle: their file name is what tells them apart.
    from ragstep.entry.cli.console import clip_middle, display_width

    shown = clip_middle("ragstep://mixed/work/notes/newuser6/docs/Thread-Safety.html", 48)
    assert shown == "ragstep://mixed…newuser6/docs/Thread-Safety.html" and display_width(shown) == 48
    assert clip_middle("ragstep://handbook/guide/configure.md", 48) == "ragstep://handbook/guide/configure.md"
    wide = clip_middle("ragstep://知识库/文档/很长的中文路径名字/北京故宫博物院介绍资料.md", 30)
    assert wide.endswith("介绍资料.md") and display_width(wide) <= 30
