"""``ragstep bench chat --http``: the first token over ``POST /v1/chat/completions`` (the real app under uvicorn on
127.0.0.1) against in-process, and through LangChain's BM25 + FAISS ``EnsembleRetriever`` chain, on a small index.

No timing is asserted: the report must have every figure, finite and positive, percentiles ordered, the ratios and
the verdicts the figures give, and a missing peer package must be a clear error before anything is built.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from ragstep.bench.chat import render
from ragstep.bench.chat_http import LANGCHAIN_K, TARGET_HTTP_ADDED_P50_MS, TARGET_LANGCHAIN_RATIO
from test_bench_chat import positive

pytest.importorskip("uvicorn", reason="--http serves the API with uvicorn (pip install 'ragstep[serve]')")
pytest.importorskip("langchain_community", reason="--http compares against LangChain (pip install 'ragstep[bench]')")

SMALL = ("--docs", "500", "--questions", "3", "--tokens", "200", "--streams", "1", "--answer-tokens", "6")


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


@pytest.mark.slow
def test_chat_bench_http_json(bench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "bench", "chat", *SMALL, "--http", "--bench-dir", str(bench_dir), "--json")
    assert code == 0, err
    assert err == "", "--json keeps stderr clean (no server log either)"
    report = json.loads(out)
    assert (report["docs"], report["questions"]) == (500, 3)
    http, lc = report["http"], report["langchain"]
    for key in (
        "first_token_p50_ms",
        "first_token_p95_ms",
        "in_process_first_token_p50_ms",
        "in_process_first_token_p95_ms",
    ):
        assert positive(http[key]), key
    assert http["first_token_p50_ms"] <= http["first_token_p95_ms"]
    assert http["in_process_first_token_p50_ms"] <= http["in_process_first_token_p95_ms"]
    # The per-question difference may be negative on a noisy machine; it must be a number, p50 <= p95.
    assert math.isfinite(http["added_p50_ms"]) and http["added_p50_ms"] <= http["added_p95_ms"]
    assert math.isfinite(http["added_cpu_p50_ms"])
    assert "127.0.0.1" in http["server"]

    for key in ("index_s", "first_token_p50_ms", "first_token_p95_ms", "ratio_in_process", "ratio_http"):
        assert positive(lc[key]), key
    assert lc["first_token_p50_ms"] <= lc["first_token_p95_ms"]
    assert lc["ratio_in_process"] == pytest.approx(
        lc["first_token_p50_ms"] / http["in_process_first_token_p50_ms"], abs=0.01
    )
    assert lc["ratio_http"] == pytest.approx(lc["first_token_p50_ms"] / http["first_token_p50_ms"], abs=0.01)
    assert (lc["k"], lc["weights"], lc["vector_store"]) == (LANGCHAIN_K, [0.5, 0.5], "FAISS (IndexFlatL2)")
    assert lc["versions"]["langchain-core"] and lc["versions"]["langchain-community"] and lc["versions"]["rank-bm25"]

    assert report["targets"]["http_added_p50_ms"] == TARGET_HTTP_ADDED_P50_MS
    assert report["targets"]["langchain_ratio"] == TARGET_LANGCHAIN_RATIO
    verdicts = report["meets_targets"]
    assert verdicts["http_added_p50_ms"] == (http["added_p50_ms"] <= TARGET_HTTP_ADDED_P50_MS)
    assert verdicts["langchain_ratio_in_process"] == (lc["ratio_in_process"] >= TARGET_LANGCHAIN_RATIO)
    assert verdicts["langchain_ratio_http"] == (lc["ratio_http"] >= TARGET_LANGCHAIN_RATIO)
    # The in-process figures of the plain run are still there.
    assert positive(report["llm_request_p50_ms"]) and positive(report["relay_tokens_per_s"])

    table = render(report)
    assert "POST /v1/chat/completions (stream): p50" in table
    assert "LangChain / ragstep, p50" in table and f"{lc['ratio_in_process']:.2f}x in-process" in table


def test_a_missing_peer_package_is_named_before_anything_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "langchain_openai", None)  # what an environment without it looks like
    code, out, err = run_cli(capsys, "bench", "chat", "--docs", "10", "--http", "--bench-dir", str(tmp_path))
    assert code == 2, (out, err)
    (line,) = err.strip().splitlines()
    assert "needs langchain_openai: pip install 'ragstep[bench]'" in line
