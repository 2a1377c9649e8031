"""Progressive indexing: a document is keyword-searchable once chunked, its vectors are added by a second phase.

Real components: the local index, catalog and blob store, and embedding through a real :class:`OpenAIEmbedder`
talking HTTP to a scripted server on 127.0.0.1, which records every text it was asked to embed (so "nothing embedded
twice" is counted, not assumed). The kill test runs ``ragstep ingest`` in a child process and SIGKILLs it between
the phases.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ragstep.app import ingest_vectors
from ragstep.app.ingest import ingest_file
from ragstep.app.ingest_scratch import sweep_stale_products
from ragstep.app.ingest_vectors import embed_pending, pending_chunks, pending_documents
from ragstep.app.search import knowledge_search
from ragstep.context import Clients, Context
from ragstep.models import KnowledgeBase, SearchRequest
from ragstep.settings import Settings
from ragstep.stages.ingest.products import get_chunks
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse
from test_ingest_pipeline import SPACE, embeddings_answer, subprocess_env, write

NOTES = {
    "glacier.md": "# Glaciers\n\nThe glacier carved the valley; its moraine holds boulders.\n\n"
    + "\n\n".join(f"Glacier paragraph {i}: ice, crevasses and the moraine below." for i in range(40)),
    "bread.md": "# Bread\n\nSourdough rises slowly overnight.\n\n"
    + "\n\n".join(f"Bread paragraph {i}: flour, water, salt and patience." for i in range(40)),
}

QUERIES = {"moraine boulders", "sourdough overnight"}


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


class Recorder:
    """The scripted embedding server's answers, with every text it embedded counted."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.delay_s = 0.0
        self.gate: threading.Event | None = None  # set: documents are embedded only once it is
        self._lock = threading.Lock()

    def __call__(self, request: RecordedRequest) -> ScriptedResponse:
        if self.gate is not None and not set(request.json["input"]) <= QUERIES:
            self.gate.wait(timeout=300)
        if self.delay_s:
            time.sleep(self.delay_s)
        with self._lock:
            # Documents' chunks only: a search's query is embedded too.
            self.texts.extend(t for t in request.json["input"] if t not in QUERIES)
        return embeddings_answer(request)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def server(recorder: Recorder) -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer(fallback=recorder) as srv:
        yield srv


def settings_for(data_dir: Path, server: ScriptedHTTPServer) -> Settings:
    # Small batches: several requests (and writes) per document.
    return Settings(data_dir=data_dir, embedding_base_url=f"{server.url}/v1", embedding_batch_size=1)


@pytest.fixture
def pctx(tmp_path: Path, server: ScriptedHTTPServer) -> Context:
    return Clients(settings_for(tmp_path / "data", server)).context()


def new_kb(ctx: Context) -> KnowledgeBase:
    return ctx.catalog.create_kb(KnowledgeBase(id="kb1", name="docs", embedding_model=SPACE, created_at=time.time()))


def search(ctx: Context, query: str) -> tuple[list[str], dict[str, int]]:
    """(file names of the results in knowledge base ``docs``, counts of the search stage's final trace row)."""
    state = knowledge_search(SearchRequest(query=query, knowledge_base_ids=[ctx.require_kb("docs").id]), ctx)
    final = [e for e in state.trace if e.stage == "chunk_search" and e.action not in ("expand", "fallback")][-1]
    return [r.knowledge_filename for r in state.search_results], dict(final.counts)


def ingest_notes(ctx: Context, kb: KnowledgeBase, folder: Path) -> int:
    chunks = 0
    for name, text in NOTES.items():
        result = ingest_file(write(folder, name, text), kb, ctx, keywords_first=True)
        assert result.status == "indexed", result.error
        chunks += result.chunks
    return chunks


