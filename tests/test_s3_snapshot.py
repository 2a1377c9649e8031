"""The S3-snapshot index against S3 served by moto on 127.0.0.1: each ``Clients`` (own data dir) plays one Lambda
container, so what one writes another must find through S3 alone."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragstep.adapters.index._s3generations import GenerationGone
from ragstep.adapters.index.s3snapshot import S3SnapshotIndex
from ragstep.app.ingest import new_ingest_state
from ragstep.app.search import knowledge_search
from ragstep.context import Clients, Context
from ragstep.errors import InputError
from ragstep.index_capabilities import scoped_reads
from ragstep.models import Chunk, KnowledgeBase, PipelineState, SearchRequest, SearchResult
from ragstep.pipeline import run_pipeline, run_stage
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import tokenize
from ragstep.settings import Settings
from ragstep.stages.ingest.products import source_blob_key

boto3 = pytest.importorskip("boto3")
pytest.importorskip("flask")  # moto[server]
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

pytestmark = pytest.mark.aws

REGION = "eu-west-1"
SPACE = "precomputed:test"


#: (method, path) of every request the S3 server received, in order: what a container read is read off the wire.
SEEN: list[tuple[str, str]] = []


def recording(app: Any) -> Any:
    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        SEEN.append((environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")))
        return app(environ, start_response)

    return wsgi


@pytest.fixture(scope="module")
def s3_url() -> Iterator[str]:
    # One request at a time: S3 applies a conditional PutObject atomically, moto checks then writes, so two
    # concurrent requests could both pass its check. Served serially, moto keeps S3's guarantee; the clients still
    # race each other between requests, which is what the tests exercise.
    server = make_server("127.0.0.1", 0, recording(DomainDispatcherApplication(create_backend_app)), threaded=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.port}"
    server.shutdown()


@pytest.fixture
def bucket(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    name = f"ragstep-{uuid.uuid4().hex[:12]}"
    s3().create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
    return name


def s3() -> Any:
    return boto3.client("s3", region_name=REGION)


def container(tmp_path: Path, bucket: str, **settings: Any) -> S3SnapshotIndex:
    """One Lambda container's index of the default tenant (its own /tmp)."""
    settings = {"index_s3_refresh_s": 0.0, **settings}
    clients = Clients(
        Settings(
            data_dir=tmp_path / uuid.uuid4().hex[:8], index_backend="s3snapshot", index_s3_bucket=bucket, **settings
        )
    )
    index = clients.context().index
    assert isinstance(index, S3SnapshotIndex)
    return index


def doc(kb: str, kid: str, *texts: str) -> tuple[list[Chunk], np.ndarray]:
    chunks = [
        Chunk(id=f"{kid}-{i}", knowledge_id=kid, knowledge_base_id=kb, content=t, chunk_index=i)
        for i, t in enumerate(texts)
    ]
    rng = np.random.default_rng(abs(hash(kid)) % 2**32)
    return chunks, rng.standard_normal((len(texts), 8)).astype(np.float32)


def found(index: S3SnapshotIndex, query: str, kb: str) -> list[str]:
    return [h.chunk_id for h in index.keyword_search(tokenize(query), SearchFilter(knowledge_base_ids=(kb,)), 10, 0.0)]


def keys(bucket: str) -> list[str]:
    pages = s3().get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", ()))


def test_what_one_container_ingests_another_finds(tmp_path: Path, bucket: str) -> None:
    writer, reader = container(tmp_path, bucket), container(tmp_path, bucket)
    chunks, vectors = doc("kb1", "k1", "the quick brown fox", "jumps over the lazy dog")
    writer.replace_knowledge("k1", chunks, vectors, SPACE)

    assert found(reader, "fox", "kb1") == ["k1-0"]
    hits = reader.vector_search(vectors[1], SPACE, SearchFilter(knowledge_base_ids=("kb1",)), 1, 0.0)
    assert [h.chunk_id for h in hits] == ["k1-1"] and hits[0].score == pytest.approx(1.0, abs=1e-5)
    # Reads by id find the knowledge base without being told which (as the rerank and merge stages ask).
    cold = container(tmp_path, bucket)
    assert cold.fetch(["k1-1"])["k1-1"].content == "jumps over the lazy dog"
    assert set(cold.vectors(["k1-0"], SPACE)) == {"k1-0"}
    assert cold.stats().chunks == 2
    pointer = [k for k in keys(bucket) if k.endswith("current.json")]
    assert pointer == ["tenants/default/index/kb1/current.json"]


