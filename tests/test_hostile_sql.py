"""The hostile-SQL corpus end to end: each statement is what a scripted chat model (a real OpenAI-compatible server
on 127.0.0.1) answers to the ``data_analysis`` stage, which runs for real (blob store, file to /tmp, the sandbox's
session process, the guard, the limited query process).

The bar (README, Security): every statement is refused, or stops at a limit, or finishes inside it -- the query holds
the request at most the timeout plus one second (measured around the stage's call), the process that ran it peaks
at most the memory limit plus 64 MB above the session process it was forked from (the kernel's figure, ``wait4``),
the requesting process does not grow by that either, nothing outside the loaded table is read and nothing is
written. The counts and figures per class are printed (``-s``); the README's Security table quotes them.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path
from typing import Any

import pytest

from ragstep.context import Clients
from ragstep.models import ChunkType, KnowledgeBase, MatchType, PipelineState, SearchRequest, SearchResult
from ragstep.settings import Settings
from ragstep.stages.analysis.data_analysis import run
from support.hostile_sql import OWN, SECRET, extended, hostile
from support.llm_server import LLMServer, Reply, completion

TIMEOUT_S = 0.5
MEMORY_MB = 64
HEADROOM_MB = 64
THEIR_SECRET = "OTHER-TENANT-CANARY"
#: The classes whose every statement the parser guard must refuse (``hostile``'s, but the resource hogs).
GUARDED = {"writes", "attach_detach", "install_load", "pragma_set", "file_url_env_reads", "stacked_and_hidden",
           "other_kb_or_tenant", "other_tenant_files"}  # fmt: skip


def outcome(state: PipelineState) -> tuple[str, dict[str, Any]]:
    """(``refused`` / ``timeout`` / ``failed`` / ``ran``, the trace detail of the query) for a one-file run."""
    rows = [t for t in state.trace if t.stage == "data_analysis"]
    for row in rows:
        if row.action == "degrade":
            return str(row.reason), dict(row.detail or {})
    (summary,) = [r for r in rows if r.action not in ("degrade", "skip")]
    (query,) = summary.detail["queries"]
    return "ran", dict(query)


@pytest.mark.slow
def test_every_hostile_statement_is_refused_or_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "secret.txt").write_text(SECRET, encoding="utf-8")
    theirs = tmp_path / "tenant2" / "data" / "kb2" / "file2" / "sales.csv"
    theirs.parent.mkdir(parents=True)
    theirs.write_text(f"city,price\n{THEIR_SECRET},1\n", encoding="utf-8")
    corpus = {**hostile(tmp_path), **extended(tmp_path, theirs)}
    distinct = {sql for statements in corpus.values() for sql in statements}
    assert len(distinct) >= 300

    kb = KnowledgeBase(id="kb1", name="own", embedding_model="none", created_at=time.time())
    key = f"data/{kb.id}/{OWN}/own.csv"
    summary = SearchResult(
        id=f"{OWN}-0",
        content="Data file: own.csv",
        knowledge_id=OWN,
        knowledge_base_id=kb.id,
        knowledge_filename="own.csv",
        score=0.5,
        match_type=MatchType.KEYWORD,
        chunk_type=ChunkType.TABLE_SUMMARY,
        metadata={"blob_key": key, "format": "csv"},
    )
    request = SearchRequest(query="what is the average price per city?", knowledge_base_ids=[kb.id])
    state = PipelineState(request=request, knowledge_bases=[kb], final_results=[summary])

    figures: dict[str, dict[str, Any]] = {}
    slow: list[tuple[str, float]] = []
    grew: list[tuple[str, float]] = []
    leaked: list[str] = []
    wrongly_ran: list[tuple[str, str, str]] = []
    unmeasured: list[tuple[str, str]] = []
    ran = 0
    with LLMServer() as server:
        settings = Settings(
            data_dir=tmp_path / "data",
            chat_provider="openai",
            chat_model="scripted",
            chat_base_url=server.url,
            chat_max_retries=0,
            cache_backend="none",  # every statement is asked of the model, none replayed
            data_analysis_timeout_s=TIMEOUT_S,
            data_analysis_memory_limit_mb=MEMORY_MB,
        )
        ctx = Clients(settings).context()
        ctx.blobs.put(key, ("city,price\n" + "".join(f"c{i % 7},{i}\n" for i in range(600))).encode(), "text/csv")
        before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for category, statements in corpus.items():
            tally = figures.setdefault(category, {"attempts": 0, "max_wall_ms": 0.0, "max_growth_mb": 0.0})
            for sql in statements:
                tally["attempts"] += 1
                server.add(Reply(body=completion(json.dumps({"knowledge_id": "", "sql": sql}))))
                done = run(state, ctx)
                reason, detail = outcome(done)
                tally[reason] = tally.get(reason, 0) + 1
                text = json.dumps([r.content for r in done.final_results] + [t.detail for t in done.trace])
                if SECRET in text or THEIR_SECRET in text or "root:x:0:0" in text:
                    leaked.append(sql)
                if category in GUARDED and reason != "refused":
                    wrongly_ran.append((category, sql, reason))
                if reason == "refused":
                    continue
                ran += 1
                wall = float(detail["wall_ms"])
                tally["max_wall_ms"] = max(tally["max_wall_ms"], wall)
                if wall > (TIMEOUT_S + 1) * 1000:
                    slow.append((sql, wall))
                if "peak_rss_mb" not in detail:
                    # The session process did not answer in time (a busy machine): the requesting side killed it,
                    # so no process was left to measure. Only a stop at the deadline may end that way.
                    unmeasured.append((sql, reason))
                    continue
                growth = float(detail["peak_rss_mb"]) - float(detail["base_rss_mb"])
                tally["max_growth_mb"] = max(tally["max_growth_mb"], growth)
                if growth > MEMORY_MB + HEADROOM_MB:
                    grew.append((sql, growth))
        requester_growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb) / 1024
    with capsys.disabled():
        print(f"\nhostile statements through the stage: {sum(f['attempts'] for f in figures.values())}")
        print(f"  ({len(distinct)} distinct; requesting process peak RSS grew {requester_growth_mb:.1f} MB;")
        print(f"  {ran} reached the query process, {len(unmeasured)} of them stopped by the requesting side)")
        for category, tally in figures.items():
            print(f"  {category}: {tally}")
    assert not leaked, leaked
    assert not wrongly_ran, wrongly_ran
    assert all(reason == "timeout" for _sql, reason in unmeasured), unmeasured
    assert len(unmeasured) <= max(3, ran // 20), unmeasured  # the kernel's figure for (nearly) every one
    assert not slow, slow
    assert not grew, grew
    assert requester_growth_mb <= MEMORY_MB + HEADROOM_MB
    assert not any((tmp_path / name).exists() for name in ("out.csv", "export", "evil.db", "x.db"))
    # The limits were really exercised: hogs were stopped by the clock and by the address-space limit.
    stopped = [f.get("timeout", 0) for f in figures.values()]
    failed = [f.get("failed", 0) for c, f in figures.items() if c.startswith("exhaustion")]
    assert sum(stopped) >= 10 and sum(failed) >= 50
