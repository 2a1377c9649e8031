"""Recording and replay: a recorded search and answer replay exactly on unchanged code and settings; a changed setting
shows a meaningful diff (results gained, lost, moved); replays from a step reuse the recorded earlier steps; records
expire; the CLI prints both forms."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ragstep.app.chat import run_chat
from ragstep.app.ingest import ingest_file
from ragstep.app.replay import recent, replay
from ragstep.app.search import knowledge_search
from ragstep.context import Clients, Context
from ragstep.entry.cli.main import main
from ragstep.models import ChatRequest, KnowledgeBase, SearchRequest
from ragstep.pipeline import recording
from ragstep.settings import Settings

DOCS = {
    f"doc{n}.md": text
    for n, text in enumerate(
        [
            "Cold starts happen when AWS Lambda creates a new execution environment for a function.",
            "Provisioned concurrency keeps Lambda environments initialised, so requests avoid cold starts.",
            "SnapStart restores a snapshot of an initialised environment to shorten Java cold starts.",
            "Step Functions Express workflows are billed per request and run for at most five minutes.",
            "DynamoDB on-demand capacity bills each read and write request.",
            "The lighthouse keeper logs every passing ship in a blue ledger.",
        ]
    )
}


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Context, KnowledgeBase]:
    clients = Clients(Settings(data_dir=tmp_path / "data", record_rate=1.0))
    ctx = clients.context()
    kb = KnowledgeBase(id="kb1", name="docs", embedding_model="none", created_at=time.time())
    ctx.catalog.create_kb(kb)
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
        ingest_file(folder / name, kb, ctx)
    return ctx, kb


def test_an_unchanged_replay_reproduces_the_search_and_the_answer(recorded: tuple[Context, KnowledgeBase]) -> None:
    ctx, kb = recorded
    searched = knowledge_search(SearchRequest(query="how to avoid lambda cold starts", knowledge_base_ids=[kb.id]), ctx)
    answered = run_chat(
        ChatRequest(query="Where does the keeper log ships?", knowledge_base_ids=[kb.id], pipeline="rag"), ctx
    )
    assert set(recent(ctx, 10)) == {searched.request_id, answered.request_id}
    for state in (searched, answered):
        d = replay(ctx, state.request_id)
        assert not d.changed, d
        assert d.unchanged == len(state.results("final_results"))
        assert d.answer_after == state.chat.answer
    assert len(recent(ctx, 10)) == 2  # replays are not recorded themselves


def test_a_changed_setting_shows_what_moved_and_a_later_step_reuses_the_earlier_ones(
    recorded: tuple[Context, KnowledgeBase],
) -> None:
    ctx, kb = recorded
    state = knowledge_search(SearchRequest(query="lambda cold starts environments", knowledge_base_ids=[kb.id]), ctx)
    assert len(state.final_results) >= 2
    d = replay(ctx, state.request_id, retrieval={"rerank_top_k": 1})
    assert d.changed and len(d.lost) == len(state.final_results) - 1 and not d.gained
    assert d.overrides == {"rerank_top_k": 1}
    later = replay(ctx, state.request_id, from_step="chunk_merge")
    assert later.from_step == "chunk_merge" and not later.changed
    assert later.stage_ms["chunk_search"][1] is not None  # the recorded search's row is kept, not run again
    with pytest.raises(Exception, match="steps are chunk_search"):
        replay(ctx, state.request_id, from_step="no_such_step")


def test_records_expire_after_the_retention(recorded: tuple[Context, KnowledgeBase]) -> None:
    ctx, kb = recorded
    knowledge_search(SearchRequest(query="blue ledger", knowledge_base_ids=[kb.id]), ctx)
    assert recording.prune(ctx) == 0
    assert recording.prune(ctx, now=time.time() + ctx.settings.record_retention_s + 10) == 1
    assert recent(ctx, 10) == []


def test_nothing_is_recorded_by_default(ctx: Context, make_kb: object) -> None:
    kb = make_kb("docs")  # type: ignore[operator]
    knowledge_search(SearchRequest(query="anything", knowledge_base_ids=[kb.id]), ctx)
    assert recent(ctx, 10) == []


def test_the_cli_replays_one_request_and_a_batch(
    recorded: tuple[Context, KnowledgeBase], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx, kb = recorded
    state = knowledge_search(SearchRequest(query="lambda cold starts environments", knowledge_base_ids=[kb.id]), ctx)
    data_dir = str(ctx.settings.data_dir)
    monkeypatch.setenv("RAGSTEP_RECORD_RATE", "1")
    capsys.readouterr()
    assert main(["--data-dir", data_dir, "replay", state.request_id]) == 0
    assert "no change" in capsys.readouterr().out
    assert main(["--data-dir", data_dir, "replay", state.request_id, "--set", "rerank_top_k=1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["changed"] and shown["lost"]
    assert main(["--data-dir", data_dir, "replay", "--last", "5", "--set", "rerank_top_k=1"]) == 0
    assert "1 of 1 recorded requests changed" in capsys.readouterr().out
    assert main(["--data-dir", data_dir, "replay", "nope"]) == 2
    assert "no record of request 'nope'" in capsys.readouterr().err


def test_an_admin_replays_over_http_and_a_limited_key_cannot(recorded: tuple[Context, KnowledgeBase]) -> None:
    import httpx
    from tests.support.api_server import api_server

    from ragstep.app.keys import create_key

    ctx, kb = recorded
    state = knowledge_search(SearchRequest(query="lambda cold starts environments", knowledge_base_ids=[kb.id]), ctx)
    admin = create_key(ctx.clients.keys, "default", ["manage"]).secret
    limited = create_key(ctx.clients.keys, "default", ["manage"], knowledge_bases=["elsewhere"]).secret
    with api_server(ctx.clients) as base:
        url = f"{base}/v1/admin/replay/{state.request_id}"
        same = httpx.post(url, json={}, headers={"Authorization": f"Bearer {admin}"}, timeout=60)
        assert same.status_code == 200, same.text
        assert same.json()["changed"] is False and same.json()["unchanged"] == len(state.final_results)
        narrowed = httpx.post(
            url, json={"retrieval": {"rerank_top_k": 1}}, headers={"Authorization": f"Bearer {admin}"}, timeout=60
        )
        assert narrowed.json()["changed"] is True and narrowed.json()["lost"]
        hidden = httpx.post(url, json={}, headers={"Authorization": f"Bearer {limited}"}, timeout=60)
        assert hidden.status_code == 404
        missing = httpx.post(f"{base}/v1/admin/replay/nope", json={}, headers={"Authorization": f"Bearer {admin}"})
        assert missing.status_code == 404 and "no record of request" in missing.text


SET = Path(__file__).resolve().parents[1] / "bench-sets" / "answer-en"  # committed: 28 manual pages, judged queries


@pytest.fixture
def man_pages(tmp_path: Path) -> tuple[Context, KnowledgeBase]:
    """The set's corpus ingested as ``<id>.txt`` files (keyword search only: fast, and judged by the file stem)."""
    clients = Clients(Settings(data_dir=tmp_path / "data", record_rate=1.0))
    ctx = clients.context()
    kb = KnowledgeBase(id="kbman", name="man", embedding_model="none", created_at=time.time())
    ctx.catalog.create_kb(kb)
    for line in (SET / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        path = tmp_path / f"{doc['_id']}.txt"
        path.write_text(f"{doc['title']}\n\n{doc['text']}", encoding="utf-8")
        ingest_file(path, kb, ctx)
    return ctx, kb


def test_a_benchmark_set_replayed_under_two_settings_says_which_is_better(
    man_pages: tuple[Context, KnowledgeBase], capsys: pytest.CaptureFixture[str]
) -> None:
    from ragstep.app.replay import load_judgements, replay_set, summarise

    ctx, kb = man_pages
    judgements = load_judgements(SET)
    answerable = {line.split("\t")[0] for line in (SET / "qrels.tsv").read_text().splitlines()[1:] if line}
    assert len(judgements.queries) == len(answerable)
    # Keeping one result instead of ten can only lose judged documents: never better, and worse where the source
    # was not first.
    summary = summarise(replay_set(ctx, judgements, [kb.id], retrieval={"rerank_top_k": 1}), judgements)
    assert summary.judged == len(answerable) and summary.changed > 0 and summary.results_lost > 0
    assert summary.better == 0 and summary.worse > 0
    assert summary.ndcg_after is not None and summary.ndcg_before is not None
    assert summary.ndcg_after < summary.ndcg_before and "the recorded settings are better" in summary.verdict
    # The same settings on both sides: nothing changes, nothing to choose.
    same = summarise(replay_set(ctx, judgements, [kb.id], limit=5), judgements)
    assert same.changed == 0 and same.judged == 5 and same.verdict == "no difference in nDCG@10"

    # Recorded requests are judged by what they asked: the CLI's batch form with --qrels.
    asked = [text for _, text in judgements.queries[:6]]
    for text in asked:
        knowledge_search(SearchRequest(query=text.upper(), knowledge_base_ids=[kb.id]), ctx)  # matched casefolded
    data_dir = str(ctx.settings.data_dir)
    capsys.readouterr()
    argv = ["--data-dir", data_dir, "replay", "--last", "6", "--qrels", str(SET), "--set", "rerank_top_k=1", "--json"]
    assert main(argv) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["replayed"] == 6 and shown["judged"] == 6 and shown["better"] == 0
    assert (
        main(["--data-dir", data_dir, "replay", "--set-dir", str(SET), "--kb", "man", "--set", "rerank_top_k=1"]) == 0
    )
    out = capsys.readouterr().out
    assert f"judged {len(answerable)}: nDCG@10" in out and "the current settings are better" in out
    assert main(["--data-dir", data_dir, "replay", "--set-dir", str(SET)]) == 2
    assert "--set-dir needs --kb" in capsys.readouterr().err
    assert main(["--data-dir", data_dir, "replay", "--last", "2", "--qrels", data_dir]) == 2
    assert "expected a BEIR-layout folder" in capsys.readouterr().err