def test_the_ivf_threshold_setting_reaches_the_snapshots_it_builds_and_reads(tmp_path: Path, bucket: str) -> None:
    # RAGSTEP_VECTOR_IVF_MIN_ROWS applies on AWS as locally: a generation built above it carries IVF lists, and a
    # container that loads it searches through them.
    writer = container(tmp_path, bucket, vector_ivf_min_rows=64)
    assert writer.ivf_min_rows == 64
    chunks, _ = doc("kb1", "k1", *(f"passage {i}" for i in range(300)))
    vectors = np.random.default_rng(7).standard_normal((300, 16)).astype(np.float32)
    writer.replace_knowledge("k1", chunks, vectors, SPACE)
    reader = container(tmp_path, bucket, vector_ivf_min_rows=64)
    for row in (0, 150, 299):
        hits = reader.vector_search(vectors[row], SPACE, SearchFilter(knowledge_base_ids=("kb1",)), 1, 0.0)
        assert [h.chunk_id for h in hits] == [f"k1-{row}"]
    assert container(tmp_path, bucket).ivf_min_rows == Settings().vector_ivf_min_rows


def test_reads_by_id_load_another_knowledge_base_only_for_ids_the_loaded_ones_lack(tmp_path: Path, bucket: str) -> None:
    writer = container(tmp_path, bucket)
    chunks, _ = doc("kb1", "k1", "alpha beta")
    writer.replace_knowledge("k1", chunks)  # keywords only: no vectors
    writer.replace_knowledge("k2", *doc("kb2", "k2", "gamma delta"), SPACE)
    reader = container(tmp_path, bucket)
    assert found(reader, "alpha", "kb1") == ["k1-0"]
    # Held by kb1 but not returned (no vector; no chunk at index 5): nothing else is downloaded.
    assert reader.vectors(["k1-0"], SPACE) == {}
    assert reader.chunks_at({"k1": [5]}) == {}
    assert not (reader.cache_dir / "kb2").exists()
    assert set(reader.fetch(["k1-0", "k2-0"])) == {"k1-0", "k2-0"}  # k2-0 is in no loaded one: kb2 is loaded
    assert (reader.cache_dir / "kb2").is_dir()


def test_a_warm_reader_sees_the_next_generation_and_skips_unchanged_ones(tmp_path: Path, bucket: str) -> None:
    writer, reader = container(tmp_path, bucket), container(tmp_path, bucket)
    writer.replace_knowledge("k1", *doc("kb1", "k1", "apples and pears"), SPACE)
    assert found(reader, "apples", "kb1") == ["k1-0"]
    loaded = reader._current("kb1").index
    assert found(reader, "apples", "kb1") == ["k1-0"]
    assert reader._current("kb1").index is loaded  # pointer unchanged: nothing reloaded

    writer.replace_knowledge("k1", *doc("kb1", "k1", "plums only"), SPACE)
    assert found(reader, "apples", "kb1") == []
    assert found(reader, "plums", "kb1") == ["k1-0"]

    # With a refresh interval, a warm reader keeps its generation until the interval has passed.
    lazy = container(tmp_path, bucket, index_s3_refresh_s=3600)
    assert found(lazy, "plums", "kb1") == ["k1-0"]
    writer.replace_knowledge("k2", *doc("kb1", "k2", "cherries"), SPACE)
    assert found(lazy, "cherries", "kb1") == []
    assert found(reader, "cherries", "kb1") == ["k2-0"]


