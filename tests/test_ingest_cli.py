"""``ragstep ingest`` / ``kb delete`` as a user meets them: folders it cannot read, files it does not take, two runs
of the same folder at once, Ctrl-C, ``--tag``, and a knowledge base deleted with everything it owns.

Real processes where the behaviour is about processes (concurrency, signals, file permissions as another user).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ragstep.app.ingest import knowledge_id_for
from ragstep.context import Clients, Context
from ragstep.settings import Settings
from test_ingest_pipeline import Cli, long_markdown, stored, subprocess_env, write


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(tmp_path / "data", capsys)


def ragstep(*args: str, data_dir: Path, **kwargs: object) -> subprocess.Popen[str]:
    env = subprocess_env()
    if "RAGSTEP_INGEST_PROGRESSIVE" in os.environ:  # a test's choice (monkeypatched), passed on
        env["RAGSTEP_INGEST_PROGRESSIVE"] = os.environ["RAGSTEP_INGEST_PROGRESSIVE"]
    return subprocess.Popen(
        [sys.executable, "-m", "ragstep", "--data-dir", str(data_dir), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[arg-type]
    )


def context(data_dir: Path) -> Context:
    return Clients(Settings(data_dir=data_dir)).context()


# -- kb delete -----------------------------------------------------------------------------------------------------


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_kb_delete_leaves_nothing_of_the_knowledge_base(cli: Cli, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs, "guide.md", long_markdown(3))
    write(docs, "sales.csv", "city,amount\nBeijing,10\nShanghai,12\n")  # a data file: published under data/
    write(docs, "copy.md", long_markdown(3))  # a duplicate: skipped, still a hash marker's concern
    kept = write(tmp_path / "other", "kept.md", "# Kept\n\nThis one belongs to another knowledge base.\n")
    cli.ok("kb", "create", "docs")
    cli.ok("kb", "create", "other")
    rows = cli.json("ingest", str(docs), "--kb", "docs")
    assert sorted(r["status"] for r in rows) == ["duplicate", "indexed", "indexed"]
    (other_row,) = cli.json("ingest", str(kept), "--kb", "other")
    ctx = cli.ctx()
    kb = ctx.require_kb("docs")
    items = ctx.catalog.list_knowledge(kb.id)
    # What a run killed half-way leaves behind (its products), for a document that never completed.
    ctx.blobs.put(f"ingest/{kb.id}/0123abcd/feed/run1/parsed.md", b"half-way")
    owned = [kb.id, *(item.id for item in items)]
    before = files_under(cli.data_dir)
    assert any(kb.id in f for f in before) and any(item.id in f for item in items for f in before)

    assert cli.ok("kb", "delete", "docs").startswith("deleted knowledge base docs (")
    ctx = cli.ctx()
    left = files_under(cli.data_dir)
    assert [f for f in left if any(ref in f for ref in owned)] == []
    assert ctx.catalog.get_kb(kb.id) is None and ctx.catalog.list_knowledge(kb.id) == []
    assert all(stored(ctx, item.id) == [] for item in items)
    # The other knowledge base is untouched.
    other = ctx.require_kb("other")
    assert [i.id for i in ctx.catalog.list_knowledge(other.id)] == [other_row["knowledge_id"]]
    assert stored(ctx, other_row["knowledge_id"]) and any(other.id in f for f in left)


# -- folders it cannot read, files it does not take ----------------------------------------------------------------


def without_root_bypass() -> list[str]:
    """The command prefix that makes file modes bind: root reads any folder whatever its mode, unless the process
    runs without the capabilities that let it (``setpriv`` drops them for the child only)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file modes cannot be made to bind")
    return ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]


