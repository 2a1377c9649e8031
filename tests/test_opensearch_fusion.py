"""Fusion on OpenSearch reads what it reads on the local index: the query's background from a sample of the searched
vectors, and raw BM25 on the cluster's own scale (OpenSearch 2.x keeps Okapi's ``k1 + 1`` factor, 3.x drops it).

The cluster is a real HTTP server on 127.0.0.1 that answers opensearch-py's requests with the documented response
bodies, computed from the same chunks a local index holds (cosines as ``(1 + cos) / 2``, BM25 from the local index in
the cluster's units); the search stage then ranks both alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.adapters.index.opensearch import build_document, space_field
from ragstep.adapters.index.opensearch.statistics import build_sample_query, keyword_gain, sample_background
from ragstep.app.search import new_state
from ragstep.bench.quality import ScaledPrecomputedEmbedder
from ragstep.context import Clients, Context
from ragstep.index_capabilities import keyword_gain as index_keyword_gain
from ragstep.models import Chunk, Knowledge, KnowledgeBase, SearchRequest
from ragstep.models.scale import ScoreScale
from ragstep.ports import SearchFilter
from ragstep.retrieval.background import moments, query_background
from ragstep.settings import Settings
from ragstep.stages.search import chunk_search
from support.opensearch_queries import find_terms
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

MODEL = "precomputed:os-fusion"
FIELD = space_field(MODEL)
E5 = ScoreScale(zero=0.77, span=0.2)
# GET / of a cluster, as https://docs.opensearch.org/latest/api-reference/cluster-api/info/ shows it (abridged).
INFO_2X = {
    "name": "node-1",
    "cluster_name": "opensearch-cluster",
    "version": {"distribution": "opensearch", "number": "2.19.1", "lucene_version": "9.12.1"},
    "tagline": "The OpenSearch Project: https://opensearch.org/",
}
INFO_3X = {**INFO_2X, "version": {"distribution": "opensearch", "number": "3.1.0", "lucene_version": "10.2.1"}}


def test_the_sample_request_follows_the_function_score_docs() -> None:
    # https://docs.opensearch.org/latest/query-dsl/compound/function-score/ ("Random score": seed and field, the
    # field with doc values; boost_mode replace keeps only the function's score), filters as the k-NN query's.
    body = build_sample_query(FIELD, SearchFilter(knowledge_base_ids=("kb1",)), 2048)
    assert body == {
        "size": 2048,
        "_source": [FIELD],
        "query": {
            "function_score": {
                "query": {
                    "bool": {
                        "filter": [
                            {
                                "bool": {
                                    "should": [
                                        {"term": {"tenant_id": "default"}},
                                        {"bool": {"must_not": [{"exists": {"field": "tenant_id"}}]}},
                                    ],
                                    "minimum_should_match": 1,
                                }
                            },
                            {"term": {"enabled": True}},
                            {"terms": {"knowledge_base_id": ["kb1"]}},
                            {"exists": {"field": FIELD}},
                        ]
                    }
                },
                "random_score": {"seed": 32, "field": "chunk_id"},
                "boost_mode": "replace",
            }
        },
    }
    # The documented search response: vectors in _source, normalised as the index compares them.
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(150, 4)) + 1.0
    hits = [{"_id": str(i), "_score": 0.5, "_source": {FIELD: (3.0 * v).tolist()}} for i, v in enumerate(vectors)]
    background = sample_background({"hits": {"total": {"value": 150}, "hits": hits}}, FIELD)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    want = moments(unit)
    assert background is not None and want is not None
    q = rng.normal(size=4)
    assert query_background(background, q) == pytest.approx(query_background(want, q))
    assert sample_background({"hits": {"hits": hits[:1]}}, FIELD) is None  # one chunk has no spread: no background


def test_the_keyword_gain_follows_the_clusters_bm25() -> None:
    # 2.x scores with LegacyBM25Similarity (k1 + 1 kept; our mapping's k1 = 1.5, Lucene's default 1.2 without it);
    # 3.0 made Lucene's BM25Similarity the default (opensearch-project/OpenSearch#17315): no factor.
    assert keyword_gain(INFO_2X, custom_similarity=True) == pytest.approx(2.5)
    assert keyword_gain(INFO_2X, custom_similarity=False) == pytest.approx(2.2)
    assert keyword_gain(INFO_3X, custom_similarity=True) == 1.0
    assert keyword_gain(None, custom_similarity=False) == pytest.approx(2.2)  # AOSS: no GET /, a 2.x engine


# -- the search stage over HTTP -----------------------------------------------------------------------------------


class Cluster:
    """Answers like OpenSearch from the chunks ``local`` holds: the mapping, ``GET /``, the vector sample, k-NN
    (``_score`` = (1 + cos) / 2), keyword search (the local index's BM25 in the cluster's units) and fetches."""

    def __init__(self, local: LocalSearchIndex, chunks: list[Chunk], vectors: np.ndarray, info: dict[str, Any]):
        self.local, self.info = local, info
        self.gain = keyword_gain(info, custom_similarity=True)
        self.docs = {
            c.id: build_document(c, version="v", space=MODEL, vector=vectors[i].tolist()) for i, c in enumerate(chunks)
        }
        self.vectors = {c.id: vectors[i] for i, c in enumerate(chunks)}
        self.kb = {c.id: c.knowledge_base_id for c in chunks}

    def hits(self, scored: list[tuple[str, float]], fields: list[str] | None = None) -> ScriptedResponse:
        rows = [
            {"_id": c, "_score": s, "_source": {k: v for k, v in self.docs[c].items() if fields is None or k in fields}}
            for c, s in scored
        ]
        return ScriptedResponse(200, {"hits": {"total": {"value": len(rows), "relation": "eq"}, "hits": rows}})

    def __call__(self, req: RecordedRequest) -> ScriptedResponse:
        if (req.method, req.path) == ("GET", "/"):
            return ScriptedResponse(200, self.info)
        if (req.method, req.path) == ("GET", "/t/_mapping"):
            return ScriptedResponse(
                200, {"t": {"mappings": {"properties": {FIELD: {"type": "knn_vector", "dimension": 16}}}}}
            )
        body = req.json or {}
        query = body.get("query", {})
        kbs = set(find_terms(query, "knowledge_base_id") or self.kb.values())
        if "function_score" in query:
            rows = [c for c in sorted(self.docs) if self.kb[c] in kbs][: body["size"]]
            return self.hits([(c, 1.0) for c in rows], body["_source"])
        if "knn" in query:
            spec = query["knn"][FIELD]
            q = np.asarray(spec["vector"])
            scored = sorted(
                ((c, float(v @ q)) for c, v in self.vectors.items() if self.kb[c] in kbs), key=lambda x: -x[1]
            )
            return self.hits([(c, (1 + cos) / 2) for c, cos in scored[: spec["k"]]])
        ids = find_terms(query, "chunk_id")
        if "should" not in query.get("bool", {}):  # a fetch by id
            return self.hits([(c, 0.0) for c in ids or () if c in self.docs])
        terms = [clause["term"]["tokens"] for clause in query["bool"]["should"]]
        flt = SearchFilter(knowledge_base_ids=tuple(sorted(kbs)))
        found = self.local.keyword_search(terms, flt, len(self.docs), 0.0)
        scored = [(h.chunk_id, h.raw_score * self.gain / 2.5) for h in found if ids is None or h.chunk_id in ids]
        return self.hits(scored[: body["size"]])


def corpus() -> tuple[list[Chunk], np.ndarray, dict[str, np.ndarray]]:
    """150 chunks of a small vocabulary with e5-like vectors (every cosine high), questions that share words with
    one chunk and point at another."""
    rng = np.random.default_rng(17)
    vocab = [f"w{i}" for i in range(60)]
    vectors = rng.normal(size=(150, 16)) + 2.0
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    chunks = [
        Chunk(id=f"c{i:03d}", knowledge_id="k1", knowledge_base_id="kb1", content=" ".join(rng.choice(vocab, size=8)),
              chunk_index=i)
        for i in range(150)
    ]  # fmt: skip
    questions = {}
    for _ in range(6):
        words = chunks[int(rng.integers(150))].content.split()[:3]
        questions[" ".join([*words, vocab[int(rng.integers(60))]])] = vectors[int(rng.integers(150))] + rng.normal(
            scale=0.3, size=16
        )
    return chunks, vectors, questions


def context(settings: Settings, questions: dict[str, np.ndarray]) -> Context:
    ctx = Clients(settings).context()
    ctx.register_embedder(ScaledPrecomputedEmbedder(MODEL, questions, E5))
    ctx.catalog.create_kb(KnowledgeBase(id="kb1", name="kb1", created_at=time.time(), embedding_model=MODEL))
    ctx.catalog.put_knowledge(Knowledge(id="k1", knowledge_base_id="kb1", filename="x.md", status="completed"))
    return ctx


@pytest.fixture
def server() -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer() as srv:
        yield srv


@pytest.mark.parametrize("info", [INFO_2X, INFO_3X], ids=["opensearch-2", "opensearch-3"])
def test_the_search_stage_ranks_on_opensearch_as_on_the_local_index(
    server: ScriptedHTTPServer, tmp_path: Path, info: dict[str, Any]
) -> None:
    chunks, vectors, questions = corpus()
    local = context(Settings(data_dir=tmp_path / "local"), questions)
    local.index.replace_knowledge("k1", chunks, vectors, MODEL)
    assert isinstance(local.index, LocalSearchIndex)
    server.set_fallback(Cluster(local.index, chunks, vectors, info))
    remote = context(
        Settings(
            data_dir=tmp_path / "remote",
            index_backend="opensearch",
            opensearch_url=server.url,
            opensearch_index="t",
            opensearch_auth="none",
            opensearch_max_retries=0,
        ),
        questions,
    )
    assert index_keyword_gain(remote.index) == pytest.approx(2.5 if info is INFO_2X else 1.0)
    for question in questions:
        want, got = (
            [
                (r.id, r.score)
                for r in chunk_search.run(
                    new_state(SearchRequest(query=question, knowledge_base_ids=["kb1"]), ctx), ctx
                ).search_results
            ]
            for ctx in (local, remote)
        )
        assert [c for c, _ in got] == [c for c, _ in want], question
        assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-4, abs=1e-5)
    # One sample and one GET / for every query of the container (both kept), besides the searches themselves.
    kinds = [
        ("sample" if "function_score" in json.dumps(r.json or {}) else r.method + " " + r.path) for r in server.requests
    ]
    assert kinds.count("sample") == 1 and kinds.count("GET /") == 1
