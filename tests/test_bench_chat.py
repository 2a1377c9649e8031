"""``ragstep bench chat``: the shape of its ``--json`` report on a small index, its table, its errors, and the
instant chat server it measures against (a real HTTP server on 127.0.0.1, read with the ``openai`` SDK).

No timing is asserted: what is checked is that every figure is there, finite and positive, the percentiles are
ordered, and the targets are reported with the verdict the figures give.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from ragstep.bench.chat import filter_rate, machine, run_chat_bench
from ragstep.bench.instant_llm import MIN_ANSWER_TOKENS, THINK, InstantLLM, answer_tokens, stream_body
from ragstep.errors import InputError
from ragstep.stages.chat.stream_filter import AnswerFilter

SMALL = ("--docs", "300", "--questions", "6", "--tokens", "400", "--streams", "2", "--answer-tokens", "12")


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


def positive(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


@pytest.mark.slow
def test_chat_bench_json(bench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "bench", "chat", *SMALL, "--bench-dir", str(bench_dir), "--json")
    assert code == 0, err
    assert err == "", "--json keeps stderr clean"
    report = json.loads(out)
    assert (report["docs"], report["questions"], report["answer_tokens"]) == (300, 6, 12)
    assert (report["relay_tokens"], report["relay_streams"]) == (400, 2)
    for key in (
        "index_s",
        "llm_request_p50_ms",
        "llm_request_p95_ms",
        "first_token_p50_ms",
        "first_token_p95_ms",
        "search_pipeline_p50_ms",
        "references_to_request_p50_ms",
        "llm_request_cpu_p50_ms",
        "search_pipeline_cpu_p50_ms",
        "relay_tokens_per_s",
        "relay_tokens_per_s_min",
        "filter_tokens_per_s",
        "peak_rss_mb",
    ):
        assert positive(report[key]), key
    assert report["llm_request_p50_ms"] <= report["llm_request_p95_ms"]
    assert report["first_token_p50_ms"] <= report["first_token_p95_ms"]
    # The first token comes after the request that produces it.
    assert report["first_token_p50_ms"] > report["llm_request_p50_ms"] > report["references_to_request_p50_ms"]
    assert report["relay_tokens_per_s_min"] <= report["relay_tokens_per_s"]
    assert isinstance(report["chat_overhead_p50_ms"], float) and math.isfinite(report["chat_overhead_p50_ms"])

    # Every stage of rag_stream ran on each question (rewrite skipped: no history, and switched off).
    assert set(report["stage_p50_ms"]) >= {
        "load_history",
        "chunk_search",
        "chunk_rerank",
        "chunk_merge",
        "filter_top_k",
        "into_chat_message",
        "chat_completion_stream",
    }
    assert report["targets"] == {"llm_request_p50_ms": 25.0, "relay_tokens_per_s": 5000.0}
    assert report["meets_targets"] == {
        "llm_request_p50_ms": report["llm_request_p50_ms"] <= 25.0,
        "relay_tokens_per_s": report["relay_tokens_per_s"] >= 5000.0,
    }
    assert report["machine"]["nproc"] >= 1 and report["machine"]["python"]


@pytest.mark.slow
def test_chat_bench_table(bench_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "bench", "chat", *SMALL, "--bench-dir", str(bench_dir))
    assert code == 0, err
    assert "time to the LLM request (rag_stream, no rewrite): p50" in out
    assert "tokens/s" in out and "stream_filter alone" in out
    assert "indexing 300 chunks" in err, "progress goes to stderr"


def test_chat_bench_bad_bench_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "bench", "chat", "--docs", "10", "--bench-dir", str(tmp_path))
    assert code == 2, (out, err)
    (line,) = err.strip().splitlines()
    assert line.startswith("ragstep: error: benchmark sets not found")


def test_chat_bench_refuses_a_size_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        run_cli(capsys, "bench", "chat", "--tokens", "0")
    assert caught.value.code == 2
    assert "argument --tokens: must be at least 1" in capsys.readouterr().err
    with pytest.raises(InputError, match="must be positive"):
        run_chat_bench(streams=0)
    with pytest.raises(InputError, match="at least 2"):
        run_chat_bench(answer_len=1)


# -- the instant chat server ------------------------------------------------------------------------------------------


def test_instant_server_answers_like_an_openai_compatible_api() -> None:
    openai = pytest.importorskip("openai")
    tokens = answer_tokens(40)
    with InstantLLM(tokens) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        stream = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "q"}], stream=True)
        chunks = list(stream)
        whole = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "q"}])
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert deltas == tokens, "one SSE event per token, in order"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 40
    assert whole.choices[0].message.content == "".join(tokens)
    assert len(server.received) == 2 and server.received[0] <= server.received[1]


def test_stream_body_is_chunked_transfer_framing_ending_with_done() -> None:
    body = stream_body(["a", "b"])
    assert body.endswith(b"0\r\n\r\n")
    size, _, rest = body.partition(b"\r\n")
    assert int(size, 16) == len(rest.split(b"\r\n0\r\n\r\n")[0])  # one frame: 2 tokens + finish + DONE
    assert rest.count(b"data: ") == 4 and b"data: [DONE]" in rest


def test_answers_open_with_a_split_think_block_the_filter_removes_and_always_cite() -> None:
    tokens = answer_tokens(len(THINK) + 12)
    flt = AnswerFilter()
    shown = "".join(flt.feed(t)[0] for t in tokens) + flt.flush()[0]
    assert "<" not in shown and "fusion" not in shown and shown.startswith("RRF [1] fuses")
    assert flt.reasoning == "The user asks about fusion."
    assert filter_rate(tokens) > 0
    for n in range(MIN_ANSWER_TOKENS, len(THINK) + 4):
        assert len(answer_tokens(n)) == n and " [1]" in answer_tokens(n), n


def test_machine_names_the_cpu_count() -> None:
    info = machine()
    assert isinstance(info["nproc"], int) and info["nproc"] >= 1
    assert set(info) == {"nproc", "cpu", "python"}