def test_unreadable_folders_are_error_rows_and_unsupported_files_are_skipped(tmp_path: Path) -> None:
    prefix = without_root_bypass()
    docs = tmp_path / "docs"
    write(docs, "a.md", "# A\n\nReadable.\n")
    write(docs, "photo.heic", b"\x00\x00\x00\x18ftypheic")
    write(docs / "locked", "b.md", "# B\n\nIn a folder that cannot be listed.\n")
    inner = write(docs / "no-entry", "c.md", "# C\n\nIn a folder that can be listed but not entered.\n")
    data_dir = tmp_path / "data"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, sys.executable, "-m", "ragstep", "--data-dir", str(data_dir), *args],
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert run("kb", "create", "docs").returncode == 0
    (docs / "locked").chmod(0o000)
    (docs / "no-entry").chmod(0o644)
    try:
        done = run("ingest", str(docs), str(inner), "--kb", "docs", "--json")
        table = run("ingest", str(docs), "--kb", "docs")
    finally:
        (docs / "locked").chmod(0o755)
        (docs / "no-entry").chmod(0o755)

    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert done.returncode == 2, done.stderr  # some files failed
    found = json.loads(done.stdout)
    rows = [(Path(r["path"]).relative_to(docs).as_posix(), r["status"], r["error"]) for r in found]
    # In path order, the folder's rows first, then the file named on the command line.
    assert [(path, status) for path, status, _ in rows] == [
        ("a.md", "indexed"),
        ("locked", "failed"),
        ("no-entry/c.md", "failed"),
        ("photo.heic", "skipped"),
        ("no-entry/c.md", "failed"),
    ]
    for path, status, error in rows:
        if status == "failed":
            assert "permission denied" in error.lower() and str(docs / path) in error
        if status == "skipped":
            assert "unsupported" in error and ".md" in error

    assert table.returncode == 2 and "Traceback" not in table.stderr
    assert "skipped" in table.stdout and "permission denied" in table.stdout.lower()
    summary = table.stdout.strip().splitlines()[-1]
    assert summary == "1 of 3 files ingested into docs, 1 chunks; 1 file skipped (type not supported)"


def test_a_folder_of_unsupported_files_only_is_still_an_error(cli: Cli, tmp_path: Path) -> None:
    write(tmp_path / "pics", "a.heic", b"\x00\x00\x00\x18ftypheic")
    cli.ok("kb", "create", "docs")
    run = cli("ingest", str(tmp_path / "pics"), "--kb", "docs")
    assert run.code == 2 and run.err.startswith("ragstep: error: no supported files under")


# -- two runs at once ----------------------------------------------------------------------------------------------


