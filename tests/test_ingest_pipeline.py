"""The ``ingest`` pipeline: four stateless stages over a tiny :class:`IngestState`, products in the blob store.

Everything runs for real: the local blob store, SQLite catalog and index, the CLI, and embedding through a real
:class:`OpenAIEmbedder` talking HTTP to a scripted server on 127.0.0.1 (or to a closed port, to make it fail).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pty
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.embedders import LocalEmbedder, OpenAIEmbedder
from ragstep.app.ingest import IngestResult, delete_knowledge, ingest_file, knowledge_id_for, new_ingest_state
from ragstep.context import Clients, Context
from ragstep.entry.cli.main import main
from ragstep.errors import InputError, ProviderError, StateTooLargeError
from ragstep.models import IngestOptions, IngestState, KnowledgeBase, MatchType
from ragstep.pipeline import PIPELINES, STAGES, run_pipeline, run_stage, state_model, transport
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import query_terms
from ragstep.settings import Settings
from ragstep.stages.ingest.embed import EMBED_CONCURRENCY
from ragstep.stages.ingest.products import get_chunks, source_blob_key
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

SHARED = Path(__file__).resolve().parents[1] / "shared"
STAGE_NAMES = [
    "ingest_parse",
    "ingest_chunk",
    "ingest_embed",
    "ingest_index",
    "ingest_graph",
    "ingest_embed_batch",  # the embed_batches Map (vectors after the index, on the ingest state machine)
    "ingest_embed_merge",
]
DIM = 16
MODEL = "test-embed"
SPACE = f"openai:{MODEL}"


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("RAGSTEP_"):
            monkeypatch.delenv(key)


# -- helpers -------------------------------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def vector(text: str) -> list[float]:
    """A deterministic bag-of-words vector: texts sharing words point the same way."""
    out = [0.0] * DIM
    for word in re.findall(r"\w+", text.lower()):
        out[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return out if any(out) else [1.0] + [0.0] * (DIM - 1)


def embeddings_answer(request: RecordedRequest) -> ScriptedResponse:
    texts = request.json["input"]
    return ScriptedResponse(200, {"data": [{"index": i, "embedding": vector(t)} for i, t in enumerate(texts)]})


@pytest.fixture
def server() -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer(fallback=embeddings_answer) as srv:
        yield srv


def embedder_at(url: str, **kwargs: object) -> OpenAIEmbedder:
    kwargs.setdefault("backoff_base_s", 0.001)
    kwargs.setdefault("timeout_s", 5.0)
    kwargs.setdefault("max_retries", 1)
    return OpenAIEmbedder(MODEL, base_url=f"{url}/v1", **kwargs)  # type: ignore[arg-type]


def blobs_under(ctx: Context, prefix: str = "") -> list[str]:
    return ctx.blobs.list(prefix)


def stored(ctx: Context, kid: str) -> list:
    return ctx.index.knowledge_chunks(kid, 100_000)


def long_markdown(sections: int, words: int = 60) -> str:
    parts = []
    for s in range(sections):
        body = " ".join(f"word{s}x{w}" for w in range(words))
        parts.append(f"## Section {s}\n\nSection {s} talks about topic{s}. {body}.\n")
    return "\n".join(parts)


def write(folder: Path, name: str, content: str | bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def staged_state(ctx: Context, kb: KnowledgeBase, name: str, data: bytes, **options: object) -> IngestState:
    """What the CLI (or the AWS starter) hands to the pipeline: the bytes in the blob store, a small state."""
    kid = knowledge_id_for(kb, f"/virtual/{name}")
    digest = hashlib.sha256(data).hexdigest()
    key = source_blob_key(kb.id, kid, digest, name)
    ctx.blobs.put(key, data)
    return new_ingest_state(
        kb,
        knowledge_id=kid,
        blob_key=key,
        filename=name,
        content_hash=digest,
        size=len(data),
        options=IngestOptions(**options),  # type: ignore[arg-type]
    )


def carry(state: IngestState, ctx: Context) -> IngestState:
    """The state as Step Functions carries it between two Lambda functions: JSON under the payload limit."""
    payload = transport.encode(state, ctx.blobs, ctx.settings.state_limit_bytes)
    wire = json.dumps(payload)
    assert len(wire.encode()) < 8 * 1024, f"the ingest state should stay tiny, got {len(wire)} bytes"
    return transport.decode(wire, ctx.blobs, IngestState)


@dataclass
class Run:
    code: int
    out: str
    err: str


class Cli:
    def __init__(self, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.data_dir = data_dir
        self.capsys = capsys

    def __call__(self, *args: str) -> Run:
        self.capsys.readouterr()
        code = main(["--data-dir", str(self.data_dir), *args])
        captured = self.capsys.readouterr()
        return Run(code, captured.out, captured.err)

    def ok(self, *args: str) -> str:
        run = self(*args)
        assert run.code == 0, run.err
        return run.out

    def json(self, *args: str) -> list[dict]:
        run = self(*args, "--json")
        return json.loads(run.out)

    def ctx(self) -> Context:
        return Clients(Settings(data_dir=self.data_dir)).context()


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(tmp_path / "data", capsys)


# -- declaration ---------------------------------------------------------------------------------------------------


def test_the_ingest_pipeline_is_declared_once_with_stable_names() -> None:
    pipeline = PIPELINES["ingest"]
    assert pipeline.stage_names() == STAGE_NAMES
    assert pipeline.kind == "STANDARD"
    assert all(STAGES[name] == f"ragstep.stages.ingest.{name.removeprefix('ingest_')}:run" for name in STAGE_NAMES)
    assert state_model("ingest") is IngestState
    assert all(state_model(name) is IngestState for name in STAGE_NAMES)
    assert state_model("chunk_search").__name__ == "PipelineState"


# -- stages one by one ---------------------------------------------------------------------------------------------


def test_stages_one_by_one_through_json(ctx: Context, make_kb: Callable[..., KnowledgeBase], server) -> None:
    ctx.register_embedder(embedder_at(server.url))
    kb = make_kb("docs", embedding_model=SPACE)
    text = long_markdown(300)  # ~150 KB of text: far over what a state could carry, far under the blob limits
    state = staged_state(ctx, kb, "guide.md", text.encode())
    kid, digest = state.source.knowledge_id, state.source.content_hash
    # Keyed by the run too: a concurrent run of the same file never touches these.
    products = f"ingest/{kb.id}/{kid}/{digest}/{state.request_id}/"

    state = carry(run_stage("ingest_parse", carry(state, ctx), ctx), ctx)
    assert state.status == "parsed"
    assert state.products.parsed == products + "parsed.md"
    assert ctx.blobs.get(state.products.parsed).decode() == text
    assert state.counts["characters"] == len(text)

    state = carry(run_stage("ingest_chunk", state, ctx), ctx)
    assert state.status == "chunked"
    assert state.products.chunks == products + "chunks.jsonl"
    chunks = get_chunks(ctx.blobs, state.products.chunks)
    assert len(chunks) == state.counts["chunks"] > 64 * 2
    assert all(text[c.start_at : c.end_at] == c.content for c in chunks)

    state = carry(run_stage("ingest_embed", state, ctx), ctx)
    assert state.status == "embedded"
    assert state.products.vectors == products + "vectors.npy"
    assert state.products.space == SPACE
    vectors = np.load(io.BytesIO(ctx.blobs.get(state.products.vectors)))
    assert vectors.shape == (len(chunks), DIM) and vectors.dtype == np.float32
    assert state.counts["batches"] == -(-len(chunks) // 64)
    assert stored(ctx, kid) == []  # nothing is searchable before the index stage

    state = carry(run_stage("ingest_index", state, ctx), ctx)
    assert state.status == "indexed"
    assert len(stored(ctx, kid)) == len(chunks)
    assert ctx.index.stats().vector_spaces.get(SPACE) == len(chunks)
    record = ctx.catalog.get_knowledge(kid)
    assert record is not None and record.status == "completed" and record.chunk_count == len(chunks)
    assert (record.content_hash, record.source_key) == (digest, state.source.blob_key)
    # The products are gone, the original stays.
    assert blobs_under(ctx, "ingest/") == []
    # What stays: the original, and the marker that finds the item by content hash (duplicate detection).
    marker = f"hashes/{kb.id}/{digest}"
    assert blobs_under(ctx) == [marker, state.source.blob_key]
    assert ctx.blobs.get(marker).decode() == kid
    assert [t.stage for t in state.trace if t.action == "run"] == STAGE_NAMES[:4]  # up to ingest_index


def test_the_whole_pipeline_with_check_transport(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("docs")
    state = staged_state(ctx, kb, "notes.md", b"# Notes\n\nVolcanoes erupt molten lava.\n")
    done = run_pipeline("ingest", state, ctx, check_transport=True)
    assert (done.status, done.counts["chunks"]) == ("indexed", 1)
    embed = next(t for t in done.trace if t.stage == "ingest_embed" and t.action == "skip")
    assert "BM25" in (embed.reason or "")
    hits = ctx.index.keyword_search(query_terms("volcano lava"), SearchFilter((kb.id,)), 5, 0.0)
    assert [h.chunk_id for h in hits] == [f"{done.source.knowledge_id}-0"]


def test_unicode_line_breaks_survive_the_chunks_file(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    """chunks.jsonl is split on "\\n" only: U+2028, U+0085 and friends are not escaped by JSON."""
    kb = make_kb("docs")
    text = "# Breaks\n\nline\u2028separator, next\x85line, paragraph\u2029separator, form\x0cfeed, vt\x0bhere.\n"
    done = run_pipeline("ingest", staged_state(ctx, kb, "breaks.md", text.encode()), ctx)
    (chunk,) = stored(ctx, done.source.knowledge_id)
    assert chunk.content == text.strip()


def test_a_state_that_cannot_shrink_is_refused(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("docs")
    state = staged_state(ctx, kb, "a.md", b"# A\n\ntext\n").model_copy(update={"note": "x" * 5000})
    with pytest.raises(StateTooLargeError, match=r"ingest state is \d+ bytes, over the 4096-byte limit"):
        transport.encode(state, ctx.blobs, 4096)


def test_data_file_products_and_published_data(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("data")
    csv = b"city,amount\nBeijing,10\nShanghai,12\n"
    state = staged_state(ctx, kb, "sales.csv", csv)
    kid = state.source.knowledge_id
    parsed = run_stage("ingest_parse", state, ctx)
    products = f"ingest/{kb.id}/{kid}/{parsed.source.content_hash}/{state.request_id}/"
    assert parsed.products.tables == products + "tables.json"
    done = run_pipeline("ingest", state, ctx, check_transport=True)
    assert done.status == "indexed"
    data_key = f"data/{kb.id}/{kid}/sales.csv"
    assert ctx.blobs.get(data_key) == csv
    assert {c.metadata["blob_key"] for c in stored(ctx, kid)} == {data_key}
    marker = f"hashes/{kb.id}/{done.source.content_hash}"
    assert blobs_under(ctx) == sorted([data_key, marker, state.source.blob_key])


def test_faq_files_go_through_the_same_stages(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("faq", kb_type="faq")
    entries = [{"standard_question": "How do I reset my password?", "similar_questions": ["Forgot password"],
                "answers": ["Settings, then Security."]}]  # fmt: skip
    state = staged_state(ctx, kb, "faq.json", json.dumps(entries).encode())
    done = run_pipeline("ingest", state, ctx, check_transport=True)
    assert (done.status, done.counts["chunks"], done.counts["entries"]) == ("indexed", 2, 1)
    assert [c.index_text for c in stored(ctx, done.source.knowledge_id)] == [
        "How do I reset my password?",
        "Forgot password",
    ]


def test_faq_entries_keep_every_field_and_only_questions_are_embedded(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], server: ScriptedHTTPServer, tmp_path: Path
) -> None:
    ctx.register_embedder(embedder_at(server.url))
    kb = make_kb("faq", kb_type="faq", embedding_model=SPACE)
    entries = [
        {
            "id": "pw-1",
            "standard_question": "How do I reset my password?",
            "similar_questions": ["I forgot my password", "Lost password"],
            "negative_questions": ["How do I reset my router?"],
            "answers": ["Open Settings, then Security.", "Or ask the help desk."],
            "tag_id": "account",
        },
        {"standard_question": "When is the shop open?", "answers": "Nine to five."},  # one answer as a string
    ]
    result = ingest_file(write(tmp_path, "faq.json", json.dumps(entries)), kb, ctx)
    assert (result.status, result.chunks) == ("indexed", 4)
    embedded = [text for request in server.requests for text in request.json["input"]]
    # The questions are what is embedded and matched, never the answers.
    assert embedded == [
        "How do I reset my password?",
        "I forgot my password",
        "Lost password",
        "When is the shop open?",
    ]
    rows = stored(ctx, result.knowledge_id)
    kid = result.knowledge_id
    assert [(r.id, r.parent_id, r.index_text) for r in rows] == [
        (f"{kid}-pw-1", f"{kid}-pw-1", "How do I reset my password?"),
        (f"{kid}-pw-1-q1", f"{kid}-pw-1", "I forgot my password"),
        (f"{kid}-pw-1-q2", f"{kid}-pw-1", "Lost password"),
        (f"{kid}-1", f"{kid}-1", "When is the shop open?"),
    ]
    first = rows[0]
    assert first.tag_id == "account" and rows[3].tag_id == ""
    assert first.metadata["negative_questions"] == ["How do I reset my router?"]
    assert first.metadata["similar_questions"] == ["I forgot my password", "Lost password"]
    assert first.metadata["answers"] == ["Open Settings, then Security.", "Or ask the help desk."]
    # What a hit returns: the entry with its answers.
    assert first.content == (
        "Q: How do I reset my password?\nAnswer:\n- Open Settings, then Security.\n- Or ask the help desk."
    )
    assert len(ctx.index.vectors([r.id for r in rows], SPACE)) == 4


def test_the_parse_stage_computes_a_missing_hash(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    """The AWS starter knows only the upload's key: the parse stage hashes the bytes itself."""
    kb = make_kb("docs")
    data = b"# Upload\n\nUploaded by S3.\n"
    ctx.blobs.put("uploads/docs/upload.md", data)
    state = new_ingest_state(kb, knowledge_id="k-upload", blob_key="uploads/docs/upload.md", filename="upload.md")
    done = run_pipeline("ingest", state, ctx, check_transport=True)
    assert done.source.content_hash == hashlib.sha256(data).hexdigest()
    assert done.status == "indexed"
    # The upload is the user's original: ingestion keeps it (``ragstep delete`` removes it).
    assert ctx.blobs.exists("uploads/docs/upload.md")
    assert ctx.catalog.get_knowledge("k-upload").source_key == "uploads/docs/upload.md"  # type: ignore[union-attr]


