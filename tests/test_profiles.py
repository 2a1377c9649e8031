"""Profiles and latency budgets: a profile's settings and skipped stages, the request's own overrides winning, a budget
giving up the optional stages in the declared order once they no longer fit, every skip a trace row, the state
saying which profile ran; no profile named runs as before."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ragstep.app.chat import run_chat
from ragstep.app.ingest import ingest_file
from ragstep.app.search import knowledge_search
from ragstep.context import Clients, Context
from ragstep.errors import InputError
from ragstep.models import ChatRequest, KnowledgeBase, SearchRequest
from ragstep.settings import Settings


@pytest.fixture
def docs(tmp_path: Path) -> tuple[Context, KnowledgeBase]:
    profiles = {
        "lean": {"description": "a deployment's own", "retrieval": {"rerank_top_k": 2}, "skip": ["rewrite_query"]}
    }
    ctx = Clients(Settings(data_dir=tmp_path / "data", profiles=profiles)).context()
    kb = KnowledgeBase(id="kb1", name="docs", embedding_model="none", created_at=time.time())
    ctx.catalog.create_kb(kb)
    texts = (
        "Cold starts happen when Lambda creates a new execution environment.",
        "Provisioned concurrency keeps environments warm and avoids cold starts.",
        "SnapStart shortens cold starts by restoring a snapshot.",
        "Large deployment packages make cold starts slower to load.",
    )
    for n, text in enumerate(texts):
        path = tmp_path / f"d{n}.md"
        path.write_text(text, encoding="utf-8")
        ingest_file(path, kb, ctx)
    return ctx, kb


def rows(state: object, action: str) -> dict[str, str]:
    return {t.stage: t.reason or "" for t in state.trace if t.action == action}  # type: ignore[attr-defined]


def test_no_profile_runs_every_stage_as_before(docs: tuple[Context, KnowledgeBase]) -> None:
    ctx, kb = docs
    state = run_chat(ChatRequest(query="when do cold starts happen", knowledge_base_ids=[kb.id], pipeline="rag"), ctx)
    assert state.profile == "standard"
    assert not [r for r in rows(state, "skip").values() if r.startswith("profile")] and not rows(state, "degrade")
    assert state.retrieval.rerank_top_k == ctx.settings.rerank_top_k


def test_quick_skips_its_stages_and_the_request_still_wins(docs: tuple[Context, KnowledgeBase]) -> None:
    ctx, kb = docs
    request = ChatRequest(
        query="when do cold starts happen",
        knowledge_base_ids=[kb.id],
        pipeline="rag",
        profile="quick",
        overrides={"rerank_top_k": 3},
    )
    state = run_chat(request, ctx)
    skipped = rows(state, "skip")
    assert {"rewrite_query", "extract_entities", "entity_search", "data_analysis"} <= skipped.keys()
    assert skipped["data_analysis"] == "profile quick: not run"
    assert state.profile == "quick" and state.retrieval.rerank_top_k == 3  # the request's override wins
    assert state.retrieval.embedding_top_k == 15 and state.chat.answer  # the profile's own setting, still answered


def test_a_deployment_defines_its_own_profile_and_unknown_names_are_refused(
    docs: tuple[Context, KnowledgeBase],
) -> None:
    ctx, kb = docs
    state = knowledge_search(SearchRequest(query="cold starts", knowledge_base_ids=[kb.id], profile="lean"), ctx)
    assert state.profile == "lean" and len(state.final_results) == 2
    with pytest.raises(InputError, match="unknown profile 'turbo'; choose from deep, lean, quick, standard"):
        knowledge_search(SearchRequest(query="cold starts", knowledge_base_ids=[kb.id], profile="turbo"), ctx)


def test_a_tight_budget_gives_up_optional_stages_in_order_and_says_so(docs: tuple[Context, KnowledgeBase]) -> None:
    ctx, kb = docs
    timings = ctx.clients.stage_timings
    for stage, ms in (("data_analysis", 400.0), ("entity_search", 300.0), ("extract_entities", 200.0)):
        timings.observe(stage, ms)  # what these stages took in this process before
    request = ChatRequest(query="when do cold starts happen", knowledge_base_ids=[kb.id], pipeline="rag", budget_ms=100)
    state = run_chat(request, ctx)
    degraded = rows(state, "degrade")
    assert {"data_analysis", "entity_search", "extract_entities"} <= degraded.keys()
    assert "budget:" in degraded["data_analysis"] and "of 100" in degraded["data_analysis"]
    assert "rewrite_query" not in degraded  # never measured here: expected to take nothing, so it ran
    assert state.chat.answer  # the answer itself is never given up
    roomy = run_chat(request.model_copy(update={"budget_ms": 600_000}), ctx)
    assert not rows(roomy, "degrade").keys() & {"data_analysis", "entity_search", "extract_entities"}


def test_a_cost_budget_gives_up_what_it_must_and_the_receipt_says_so(docs: tuple[Context, KnowledgeBase]) -> None:
    from ragstep.app.chat import chat_response
    from ragstep.models.profiles import DEGRADE_ORDER

    ctx, kb = docs
    request = ChatRequest(query="when do cold starts happen", knowledge_base_ids=[kb.id], pipeline="rag")
    taught = run_chat(request, ctx)  # no budget: every stage runs, and its cost is learnt from the receipt
    ran = {t.stage for t in taught.trace if t.action == "run" and t.duration_ms > 0} & set(DEGRADE_ORDER)
    assert ran, "some optional stage ran and was priced"
    assert all(ctx.clients.stage_costs.expected(stage) > 0 for stage in ran)

    tight = run_chat(request.model_copy(update={"cost_budget_usd": 1e-12}), ctx)
    degraded = rows(tight, "degrade")
    assert ran <= degraded.keys() and all("cost budget:" in degraded[s] for s in ran)
    assert "over the $0.000000 budget" in degraded["cost_budget"]  # even the smallest plan does not fit: said so
    assert not {t.stage for t in tight.trace if t.action == "run"} & ran  # given up, not run
    assert tight.chat.answer  # the answer itself is never given up
    receipt = chat_response(tight, ctx)["usage"]["cost"]
    assert receipt["budget_usd"] == 1e-12 and receipt["over_budget"] is True

    roomy = run_chat(request.model_copy(update={"cost_budget_usd": 1.0}), ctx)
    assert not rows(roomy, "degrade")
    receipt = chat_response(roomy, ctx)["usage"]["cost"]
    assert receipt["budget_usd"] == 1.0 and receipt["over_budget"] is False


def test_the_command_line_takes_a_profile_and_budgets(
    docs: tuple[Context, KnowledgeBase], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from ragstep.entry.cli.main import main

    ctx, kb = docs
    data_dir = str(ctx.settings.data_dir)
    args = ["--data-dir", data_dir, "search", "cold starts", "--kb", kb.name, "--json"]
    assert main([*args, "--profile", "quick", "--cost-budget-usd", "0.5", "--budget-ms", "60000"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["profile"] == "quick" and shown["usage"]["cost"]["budget_usd"] == 0.5
    with pytest.raises(SystemExit) as exited:
        main([*args, "--cost-budget-usd", "0"])
    assert exited.value.code == 2
    assert "must be a number above 0" in capsys.readouterr().err