def test_chunks_are_keyword_searchable_before_their_vectors_and_the_trace_counts_them(
    pctx: Context, recorder: Recorder, tmp_path: Path
) -> None:
    kb = new_kb(pctx)
    chunks = ingest_notes(pctx, kb, tmp_path / "docs")
    assert recorder.texts == []  # phase 1 embedded nothing
    assert {k.filename for k in pending_documents(kb, pctx)} == set(NOTES)
    assert pctx.index.stats().vector_spaces == {}
    found, counts = search(pctx, "moraine boulders")
    assert found and found[0] == "glacier.md"  # by keyword
    assert counts["keyword_only_chunks"] == chunks and counts["vector_hits"] == 0

    outcome = embed_pending(kb, pctx)
    assert (outcome.documents, outcome.chunks, outcome.failed) == (2, chunks, [])
    assert len(recorder.texts) == chunks  # each chunk embedded once
    assert pctx.index.stats().vector_spaces == {SPACE: chunks}
    assert pending_documents(kb, pctx) == [] and pctx.blobs.list("pending/") == []
    found, counts = search(pctx, "moraine boulders")
    assert found[0] == "glacier.md" and "keyword_only_chunks" not in counts and counts["vector_hits"] > 0


def test_a_resumed_pass_embeds_only_the_chunks_still_without_a_vector(
    pctx: Context, recorder: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = new_kb(pctx)
    chunks = ingest_notes(pctx, kb, tmp_path / "docs")
    # Written after every group of requests, and stopped after the first write (a server shutting down).
    monkeypatch.setattr(ingest_vectors, "FLUSH_S", 0.0)
    first = embed_pending(kb, pctx, should_stop=lambda: bool(recorder.texts))
    assert 0 < first.chunks < chunks and first.documents == 0
    assert pending_chunks(kb, pctx) == chunks - first.chunks
    done_first = list(recorder.texts)

    second = embed_pending(kb, pctx)
    assert second.chunks == chunks - first.chunks and second.documents == 2
    assert len(recorder.texts) == chunks  # none embedded twice
    assert sorted(recorder.texts[len(done_first) :]) == sorted(set(recorder.texts[len(done_first) :]) - set(done_first))
    assert pending_chunks(kb, pctx) == 0 and pending_documents(kb, pctx) == []


def test_a_document_another_process_is_embedding_is_left_to_it(
    pctx: Context, recorder: Recorder, tmp_path: Path
) -> None:
    import fcntl

    kb = new_kb(pctx)
    chunks = ingest_notes(pctx, kb, tmp_path / "docs")
    bread = next(k for k in pending_documents(kb, pctx) if k.filename == "bread.md")
    claim = pctx.data_dir / ingest_vectors.CLAIMS_DIR / f"{bread.id}.lock"
    claim.parent.mkdir(parents=True, exist_ok=True)
    with claim.open("wb") as held:  # what another process embedding bread.md holds
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        first = embed_pending(kb, pctx)
    assert first.documents == 1 and [k.id for k in pending_documents(kb, pctx)] == [bread.id]
    second = embed_pending(kb, pctx)
    assert second.documents == 1 and first.chunks + second.chunks == chunks == len(recorder.texts)
    assert pending_documents(kb, pctx) == [] and not claim.exists()


def test_vectors_are_never_written_onto_content_ingested_again_meanwhile(
    pctx: Context, recorder: Recorder, tmp_path: Path
) -> None:
    kb = new_kb(pctx)
    folder = tmp_path / "docs"
    ingest_notes(pctx, kb, folder)
    old = next(k for k in pending_documents(kb, pctx) if k.filename == "bread.md")
    old_chunks = get_chunks(pctx.blobs, old.vectors_pending)
    old_vectors = pctx.embedder(SPACE).embed([c.content for c in old_chunks])  # a pass in flight...
    # ...while the same path is ingested again with other content: same chunk ids, other text.
    result = ingest_file(
        write(folder, "bread.md", "# Rye\n\nRye bread is dense and dark."), kb, pctx, keywords_first=True
    )
    assert result.status == "updated" and result.knowledge_id == old.id
    backfill = ingest_vectors.require_backfill(pctx)
    assert backfill.add_vectors(old_chunks, old_vectors, SPACE) == 0  # refused: not the content stored now
    assert not pctx.blobs.exists(old.vectors_pending)  # the earlier version's pending chunks went with it
    before = len(recorder.texts)
    embed_pending(kb, pctx)
    assert pending_chunks(kb, pctx) == 0 and backfill.missing_vectors(old.id) == []
    assert any("Rye" in t for t in recorder.texts[before:])
    assert not any("Sourdough" in t for t in recorder.texts[before:])


def ragstep(data_dir: Path, server: ScriptedHTTPServer, *args: str) -> subprocess.Popen[str]:
    env = {**subprocess_env(), "RAGSTEP_EMBEDDING_BASE_URL": f"{server.url}/v1", "RAGSTEP_EMBEDDING_BATCH_SIZE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "ragstep", "--data-dir", str(data_dir), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: Callable[[], bool], run: subprocess.Popen[str], what: str, timeout_s: float = 600) -> None:
    """Readiness observed, never assumed from time; the timeout only guards against a hang on a busy machine."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert run.poll() is None, f"the ingest ended before {what}: {run.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, f"no sign of {what} after {timeout_s} s"
        time.sleep(0.02)


def test_kb_embed_says_which_documents_it_left_to_another_process(
    pctx: Context, server: ScriptedHTTPServer, tmp_path: Path
) -> None:
    import fcntl

    kb = new_kb(pctx)
    ingest_notes(pctx, kb, tmp_path / "docs")
    bread = next(k for k in pending_documents(kb, pctx) if k.filename == "bread.md")
    claim = pctx.data_dir / ingest_vectors.CLAIMS_DIR / f"{bread.id}.lock"
    claim.parent.mkdir(parents=True, exist_ok=True)
    with claim.open("wb") as held:  # what `ragstep serve`'s worker holds while it embeds bread.md
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        run = ragstep(pctx.data_dir, server, "kb", "embed", "docs")
        out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    left = pending_chunks(kb, pctx)
    assert left == len(ingest_vectors.require_backfill(pctx).missing_vectors(bread.id)) > 0
    assert out.strip().endswith("chunks of docs given their vectors (2 documents)")
    progress, said = err.strip().splitlines()
    assert progress.startswith("ragstep: kb embed: vectors: ")
    assert said == (
        "ragstep: kb embed: left to another process on this data dir (`ragstep serve`, another ingest or kb embed), "
        "which is adding the vectors of bread.md; `ragstep kb show docs` lists it as `vectors pending` until it is done"
    )


def test_killed_between_the_phases_then_resumed_loses_nothing_and_embeds_nothing_twice(
    tmp_path: Path, server: ScriptedHTTPServer, recorder: Recorder
) -> None:
    data_dir = tmp_path / "data"
    folder = tmp_path / "docs"
    for name, text in NOTES.items():
        write(folder, name, text)
    assert ragstep(data_dir, server, "kb", "create", "docs", "--embedding-model", SPACE).wait(timeout=300) == 0
    recorder.delay_s = 0.5  # the second phase takes a while: the kill lands in it, or just before it
    run = ragstep(data_dir, server, "ingest", str(folder), "--kb", "docs")
    ctx = Clients(settings_for(data_dir, server)).context()
    kb = ctx.require_kb("docs")
    # Phase 1 done: both documents are recorded, searchable by keyword, their vectors pending.
    wait_for(lambda: len(pending_documents(kb, ctx)) == 2, run, "both documents keyword-searchable")
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=300)
    found, counts = search(ctx, "sourdough overnight")
    assert found and found[0] == "bread.md"
    missing = pending_chunks(kb, ctx)
    total = sum(k.chunk_count for k in ctx.catalog.list_knowledge(kb.id))
    assert 0 < missing <= total and counts["keyword_only_chunks"] == missing

    recorder.delay_s = 0.0
    before = len(recorder.texts)
    resumed = ragstep(data_dir, server, "kb", "embed", "docs")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert out.strip() == f"{missing} of {missing} chunks of docs given their vectors (2 documents)"
    assert len(recorder.texts) - before == missing  # the resume embedded exactly the chunks without a vector
    assert pending_chunks(kb, ctx) == 0 and pending_documents(kb, ctx) == []
    assert ctx.index.stats().vector_spaces == {SPACE: total}
    assert ctx.blobs.list("pending/") == []
    found, counts = search(ctx, "sourdough overnight")
    assert found[0] == "bread.md" and "keyword_only_chunks" not in counts
    # The kill may land before the run removed a document's scratch: its lease is stale now, and swept.
    sweep_stale_products(ctx)
    assert ctx.blobs.list("ingest/") == []


def test_the_servers_worker_indexes_an_upload_for_keywords_then_adds_its_vectors_in_the_background(
    tmp_path: Path, server: ScriptedHTTPServer, recorder: Recorder
) -> None:
    import io

    from ragstep.app.jobs import JobRunner
    from ragstep.app.uploads import Upload, store_uploads

    clients = Clients(settings_for(tmp_path / "data", server))
    ctx = clients.context()
    kb = new_kb(ctx)
    gate = threading.Event()  # the embedding server answers once the test has looked at the keyword phase
    recorder.gate = gate
    upload = Upload(name="glacier.md", file=io.BytesIO(NOTES["glacier.md"].encode()))
    [job] = store_uploads(ctx, kb, [upload])
    runner = JobRunner(clients)
    try:
        runner.submit(ctx.tenant_id, job.id)
        deadline = time.monotonic() + 300
        while (done := ctx.catalog.get_job(job.id)) is None or done.status in ("queued", "running"):
            assert time.monotonic() < deadline, "the job never ran"
            time.sleep(0.02)
        assert done.status == "indexed" and done.chunks > 0
        found, counts = search(ctx, "moraine boulders")  # searchable while the vectors wait
        assert found[0] == "glacier.md" and counts["keyword_only_chunks"] == done.chunks
        gate.set()
        while pending_documents(kb, ctx):
            assert time.monotonic() < deadline, "the vectors were never added"
            time.sleep(0.02)
    finally:
        gate.set()
        runner.shutdown()
    assert ctx.index.stats().vector_spaces == {SPACE: done.chunks} and len(recorder.texts) == done.chunks


def test_the_http_document_rows_count_the_chunks_still_waiting_for_their_vectors(
    tmp_path: Path, server: ScriptedHTTPServer, recorder: Recorder
) -> None:
    import httpx

    from support.api_server import api_server

    clients = Clients(settings_for(tmp_path / "data", server))
    ctx = clients.context()
    kb = new_kb(ctx)
    chunks: dict[str, int] = {}
    for name, text in NOTES.items():
        chunks[name] = ingest_file(write(tmp_path / "docs", name, text), kb, ctx, keywords_first=True).chunks
    gate = threading.Event()  # the server's worker resumes the vectors at start: held until the rows are read
    recorder.gate = gate
    try:
        with api_server(clients) as base:

            def rows() -> dict[str, dict[str, object]]:
                page = httpx.get(f"{base}/v1/knowledge-bases/docs/documents", timeout=30)
                assert page.status_code == 200, page.text
                return {row["file"]: row for row in page.json()["items"]}

            assert {name: row["vectors_pending"] for name, row in rows().items()} == chunks
            assert all(n > 0 for n in chunks.values())
            gate.set()
            embed_pending(kb, ctx)  # what the worker has not done yet (it may hold a document: left to it)
            deadline = time.monotonic() + 300
            while pending_documents(kb, ctx):
                assert time.monotonic() < deadline, "the vectors were never added"
                time.sleep(0.02)
            done = rows()
            assert {name: row["vectors_pending"] for name, row in done.items()} == dict.fromkeys(NOTES, 0)
            one = httpx.get(f"{base}/v1/documents/{done['glacier.md']['id']}", timeout=30).json()
            assert one["vectors_pending"] == 0 and one["chunks"] == chunks["glacier.md"]
    finally:
        gate.set()