@pytest.mark.slow
def test_concurrent_ingests_into_one_knowledge_base_keep_every_document(tmp_path: Path, bucket: str) -> None:
    writers = [container(tmp_path, bucket) for _ in range(2)]
    start = threading.Barrier(len(writers))
    errors: list[BaseException] = []

    def ingest(i: int, index: S3SnapshotIndex) -> None:
        try:
            start.wait()
            for j in range(2):
                kid = f"w{i}d{j}"
                index.replace_knowledge(kid, *doc("kb1", kid, f"document {kid} marker{i}x{j}"), SPACE)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ingest, args=(i, w)) for i, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    reader = container(tmp_path, bucket)
    assert reader.stats().chunks == 4
    for i in range(2):
        for j in range(2):
            assert found(reader, f"marker{i}x{j}", "kb1") == [f"w{i}d{j}-0"]
    # Generations that lost a race were deleted; the ones replaced wait for the grace period.
    folders = {k.split("/")[4] for k in keys(bucket) if "/gen-" in k}
    assert len(folders) <= 4


@pytest.mark.slow
def test_delete_and_disable_reach_other_containers(tmp_path: Path, bucket: str) -> None:
    writer, api, reader = (container(tmp_path, bucket) for _ in range(3))
    writer.replace_knowledge("k1", *doc("kb1", "k1", "red apples", "green apples"), SPACE)
    writer.replace_knowledge("k2", *doc("kb2", "k2", "red cars"), SPACE)
    everywhere = SearchFilter()
    assert len(reader.keyword_search(["red"], everywhere, 10, 0.0)) == 2

    assert api.set_enabled(["k1-0"], False) == 1  # the API function never loaded kb1 before
    assert found(reader, "red", "kb1") == []
    assert reader.fetch(["k1-0"])["k1-0"].enabled is False
    assert api.set_enabled(["k1-0"], True) == 1
    assert found(reader, "red", "kb1") == ["k1-0"]

    assert api.set_enabled(["k1-0", "k1-1"], False) == 2
    assert api.delete_knowledge(["k1"]) == 2  # disabled chunks are found and deleted too
    assert reader.fetch(["k1-0", "k1-1"]) == {}
    assert api.delete_knowledge(["k1"]) == 0
    assert [h.chunk_id for h in reader.keyword_search(["red"], everywhere, 10, 0.0)] == ["k2-0"]

    assert api.delete_knowledge_base("kb2") == 1
    assert reader.keyword_search(["red"], everywhere, 10, 0.0) == []
    assert not [k for k in keys(bucket) if "/kb2/" in k]


def test_a_reader_survives_the_generation_it_is_loading_being_pruned(tmp_path: Path, bucket: str) -> None:
    writer = container(tmp_path, bucket, index_s3_prune_grace_s=0.0)
    reader = container(tmp_path, bucket)
    writer.replace_knowledge("k1", *doc("kb1", "k1", "first version"), SPACE)
    assert found(reader, "first", "kb1") == ["k1-0"]  # warm on generation 1
    read = reader.store.pointer("kb1")  # a cold reader read the pointer of generation 1 ...
    assert read is not None and not isinstance(read, str)

    time.sleep(0.01)
    writer.replace_knowledge("k1", *doc("kb1", "k1", "second version"), SPACE)  # ... then it was replaced and pruned
    assert not [k for k in keys(bucket) if f"/{read.folder}/" in k]
    with pytest.raises(GenerationGone):
        reader.store.download("kb1", read, tmp_path / "partial")
    # The warm reader still answers from its copy until it sees the new pointer; then it loads the new generation.
    assert found(container(tmp_path, bucket), "second", "kb1") == ["k1-0"]
    assert found(reader, "second", "kb1") == ["k1-0"]


def test_the_size_limit_refuses_the_write_and_the_soft_limit_warns(tmp_path: Path, bucket: str) -> None:
    writer = container(tmp_path, bucket, index_s3_warn_bytes=1, index_s3_max_bytes=10_000_000)
    assert writer.capacity_warning("kb1") is None
    writer.replace_knowledge("k1", *doc("kb1", "k1", "small document"), SPACE)
    warning = writer.capacity_warning("kb1")
    assert warning and "RAGSTEP_INDEX_S3_WARN_BYTES" in warning and "OpenSearchEndpoint" in warning

    tight = container(tmp_path, bucket, index_s3_max_bytes=1000)
    before = keys(bucket)
    with pytest.raises(InputError) as refused:
        tight.replace_knowledge("k2", *doc("kb1", "k2", "one more"), SPACE)
    message = refused.value.message
    assert "RAGSTEP_INDEX_S3_MAX_BYTES" in message and "OpenSearchEndpoint" in message
    assert "CreateOpenSearchDomain" in message
    assert keys(bucket) == before  # nothing uploaded, nothing published
    assert found(container(tmp_path, bucket), "document", "kb1") == ["k1-0"]


