"""Memories and skills: the pure extraction, parsing and deduplication; ``ragstep remember`` with a scripted model
(real HTTP server) and with the rule; memory and skill queries of ``search --hierarchical`` reaching only their own
roots (one user's memories never another's); ``POST /v1/remember``; viking_stream saving each turn's memories."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import run_cli
from ragstep.context import Clients
from ragstep.models import Turn
from ragstep.retrieval.memory import Memory, deduplicate, parse_memories, rule_memories
from ragstep.settings import Settings
from ragstep.stages.viking.tree import MEMORY_KB, stored_hierarchy
from support.api_server import api_server
from support.llm_server import LLMServer, Received, Reply, completion, streamed

# -- pure ----------------------------------------------------------------------------------------------------------


def test_the_models_memories_are_read_leniently() -> None:
    answer = 'Sure:\n```json\n{"memories": [{"category": "preference", "text": "The user prefers  YAML."},' \
        ' "The user runs Debian.", {"category": "odd", "text": ""}, 3]}\n```'  # fmt: skip
    assert parse_memories(answer) == [
        Memory("preferences", "The user prefers YAML."),  # "preference" read as its category, spaces squeezed
        Memory("facts", "The user runs Debian."),  # a bare string is a fact; the empty entry and the 3 are skipped
    ]
    assert parse_memories('{"memories": []}') == []  # nothing to keep is an answer
    assert parse_memories('[{"text": "The user decided on Postgres.", "category": "decisions"}]') == [
        Memory("decisions", "The user decided on Postgres.")
    ]
    for unreadable in ("I would remember that they like YAML.", '{"memories": "YAML"}', "{broken"):
        assert parse_memories(unreadable) is None, unreadable


def test_without_a_model_only_the_users_own_statements_are_kept() -> None:
    said = [
        "How do I set a proxy? I prefer environment variables over config files. Thanks!",
        "We decided to pin every dependency. What does npm ci do?",
        "Let's use the offline installer.\nIt is faster than I thought.",
    ]
    assert rule_memories(said) == [
        Memory("preferences", "The user said: I prefer environment variables over config files."),
        Memory("decisions", "The user said: We decided to pin every dependency."),
        Memory("decisions", "The user said: Let's use the offline installer."),
    ]


def test_a_memory_saying_what_is_known_is_dropped() -> None:
    new = [
        Memory("preferences", "The user prefers dark mode in the editor."),
        Memory("preferences", "The user prefers the editor in dark mode."),  # the same words: the first one stands
        Memory("facts", "The user works on a Debian laptop."),
    ]
    kept, dropped = deduplicate(new, ["The user works on a laptop running Debian."])
    assert kept == [new[0]] and dropped == [new[1], new[2]]


# -- end to end ----------------------------------------------------------------------------------------------------

DOCS = {
    "guide/install.md": "# Installing the tool\n\nYou install the tool with pip.\n",
    "skills/deploy.md": "# Deploy the service\n\nRun the deploy script, then check the health endpoint.\n",
    "skills/rollback.md": "# Roll back a release\n\nRedeploy the previous tag.\n",
}


class Scripted:
    """A chat model: memories for the extraction prompt, ``plan`` for the intent analyser, a short streamed answer."""

    def __init__(self) -> None:
        self.memories: Any = {"memories": []}
        self.plan: Any = {"queries": []}
        self.extractions: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, received: Received) -> Reply:
        messages = received.json["messages"]
        if received.json.get("stream"):
            return Reply(chunks=streamed("Run the deploy script [1]."))
        system = messages[0]["content"]
        if system.startswith("You keep long-term memories"):
            with self.lock:
                self.extractions.append(messages[-1]["content"])
            return Reply(body=completion(json.dumps(self.memories)))
        if system.startswith("You plan retrieval"):
            return Reply(body=completion(json.dumps(self.plan)))
        return Reply(body=completion(json.dumps({"abstract": messages[-1]["content"].splitlines()[0][:80]})))


@pytest.fixture
def handbook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain_environment: None) -> Path:
    monkeypatch.setenv("RAGSTEP_EMBEDDER", "none")
    folder = tmp_path / "docs"
    for name, text in DOCS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _settings(data: Path, llm: LLMServer | None = None) -> Settings:
    if llm is None:
        return Settings(data_dir=data, embedder="none")
    return Settings(data_dir=data, embedder="none", chat_provider="openai", chat_model="m", chat_base_url=llm.url,
                    chat_max_retries=0)  # fmt: skip


def _ingest(ctx: Any, folder: Path) -> None:
    from ragstep.app.ingest import ingest_file
    from ragstep.app.knowledge_bases import create_knowledge_base
    from ragstep.app.viking import refresh_hierarchy

    kb = create_knowledge_base(ctx, "handbook", embedding_model="none", layers=True)
    for path in sorted(folder.rglob("*.md")):
        assert ingest_file(path, kb, ctx).status == "indexed"
    refresh_hierarchy(kb, ctx, [folder])


def _turn(session: str, query: str, answer: str, at: float) -> Turn:
    return Turn(session_id=session, created_at=at, query=query, answer=answer)


def test_remember_saves_deduplicated_memories_that_only_their_user_finds(
    handbook: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = Scripted()
    with LLMServer(responder=script) as llm:
        ctx = Clients(_settings(tmp_path / "data", llm)).context()
        _ingest(ctx, handbook)
        now = time.time()
        ctx.history.append(_turn("s1", "I prefer YAML for configuration. How do I deploy?", "Run the script.", now))
        ctx.history.append(_turn("s2", "We decided on blue-green deploys.", "Noted.", now))

        script.memories = {"memories": [
            {"category": "preferences", "text": "The user prefers YAML for configuration files."},
            {"category": "decisions", "text": "The user deploys with blue-green releases."},
        ]}  # fmt: skip
        from ragstep.app.memories import remember
        from ragstep.app.viking import search

        first = remember(ctx, "s1", user="alice")
        assert first.source == "openai:m" and [m.category for m in first.saved] == ["preferences", "decisions"]
        assert "user: I prefer YAML for configuration. How do I deploy?" in script.extractions[-1]
        # Again, with one memory reworded: nothing new is saved.
        script.memories = {"memories": [{"category": "preferences", "text": "The user prefers YAML configuration."}]}
        again = remember(ctx, "s1", user="alice")
        assert again.saved == [] and [m.text for m in again.duplicates] == ["The user prefers YAML configuration."]
        script.memories = {"memories": [{"category": "preferences", "text": "The user prefers TOML configuration."}]}
        assert [m.text for m in remember(ctx, "s2", user="bob").saved] == ["The user prefers TOML configuration."]

        tree = stored_hierarchy(ctx.require_kb(MEMORY_KB), ctx)
        assert tree is not None
        leaves = sorted(n.path for n in tree.nodes.values() if n.is_leaf)
        assert [p.rsplit("/", 1)[0] for p in leaves] == ["alice/decisions", "alice/preferences", "bob/preferences"]

        script.plan = {"queries": [
            {"query": "user's preferred configuration format", "context_type": "memory", "priority": 1},
            {"query": "deploy the service", "context_type": "skill", "priority": 2},
            {"query": "installing the tool", "context_type": "resource", "priority": 3},
        ]}  # fmt: skip
        found = search("how should I write the deploy config?", ["handbook"], ctx, user="alice")
        assert [m.context_type for m in found.memories] == ["memory"] * len(found.memories)
        assert found.memories and all(m.uri.startswith(f"ragstep://{MEMORY_KB}/alice/") for m in found.memories)
        # (the abstracts are the scripted model's; the URIs say whose memories and which)
        assert found.memories[0].uri.startswith(f"ragstep://{MEMORY_KB}/alice/preferences/preference-")
        assert found.skills[0].uri == "ragstep://handbook/skills/deploy.md"
        assert all(m.uri.startswith("ragstep://handbook/skills/") for m in found.skills)
        assert found.resources and not any("/skills/" in m.uri for m in found.resources)
        for_bob = search("how should I write the deploy config?", ["handbook"], ctx, user="bob")
        assert for_bob.memories and all(m.uri.startswith(f"ragstep://{MEMORY_KB}/bob/") for m in for_bob.memories)
        nobody = search("and for carol?", ["handbook"], ctx, user="carol")
        skipped = [e.reason for e in nobody.trace if e.stage == "hierarchical_search" and e.action == "skip"]
        assert nobody.memories == [] and skipped == ["no memories of user 'carol' yet (ragstep remember saves them)"]

    # The memory knowledge base is not a knowledge base to search; a bad user name says what to use.
    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path / "data"), "find", "yaml", "--kb", MEMORY_KB)
    assert code == 2 and "memory queries" in err
    code, _, err = run_cli(capsys, "--data-dir", str(tmp_path / "data"), "remember", "--session", "s1", "--user",
                           "../etc")  # fmt: skip
    assert code == 2 and "letters, digits" in err


def test_remember_without_a_model_keeps_the_users_own_statements(
    handbook: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    ctx = Clients(_settings(data)).context()
    ctx.history.append(_turn("s1", "Let's use the offline installer. Where is it?", "In the guide.", time.time()))
    code, out, err = run_cli(capsys, "--data-dir", str(data), "remember", "--session", "s1", "--json")
    assert code == 0, err
    body = json.loads(out)
    assert body["user"] == "default" and body["source"] == "rule"
    assert body["saved"] == [{"category": "decisions", "text": "The user said: Let's use the offline installer."}]
    code, out, _ = run_cli(capsys, "--data-dir", str(data), "remember", "--session", "s1")
    assert code == 0 and out.startswith("0 memories saved for default, 1 already known")
    code, _, err = run_cli(capsys, "--data-dir", str(data), "remember", "--session", "nope")
    assert code != 0 and "unknown session 'nope'" in err


def test_remember_over_http_and_in_the_viking_stream_pipeline(handbook: Path, tmp_path: Path) -> None:
    from ragstep.app.chat import run_chat
    from ragstep.models import ChatRequest

    script = Scripted()
    script.plan = {"queries": [{"query": "deploy the service", "context_type": "skill"}]}
    with LLMServer(responder=script) as llm:
        clients = Clients(_settings(tmp_path / "data", llm))
        ctx = clients.context()
        _ingest(ctx, handbook)
        script.memories = {"memories": [{"category": "facts", "text": "The user deploys to three regions."}]}
        state = run_chat(ChatRequest(query="How do I deploy? We run three regions.", knowledge_base_ids=["handbook"],
                                     pipeline="viking_stream", user="alice"), ctx)  # fmt: skip
        assert state.final_results[0].metadata["viking_uri"] == "ragstep://handbook/skills/deploy.md"
        # The turn's memories were saved once the answer was out: only that turn was read.
        assert script.extractions[-1].startswith("user: How do I deploy? We run three regions.")
        tree = stored_hierarchy(ctx.require_kb(MEMORY_KB), ctx)
        assert tree is not None and any(n.path.startswith("alice/facts/") for n in tree.nodes.values())

        session = state.request.session_id
        assert session is not None
        script.memories = {"memories": [{"category": "facts", "text": "The user deploys to three regions."}]}
        with api_server(clients) as url, httpx.Client(base_url=url, timeout=30) as http:
            saved = http.post("/v1/remember", json={"session_id": session, "user": "alice"})
            assert saved.status_code == 200, saved.text
            assert saved.json()["saved"] == [] and len(saved.json()["duplicates"]) == 1
            unknown = http.post("/v1/remember", json={"session_id": "nope"})
            assert unknown.status_code == 404 and "nope" in unknown.json()["message"]
            bad = http.post("/v1/remember", json={"session_id": session, "user": "a/b"})
            assert bad.status_code == 400 and "letters, digits" in bad.json()["message"]