# -- embedding -----------------------------------------------------------------------------------------------------


def test_embedding_runs_in_batches_of_64_a_few_at_a_time(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    in_flight = 0
    peak = 0
    lock = threading.Lock()

    def slow_answer(request: RecordedRequest) -> ScriptedResponse:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.15)
        with lock:
            in_flight -= 1
        return embeddings_answer(request)

    with ScriptedHTTPServer(fallback=slow_answer) as srv:
        ctx.register_embedder(embedder_at(srv.url))
        kb = make_kb("docs", embedding_model=SPACE)
        path = write(tmp_path / "docs", "big.md", long_markdown(400, 40))
        result = ingest_file(path, kb, ctx)
        sizes = [len(r.json["input"]) for r in srv.requests]
    assert result.status == "indexed", result.error
    assert sum(sizes) == result.chunks > 5 * 64
    # Full batches of 64 and one remainder (requests arrive in any order: they run concurrently).
    assert max(sizes) == 64 and sizes.count(64) >= len(sizes) - 1
    assert 2 <= peak <= EMBED_CONCURRENCY
    assert len(ctx.index.vectors([f"{result.knowledge_id}-0"], SPACE)) == 1


def test_a_failed_batch_fails_the_file_and_indexes_nothing(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    answers = [embeddings_answer, embeddings_answer, ScriptedResponse(400, {"error": {"message": "input too long"}})]
    with ScriptedHTTPServer(*answers, fallback=embeddings_answer) as srv:
        # Whichever batch is answered third fails (after the embedder's own retries: a 400 is not retried).
        ctx.register_embedder(embedder_at(srv.url))
        kb = make_kb("docs", embedding_model=SPACE)
        path = write(tmp_path / "docs", "big.md", long_markdown(300, 40))
        result = ingest_file(path, kb, ctx)
    assert result.status == "failed"
    # The user learns which provider refused and how; the provider's own text stays in the server log.
    assert result.error == "embedding provider openai (model test-embed) rejected the request (HTTP 400)"
    assert stored(ctx, result.knowledge_id) == []
    assert ctx.catalog.get_knowledge(result.knowledge_id) is None
    assert blobs_under(ctx) == []  # the staged original and the products are discarded


def test_heading_breadcrumbs_go_to_the_embedder_but_not_into_the_content(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], server: ScriptedHTTPServer, tmp_path: Path
) -> None:
    ctx.register_embedder(embedder_at(server.url))
    kb = make_kb("docs", embedding_model=SPACE)
    body = "Unpack the archive and run the installer script from a terminal window. " * 5
    text = f"# Guide\n\n## Install\n\n### Linux\n\n{body}\n\n### Windows\n\n{body}\n"
    path = write(tmp_path, "guide.md", text)
    result = ingest_file(path, kb, ctx, IngestOptions(chunk_size=512, chunk_overlap=0))
    assert result.status == "indexed", result.error
    chunks = stored(ctx, result.knowledge_id)
    embedded = [t for r in server.requests for t in r.json["input"]]
    assert len(chunks) == len(embedded) == 2
    assert [c.content for c in chunks] == [f"# Guide\n\n## Install\n\n### Linux\n\n{body.strip()}",
                                           f"### Windows\n\n{body.strip()}"]  # fmt: skip
    assert [c.metadata["context_header"] for c in chunks] == ["Guide", "Guide > Install > Windows"]
    # The embedder reads breadcrumb + content; the stored content (what is returned and what BM25 indexes) has
    # no breadcrumb, and its offsets still point into the parsed text.
    assert embedded == [f"Guide\n{chunks[0].content}", f"Guide > Install > Windows\n{chunks[1].content}"]
    assert all(text[c.start_at : c.end_at] == c.content for c in chunks)
    assert ctx.index.keyword_search(["install"], SearchFilter((kb.id,)), 5, 0.0)[0].chunk_id == chunks[0].id
    assert len(ctx.index.keyword_search(["install"], SearchFilter((kb.id,)), 5, 0.0)) == 1