@pytest.mark.slow
def test_the_ingest_pipeline_and_the_search_pipeline_share_only_s3_and_dynamodb(
    tmp_path: Path, bucket: str, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deployed shape: ingest_index in one container, search in another, the catalog in DynamoDB; a knowledge
    base over the soft limit gets the warning on the ingest trace."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", s3_url)
    table = f"catalog-{uuid.uuid4().hex[:8]}"
    boto3.client("dynamodb", region_name=REGION).create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )

    def context(name: str) -> Context:
        settings = Settings(
            data_dir=tmp_path / name,
            index_backend="s3snapshot",
            index_s3_bucket=bucket,
            index_s3_warn_bytes=1,
            catalog_backend="dynamodb",
            catalog_table=table,
        )
        return Clients(settings).context()

    ingest, search = context("ingest"), context("search")
    kb = ingest.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="notes", created_at=time.time()))
    data = b"# Tides\n\nThe harbour floods at the spring tide, twice a month.\n"
    digest = hashlib.sha256(data).hexdigest()
    key = source_blob_key(kb.id, "k1", digest, "tides.md")
    ingest.blobs.put(key, data)
    state = new_ingest_state(kb, knowledge_id="k1", blob_key=key, filename="tides.md", content_hash=digest)
    done = run_pipeline("ingest", state, ingest)
    assert done.status == "indexed"
    index_row = next(t for t in done.trace if t.stage == "ingest_index" and t.action == "run")
    assert index_row.reason and "RAGSTEP_INDEX_S3_WARN_BYTES" in index_row.reason

    found = knowledge_search(SearchRequest(query="spring tide", knowledge_base_ids=[kb.id]), search)
    assert [r.knowledge_id for r in found.final_results] == ["k1"]


def test_each_tenant_has_its_own_prefix(tmp_path: Path, bucket: str) -> None:
    settings = Settings(data_dir=tmp_path / "acme", index_backend="s3snapshot", index_s3_bucket=bucket)
    acme = Clients(settings).context("acme").index
    acme.replace_knowledge("k1", *doc("kb1", "k1", "tenant secret"), SPACE)
    assert {k.split("/index/")[0] for k in keys(bucket)} == {"tenants/acme"}
    assert found(container(tmp_path, bucket), "secret", "kb1") == []  # the default tenant sees none of it
    assert [h.chunk_id for h in acme.keyword_search(["secret"], SearchFilter(), 5, 0.0)] == ["k1-0"]


def test_a_search_over_several_knowledge_bases_ranks_as_one_index_holding_them(tmp_path: Path, bucket: str) -> None:
    # Each knowledge base is its own local index here; BM25 must still use their joint statistics (the small base,
    # where "apple" is in every chunk, would otherwise score it far lower than the large one, where it is rare).
    from ragstep.adapters.index.local import LocalSearchIndex

    docs = [
        doc("small", "s1", "apple pie", "apple tart crust"),
        doc("large", "l1", "apple orchard harvest time", *(f"pear plum fig {i}" for i in range(7))),
    ]
    writer, one = container(tmp_path, bucket), LocalSearchIndex(tmp_path / "one")
    for chunks, _ in docs:
        writer.replace_knowledge(chunks[0].knowledge_id, chunks)
        one.replace_knowledge(chunks[0].knowledge_id, chunks)
    reader = container(tmp_path, bucket)
    for flt in (SearchFilter(knowledge_base_ids=("small", "large")), SearchFilter()):
        got = [(h.chunk_id, h.score, h.raw_score) for h in reader.keyword_search(["apple", "fig"], flt, 10, 0.0)]
        want = [(h.chunk_id, h.score, h.raw_score) for h in one.keyword_search(["apple", "fig"], flt, 10, 0.0)]
        assert [c for c, _, _ in got] == [c for c, _, _ in want]
        assert [(s, r) for _, s, r in got] == [
            (pytest.approx(s, rel=1e-6), pytest.approx(r, rel=1e-6)) for _, s, r in want
        ]
    assert [c for c, _, _ in got][:3] == ["s1-0", "s1-1", "l1-0"]