def test_two_concurrent_ingests_of_one_folder_fail_nothing(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    for i in range(60):
        write(docs, f"note-{i:02d}.md", f"# Note {i}\n\nNote number {i} is about topic{i} and nothing else.\n")
    data_dir = tmp_path / "data"
    assert ragstep("kb", "create", "docs", data_dir=data_dir).wait(timeout=60) == 0
    runs = [ragstep("ingest", str(docs), "--kb", "docs", "--json", data_dir=data_dir) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    for run, (out, err) in zip(runs, outputs, strict=True):
        rows = json.loads(out)
        assert len(rows) == 60
        assert [r for r in rows if r["status"] not in ("indexed", "unchanged")] == []
        assert run.returncode == 0, err
    ctx = context(data_dir)
    kb = ctx.require_kb("docs")
    items = ctx.catalog.list_knowledge(kb.id)
    assert len(items) == 60 and {i.status for i in items} == {"completed"}
    assert all(len(stored(ctx, i.id)) == i.chunk_count > 0 for i in items)
    assert ctx.blobs.list("ingest/") == []  # every run removed its own products


# -- Ctrl-C --------------------------------------------------------------------------------------------------------


def wait_for(condition: Callable[[], bool], run: subprocess.Popen[str], what: str, timeout_s: float = 900) -> None:
    """Wait until ``condition`` holds while ``run`` is still going: readiness is observed, never assumed from time.
    ``timeout_s`` only guards against a hang (generous: a busy 2-core machine is many times slower than an idle one).
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert run.poll() is None, f"the ingest ended before {what}: {run.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, f"no sign of {what} after {timeout_s} s"
        time.sleep(0.05)


def test_ctrl_c_prints_the_partial_summary_and_exits_130(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    for i in range(400):
        write(docs, f"doc-{i:03d}.md", long_markdown(4, 40).replace("Section", f"Doc {i} section"))
    data_dir = tmp_path / "data"
    assert ragstep("kb", "create", "docs", data_dir=data_dir).wait(timeout=300) == 0
    run = ragstep("ingest", str(docs), "--kb", "docs", data_dir=data_dir)
    ctx = context(data_dir)
    kb = ctx.require_kb("docs")
    # Two documents indexed: at least one result row is in whatever the one in flight is doing when the signal lands.
    wait_for(lambda: len(ctx.catalog.list_knowledge(kb.id)) >= 2, run, "two documents indexed")
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 130, err
    assert "Traceback" not in err and "internal error" not in err
    lines = out.strip().splitlines()
    assert lines[0].split() == ["file", "status", "chunks", "note"]
    done = len(lines) - 3  # header, rule, summary
    assert 1 <= done < 400
    # The count is of the files the run set out to ingest, those never reached included.
    assert lines[-1].startswith(f"{done} of 400 files ingested into docs, ")
    assert f"interrupted: {400 - done} of 400 files not ingested" in err
    # Nothing half-done is left: the file in flight had its products removed.
    assert context(data_dir).blobs.list("ingest/") == []


def products_of(data_dir: Path, name: str) -> list[str]:
    """The scratch products (``ingest/...``) of the runs ingesting the file ``name``."""
    ctx = context(data_dir)
    kb = ctx.require_kb("docs")
    kid = knowledge_id_for(kb, str((data_dir.parent / "docs" / name).resolve()))
    return ctx.blobs.list(f"ingest/{kb.id}/{kid}/")


def big_text(paragraphs: int) -> str:
    return "\n\n".join(
        f"Paragraph {i} tells about the glacier number {i} and its moraine." * 6 for i in range(paragraphs)
    )


def test_ctrl_c_inside_one_large_files_embedding_stops_and_keeps_it_keyword_searchable(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    write(docs, "large.txt", big_text(3000))  # thousands of chunks: minutes of embedding even on an idle machine
    data_dir = tmp_path / "data"
    assert ragstep("kb", "create", "docs", data_dir=data_dir).wait(timeout=300) == 0
    run = ragstep("ingest", str(docs), "--kb", "docs", data_dir=data_dir)
    ctx = context(data_dir)
    kb = ctx.require_kb("docs")
    # Progressive indexing: the file is searchable by keyword, then embedded batch after batch.
    assert run.stderr is not None
    said = ""
    while "adding the vectors of" not in said:  # the second phase has begun (a line, not a time)
        said = run.stderr.readline()
        assert said or run.poll() is None, "the ingest ended before its second phase"
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 130, err
    assert "Traceback" not in err
    [item] = ctx.catalog.list_knowledge(kb.id)
    assert out.strip().splitlines()[-1] == f"1 of 1 files ingested into docs, {item.chunk_count} chunks"
    assert "searchable by keyword only" in err and "`ragstep kb embed docs`" in err
    # Nothing half-written: no run's scratch; the chunks waiting for vectors are kept for the resume.
    assert ctx.blobs.list("ingest/") == [] and ctx.blobs.list("pending/") == [item.vectors_pending]
    assert item.status == "completed" and len(stored(ctx, item.id)) == item.chunk_count


def test_a_killed_runs_scratch_is_removed_by_the_next_ingest_and_a_live_runs_is_kept(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One phase (each file embedded before it is indexed): a run's products stay for the minutes of its embedding.
    monkeypatch.setenv("RAGSTEP_INGEST_PROGRESSIVE", "false")
    docs = tmp_path / "docs"
    write(docs, "killed.txt", big_text(3000))
    write(docs, "alive.txt", big_text(3001))
    small = write(tmp_path / "other", "small.md", "# Small\n\nA small note about moraines.\n")
    data_dir = cli.data_dir
    assert data_dir.parent == tmp_path
    cli.ok("kb", "create", "docs")

    killed = ragstep("ingest", str(docs / "killed.txt"), "--kb", "docs", data_dir=data_dir)
    wait_for(lambda: any(k.endswith("chunks.jsonl") for k in products_of(data_dir, "killed.txt")), killed, "chunks")
    killed.kill()  # SIGKILL: no handler runs, the scratch stays behind
    killed.communicate(timeout=300)
    left = products_of(data_dir, "killed.txt")
    assert any(k.endswith("parsed.md") for k in left) and any(k.endswith("chunks.jsonl") for k in left)

    alive = ragstep("ingest", str(docs / "alive.txt"), "--kb", "docs", data_dir=data_dir)
    try:
        wait_for(lambda: any(k.endswith("chunks.jsonl") for k in products_of(data_dir, "alive.txt")), alive, "chunks")
        (row,) = cli.json("ingest", str(small), "--kb", "docs")
        assert row["status"] == "indexed"
        assert products_of(data_dir, "killed.txt") == []  # the killed run's scratch is gone
        assert alive.poll() is None, "the live run ended too early to tell"
        assert any(k.endswith("chunks.jsonl") for k in products_of(data_dir, "alive.txt"))  # the live run's is kept
    finally:
        alive.send_signal(signal.SIGINT)
        alive.communicate(timeout=300)
    assert context(data_dir).blobs.list("ingest/") == []


# -- --tag ---------------------------------------------------------------------------------------------------------


def test_ingest_tag_tags_documents_and_chunks_for_search(cli: Cli, tmp_path: Path) -> None:
    tagged = write(tmp_path / "a", "release.md", "# Release\n\nThe glacier release notes mention moraine.\n")
    plain = write(tmp_path / "b", "draft.md", "# Draft\n\nThe glacier draft mentions moraine too.\n")
    cli.ok("kb", "create", "docs")
    (row,) = cli.json("ingest", str(tagged), "--kb", "docs", "--tag", "release-1")
    assert row["status"] == "indexed"
    cli.json("ingest", str(plain), "--kb", "docs")
    ctx = cli.ctx()
    record = ctx.catalog.get_knowledge(row["knowledge_id"])
    assert record is not None and record.tag_id == "release-1"
    assert {c.tag_id for c in stored(ctx, row["knowledge_id"])} == {"release-1"}

    found = json.loads(cli.ok("search", "glacier moraine", "--kb", "docs", "--tag", "release-1", "--json"))
    assert {r["knowledge_id"] for r in found["results"]} == {row["knowledge_id"]}
    both = json.loads(cli.ok("search", "glacier moraine", "--kb", "docs", "--json"))
    assert len({r["knowledge_id"] for r in both["results"]}) == 2

    # Same content, another tag: not "unchanged", the document is re-tagged.
    (again,) = cli.json("ingest", str(tagged), "--kb", "docs", "--tag", "release-2")
    assert again["status"] == "updated"
    assert {c.tag_id for c in stored(cli.ctx(), row["knowledge_id"])} == {"release-2"}
    bad = cli("ingest", str(tagged), "--kb", "docs", "--tag", " ")
    assert bad.code == 2 and bad.err.startswith("ragstep: error: tag ' ':")


# -- progress ------------------------------------------------------------------------------------------------------


def test_progress_without_a_terminal_is_plain_lines_with_chunks_embedded_rate_and_eta() -> None:
    import io

    from ragstep.entry.cli.ingest import Progress

    stream = io.StringIO()
    progress = Progress([1000, 3000], embeds=True, stream=stream, every_s=0.0)
    progress.start("a.md")
    progress.chunked(10)
    progress.embedded(4)
    line = stream.getvalue().splitlines()[-1]
    assert line.startswith("ragstep: ingest: 0/2 files, 10 chunks, 4 embedded, ")
    assert " chunks/s, ETA " in line and line.endswith(" elapsed (at a.md)")
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    progress.embedded(6)
    progress.advance(10)
    progress.start("b.md")
    # What is left: b.md's bytes at the chunks per byte seen so far (10 per 1000), at the embedding rate seen so far.
    eta = progress.eta_s()
    assert eta is not None and eta == pytest.approx(30 / progress.rate(), rel=0.2)
    assert progress.fraction() == pytest.approx(0.25)
    assert stream.getvalue().splitlines()[-1].startswith("ragstep: ingest: 1/2 files, 10 chunks, 10 embedded, ")

    # The default: nothing for a run shorter than the period (a short run's stderr stays empty).
    quiet = io.StringIO()
    short = Progress([10], embeds=False, stream=quiet)
    short.start("c.md")
    short.chunked(1)
    short.advance(1)
    short.close()
    assert quiet.getvalue() == ""


def test_the_vectors_rate_is_measured_from_the_first_chunks_embedded() -> None:
    """The first call also loads and warms the model: counted in, it made the first ETAs several times too long."""
    import io

    from ragstep.entry.cli.ingest_progress import EmbedProgress

    stream = io.StringIO()
    progress = EmbedProgress(13183, stream=stream, every_s=0.0, command="kb embed")
    progress.embedded(2)
    assert stream.getvalue().splitlines()[-1].startswith("ragstep: kb embed: vectors: 2/13183 chunks embedded, 0:")
    assert progress.rate() == 0.0  # one report: no rate yet, no ETA
    progress.embedded(16)
    line = stream.getvalue().splitlines()[-1]
    assert line.startswith("ragstep: kb embed: vectors: 18/13183 chunks embedded, ") and ", ETA " in line
    assert progress.rate() > 0


def test_the_keyword_rate_is_measured_from_the_first_bytes_read() -> None:
    """The first file's parse and the warm-up come before the first note: counted in, a 1 s phase's first lines said
    "ETA 7:12". No ETA until a second note has read more, inside a file as after whole files."""
    import io

    from ragstep.entry.cli.ingest_progress import Progress

    stream = io.StringIO()
    progress = Progress([1000, 1000, 1000], embeds=False, stream=stream, every_s=0.0, phase="keywords")
    progress.start("a.txt")
    progress.chunking(100, 1000)
    assert stream.getvalue().splitlines()[-1].startswith("ragstep: ingest: keywords: 0/3 files, 0 chunks, ")
    assert progress.eta_s() is None and ", ETA " not in stream.getvalue()  # one note: no rate yet
    progress.chunking(600, 1000)
    eta = progress.eta_s()
    assert eta is not None and eta >= 0 and ", ETA " in stream.getvalue().splitlines()[-1]

    stream = io.StringIO()  # files read whole (small ones, unchanged ones): the first one sets where it counts from
    progress = Progress([1000, 1000, 1000], embeds=False, stream=stream, every_s=0.0, phase="keywords")
    progress.start("a.txt")
    progress.advance(0)
    assert progress.eta_s() is None and ", ETA " not in stream.getvalue()
    progress.start("b.txt")
    progress.advance(0)
    assert progress.eta_s() is not None and ", ETA " in stream.getvalue().splitlines()[-1]


def test_the_keyword_rate_is_measured_from_the_first_chunks_cut() -> None:
    """As the vectors' rate: the time before the first note (the first file's parse, the warm-up) and the chunks
    that note counted are left out. From the run's start, the first lines' chunks/s read several times too low."""
    import io

    from ragstep.entry.cli.ingest_progress import Progress

    stream = io.StringIO()
    progress = Progress([1000, 1000, 1000], embeds=False, stream=stream, every_s=0.0, phase="keywords")
    progress.start("a.txt")
    progress.chunked(50)
    progress.advance(50)
    assert progress.rate() == 0.0 and "chunks/s" not in stream.getvalue()  # one note: no rate yet
    progress.start("b.txt")
    progress.chunked(30)
    assert progress.rate() > 0 and " chunks/s" in stream.getvalue().splitlines()[-1]

    # Small files ingested side by side by worker threads send no notes: their chunks count when they are reported
    # (the rate was never shown for a folder of them).
    stream = io.StringIO()
    progress = Progress([1000, 1000, 1000], embeds=False, stream=stream, every_s=0.0, phase="keywords")
    for name, chunks in (("a.txt", 50), ("b.txt", 30)):
        progress.start(name)
        progress.advance(chunks)
    assert progress.rate() > 0 and " chunks/s" in stream.getvalue().splitlines()[-1]


def test_one_large_files_keyword_phase_moves_and_has_an_eta_while_it_is_cut(
    ctx: Context, make_kb: Callable[..., Any], tmp_path: Path
) -> None:
    """The chunk stage tells how far the chunker is inside the file; the keyword phase's line turns that into a
    fraction of the bytes and an ETA before the file ends, then says how many chunks the index has taken."""
    import io

    from ragstep.app.ingest import ingest_file
    from ragstep.entry.cli.ingest import Progress
    from ragstep.ingest_notes import listening

    path = write(tmp_path / "docs", "big.md", long_markdown(700, 60))
    kb = make_kb("docs", embedding_model="none")
    stream = io.StringIO()
    progress = Progress([path.stat().st_size], embeds=False, stream=stream, every_s=0.0, phase="keywords")
    heard: list[tuple[int, int]] = []
    listen = progress.chunking

    def chunking(done: int, total: int) -> None:
        heard.append((done, total))
        listen(done, total)

    progress.chunking = chunking  # type: ignore[method-assign]
    progress.start(path.name)
    with listening(progress):
        result = ingest_file(path, kb, ctx, keywords_first=True)
    assert result.status == "indexed" and result.chunks > 100
    # Told after each chunk cut: positions rising, inside the text, the same total every time.
    assert len(heard) == result.chunks and len({total for _, total in heard}) == 1
    positions = [done for done, _ in heard]
    assert positions == sorted(positions) and 0 < positions[0] < positions[-1] <= heard[0][1]
    lines = stream.getvalue().splitlines()
    cutting = [line for line in lines if ", ETA " in line]
    assert cutting and all(line.startswith("ragstep: ingest: keywords: 0/1 files, 0 chunks") for line in cutting)
    assert lines[-1].startswith(f"ragstep: ingest: keywords: 0/1 files, {result.chunks} chunks")
    assert f", indexing {result.chunks}/{result.chunks}, " in lines[-1]
    indexing = [line for line in lines if ", indexing " in line]  # read back (0 taken), then as the index takes them
    assert f", indexing 0/{result.chunks}, " in indexing[0] and len(indexing) > result.chunks
    assert progress.fraction() == 1.0


def test_a_large_files_index_stage_reaches_the_plain_progress_lines(tmp_path: Path) -> None:
    """After the cutting, the index stage of one large file tells how many of its chunks the index has taken, and
    with stderr not a terminal the plain lines say so (a line for every note here: RAGSTEP_INGEST_PROGRESS_EVERY_S=0;
    counted, never timed). Before, the index stage, half of a large text's keyword phase, was silent."""
    import re

    from ragstep.entry.cli.ingest import SIDE_BY_SIDE_MAX_BYTES

    docs = tmp_path / "docs"
    # Large enough to run in the command's own thread (the notes of small files run side by side are not shown).
    assert write(docs, "large.txt", big_text(3000)).stat().st_size > SIDE_BY_SIDE_MAX_BYTES
    data_dir = tmp_path / "data"
    assert ragstep("kb", "create", "docs", data_dir=data_dir).wait(timeout=300) == 0
    command = ["ingest", str(docs), "--kb", "docs", "--vectors-later", "--json"]
    run = subprocess.run(
        [sys.executable, "-m", "ragstep", "--data-dir", str(data_dir), *command],
        env={**subprocess_env(), "RAGSTEP_INGEST_PROGRESS_EVERY_S": "0"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    [row] = json.loads(run.stdout)  # stdout is the JSON summary, as without progress lines
    chunks = row["chunks"]
    assert row["status"] == "indexed" and chunks > 1000
    lines = run.stderr.splitlines()
    assert "Traceback" not in run.stderr
    indexing = [line for line in lines if ", indexing " in line]
    taken = [re.search(r", indexing (\d+)/(\d+), ", line) for line in indexing]
    assert all(m is not None and int(m[2]) == chunks for m in taken), indexing[:3]
    counts = [int(m[1]) for m in taken if m is not None]
    # Read back (0 taken), then one chunk after another into the index, all of them.
    assert counts[0] == 0 and counts == sorted(counts) and counts[-1] == chunks and len(set(counts)) == chunks + 1
    assert all(
        line.startswith(f"ragstep: ingest: keywords: 0/1 files, {chunks} chunks, ") and line.endswith("(at large.txt)")
        for line in indexing
    )
    # After the lines of the cutting (ETA by the bytes cut), before the end of the file.
    assert lines.index(indexing[0]) > max(i for i, line in enumerate(lines) if ", ETA " in line)


def test_the_summary_of_an_interrupted_run_counts_the_files_it_set_out_to_ingest() -> None:
    from ragstep.app.ingest import IngestResult
    from ragstep.entry.cli.ingest import ingest_summary

    rows = [IngestResult("a.md", "k1", "indexed", 3), IngestResult("b.png", "", "skipped", error="unsupported")]
    assert (
        ingest_summary(rows, "docs") == "1 of 1 files ingested into docs, 3 chunks; 1 file skipped (type not supported)"
    )
    assert ingest_summary(rows, "docs", files=5).startswith("1 of 5 files ingested into docs, 3 chunks")
    assert ingest_summary([], "docs", files=2) == "0 of 2 files ingested into docs, 0 chunks"