def test_a_transient_embedding_error_is_retried_and_the_file_indexed(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    answers = [ScriptedResponse(503, {"error": {"message": "overloaded"}}), ScriptedResponse(429, {"error": "slow"})]
    with ScriptedHTTPServer(*answers, fallback=embeddings_answer) as srv:
        ctx.register_embedder(embedder_at(srv.url, max_retries=2))
        kb = make_kb("docs", embedding_model=SPACE)
        result = ingest_file(write(tmp_path, "big.md", long_markdown(200, 40)), kb, ctx)
        statuses = len(srv.requests)
    assert result.status == "indexed", result.error
    batches = -(-result.chunks // 64)
    assert batches >= 3 and statuses == batches + 2  # two batches were answered with errors, then retried
    ids = [c.id for c in stored(ctx, result.knowledge_id)]
    assert len(ids) == result.chunks and len(ctx.index.vectors(ids, SPACE)) == result.chunks


# -- idempotence ---------------------------------------------------------------------------------------------------


def test_reingest_same_path_unchanged_is_skipped_without_embedding(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], server: ScriptedHTTPServer, tmp_path: Path
) -> None:
    ctx.register_embedder(embedder_at(server.url))
    kb = make_kb("docs", embedding_model=SPACE)
    path = write(tmp_path / "docs", "a.md", "# Alpha\n\nAlpha particles are helium nuclei.\n")
    first = ingest_file(path, kb, ctx)
    calls = len(server.requests)
    again = ingest_file(path, kb, ctx)
    assert (first.status, again.status) == ("indexed", "unchanged")
    assert (again.knowledge_id, again.chunks) == (first.knowledge_id, first.chunks)
    assert len(server.requests) == calls  # nothing re-embedded
    assert len(ctx.catalog.list_knowledge(kb.id)) == 1
    # Other chunking options are a change: the document is chunked again.
    assert ingest_file(path, kb, ctx, IngestOptions(chunk_size=128, chunk_overlap=0)).status == "updated"
    assert ingest_file(path, kb, ctx, IngestOptions(chunk_size=128, chunk_overlap=0)).status == "unchanged"


def test_same_bytes_under_another_path_is_a_duplicate(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    kb = make_kb("docs")
    text = "# Comet\n\nComets have icy nuclei and long tails.\n"
    original = ingest_file(write(tmp_path / "a", "comet.md", text), kb, ctx)
    copy = ingest_file(write(tmp_path / "b", "copy-of-comet.md", text), kb, ctx)
    assert original.status == "indexed"
    assert copy == IngestResult(copy.path, original.knowledge_id, "duplicate", 0, "duplicate of comet.md")
    assert [k.filename for k in ctx.catalog.list_knowledge(kb.id)] == ["comet.md"]
    assert ctx.index.stats().chunks == 1
    # Only the original's blob is kept.
    kept = ctx.catalog.get_knowledge(original.knowledge_id)
    assert kept is not None
    assert blobs_under(ctx) == [f"hashes/{kb.id}/{kept.content_hash}", kept.source_key]
    # Another knowledge base may hold the same content.
    other = make_kb("other")
    assert ingest_file(tmp_path / "b" / "copy-of-comet.md", other, ctx).status == "indexed"
    # Once the original is deleted, the copy is the one that gets indexed.
    delete_knowledge(kept, ctx)
    assert ingest_file(tmp_path / "b" / "copy-of-comet.md", kb, ctx).status == "indexed"
    assert [k.filename for k in ctx.catalog.list_knowledge(kb.id)] == ["copy-of-comet.md"]


def test_a_path_whose_new_content_duplicates_another_drops_its_old_version(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    kb = make_kb("docs")
    ingest_file(write(tmp_path, "a.md", "# A\n\nApples are red.\n"), kb, ctx)
    b = ingest_file(write(tmp_path, "b.md", "# B\n\nBananas are yellow.\n"), kb, ctx)
    write(tmp_path, "b.md", "# A\n\nApples are red.\n")
    again = ingest_file(tmp_path / "b.md", kb, ctx)
    assert (again.status, again.error) == ("duplicate", "duplicate of a.md")
    assert stored(ctx, b.knowledge_id) == []
    assert ctx.catalog.get_knowledge(b.knowledge_id) is None
    assert not any(b.knowledge_id in key for key in blobs_under(ctx))
    markers = [ctx.blobs.get(k).decode() for k in blobs_under(ctx, "hashes/")]
    assert b.knowledge_id not in markers and len(markers) == 1


def test_changed_content_replaces_atomically_with_no_empty_window(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    kb = make_kb("docs")
    path = write(tmp_path, "ship.md", "# Zeppelin v0\n\nThe zeppelin is an airship.\n")
    kid = ingest_file(path, kb, ctx).knowledge_id
    reader = Clients(Settings(data_dir=ctx.settings.data_dir)).context()  # another process's view of the same index
    misses: list[int] = []
    stop = threading.Event()

    def search() -> None:
        while not stop.is_set():
            hits = reader.index.keyword_search(["zeppelin"], SearchFilter((kb.id,)), 50, 0.0)
            if not hits:
                misses.append(1)

    thread = threading.Thread(target=search)
    thread.start()
    try:
        for version in range(1, 16):
            body = "\n\n".join(f"Paragraph {p} of version {version}: the zeppelin flies." for p in range(version))
            write(tmp_path, "ship.md", f"# Zeppelin v{version}\n\n{body}\n")
            assert ingest_file(path, kb, ctx).status == "updated"  # v0 came first
    finally:
        stop.set()
        thread.join()
    assert misses == []
    chunks = stored(ctx, kid)
    assert chunks and all("v0" not in c.content for c in chunks) and "v15" in chunks[0].content
    assert len(ctx.catalog.list_knowledge(kb.id)) == 1
    sources = blobs_under(ctx, "sources/")
    assert sources == [ctx.catalog.get_knowledge(kid).source_key]  # type: ignore[union-attr]  # old ones gone


def test_a_failed_reingest_keeps_the_previous_version(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], server: ScriptedHTTPServer, tmp_path: Path
) -> None:
    ctx.register_embedder(embedder_at(server.url))
    kb = make_kb("docs", embedding_model=SPACE)
    path = write(tmp_path, "moon.md", "# Moon\n\nThe moon orbits the earth.\n")
    first = ingest_file(path, kb, ctx)
    before = stored(ctx, first.knowledge_id)
    record = ctx.catalog.get_knowledge(first.knowledge_id)
    blobs_before = blobs_under(ctx)

    # The provider goes away: a real embedder aimed at a port nobody listens on.
    ctx.register_embedder(embedder_at(f"http://127.0.0.1:{closed_port()}", max_retries=0))
    write(tmp_path, "moon.md", "# Moon\n\nThe moon has no atmosphere.\n")
    failed = ingest_file(path, kb, ctx)
    assert failed.status == "failed"
    assert failed.error.startswith("embedding provider openai (model test-embed) failed after 1 attempt")
    assert "127.0.0.1" not in failed.error  # the provider's address is the server log's, not the user's
    assert stored(ctx, first.knowledge_id) == before
    assert ctx.catalog.get_knowledge(first.knowledge_id) == record
    assert blobs_under(ctx) == blobs_before  # the new version's original and products are discarded
    hits = ctx.index.keyword_search(query_terms("moon orbits"), SearchFilter((kb.id,)), 5, 0.0)
    assert hits and hits[0].chunk_id == before[0].id

    # A file that no longer parses does not cost the indexed version either.
    write(tmp_path, "moon.md", b"not text \xff\x00\xff")
    assert ingest_file(path, kb, ctx).error.startswith("moon.md: cannot decode the text: not UTF-8")
    assert stored(ctx, first.knowledge_id) == before
    assert blobs_under(ctx) == blobs_before


# -- delete --------------------------------------------------------------------------------------------------------


def test_delete_removes_chunks_blobs_and_the_record(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    write(folder, "a.md", "# A\n\nAardvarks dig burrows.\n")
    write(folder, "sales.csv", "city,amount\nBeijing,10\n")
    cli.ok("kb", "create", "docs")
    results = {Path(r["path"]).name: r for r in cli.json("ingest", str(folder), "--kb", "docs")}
    ctx = cli.ctx()
    # two originals, the published data file, two content-hash markers
    assert [k.split("/")[0] for k in blobs_under(ctx)] == ["data", "hashes", "hashes", "sources", "sources"]

    for name in ("sales.csv", "a.md"):
        kid = results[name]["knowledge_id"]
        out = cli.ok("delete", kid)
        assert out == f"deleted {name} ({results[name]['chunks']} chunks)\n"
        assert stored(ctx, kid) == []
        assert ctx.catalog.get_knowledge(kid) is None
        assert not any(kid in key for key in blobs_under(ctx))
    assert blobs_under(ctx) == []
    assert cli("delete", results["a.md"]["knowledge_id"]).code == 2


def test_delete_removes_an_upload_the_pipeline_kept(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("docs")
    ctx.blobs.put("uploads/x/report.md", b"# Report\n\nQuarterly numbers.\n")
    state = new_ingest_state(kb, knowledge_id="k-report", blob_key="uploads/x/report.md", filename="report.md")
    run_pipeline("ingest", state, ctx)
    record = ctx.catalog.get_knowledge("k-report")
    assert record is not None
    assert delete_knowledge(record, ctx) == 1
    assert blobs_under(ctx) == []


# -- a batch with bad files ----------------------------------------------------------------------------------------


def encrypted_pdf() -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(200, 200)
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_bad_files_fail_alone_and_the_summary_says_why(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSTEP_MAX_FILE_BYTES", "2000")
    folder = tmp_path / "mixed"
    write(folder, "good.md", "# Sourdough\n\nSourdough bread rises with wild yeast.\n")
    write(folder, "broken.pdf", b"%PDF-1.4\ntruncated")
    write(folder, "locked.pdf", encrypted_pdf())
    write(folder, "empty.md", "  \n\n")  # blank, found in a folder: skipped (no text), not failed
    write(folder, "binary.txt", b"hello \xff\x00 world\n")
    write(folder, "huge.md", "# Huge\n\n" + "words " * 1000)
    slides = write(tmp_path, "slides.pptx", b"PK\x03\x04")
    cli.ok("kb", "create", "docs")

    run = cli("ingest", str(folder), str(slides), "--kb", "docs")
    assert run.code == 2
    assert "Traceback" not in run.out + run.err
    header, _rule, *rows, summary = run.out.splitlines()
    assert header.split() == ["file", "status", "chunks", "note"]
    by_name = {Path(row.split()[0]).name: row for row in rows}
    assert by_name["good.md"].split()[1:3] == ["indexed", "1"]
    expected = {
        "broken.pdf": "broken.pdf: not a readable PDF (",
        "locked.pdf": "locked.pdf: the PDF is encrypted with a password; remove the password and retry",
        "binary.txt": "binary.txt: cannot decode the text: not UTF-8, UTF-16 (with its byte order mark) or GB18030, "
        "and it holds NUL bytes",
        "huge.md": "huge.md: 6008 bytes is over the 2000-byte limit (RAGSTEP_MAX_FILE_BYTES)",
        "slides.pptx": "slides.pptx: unsupported file type .pptx; supported: .txt, .md, .markdown, .json, .html, .htm, "
        ".pdf, .docx, .png, .jpg, .jpeg, .webp, .tif, .tiff, .rst, .jsonl, .ndjson, .yaml, .yml, .toml, .ini, .cfg, "
        ".conf, .properties, .adoc, .asciidoc, .org, .tex, .xml, .csv, .xlsx, source code (.py, .sh, .js, .ts, .go, "
        ".rs, .c, .h, .java, .sql and 66 more), and text files without an extension",
    }
    for name, message in expected.items():
        assert by_name[name].split()[1] == "failed", by_name[name]
        assert message in by_name[name]
    assert (
        by_name["empty.md"].split()[1] == "skipped"
        and "empty.md: no text found: nothing to index" in by_name["empty.md"]
    )
    assert summary == "1 of 6 files ingested into docs, 1 chunks; 1 skipped (the note column says why)"
    ctx = cli.ctx()
    hits = ctx.index.keyword_search(query_terms("sourdough yeast"), SearchFilter(), 5, 0.0)
    assert len(hits) == 1
    # Only the good file's original is stored; nothing of the failed ones lingers.
    assert [k.split("/")[0] for k in blobs_under(ctx)] == ["hashes", "sources"]


def test_the_size_limit_is_50_mb_by_default_and_checked_before_reading(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    assert ctx.settings.max_file_bytes == 50 * 1024 * 1024
    kb = make_kb("docs")
    big = tmp_path / "big.md"
    with big.open("wb") as fh:  # sparse: 50 MiB + 1 byte on paper, nothing on disk
        fh.truncate(50 * 1024 * 1024 + 1)
    result = ingest_file(big, kb, ctx)
    assert (result.status, result.error) == (
        "failed",
        "big.md: 52428801 bytes is over the 52428800-byte limit (RAGSTEP_MAX_FILE_BYTES)",
    )
    assert blobs_under(ctx) == []
    # At the limit is fine (a smaller limit keeps the test quick).
    small = Clients(Settings(data_dir=tmp_path / "small", max_file_bytes=40)).context()
    small_kb = small.catalog.create_kb(kb)
    exact = write(tmp_path, "exact.md", "# Forty\n\n" + "x" * 30 + "\n")
    assert exact.stat().st_size == 40
    assert ingest_file(exact, small_kb, small).status == "indexed"
    write(tmp_path, "exact.md", "# Forty\n\n" + "x" * 31 + "\n")
    assert "41 bytes is over the 40-byte limit" in ingest_file(exact, small_kb, small).error


# -- progress and summary ------------------------------------------------------------------------------------------


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTEP_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHARED), env.get("PYTHONPATH", "")) if p)
    return env


def run_with_tty_stderr(*args: str, cwd: Path) -> tuple[int, str, str]:
    """Run the CLI with stdout on a pipe and stderr on a real terminal (a pty)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragstep", *args],
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    err = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        err += data
    out = proc.stdout.read() if proc.stdout else b""
    code = proc.wait(timeout=120)
    os.close(master)
    return code, out.decode(), err.decode()


def test_ctrl_c_inside_one_documents_embedding_stops_between_batches(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    import _thread

    from ragstep.ingest_notes import listening

    kb = make_kb("docs", embedding_model="local:multilingual-e5-small")
    path = write(tmp_path / "docs", "big.md", long_markdown(150, 40))
    seen: list[int] = []

    class Listener:
        def chunking(self, done: int, total: int) -> None:
            pass

        def chunked(self, count: int) -> None:
            seen.append(-count)

        def embedded(self, count: int) -> None:
            seen.append(count)
            if len(seen) == 2:  # the first batch is in: Ctrl-C, as a terminal sends it
                _thread.interrupt_main()

    with pytest.raises(KeyboardInterrupt), listening(Listener()):
        ingest_file(path, kb, ctx)
    chunks = -seen[0]
    # Stopped after a batch or two of the document's many, not at its end.
    assert sum(seen[1:]) <= 2 * LocalEmbedder.engine_batch_size < chunks
    assert ctx.blobs.list("ingest/") == [] and ctx.catalog.list_knowledge(kb.id) == []


def test_progress_bar_on_a_terminal_only(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    write(folder, "one.md", "# One\n\nThe first document.\n")
    write(folder, "two.md", "# Two\n\nThe second document.\n")
    write(folder, "three.md", b"\xff\x00\n")  # not text: fails (a blank one in a folder is skipped)
    cli.ok("kb", "create", "docs")

    code, out, err = run_with_tty_stderr(
        "--data-dir", str(cli.data_dir), "ingest", str(folder), "--kb", "docs", cwd=tmp_path
    )
    assert code == 2  # three.md is not text
    assert "\r[" in err and "\x1b[K" in err
    # Two phases (progressive indexing): every file searchable by keyword, then the vectors.
    assert "[------------------------------] keywords: 0/3 files, 0 chunks" in err
    assert f"[{'#' * 30}] keywords: 3/3 files, 2 chunks" in err
    assert f"[{'#' * 30}] vectors: 2/2 chunks embedded, " in err  # the default model embedded both chunks
    assert "Traceback" not in err
    # stdout is the same table and summary as without a terminal.
    assert out.splitlines()[-1] == "2 of 3 files ingested into docs, 2 chunks"
    assert "three.md: cannot decode the text" in out

    # Not a terminal: no progress at all (and --json output unchanged).
    run = cli("ingest", str(folder), "--kb", "docs", "--json")
    assert run.err == ""
    assert [(Path(r["path"]).name, r["status"]) for r in json.loads(run.out)] == [
        ("one.md", "unchanged"),
        ("three.md", "failed"),
        ("two.md", "unchanged"),
    ]


# -- chunking flags ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--chunk-size", "10"), "--chunk-size must be between 64 and 7500, got 10"),
        (("--chunk-size", "7501"), "--chunk-size must be between 64 and 7500, got 7501"),
        (("--chunk-overlap", "512"), "--chunk-overlap 512 must be smaller than --chunk-size 512"),
        (
            ("--chunk-size", "100", "--chunk-overlap", "150"),
            "--chunk-overlap 150 must be smaller than --chunk-size 100",
        ),
        (("--chunk-overlap", "-1"), "--chunk-overlap must be between 0 and 511, got -1"),
    ],
)
def test_bad_chunk_flags_are_one_clear_error(cli: Cli, tmp_path: Path, flags: tuple[str, ...], message: str) -> None:
    path = write(tmp_path / "docs", "a.md", "# A\n\ntext\n")
    cli.ok("kb", "create", "docs")
    run = cli("ingest", str(path), "--kb", "docs", *flags)
    assert run.code == 2
    assert run.err == f"ragstep: error: {message}\n"
    assert cli.ctx().catalog.list_knowledge(cli.ctx().require_kb("docs").id) == []


def test_chunk_flags_change_the_chunks(cli: Cli, tmp_path: Path) -> None:
    path = write(tmp_path / "docs", "long.md", long_markdown(20, 30))
    cli.ok("kb", "create", "docs")
    (default,) = cli.json("ingest", str(path), "--kb", "docs")
    (small,) = cli.json("ingest", str(path), "--kb", "docs", "--chunk-size", "128", "--chunk-overlap", "0")
    assert small["status"] == "updated" and small["chunks"] > default["chunks"]
    chunks = stored(cli.ctx(), small["knowledge_id"])
    assert len(chunks) == small["chunks"] and all(len(c.content) <= 128 for c in chunks)
    (same,) = cli.json("ingest", str(path), "--kb", "docs", "--chunk-size", "128", "--chunk-overlap", "0")
    assert same["status"] == "unchanged"
    # The smallest size alone is valid: the default overlap (80) is capped at half of it, as the chunker caps it.
    (tiny,) = cli.json("ingest", str(path), "--kb", "docs", "--chunk-size", "64")
    assert tiny["status"] == "updated" and tiny["chunks"] > small["chunks"]
    record = cli.ctx().catalog.get_knowledge(tiny["knowledge_id"])
    assert record is not None and record.options["chunk_overlap"] == 32


def test_parent_child_indexes_children_and_returns_parents(cli: Cli, tmp_path: Path) -> None:
    text = long_markdown(6, 80)  # ~6 sections of ~700 characters
    path = write(tmp_path / "docs", "book.md", text)
    cli.ok("kb", "create", "docs")
    (result,) = cli.json("ingest", str(path), "--kb", "docs", "--parent-child", "--chunk-size", "128")
    assert result["status"] == "indexed"
    ctx = cli.ctx()
    children = stored(ctx, result["knowledge_id"])
    assert len(children) == result["chunks"] and all(len(c.content) <= 128 for c in children)
    parents = {c.parent_id: c.metadata["parent_content"] for c in children}
    assert 1 < len(parents) < len(children)
    for c in children:
        assert c.content in c.metadata["parent_content"]
        assert text[c.metadata["parent_start_at"] : c.metadata["parent_end_at"]] == c.metadata["parent_content"]

    # "word3x77" is in one child of section 3; the result is that child's parent, whole.
    hit_child = next(c for c in children if "word3x77" in c.content)
    out = cli("search", "word3x77", "--kb", "docs", "--json")
    assert out.code == 0, out.err
    results = json.loads(out.out)["results"]
    assert results[0]["id"] == hit_child.id
    assert results[0]["match_type"] == MatchType.PARENT
    assert results[0]["content"] == hit_child.metadata["parent_content"]
    assert len(results[0]["content"]) > 128
    assert "parent_content" not in results[0]["metadata"]
    assert (results[0]["metadata"]["child_start_at"], results[0]["metadata"]["child_end_at"]) == (
        hit_child.start_at,
        hit_child.end_at,
    )


def test_parent_child_defaults_are_384_character_children_overlapping_by_a_fifth(cli: Cli, tmp_path: Path) -> None:
    text = "\n".join(f"Sentence number {i} of the manual, about topic {i % 7}." for i in range(600))
    path = write(tmp_path / "docs", "manual.md", text)
    cli.ok("kb", "create", "docs")
    (result,) = cli.json("ingest", str(path), "--kb", "docs", "--parent-child")
    assert result["status"] == "indexed"
    ctx = cli.ctx()
    record = ctx.catalog.get_knowledge(result["knowledge_id"])
    assert record is not None
    assert (record.options["chunk_size"], record.options["chunk_overlap"]) == (384, 384 // 5)
    children = stored(ctx, result["knowledge_id"])
    parents = {c.parent_id: c.metadata for c in children}
    assert len(parents) >= -(-len(text) // 4096) > 1
    assert all(3500 < len(m["parent_content"]) <= 4096 for m in list(parents.values())[:-1])
    assert all(len(c.content) <= 384 for c in children)
    siblings = [(a, b) for a, b in pairwise(children) if a.parent_id == b.parent_id]
    overlaps = [a.end_at - b.start_at for a, b in siblings]
    assert 0 < max(overlaps) <= 76
    # --chunk-size alone: the overlap is a fifth of it.
    (small,) = cli.json("ingest", str(path), "--kb", "docs", "--parent-child", "--chunk-size", "128")
    record = cli.ctx().catalog.get_knowledge(small["knowledge_id"])
    assert record is not None and (record.options["chunk_size"], record.options["chunk_overlap"]) == (128, 25)
    assert small["chunks"] > result["chunks"]
    # Same flags again: unchanged. Without --parent-child the defaults are 512 / 80 again.
    (same,) = cli.json("ingest", str(path), "--kb", "docs", "--parent-child", "--chunk-size", "128")
    assert same["status"] == "unchanged"
    assert IngestOptions(parent_child=True).model_dump() == {
        "chunk_size": 384,
        "chunk_overlap": 76,
        "parent_child": True,
        "parent_size": None,
    }
    assert IngestOptions(parent_child=True, chunk_overlap=0).chunk_size == 384
    assert (IngestOptions().chunk_size, IngestOptions().chunk_overlap) == (512, 80)
    with pytest.raises(ValueError, match="chunk_overlap 384 must be smaller than chunk_size 384"):
        IngestOptions(parent_child=True, chunk_overlap=384)


def test_ingest_options_are_validated_in_the_state_too() -> None:
    with pytest.raises(ValueError, match="chunk_size must be between 64 and 7500, got 8000"):
        IngestOptions(chunk_size=8000)
    with pytest.raises(ValueError, match="parent_size must be between chunk_size"):
        IngestOptions(chunk_size=512, parent_size=100)
    assert IngestOptions(chunk_size=6000).effective_parent_size == 6000
    assert IngestOptions().effective_parent_size == 4096


def test_a_stage_given_the_wrong_status_says_so(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    kb = make_kb("docs")
    state = staged_state(ctx, kb, "a.md", b"# A\n\ntext\n")
    with pytest.raises(InputError, match="ingest_embed needs a chunked state"):
        run_stage("ingest_embed", state, ctx)


def test_embedder_errors_are_provider_errors(ctx: Context, make_kb: Callable[..., KnowledgeBase]) -> None:
    ctx.register_embedder(embedder_at(f"http://127.0.0.1:{closed_port()}", max_retries=0))
    kb = make_kb("docs", embedding_model=SPACE)
    state = staged_state(ctx, kb, "a.md", b"# A\n\ntext\n")
    with pytest.raises(ProviderError) as exc:
        run_pipeline("ingest", state, ctx, check_transport=True)
    failed = exc.value.state
    assert isinstance(failed, IngestState)
    assert failed.error is not None and failed.error.stage == "ingest_embed"
    assert failed.status == "chunked"