def index_reads(bucket: str, since: int) -> set[str]:
    """The knowledge bases whose index objects (pointer or generation files) were read since request ``since``."""
    marker = f"/{bucket}/tenants/default/index/"
    return {
        path.split(marker, 1)[1].split("/", 1)[0] for method, path in SEEN[since:] if method == "GET" and marker in path
    }


def three_knowledge_bases(tmp_path: Path, bucket: str) -> None:
    writer = container(tmp_path, bucket)
    for kb in ("kb1", "kb2", "kb3"):
        writer.replace_knowledge(f"{kb}-k", *doc(kb, f"{kb}-k", f"{kb} first", f"{kb} second", f"{kb} third"), SPACE)


def test_reads_scoped_to_the_requests_knowledge_bases_load_only_those(tmp_path: Path, bucket: str) -> None:
    """A cold rerank or merge container: reads by id name the request's knowledge bases, so it downloads those
    only, where an unscoped read walks the tenant's knowledge bases until it finds the ids."""
    three_knowledge_bases(tmp_path, bucket)
    cold = container(tmp_path, bucket)
    start = len(SEEN)
    scoped = scoped_reads(cold, ["kb3"])
    assert set(scoped.vectors(["kb3-k-0", "kb1-k-0"], SPACE)) == {"kb3-k-0"}  # kb1's chunk is not the request's
    assert [c.content for c in scoped.chunks_at({"kb3-k": [1]})["kb3-k"].values()] == ["kb3 second"]
    assert scoped.fetch(["kb3-k-2"])["kb3-k-2"].content == "kb3 third"
    assert index_reads(bucket, start) == {"kb3"}
    assert sorted(p.name for p in cold.cache_dir.iterdir()) == ["kb3"]

    start = len(SEEN)
    unscoped = container(tmp_path, bucket)
    assert set(unscoped.fetch(["kb3-k-0"])) == {"kb3-k-0"}
    assert index_reads(bucket, start) == {"kb1", "kb2", "kb3"}  # what the scope saves


def test_cold_rerank_and_merge_stages_load_only_their_results_knowledge_bases(tmp_path: Path, bucket: str) -> None:
    three_knowledge_bases(tmp_path, bucket)
    kb2 = KnowledgeBase(id="kb2", name="two", created_at=time.time(), embedding_model=SPACE)
    results = [
        SearchResult(id="kb2-k-1", content="kb2 second", knowledge_id="kb2-k", knowledge_base_id="kb2", chunk_index=1)
    ]
    state = PipelineState.model_validate(
        {
            "request": {"query": "second", "knowledge_base_ids": ["kb2"]},
            "knowledge_bases": [kb2.model_dump(mode="json")],
            "search_results": [r.model_dump(mode="json") for r in results],
            "query_embeddings": {SPACE: [1.0] + [0.0] * 7},
        }
    )
    for stage in ("chunk_rerank", "chunk_merge"):
        ctx = Clients(Settings(data_dir=tmp_path / stage, index_backend="s3snapshot", index_s3_bucket=bucket)).context()
        start = len(SEEN)
        out = run_stage(stage, state, ctx)
        # Never another knowledge base's snapshot. (The rerank stage reads none here: this model declares no score
        # scale, so its cosines are read relative to one another from the search's own, ragstep.retrieval.background.)
        read = index_reads(bucket, start)
        assert read <= {"kb2"} and (read == {"kb2"} or stage == "chunk_rerank"), stage
        loaded = tmp_path / stage / "s3index"
        assert sorted(p.name for p in loaded.iterdir()) == sorted(read) if loaded.exists() else not read
        if stage == "chunk_merge":  # the short result was expanded with its neighbours from kb2's index
            assert "kb2 first" in out.merge_results[0].content and "kb2 third" in out.merge_results[0].content


# -- fusion ranks as on the local index -----------------------------------------------------------------------------

FUSION_SPACE = "precomputed:fusion"
FUSION_SPACE_UNDECLARED = "precomputed:fusion-undeclared"


def fusion_corpus() -> tuple[dict[str, list[Chunk]], np.ndarray, dict[str, np.ndarray]]:
    """Two knowledge bases (80 and 70 chunks: each under the background's 100 rows, together over them) of words
    from a small vocabulary, e5-like vectors (every cosine high), and questions that share words with one chunk and
    point at another: the fusion's reading of both lists decides their order."""
    rng = np.random.default_rng(32)
    vocab = [f"w{i}" for i in range(60)]
    vectors = rng.normal(size=(150, 16)) + 2.0
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    texts = [" ".join(rng.choice(vocab, size=8)) for _ in range(150)]
    docs = {
        kb: [
            Chunk(id=f"{kb}-{i}", knowledge_id=f"{kb}-k", knowledge_base_id=kb, content=texts[row], chunk_index=i)
            for i, row in enumerate(rows)
        ]
        for kb, rows in (("fa", range(80)), ("fb", range(80, 150)))
    }
    questions: dict[str, np.ndarray] = {}
    for _ in range(8):
        words, near = texts[int(rng.integers(150))].split()[:3], vectors[int(rng.integers(150))]
        question = " ".join([*words, vocab[int(rng.integers(60))]])
        questions[question] = near + rng.normal(scale=0.3, size=16)
    return docs, vectors.astype(np.float32), questions


def fusion_context(settings: Settings, questions: dict[str, np.ndarray]) -> Context:
    from ragstep.adapters.embedders import PrecomputedEmbedder
    from ragstep.bench.quality import ScaledPrecomputedEmbedder
    from ragstep.models import Knowledge
    from ragstep.models.scale import ScoreScale

    ctx = Clients(settings).context()
    ctx.register_embedder(ScaledPrecomputedEmbedder(FUSION_SPACE, questions, ScoreScale(zero=0.77, span=0.2)))
    ctx.register_embedder(PrecomputedEmbedder(FUSION_SPACE_UNDECLARED, questions))
    for kb in ("fa", "fb", "ga", "gb"):
        model = FUSION_SPACE if kb.startswith("f") else FUSION_SPACE_UNDECLARED
        ctx.catalog.create_kb(KnowledgeBase(id=kb, name=kb, created_at=time.time(), embedding_model=model))
        ctx.catalog.put_knowledge(Knowledge(id=f"{kb}-k", knowledge_base_id=kb, filename="x.md", status="completed"))
    return ctx


def renamed(chunk: Chunk, prefix: str) -> Chunk:
    """The chunk in the knowledge base of the same name but its first letter (the other embedding model's copy)."""
    ids = {"id": chunk.id, "knowledge_base_id": chunk.knowledge_base_id, "knowledge_id": chunk.knowledge_id}
    return chunk.model_copy(update={name: prefix + value[1:] for name, value in ids.items()})


def ranked(ctx: Context, question: str, kbs: list[str]) -> list[tuple[str, float]]:
    from ragstep.app.search import new_state
    from ragstep.stages.search import chunk_search

    state = chunk_search.run(new_state(SearchRequest(query=question, knowledge_base_ids=kbs), ctx), ctx)
    return [(r.id, r.score) for r in state.search_results]


def test_fusion_ranks_as_the_local_index_whatever_the_snapshot_format(tmp_path: Path, bucket: str) -> None:
    """The S3-snapshot index gives fusion the joint BM25 statistics and the centroid of the searched knowledge bases
    (each generation ships its centroids), so a search ranks and scores as on the local index: one knowledge base
    or two, a model that declares its score scale or not, a generation written before the statistics were shipped
    (they are computed when it loads)."""
    docs, vectors, questions = fusion_corpus()
    local = fusion_context(Settings(data_dir=tmp_path / "local"), questions)
    remote = fusion_context(
        Settings(data_dir=tmp_path / "s3", index_backend="s3snapshot", index_s3_bucket=bucket), questions
    )
    for ctx in (local, remote):
        for kb, chunks in docs.items():
            rows = vectors[[int(c.id.split("-")[1]) + (80 if kb == "fb" else 0) for c in chunks]]
            for prefix, space in (("f", FUSION_SPACE), ("g", FUSION_SPACE_UNDECLARED)):
                named = [renamed(c, prefix) for c in chunks]
                ctx.index.replace_knowledge(named[0].knowledge_id, named, rows, space)

    def compare(ctx: Context) -> None:
        for question in questions:
            for kbs in (["fa"], ["fa", "fb"], ["ga", "gb"]):
                want, got = ranked(local, question, kbs), ranked(ctx, question, kbs)
                assert [c for c, _ in got] == [c for c, _ in want], (question, kbs)
                assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-5, abs=1e-6)

    compare(remote)
    # A generation from before the statistics were shipped: its pointer lists no fusion-stats.json.
    for kb in ("fa", "fb", "ga", "gb"):
        key = f"tenants/default/index/{kb}/current.json"
        pointer = json.loads(s3().get_object(Bucket=bucket, Key=key)["Body"].read())
        assert pointer["files"].pop("fusion-stats.json") > 0
        s3().put_object(Bucket=bucket, Key=key, Body=json.dumps(pointer).encode())
    old = fusion_context(
        Settings(data_dir=tmp_path / "old", index_backend="s3snapshot", index_s3_bucket=bucket), questions
    )
    compare(old)
    assert not list((tmp_path / "old").rglob("fusion-stats.json"))


def test_a_statistics_file_of_another_format_or_damaged_is_recomputed_not_trusted() -> None:
    from ragstep.adapters.index._s3fusion import FUSION_STATS_FORMAT, Centroid, GenerationStats

    stats = GenerationStats({SPACE: Centroid(3, np.array([0.5, 0.25, 0.0]))})
    again = GenerationStats.parse(stats.body())
    assert again is not None and again.centroids[SPACE].rows == 3
    assert again.centroids[SPACE].mean.tolist() == [0.5, 0.25, 0.0]
    doc = json.loads(stats.body())
    for damaged in (
        {**doc, "format": FUSION_STATS_FORMAT + 1},  # a newer writer's format: computed from the generation instead
        {**doc, "spaces": {SPACE: {"rows": 3, "mean": [0.5, None, 0.0]}}},
        {**doc, "spaces": {SPACE: {"rows": 3, "mean": [0.5, float("nan"), 0.0]}}},
        {"spaces": {}},
    ):
        assert GenerationStats.parse(json.dumps(damaged).encode()) is None, damaged
    assert GenerationStats.parse(b"not json") is None


def test_a_generation_written_before_accent_folding_is_upgraded_and_published(tmp_path: Path, bucket: str) -> None:
    """A generation whose tokens an earlier tokenizer wrote (unfolded, no stamp): every container folds them as it
    loads it, and ``upgrade_tokens`` publishes the upgraded generation so the next ones need not."""
    import sqlite3

    from ragstep.adapters.index.local import LocalSearchIndex

    writer = container(tmp_path, bucket)
    chunks, vectors = doc("kb1", "k1", "Les répertoires de données", "plain words")
    writer.replace_knowledge("k1", chunks, vectors, SPACE)

    def as_written_before_folding(index: LocalSearchIndex) -> bool:
        with sqlite3.connect(index.root / "index.sqlite") as conn:
            for row, doc_json in conn.execute("SELECT row, doc FROM chunks").fetchall():
                old = " ".join(tokenize(Chunk.model_validate_json(doc_json).content, fold=False))
                conn.execute("UPDATE chunks SET tokens = ? WHERE row = ?", (old, row))
            conn.execute("DELETE FROM meta WHERE key = 'tokenizer'")
            conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
        return True

    writer.apply_change("kb1", as_written_before_folding)
    reader = container(tmp_path, bucket)
    assert found(reader, "repertoires donnees", "kb1") == ["k1-0"]  # folded as it loaded
    assert found(reader, "répertoires", "kb1") == ["k1-0"]
    assert reader.upgrade_tokens("kb1") == (2, 1)
    cold = container(tmp_path, bucket)
    assert found(cold, "repertoires", "kb1") == ["k1-0"]
    loaded = cold._current("kb1").index
    assert loaded is not None and loaded.tokens_upgraded == 0  # the generation in S3 holds folded tokens now
    assert cold.upgrade_tokens("kb1") == (2, 0)
