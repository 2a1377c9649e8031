"""The OpenSearch index without a cluster, and with one when ``RAGSTEP_TEST_OPENSEARCH_URL`` is set.

* Request bodies are compared with the shapes the OpenSearch documentation gives for each call (the expected JSON
  is written out literally, with the page it follows).
* Responses are parsed from the documentation's sample responses.
* The client plumbing runs over real HTTP: opensearch-py talks to a scripted server on 127.0.0.1 that answers like
  OpenSearch, and the test reads back the methods, paths, query strings and bodies that arrived.
* The ``live`` suite indexes English and Chinese chunks in a real cluster and compares its rankings with the local
  index on the same data.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from ragstep.adapters.embedders import PrecomputedEmbedder
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.adapters.index.opensearch import OpenSearchIndex as OSIndex
from ragstep.adapters.index.opensearch import (
    SearchHit,
    build_bulk_body,
    build_delete_by_query,
    build_document,
    build_hybrid_query,
    build_keyword_query,
    build_knn_query,
    build_mapping,
    build_scan_query,
    build_search_pipeline,
    chunk_from_source,
    cosine_from_score,
    delete_action,
    enable_action,
    index_action,
    keyword_hits,
    knowledge_query,
    newest_per_chunk,
    parse_bulk_response,
    parse_mapping_response,
    parse_search_response,
    parse_stats_response,
    search_pipeline_name,
    space_field,
    vector_hits,
)
from ragstep.adapters.index.opensearch.queries import BULK_MAX_ACTIONS
from ragstep.app.search import new_state
from ragstep.bench.quality import ScaledPrecomputedEmbedder
from ragstep.context import Clients, Context
from ragstep.errors import ConflictError, InputError, StorageError
from ragstep.ingest_notes import listening
from ragstep.models import Chunk, ChunkType, Knowledge, KnowledgeBase, KnowledgeBaseType, MatchType, SearchRequest
from ragstep.models.scale import COMMON_SCALE
from ragstep.ports import SearchFilter, SearchIndex
from ragstep.retrieval.fusion import KEYWORD_UNIT, VECTOR_EVIDENCE_POWER
from ragstep.retrieval.text import query_terms, tokenize
from ragstep.settings import Settings
from ragstep.stages.search import chunk_search
from support.opensearch_queries import find_terms
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

SPACE = "openai:text-embedding-3-small"
FIELD = space_field(SPACE)
ALL = SearchFilter(enabled_only=False)
# The default tenant's clause: its own documents, and those written before documents carried a tenant.
DEFAULT_SCOPE = {
    "bool": {
        "should": [
            {"term": {"tenant_id": "default"}},
            {"bool": {"must_not": [{"exists": {"field": "tenant_id"}}]}},
        ],
        "minimum_should_match": 1,
    }
}


def chunk(cid: str, content: str, kid: str = "k1", kb: str = "kb1", **kw: Any) -> Chunk:
    return Chunk(id=cid, knowledge_id=kid, knowledge_base_id=kb, content=content, **kw)


# ====================================================================================== request bodies vs the docs


def test_space_field_names_are_safe_and_distinct() -> None:
    name = space_field("bedrock:amazon.titan-embed-text-v2:0")
    # A dot in a field name is an object path to OpenSearch; model ids have dots and colons.
    assert name.startswith("vec_bedrock_amazon_titan_embed_text_v2_0_")
    assert "." not in name and ":" not in name
    assert space_field("a:b") != space_field("a_b")
    assert space_field("a:b") == space_field("a:b")


def test_mapping_has_the_documented_knn_vector_shape() -> None:
    # https://docs.opensearch.org/latest/mappings/supported-field-types/knn-methods-engines/ ("Method definition
    # example"): settings.index.knn = true; "type": "knn_vector", "dimension", and a method with name, space_type,
    # engine and parameters {ef_construction, m}.
    # https://docs.opensearch.org/latest/mappings/mapping-parameters/enabled/: {"type": "object", "enabled": false}
    # https://docs.opensearch.org/latest/analyzers/supported-analyzers/whitespace/: {"type": "text", "analyzer":
    # "whitespace"}; https://docs.opensearch.org/latest/im-plugin/similarity/: a BM25 similarity with k1 and b.
    expected = {
        "settings": {
            "index": {
                "knn": True,
                "similarity": {"ragstep_bm25": {"type": "BM25", "k1": 1.5, "b": 0.75}},
            }
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "chunk_id": {"type": "keyword"},
                "tenant_id": {"type": "keyword"},
                "knowledge_id": {"type": "keyword"},
                "knowledge_base_id": {"type": "keyword"},
                "tag_id": {"type": "keyword"},
                "chunk_type": {"type": "keyword"},
                "space": {"type": "keyword"},
                "version": {"type": "keyword"},
                "enabled": {"type": "boolean"},
                "chunk_index": {"type": "integer"},
                "tokens": {
                    "type": "text",
                    "analyzer": "whitespace",
                    "index_options": "freqs",
                    "similarity": "ragstep_bm25",
                },
                "content": {"type": "text", "index": False},
                "doc": {"type": "object", "enabled": False},
                FIELD: {
                    "type": "knn_vector",
                    "dimension": 3,
                    "method": {
                        "name": "hnsw",
                        "space_type": "cosinesimil",
                        "engine": "faiss",
                        "parameters": {"ef_construction": 128, "m": 16},
                    },
                },
            },
        },
    }
    assert build_mapping({SPACE: 3}) == expected

    # AOSS: no custom similarity (default BM25), same fields; lucene is the engine for clusters before 2.19.
    aoss = build_mapping({SPACE: 3}, custom_similarity=False)
    assert aoss["settings"] == {"index": {"knn": True}}
    assert "similarity" not in aoss["mappings"]["properties"]["tokens"]
    lucene = build_mapping({SPACE: 3}, engine="lucene")
    assert lucene["mappings"]["properties"][FIELD]["method"]["engine"] == "lucene"


def test_knn_query_has_the_filter_inside_the_knn_clause() -> None:
    # https://docs.opensearch.org/latest/vector-search/filter-search-knn/efficient-knn-filtering/ ("Step 3"):
    # {"size": 2, "query": {"knn": {"item_vector": {"vector": [...], "k": 10, "filter": {"bool": {"must": [...]}}}}}}
    flt = SearchFilter(knowledge_base_ids=("kb1", "kb2"), tag_ids=("t1",), chunk_types=(ChunkType.FAQ,))
    expected = {
        "size": 5,
        "_source": ["chunk_id", "version"],
        "query": {
            "knn": {
                FIELD: {
                    "vector": [0.6, 0.8, 0.0],
                    "k": 5,
                    "filter": {
                        "bool": {
                            "filter": [
                                DEFAULT_SCOPE,
                                {"term": {"enabled": True}},
                                {"terms": {"knowledge_base_id": ["kb1", "kb2"]}},
                                {"terms": {"tag_id": ["t1"]}},
                                {"terms": {"chunk_type": ["faq"]}},
                            ]
                        }
                    },
                }
            }
        },
    }
    assert build_knn_query([0.6, 0.8, 0.0], FIELD, flt, 5) == expected
    # No restriction of the SearchFilter: the tenant is still one, always inside the clause.
    unfiltered = build_knn_query([1.0], FIELD, ALL, 3, tenant_id="acme")
    assert unfiltered["query"] == {
        "knn": {FIELD: {"vector": [1.0], "k": 3, "filter": {"bool": {"filter": [{"term": {"tenant_id": "acme"}}]}}}}
    }


def test_keyword_query_is_a_bool_of_terms_with_non_scoring_filters() -> None:
    # https://docs.opensearch.org/latest/query-dsl/compound/bool/: should clauses score, filter clauses do not;
    # with a filter present, minimum_should_match must be 1 or documents matching no term would come back.
    flt = SearchFilter(knowledge_ids=("k1",))
    expected = {
        "size": 10,
        "_source": ["chunk_id", "version"],
        "query": {
            "bool": {
                "should": [{"term": {"tokens": "向量"}}, {"term": {"tokens": "检索"}}, {"term": {"tokens": "bm25"}}],
                "minimum_should_match": 1,
                "filter": [DEFAULT_SCOPE, {"term": {"enabled": True}}, {"terms": {"knowledge_id": ["k1"]}}],
            }
        },
    }
    assert build_keyword_query(["向量", "检索", "bm25", "检索"], flt, 10) == expected
    acme = build_keyword_query(["bm25"], ALL, 3, tenant_id="acme")
    assert acme["query"]["bool"]["filter"] == [{"term": {"tenant_id": "acme"}}]
    assert build_keyword_query([], flt, 10)["query"] == {"match_none": {}}


def test_bulk_body_is_the_documented_ndjson() -> None:
    # https://docs.opensearch.org/latest/api-reference/document-apis/bulk/ ("Request body"): one action line, then
    # the source line for index/create/update, each ending with "\n" (the index is in the path: POST <index>/_bulk).
    body = build_bulk_body(
        [
            delete_action("tt2229499"),
            ({"index": {"_id": "tt1979320"}}, {"title": "Rush", "year": 2013}),
            enable_action("tt0816711", False),
        ]
    )
    assert body.endswith("\n")
    assert [json.loads(line) for line in body.splitlines()] == [
        {"delete": {"_id": "tt2229499"}},
        {"index": {"_id": "tt1979320"}},
        {"title": "Rush", "year": 2013},
        {"update": {"_id": "tt0816711"}},
        {"doc": {"enabled": False}},
    ]
    source = {"chunk_id": "c1", "tokens": "向量"}
    assert index_action(source, with_id=True) == ({"index": {"_id": "c1"}}, source)
    assert index_action(source, with_id=False) == ({"index": {}}, source)  # AOSS vector collections assign ids
    assert "向量" in build_bulk_body([index_action(source, with_id=True)])  # UTF-8, not \\u escapes


def test_delete_by_query_and_scan_bodies() -> None:
    # https://docs.opensearch.org/latest/api-reference/document-apis/delete-by-query/: {"query": {...}}
    assert build_delete_by_query(knowledge_query(["k1"], keep_version="v2")) == {
        "query": {
            "bool": {
                "filter": [DEFAULT_SCOPE, {"terms": {"knowledge_id": ["k1"]}}],
                "must_not": [{"term": {"version": "v2"}}],
            }
        }
    }
    # https://docs.opensearch.org/latest/search-plugins/searching-data/paginate/ ("search_after"): sort + the last
    # hit's sort values.
    assert build_scan_query({"match_all": {}}, 100, ["c9", "v1"]) == {
        "size": 100,
        "query": {"match_all": {}},
        "_source": False,
        "sort": [{"chunk_id": "asc"}, {"version": "asc"}],
        "search_after": ["c9", "v1"],
    }


def test_hybrid_query_and_search_pipeline_follow_the_docs() -> None:
    # https://docs.opensearch.org/latest/search-plugins/search-pipelines/normalization-processor/ ("Creating a
    # search pipeline"): min_max + arithmetic_mean with one weight per query, in query order.
    assert build_search_pipeline(0.3, 0.7) == {
        "description": "ragstep: min-max normalised BM25 and k-NN scores, weighted arithmetic mean",
        "phase_results_processors": [
            {
                "normalization-processor": {
                    "normalization": {"technique": "min_max"},
                    "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [0.3, 0.7]}},
                }
            }
        ],
    }
    weights = build_search_pipeline(3, 7)["phase_results_processors"][0]["normalization-processor"]["combination"]
    assert sum(weights["parameters"]["weights"]) == pytest.approx(1.0)  # the processor requires a sum of 1.0
    with pytest.raises(InputError):
        build_search_pipeline(0, 0)
    # https://docs.opensearch.org/latest/query-dsl/compound/hybrid/: {"query": {"hybrid": {"queries": [...]}}}
    flt = SearchFilter(knowledge_base_ids=("kb1",))
    assert build_hybrid_query(["apple"], [1.0, 0.0], FIELD, flt, 4) == {
        "size": 4,
        "_source": ["chunk_id", "version"],
        "query": {
            "hybrid": {
                "queries": [
                    {
                        "bool": {
                            "should": [{"term": {"tokens": "apple"}}],
                            "minimum_should_match": 1,
                            "filter": [
                                DEFAULT_SCOPE,
                                {"term": {"enabled": True}},
                                {"terms": {"knowledge_base_id": ["kb1"]}},
                            ],
                        }
                    },
                    {
                        "knn": {
                            FIELD: {
                                "vector": [1.0, 0.0],
                                "k": 4,
                                "filter": {
                                    "bool": {
                                        "filter": [
                                            DEFAULT_SCOPE,
                                            {"term": {"enabled": True}},
                                            {"terms": {"knowledge_base_id": ["kb1"]}},
                                        ]
                                    }
                                },
                            }
                        }
                    },
                ]
            }
        },
    }


def test_documents_carry_our_tokens_and_rebuild_the_chunk() -> None:
    faq = chunk(
        "c1",
        "答案：北京是中国的首都。",
        index_text="中国的首都是哪里？ What is the capital of China?",
        embed_text="not stored",
        chunk_type=ChunkType.FAQ,
        tag_id="t1",
        chunk_index=3,
        metadata={"answers": ["北京"]},
    )
    source = build_document(faq, version="v1", space=SPACE, vector=[0.6, 0.8])
    # BM25 sees exactly our tokenizer's terms (jieba for Han runs), joined by the spaces the whitespace analyzer
    # splits on; FAQ entries are matched on their questions (index_text), not on the answer.
    assert source["tokens"] == " ".join(tokenize(faq.index_text or ""))
    assert "首都" in source["tokens"].split() and "capital" in source["tokens"].split()
    assert source[FIELD] == [0.6, 0.8] and source["space"] == SPACE
    assert source["chunk_type"] == "faq" and source["version"] == "v1" and source["chunk_index"] == 3
    assert "content" not in source["doc"] and "embed_text" not in source["doc"]
    assert chunk_from_source(source) == faq.model_copy(update={"embed_text": None})
    # The top-level enabled flag is the truth (set_enabled changes only that field).
    assert chunk_from_source({**source, "enabled": False}).enabled is False
    bare = build_document(chunk("c2", "plain"), version="v1")
    assert "space" not in bare and not any(k.startswith("vec_") for k in bare)


# ================================================================================= responses from the docs' samples

# The response of "Step 3" in https://docs.opensearch.org/latest/vector-search/filter-search-knn/efficient-knn-filtering/
DOC_KNN_RESPONSE = {
    "took": 2,
    "timed_out": False,
    "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
    "hits": {
        "total": {"value": 2, "relation": "eq"},
        "max_score": 0.8620689,
        "hits": [
            {
                "_index": "products-shirts",
                "_id": "8",
                "_score": 0.8620689,
                "_source": {"item_vector": [2.4, 4, 3], "size": "small", "rating": 8},
            },
            {
                "_index": "products-shirts",
                "_id": "6",
                "_score": 0.029691212,
                "_source": {"item_vector": [6.4, 3.4, 6.6], "size": "small", "rating": 9},
            },
        ],
    },
}

# "When operations fail" in https://docs.opensearch.org/latest/api-reference/document-apis/bulk/, plus a rejected
# (429) item as a busy node answers, between two successes.
DOC_BULK_ERRORS = {
    "took": 9,
    "errors": True,
    "items": [
        {"index": {"_index": "movies", "_id": "a", "_version": 1, "result": "created", "status": 201}},
        {
            "update": {
                "_index": "movies",
                "_id": "nonexistent1",
                "status": 404,
                "error": {
                    "type": "document_missing_exception",
                    "reason": "[nonexistent1]: document missing",
                    "index": "movies",
                    "shard": "0",
                    "index_uuid": "UZdzhOjDQvGihxfS-m_UFA",
                },
            }
        },
        {
            "index": {
                "_index": "movies",
                "_id": "b",
                "status": 429,
                "error": {"type": "es_rejected_execution_exception", "reason": "rejected execution"},
            }
        },
        {"delete": {"_index": "movies", "_id": "tt2229499", "result": "not_found", "status": 404}},
    ],
}


def test_parse_search_response_on_the_documented_sample() -> None:
    hits = parse_search_response(DOC_KNN_RESPONSE)
    assert [(h.doc_id, h.chunk_id, h.score) for h in hits] == [("8", "8", 0.8620689), ("6", "6", 0.029691212)]
    assert hits[0].source["size"] == "small"
    # Our documents name their chunk in _source (AOSS assigns _id itself).
    ours = parse_search_response({"hits": {"hits": [{"_id": "Xy1", "_score": 2.0, "_source": {"chunk_id": "c1"}}]}})
    assert ours[0].chunk_id == "c1" and ours[0].doc_id == "Xy1"
    assert parse_search_response({"hits": {"hits": []}}) == []


def test_cosinesimil_scores_convert_back_to_the_cosine() -> None:
    # https://docs.opensearch.org/latest/mappings/supported-field-types/knn-spaces/: cosinesimil has
    # d = 1 - cos and score = (2 - d) / 2 = (1 + cos) / 2.
    rng = np.random.default_rng(7)
    for _ in range(20):
        a, b = rng.normal(size=8), rng.normal(size=8)
        cos = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
        d = 1 - cos
        assert cosine_from_score((2 - d) / 2) == pytest.approx(cos, abs=1e-12)
    assert cosine_from_score(1.0) == 1.0 and cosine_from_score(0.5) == 0.0 and cosine_from_score(0.0) == -1.0
    assert cosine_from_score(1.0000001) == 1.0  # float noise never leaves [-1, 1]
    hits = vector_hits(parse_search_response(DOC_KNN_RESPONSE), threshold=0.2)
    assert [h.chunk_id for h in hits] == ["8"]  # (1 + cos) / 2 = 0.0297 is cos = -0.94: below 0.2
    assert hits[0].score == pytest.approx(2 * 0.8620689 - 1) and hits[0].raw_score == hits[0].score
    assert len(vector_hits(parse_search_response(DOC_KNN_RESPONSE), threshold=-1.0)) == 2


def raw(*scores: float, ids: str = "abcdefgh") -> list[SearchHit]:
    return [SearchHit(doc_id=i, chunk_id=i, version="v", score=s) for i, s in zip(ids, scores, strict=False)]


def test_keyword_scores_are_normalised_to_the_best_hit_then_thresholded() -> None:
    hits = keyword_hits(raw(4.0, 2.0, 1.0), threshold=0.5)
    assert [(h.chunk_id, h.score, h.raw_score) for h in hits] == [("a", 1.0, 4.0), ("b", 0.5, 2.0)]
    assert keyword_hits([], 0.0) == []
    # A copy of a chunk (AOSS, mid-replace) counts once, at its best rank.
    dup = [*raw(3.0, ids="a"), *raw(2.0, ids="a"), *raw(1.5, ids="b")]
    assert [h.chunk_id for h in keyword_hits(dup, 0.0)] == ["a", "b"]


def test_keyword_normalisation_matches_the_local_index(tmp_path: Path) -> None:
    local = LocalSearchIndex(tmp_path)
    local.replace_knowledge(
        "k1",
        [
            chunk("d0", "apple banana"),
            chunk("d1", "apple apple cherry"),
            chunk("d2", "banana split with apple on top"),
            chunk("d3", "durian"),
        ],
    )
    for threshold in (0.0, 0.3, 0.7, 1.0):
        expected = local.keyword_search(["apple", "banana"], ALL, 10, threshold)
        # Feed the local raw BM25 scores through the OpenSearch path's normalisation: same hits, same scores.
        everything = local.keyword_search(["apple", "banana"], ALL, 10, 0.0)
        got = keyword_hits([SearchHit(h.chunk_id, h.chunk_id, "v", h.raw_score) for h in everything], threshold)
        assert [(h.chunk_id, round(h.score, 6)) for h in got] == [(h.chunk_id, round(h.score, 6)) for h in expected]


def test_parse_bulk_response_with_per_item_errors() -> None:
    items = parse_bulk_response(DOC_BULK_ERRORS)
    assert [(i.action, i.status, i.doc_id, i.ok) for i in items] == [
        ("index", 201, "a", True),
        ("update", 404, "nonexistent1", False),
        ("index", 429, "b", False),
        ("delete", 404, "tt2229499", False),
    ]
    assert items[1].error_type == "document_missing_exception"
    assert items[1].error_reason == "[nonexistent1]: document missing"
    assert items[3].result == "not_found" and items[3].error_type == ""


def test_parse_mapping_and_stats_responses() -> None:
    # GET /<index>/_mapping answers keyed by the concrete index name.
    mapping = {"ragstep-chunks-000001": build_mapping({SPACE: 384, "bedrock:titan": 1024})}
    assert parse_mapping_response(mapping) == {FIELD: 384, space_field("bedrock:titan"): 1024}
    stats = parse_stats_response(
        {
            "hits": {"total": {"value": 12, "relation": "eq"}, "hits": []},
            "aggregations": {
                "knowledge_items": {"value": 3},
                "spaces": {"buckets": [{"key": SPACE, "doc_count": 9}]},
            },
        }
    )
    assert (stats.chunks, stats.knowledge_items, stats.vector_spaces) == (12, 3, {SPACE: 9})
    assert parse_stats_response({"hits": {"hits": []}}).chunks == 0


def test_newest_version_of_a_chunk_wins() -> None:
    hits = [
        SearchHit("x1", "c1", "0001-a", 0.0, {"enabled": True}),
        SearchHit("x2", "c2", "0001-a", 0.0),
        SearchHit("x3", "c1", "0002-b", 0.0, {"enabled": False}),
    ]
    newest = newest_per_chunk(hits)
    assert [(h.chunk_id, h.doc_id) for h in newest] == [("c1", "x3"), ("c2", "x2")]


# ======================================================================================== over HTTP (scripted server)


def ok(body: Any) -> ScriptedResponse:
    return ScriptedResponse(200, body)


def error(status: int, kind: str, reason: str) -> ScriptedResponse:
    return ScriptedResponse(status, {"error": {"root_cause": [], "type": kind, "reason": reason}, "status": status})


NO_INDEX = error(404, "index_not_found_exception", "no such index [t]")
NO_HITS = ok({"hits": {"total": {"value": 0, "relation": "eq"}, "hits": []}})


def bulk_ok(request: RecordedRequest) -> ScriptedResponse:
    """Answer a _bulk with one success per action line (sources follow index/update actions)."""
    lines = [json.loads(line) for line in request.body.decode().splitlines()]
    items, i = [], 0
    while i < len(lines):
        action, meta = next(iter(lines[i].items()))
        status, result = {"index": (201, "created"), "update": (200, "updated"), "delete": (200, "deleted")}[action]
        items.append({action: {"_index": "t", "_id": meta.get("_id", f"auto{i}"), "result": result, "status": status}})
        i += 1 if action == "delete" else 2
    return ok({"took": 1, "errors": False, "items": items})


def bulk_lines(request: RecordedRequest) -> list[Any]:
    return [json.loads(line) for line in request.body.decode().splitlines()]


@pytest.fixture
def server() -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer() as srv:
        yield srv


@pytest.fixture
def make_index(server: ScriptedHTTPServer) -> Callable[..., OSIndex]:
    def make(**kw: Any) -> OSIndex:
        kw.setdefault("index", "t")
        kw.setdefault("auth", "none")
        kw.setdefault("backoff_base_s", 0.0)
        kw.setdefault("max_retries", 2)
        kw.setdefault("sleep", lambda _s: None)
        return OSIndex(server.url, **kw)

    return make


def mapping_of(spaces: dict[str, int]) -> ScriptedResponse:
    return ok({"t": build_mapping(spaces)})


def test_replace_over_http_creates_the_index_retries_429_and_drops_the_old_version(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    server.add(
        NO_INDEX,  # GET /t/_mapping
        ok({"acknowledged": True, "shards_acknowledged": True, "index": "t"}),  # PUT /t
        NO_HITS,  # chunk id conflict check
        error(429, "es_rejected_execution_exception", "rejected execution of coordinating operation"),
        bulk_ok,
        ok({"took": 5, "timed_out": False, "total": 1, "deleted": 1, "failures": []}),  # _delete_by_query
    )
    idx = make_index()
    chunks = [chunk("c1", "Vector search finds neighbours."), chunk("c2", "向量检索找到相似的文本。", chunk_index=1)]
    vectors = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]], dtype=np.float32)
    idx.replace_knowledge("k1", chunks, vectors, SPACE)
    assert server.pending == 0

    reqs = server.requests
    assert [(r.method, r.path) for r in reqs] == [
        ("GET", "/t/_mapping"),
        ("PUT", "/t"),
        ("POST", "/t/_search"),
        ("POST", "/t/_bulk"),
        ("POST", "/t/_bulk"),
        ("POST", "/t/_delete_by_query"),
    ]
    assert reqs[1].json == build_mapping({SPACE: 3})
    assert reqs[2].json["query"]["bool"]["must_not"] == [{"term": {"knowledge_id": "k1"}}]
    # The 429 was retried with the same body; the bulk waits for a refresh so the old version can go next.
    assert reqs[3].body == reqs[4].body
    assert reqs[4].query == {"refresh": ["wait_for"]}
    assert reqs[4].headers["content-type"] == "application/x-ndjson"
    lines = bulk_lines(reqs[4])
    assert lines[0] == {"index": {"_id": "c1"}} and lines[2] == {"index": {"_id": "c2"}}
    first, second = lines[1], lines[3]
    assert first[FIELD] == pytest.approx([0.6, 0.8, 0.0]) and second[FIELD] == pytest.approx([0.0, 0.0, 1.0])
    assert second["tokens"] == " ".join(tokenize("向量检索找到相似的文本。"))
    version = first["version"]
    assert second["version"] == version
    # Then everything of k1 that is not the new version goes (delete by query; refresh=true, not wait_for).
    assert reqs[5].query == {"refresh": ["true"], "conflicts": ["proceed"]}
    assert reqs[5].json == build_delete_by_query(knowledge_query(["k1"], keep_version=version))


def test_a_large_documents_bulk_requests_are_told_to_the_ingest_progress(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    """A document of more chunks than one bulk request holds goes in over several requests; each one is told to
    whoever shows ingest progress, so a large file's write to a cluster is not minutes of silence."""

    class Notes:
        def __init__(self) -> None:
            self.told: list[tuple[int, int]] = []

        def chunking(self, done: int, total: int) -> None: ...

        def chunked(self, count: int) -> None: ...

        def indexing(self, done: int, total: int) -> None:
            self.told.append((done, total))

        def embedded(self, count: int) -> None: ...

        def ocr_page(self, done: int, total: int) -> None: ...

    notes = Notes()
    total = BULK_MAX_ACTIONS + 7
    server.add(mapping_of({}), NO_HITS, bulk_ok, bulk_ok, ok({"took": 1, "deleted": 0, "failures": []}))
    with listening(notes):
        make_index().replace_knowledge("k1", [chunk(f"c{i}", f"chunk number {i}", chunk_index=i) for i in range(total)])
    assert [r.path for r in server.requests].count("/t/_bulk") == 2
    assert notes.told == [(BULK_MAX_ACTIONS, total), (total, total)]


def test_bulk_item_failures_name_the_chunks_and_rejected_items_are_resent(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    def partial(request: RecordedRequest) -> ScriptedResponse:
        return ok(
            {
                "took": 3,
                "errors": True,
                "items": [
                    {"index": {"_id": "c1", "status": 201, "result": "created"}},
                    {
                        "index": {
                            "_id": "c2",
                            "status": 400,
                            "error": {"type": "mapper_parsing_exception", "reason": "failed to parse field [doc]"},
                        }
                    },
                    {
                        "index": {
                            "_id": "c3",
                            "status": 429,
                            "error": {"type": "es_rejected_execution_exception", "reason": "queue full"},
                        }
                    },
                ],
            }
        )

    server.add(mapping_of({}), NO_HITS, partial, bulk_ok)
    idx = make_index()
    with pytest.raises(StorageError) as err:
        idx.replace_knowledge("k1", [chunk("c1", "one"), chunk("c2", "two"), chunk("c3", "three")])
    msg = err.value.message
    assert "c2" in msg and "mapper_parsing_exception" in msg and "failed to parse field [doc]" in msg
    assert "c1" not in msg.split("(")[1] and "c3" not in msg  # c3 succeeded when sent again
    assert "retry" in msg
    resent = bulk_lines(server.requests[-1])
    assert [line for line in resent if "index" in line] == [{"index": {"_id": "c3"}}]
    # The old version was not touched: no delete after a failed write.
    assert all(r.path != "/t/_delete_by_query" for r in server.requests)


def test_persistent_429_becomes_a_storage_error(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    server.set_fallback(error(429, "es_rejected_execution_exception", "rejected execution"))
    slept: list[float] = []
    idx = make_index(max_retries=3, backoff_base_s=0.5, sleep=slept.append)
    with pytest.raises(StorageError, match=r"after 4 attempts: HTTP 429 es_rejected_execution_exception"):
        idx.stats()
    assert len(server.requests) == 4
    # Exponential backoff with jitter: attempt n waits between half and all of 0.5 * 2**n seconds.
    assert len(slept) == 3
    for n, s in enumerate(slept):
        assert 0.25 * 2**n <= s <= 0.5 * 2**n


def test_client_errors_are_not_retried(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    server.add(error(403, "security_exception", "no permissions for [indices:data/read/search]"))
    with pytest.raises(StorageError, match=r"403 security_exception.*access policy"):
        make_index().keyword_search(["apple"], ALL, 5, 0.0)
    assert len(server.requests) == 1


def test_searches_over_http(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    server.add(
        ok(
            {
                "hits": {
                    "max_score": 6.0,
                    "hits": [
                        {"_id": "c1", "_score": 6.0, "_source": {"chunk_id": "c1", "version": "v"}},
                        {"_id": "c2", "_score": 3.0, "_source": {"chunk_id": "c2", "version": "v"}},
                        {"_id": "c3", "_score": 1.2, "_source": {"chunk_id": "c3", "version": "v"}},
                    ],
                }
            }
        ),
        mapping_of({SPACE: 2}),
        ok(
            {
                "hits": {
                    "hits": [
                        {"_id": "c2", "_score": 0.9, "_source": {"chunk_id": "c2", "version": "v"}},
                        {"_id": "c1", "_score": 0.55, "_source": {"chunk_id": "c1", "version": "v"}},
                    ]
                }
            }
        ),
    )
    idx = make_index()
    flt = SearchFilter(knowledge_base_ids=("kb1",))
    terms = query_terms("向量检索 vector search")
    kw = idx.keyword_search(terms, flt, 7, 0.3)
    assert [(h.chunk_id, h.score, h.raw_score) for h in kw] == [("c1", 1.0, 6.0), ("c2", 0.5, 3.0)]
    vec = idx.vector_search(np.array([0.0, 2.0], dtype=np.float32), SPACE, flt, 4, 0.5)
    assert [h.chunk_id for h in vec] == ["c2"] and vec[0].score == pytest.approx(0.8)

    reqs = server.requests
    assert (reqs[0].method, reqs[0].path, reqs[0].json) == ("POST", "/t/_search", build_keyword_query(terms, flt, 7))
    assert (reqs[1].method, reqs[1].path) == ("GET", "/t/_mapping")
    assert reqs[2].json == build_knn_query([0.0, 1.0], FIELD, flt, 4)  # the query vector goes out unit-length

    # A space nobody embedded into has no field: no query, no hits (as locally); a wrong dimension is an error.
    server.add(mapping_of({SPACE: 2}))
    assert idx.vector_search(np.ones(3, dtype=np.float32), "other:model", flt, 4, 0.0) == []
    with pytest.raises(InputError, match="3 dimensions"):
        idx.vector_search(np.ones(3, dtype=np.float32), SPACE, flt, 4, 0.0)
    assert idx.vector_search(np.zeros(2, dtype=np.float32), SPACE, flt, 4, 0.0) == []
    assert idx.keyword_search([], flt, 4, 0.0) == [] and idx.keyword_search(["x"], flt, 0, 0.0) == []


def test_missing_index_reads_as_empty(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    server.set_fallback(NO_INDEX)
    idx = make_index()
    assert idx.keyword_search(["apple"], ALL, 5, 0.0) == []
    assert idx.vector_search(np.ones(2, dtype=np.float32), SPACE, ALL, 5, 0.0) == []
    assert idx.fetch(["c1"]) == {}
    assert idx.knowledge_chunks("k1", 5) == []
    assert idx.stats().chunks == 0
    assert idx.delete_knowledge(["k1"]) == 0
    assert idx.delete_knowledge_base("kb1") == 0


def test_fetch_and_knowledge_chunks_rebuild_chunks(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    a = chunk("c1", "第一段", chunk_index=0, metadata={"page": 1})
    b = chunk("c2", "second", chunk_index=1, enabled=False)
    docs = [build_document(a, version="v1"), build_document(b, version="v1")]
    found = [{"_id": d["chunk_id"], "_score": 1.0, "_source": d} for d in docs]
    server.add(ok({"hits": {"hits": found}}), ok({"hits": {"hits": found[:1]}}))
    idx = make_index()
    assert idx.fetch(["c1", "c2", "c1"]) == {"c1": a, "c2": b}
    assert idx.knowledge_chunks("k1", 10) == [a]
    fetch_body, chunks_body = server.requests[0].json, server.requests[1].json
    assert fetch_body["query"] == {"bool": {"filter": [DEFAULT_SCOPE, {"terms": {"chunk_id": ["c1", "c2"]}}]}}
    assert fetch_body["_source"] == {"excludes": ["tokens", "vec_*"]}
    assert chunks_body["sort"] == [{"chunk_index": "asc"}, {"chunk_id": "asc"}]
    assert chunks_body["query"]["bool"]["filter"] == [
        DEFAULT_SCOPE,
        {"term": {"knowledge_id": "k1"}},
        {"term": {"enabled": True}},
    ]


def test_set_enabled_sends_partial_updates(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    server.add(
        ok(
            {
                "errors": True,
                "items": [
                    {"update": {"_id": "c1", "status": 200, "result": "updated"}},
                    {
                        "update": {
                            "_id": "gone",
                            "status": 404,
                            "error": {"type": "document_missing_exception", "reason": "[gone]: document missing"},
                        }
                    },
                ],
            }
        )
    )
    assert make_index().set_enabled(["c1", "gone"], False) == 1  # a missing chunk is not an error (as locally)
    req = server.requests[0]
    assert req.path == "/t/_bulk" and req.query == {"refresh": ["wait_for"]}
    assert bulk_lines(req) == [
        {"update": {"_id": "c1"}},
        {"doc": {"enabled": False}},
        {"update": {"_id": "gone"}},
        {"doc": {"enabled": False}},
    ]


def test_conflicting_chunk_ids_and_dimensions_are_refused_before_writing(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    other = {"_id": "c1", "_score": 0.0, "_source": {"chunk_id": "c1", "knowledge_id": "k0"}}
    server.add(mapping_of({SPACE: 3}), ok({"hits": {"hits": [other]}}))
    idx = make_index()
    with pytest.raises(ConflictError, match="c1 belongs to k0"):
        idx.replace_knowledge("k1", [chunk("c1", "x")])
    with pytest.raises(InputError, match="holds 3-dimensional vectors, got 4"):
        idx.replace_knowledge("k1", [chunk("c1", "x")], np.ones((1, 4), dtype=np.float32), SPACE)
    with pytest.raises(InputError, match="belongs to knowledge k2"):
        idx.replace_knowledge("k1", [chunk("c1", "x", kid="k2")])
    assert all(r.path != "/t/_bulk" for r in server.requests)


def test_new_space_is_added_to_the_mapping(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    server.add(mapping_of({}), ok({"acknowledged": True}))
    make_index().ensure_index({SPACE: 8})
    put = server.requests[1]
    assert (put.method, put.path) == ("PUT", "/t/_mapping")
    assert put.json == {"properties": {FIELD: build_mapping({SPACE: 8})["mappings"]["properties"][FIELD]}}


def test_aoss_replace_uses_generated_ids_waits_for_visibility_and_deletes_by_id(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    old = [
        {"_id": "AbC1", "_score": None, "sort": ["c1", "0001-old"]},
        {"_id": "AbC2", "_score": None, "sort": ["c9", "0001-old"]},
    ]
    server.add(
        ok({"t": build_mapping({}, custom_similarity=False)}),
        NO_HITS,
        bulk_ok,
        ok({"count": 1}),  # not all new chunks searchable yet
        ok({"count": 2}),
        ok({"hits": {"hits": old}}),  # the scan for the previous version's documents
        bulk_ok,
    )
    slept: list[float] = []
    idx = make_index(flavour="aoss", sleep=slept.append)
    idx.replace_knowledge("k1", [chunk("c1", "one"), chunk("c2", "two")])
    reqs = server.requests
    assert [(r.method, r.path) for r in reqs] == [
        ("GET", "/t/_mapping"),
        ("POST", "/t/_search"),
        ("POST", "/t/_bulk"),
        ("POST", "/t/_count"),
        ("POST", "/t/_count"),
        ("POST", "/t/_search"),
        ("POST", "/t/_bulk"),
    ]
    assert all(r.query == {} for r in reqs)  # no refresh parameter on AOSS
    written = bulk_lines(reqs[2])
    assert written[0] == {"index": {}} and written[2] == {"index": {}}  # the collection assigns the ids
    version = written[1]["version"]
    assert reqs[3].json == {
        "query": {"bool": {"filter": [DEFAULT_SCOPE, {"term": {"knowledge_id": "k1"}}, {"term": {"version": version}}]}}
    }
    assert len(slept) == 1
    assert reqs[5].json == build_scan_query(knowledge_query(["k1"], keep_version=version), 1000)
    assert bulk_lines(reqs[6]) == [{"delete": {"_id": "AbC1"}}, {"delete": {"_id": "AbC2"}}]


def test_aoss_set_enabled_reindexes_a_copy(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    doc = build_document(chunk("c1", "one"), version="0001-a", space=SPACE, vector=[1.0, 0.0])
    server.add(
        ok({"hits": {"hits": [{"_id": "Gen1", "_score": 0.0, "_source": doc}]}}),
        bulk_ok,
        ok({"count": 1}),
        bulk_ok,
    )
    assert make_index(flavour="aoss").set_enabled(["c1", "missing"], False) == 1
    reqs = server.requests
    lookup = reqs[0].json
    assert lookup["query"] == {"bool": {"filter": [DEFAULT_SCOPE, {"terms": {"chunk_id": ["c1", "missing"]}}]}}
    # The copy needs the vector and tokens: asked for by name, since newer collections leave vectors out of _source
    assert lookup["_source"] == {"includes": ["*", "vec_*"]}
    copy = bulk_lines(reqs[1])
    assert copy[0] == {"index": {}}
    assert copy[1] == {**doc, "enabled": False, "version": copy[1]["version"]} and copy[1]["version"] > "0001-a"
    assert bulk_lines(reqs[3]) == [{"delete": {"_id": "Gen1"}}]


def test_search_pipeline_names_follow_the_normalised_weights() -> None:
    assert search_pipeline_name("t") == "t-hybrid-k300000-v700000"
    assert search_pipeline_name("t", 3, 7) == search_pipeline_name("t", 0.3, 0.7)  # same weights after normalising
    assert search_pipeline_name("t", 1, 2) == "t-hybrid-k333333-v666667"
    assert search_pipeline_name("t", 0.5, 0.5) != search_pipeline_name("t", 0.3, 0.7)
    with pytest.raises(InputError, match="not both zero"):
        search_pipeline_name("t", 0, 0)


def hits_of(*pairs: tuple[str, float]) -> ScriptedResponse:
    return ok(
        {"hits": {"hits": [{"_id": c, "_score": sc, "_source": {"chunk_id": c, "version": "v"}} for c, sc in pairs]}}
    )


PIPE = "t-hybrid-k300000-v700000"


def test_hybrid_search_over_http(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    server.add(mapping_of({SPACE: 2}), ok({"acknowledged": True}), hits_of(("c1", 0.7), ("c2", 0.1)), hits_of())
    idx = make_index(server_hybrid=True)
    vec = np.array([2.0, 0.0], dtype=np.float32)
    hits = idx.hybrid_search(["apple"], vec, SPACE, ALL, 3)
    assert [(h.chunk_id, h.score, h.raw_score) for h in hits] == [("c1", 0.7, 0.7), ("c2", 0.1, 0.1)]
    assert idx.hybrid_search(["apple"], vec, SPACE, ALL, 3) == []
    # The pipeline is created on first use, once per adapter: mapping, PUT, search, then the second search alone.
    reqs = server.requests
    assert [(r.method, r.path) for r in reqs] == [
        ("GET", "/t/_mapping"),
        ("PUT", f"/_search/pipeline/{PIPE}"),
        ("POST", "/t/_search"),
        ("POST", "/t/_search"),
    ]
    assert reqs[1].json == build_search_pipeline(0.3, 0.7)
    for search in reqs[2:]:
        assert search.query == {"search_pipeline": [PIPE]}
        assert search.json == build_hybrid_query(["apple"], [1.0, 0.0], FIELD, ALL, 3)  # unit query vector

    # Other weights: their own pipeline (created once too); the same weights scaled: the existing one.
    server.add(ok({"acknowledged": True}), hits_of(), hits_of(), hits_of())
    idx.hybrid_search(["apple"], vec, SPACE, ALL, 3, w_keyword=0.5, w_vector=0.5)
    idx.hybrid_search(["apple"], vec, SPACE, ALL, 3, w_keyword=1, w_vector=1)
    idx.hybrid_search(["apple"], vec, SPACE, ALL, 3, w_keyword=3, w_vector=7)
    more = server.requests[4:]
    assert [(r.method, r.path, r.query) for r in more] == [
        ("PUT", "/_search/pipeline/t-hybrid-k500000-v500000", {}),
        ("POST", "/t/_search", {"search_pipeline": ["t-hybrid-k500000-v500000"]}),
        ("POST", "/t/_search", {"search_pipeline": ["t-hybrid-k500000-v500000"]}),
        ("POST", "/t/_search", {"search_pipeline": [PIPE]}),
    ]
    assert more[0].json == build_search_pipeline(0.5, 0.5)

    # Nothing embedded in the space (the mapping is read again to be sure): a plain keyword search, no pipeline.
    server.add(
        mapping_of({SPACE: 2}),
        ok({"hits": {"hits": [{"_id": "c1", "_score": 2.0, "_source": {"chunk_id": "c1", "version": "v"}}]}}),
    )
    assert [h.chunk_id for h in idx.hybrid_search(["apple"], np.ones(3), "other:model", ALL, 3)] == ["c1"]
    assert server.requests[-1].json == build_keyword_query(["apple"], ALL, 3) and server.requests[-1].query == {}


def test_hybrid_pipeline_is_created_once_under_concurrency(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    # A slow PUT: every thread reaches the pipeline check while the first creation is still in flight.
    server.add(mapping_of({SPACE: 2}))
    server.set_fallback(
        lambda r: (
            ScriptedResponse(200, {"acknowledged": True}, delay_s=0.3) if r.method == "PUT" else hits_of(("c1", 1.0))
        )
    )
    idx = make_index(server_hybrid=True)
    idx.ensure_index()  # the mapping is read once, before the threads start
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def search() -> None:
        try:
            results.append([h.chunk_id for h in idx.hybrid_search(["apple"], np.ones(2), SPACE, ALL, 3)])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=search) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert errors == [] and results == [["c1"]] * 8
    puts = [r for r in server.requests if r.method == "PUT"]
    assert [r.path for r in puts] == [f"/_search/pipeline/{PIPE}"]
    assert sum(1 for r in server.requests if r.query == {"search_pipeline": [PIPE]}) == 8


def test_hybrid_pipeline_gone_from_the_cluster_is_created_again(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    server.add(mapping_of({SPACE: 2}), ok({"acknowledged": True}), hits_of(("c1", 1.0)))
    idx = make_index(server_hybrid=True)
    idx.hybrid_search(["apple"], np.ones(2), SPACE, ALL, 3)
    # OpenSearch's answer to a search through an unknown pipeline (SearchPipelineService.resolvePipeline).
    server.add(
        error(400, "illegal_argument_exception", f"Pipeline {PIPE} is not defined"),
        ok({"acknowledged": True}),
        hits_of(("c2", 1.0)),
    )
    assert [h.chunk_id for h in idx.hybrid_search(["apple"], np.ones(2), SPACE, ALL, 3)] == ["c2"]
    assert [(r.method, r.path) for r in server.requests[3:]] == [
        ("POST", "/t/_search"),
        ("PUT", f"/_search/pipeline/{PIPE}"),
        ("POST", "/t/_search"),
    ]
    # Other client errors are not retried, and the pipeline stays known (no PUT).
    server.add(error(400, "parsing_exception", "unknown query [hybrid]"))
    with pytest.raises(StorageError, match="unknown query"):
        idx.hybrid_search(["apple"], np.ones(2), SPACE, ALL, 3)
    assert len(server.requests) == 7
    # The index deleted behind the cached mapping: nothing found, as for the other searches.
    server.add(NO_INDEX)
    assert idx.hybrid_search(["apple"], np.ones(2), SPACE, ALL, 3) == []


def test_server_hybrid_is_refused_on_aoss(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    with pytest.raises(InputError, match=r"OpenSearch Serverless.*unset RAGSTEP_OPENSEARCH_SERVER_HYBRID"):
        make_index(flavour="aoss", server_hybrid=True)
    with pytest.raises(InputError, match="Serverless"):
        make_index(flavour="aoss").hybrid_search(["apple"], np.ones(2), SPACE, ALL, 3)
    # At configuration time: the settings themselves do not validate (the CLI prints "field: message").
    with pytest.raises(ValidationError) as err:
        Settings(opensearch_url=server.url, opensearch_flavour="aoss", opensearch_server_hybrid=True)
    first = err.value.errors()[0]
    assert first["loc"] == ("opensearch_server_hybrid",)
    assert "RAGSTEP_OPENSEARCH_FLAVOUR=es" in first["msg"] and "unset RAGSTEP_OPENSEARCH_SERVER_HYBRID" in first["msg"]
    assert Settings(opensearch_flavour="es", opensearch_server_hybrid=True).opensearch_server_hybrid is True
    assert server.requests == []


# ------------------------------------------------------------ the search stage with server-side fusion (scripted)

MODEL = "precomputed:hybrid-test"
MFIELD = space_field(MODEL)
QVEC = [1.0, 0.0, 0.0, 0.0]


class StageCluster:
    """Answers the search stage's requests by what they are (concurrent retrievers arrive in any order): the mapping,
    pipeline creation, hybrid searches (``hybrid``), k-NN and keyword searches by knowledge base, and fetches."""

    def __init__(self, chunks: list[Chunk]) -> None:
        self.docs = {c.id: build_document(c, version="v") for c in chunks}
        self.hybrid: Callable[[RecordedRequest], ScriptedResponse] = lambda _r: hits_of()
        self.knn: dict[str, list[tuple[str, float]]] = {}
        self.keyword: Callable[[str, list[str]], list[tuple[str, float]]] = lambda _kb, _terms: []

    def __call__(self, req: RecordedRequest) -> ScriptedResponse:
        if (req.method, req.path) == ("GET", "/t/_mapping"):
            return mapping_of({MODEL: len(QVEC)})
        if req.method == "PUT" and req.path.startswith("/_search/pipeline/"):
            return ok({"acknowledged": True})
        if req.path == "/t/_count":  # the trace's keyword_only_chunks: every chunk here has its vector
            return ok({"count": 0})
        query = (req.json or {}).get("query", {})
        kb = (find_terms(query, "knowledge_base_id") or [""])[0]
        if "search_pipeline" in req.query:
            return self.hybrid(req)
        if "knn" in query:
            return hits_of(*self.knn.get(kb, []))
        ids = find_terms(query, "chunk_id")
        if ids is not None:
            found = [{"_id": i, "_score": 0.0, "_source": self.docs[i]} for i in ids if i in self.docs]
            return ok({"hits": {"hits": found}})
        should = query.get("bool", {}).get("should")
        if should:
            return hits_of(*self.keyword(kb, [c["term"]["tokens"] for c in should]))
        return error(400, "unexpected_request", f"{req.method} {req.path} {req.json}")


def kind(req: RecordedRequest) -> str:
    query = (req.json or {}).get("query", {})
    if req.method != "POST":
        return req.method
    if req.path.endswith("/_count"):
        return "count"
    if "search_pipeline" in req.query:
        return "hybrid"
    if "knn" in query:
        return "knn"
    return "keyword" if query.get("bool", {}).get("should") else "fetch"


@pytest.fixture
def stage_services(server: ScriptedHTTPServer, tmp_path: Path) -> Context:
    """The search stage on OpenSearch with RAGSTEP_OPENSEARCH_SERVER_HYBRID, built from settings as on Lambda."""
    settings = Settings(
        data_dir=tmp_path / "data",
        index_backend="opensearch",
        opensearch_url=server.url,
        opensearch_index="t",
        opensearch_auth="none",
        opensearch_max_retries=0,
        opensearch_server_hybrid=True,
    )
    ctx = Clients(settings).context()
    ctx.register_embedder(  # declared on the common scale: fused on absolute scales (undeclared: relative)
        ScaledPrecomputedEmbedder(
            MODEL, {"vector search": QVEC, "what is vector search?": QVEC, "zzz": [0.0, 1.0, 0, 0]}, COMMON_SCALE
        )
    )
    for kb_id, kb_type in (("kb-doc", KnowledgeBaseType.DOCUMENT), ("kb-faq", KnowledgeBaseType.FAQ)):
        ctx.catalog.create_kb(
            KnowledgeBase(id=kb_id, name=kb_id, type=kb_type, embedding_model=MODEL, created_at=time.time())
        )
    return ctx


DOCS = [
    chunk("c1", "Vector search finds neighbours.", kid="kd", kb="kb-doc"),
    chunk("c2", "Keyword search ranks with BM25.", kid="kd", kb="kb-doc", chunk_index=1),
    chunk("c3", "Hybrid search combines both.", kid="kd", kb="kb-doc", chunk_index=2),
    chunk("c4", "Search engines index text.", kid="kd", kb="kb-doc", chunk_index=3),
    chunk("f1", "What is vector search?", kid="kf", kb="kb-faq", chunk_type=ChunkType.FAQ, parent_id="entry-1"),
]


def search(ctx: Context, **request: Any):
    return chunk_search.run(new_state(SearchRequest(**request), ctx), ctx)


def run_row(state: Any) -> Any:
    return next(t for t in state.trace if t.stage == "chunk_search" and t.action == "run")


def test_stage_runs_one_hybrid_query_per_target_through_a_lazily_created_pipeline(
    server: ScriptedHTTPServer, stage_services: Clients
) -> None:
    cluster = StageCluster(DOCS)
    cluster.hybrid = lambda _r: hits_of(("c2", 0.9), ("c1", 0.6), ("c3", 0.001))
    server.set_fallback(cluster)
    state = search(
        stage_services, query="vector search", knowledge_base_ids=["kb-doc"], overrides={"embedding_top_k": 2}
    )

    flt = SearchFilter(knowledge_base_ids=("kb-doc",))
    pool = chunk_search.candidate_pool(2, 1)
    reqs = server.requests
    # Mapping, the pipeline (once), ONE hybrid search for the target (no separate k-NN or keyword search), the fetch,
    # and the count of chunks still without a vector for the trace (progressive indexing).
    assert [(r.method, r.path, r.query) for r in reqs] == [
        ("GET", "/t/_mapping", {}),
        ("PUT", f"/_search/pipeline/{PIPE}", {}),
        ("POST", "/t/_search", {"search_pipeline": [PIPE]}),
        ("POST", "/t/_search", {}),
        ("POST", "/t/_count", {}),
    ]
    assert reqs[1].json == build_search_pipeline(0.3, 0.7)
    assert reqs[2].json == build_hybrid_query(query_terms("vector search"), QVEC, MFIELD, flt, pool)
    assert find_terms(reqs[3].json["query"], "chunk_id") == ["c2", "c1", "c3"]

    # The server's order and combined scores, no client-side fusion; hybrid match type.
    assert [(r.id, r.score, r.match_type) for r in state.search_results] == [
        ("c2", 0.9, MatchType.HYBRID),
        ("c1", 0.6, MatchType.HYBRID),
    ]
    assert state.search_results[0].metadata["retrieval"] == {"fusion": "server", "hybrid_score": 0.9, "hybrid_rank": 1}
    assert state.query_embeddings[MODEL] == QVEC
    row = run_row(state)
    assert row.counts == {"vector_hits": 0, "keyword_hits": 0, "hybrid_hits": 3, "results": 2}
    assert row.detail["server_fusion"] == {
        "targets": 1,
        "normalization": "min_max",
        "combination": "arithmetic_mean",
        "pipeline": PIPE,
        "thresholds_applied": False,
    }
    assert not [t for t in state.trace if t.action in ("degrade", "expand", "fallback")]

    # Other weights (a per-request override): a second pipeline, created once; back to the defaults: no PUT at all.
    weights = {"embedding_top_k": 2, "rrf_keyword_weight": 0.5, "rrf_vector_weight": 0.5}
    search(stage_services, query="vector search", knowledge_base_ids=["kb-doc"], overrides=weights)
    search(stage_services, query="vector search", knowledge_base_ids=["kb-doc"], overrides=weights)
    search(stage_services, query="vector search", knowledge_base_ids=["kb-doc"], overrides={"embedding_top_k": 2})
    later = [(r.method, r.path, r.query) for r in server.requests[5:] if kind(r) not in ("fetch", "count")]
    other = "t-hybrid-k500000-v500000"
    assert later == [
        ("PUT", f"/_search/pipeline/{other}", {}),
        ("POST", "/t/_search", {"search_pipeline": [other]}),
        ("POST", "/t/_search", {"search_pipeline": [other]}),
        ("POST", "/t/_search", {"search_pipeline": [PIPE]}),
    ]
    assert server.requests[5].json == build_search_pipeline(0.5, 0.5)


def test_stage_merges_server_fused_and_client_fused_targets(
    server: ScriptedHTTPServer, stage_services: Clients
) -> None:
    # A FAQ knowledge base keeps the k-NN + keyword pair (fused here); the document one runs the hybrid query.
    cluster = StageCluster(DOCS)
    cluster.hybrid = lambda _r: hits_of(("c1", 0.95), ("c2", 0.4))
    cluster.knn = {"kb-faq": [("f1", 0.95)]}  # cosine 0.9
    cluster.keyword = lambda kb, _terms: [("f1", 5.0)] if kb == "kb-faq" else [("c4", 9.0)]
    server.set_fallback(cluster)
    state = search(
        stage_services, query="vector search", knowledge_base_ids=["kb-doc", "kb-faq"], overrides={"embedding_top_k": 3}
    )
    # The FAQ target's two lists (one hit each) fused on absolute scales: cosine 0.9 (the vector weight times the
    # list's best cosine to VECTOR_EVIDENCE_POWER), and 5 points of BM25 in the keyword weight's unit (min-max fusion
    # gave the lone hit 0.7 + 0.3 = 1.0).
    wv, wk = 0.7 * 0.9**VECTOR_EVIDENCE_POWER, 0.3 * 5.0 / KEYWORD_UNIT
    assert [(r.id, r.score, r.match_type) for r in state.search_results] == [
        ("c1", 0.95, MatchType.HYBRID),
        ("entry-1", pytest.approx((wv * 0.9 + wk) / (wv + wk)), MatchType.FAQ),
        ("c2", 0.4, MatchType.HYBRID),
    ]
    by_kind: dict[str, list[list[str]]] = {}
    for r in server.requests:
        by_kind.setdefault(kind(r), []).append(find_terms((r.json or {}).get("query"), "knowledge_base_id") or [])
    assert by_kind["hybrid"] == [["kb-doc"]]
    assert by_kind["knn"] == [["kb-faq"]] and by_kind["keyword"] == [["kb-faq"]]  # none for the hybrid target
    row = run_row(state)
    assert row.counts == {"vector_hits": 1, "keyword_hits": 1, "hybrid_hits": 2, "results": 3, "faq_rounds": 1}
    assert row.detail["server_fusion"]["targets"] == 1 and row.detail["targets"] == 2


def test_failing_hybrid_call_degrades_and_keyword_expansion_still_runs(
    server: ScriptedHTTPServer, stage_services: Clients
) -> None:
    cluster = StageCluster(DOCS)
    cluster.hybrid = lambda _r: error(400, "parsing_exception", "unknown query [hybrid]")  # no neural-search plugin
    found = {("vector",): [("c3", 4.0)], ("search",): [("c3", 2.0), ("c4", 1.0)]}
    cluster.keyword = lambda _kb, terms: found.get(tuple(terms), [])
    server.set_fallback(cluster)
    state = search(stage_services, query="vector search", knowledge_base_ids=["kb-doc"])

    degrade = [t for t in state.trace if t.action == "degrade"]
    assert len(degrade) == 1
    assert "hybrid search #0 failed, dropped" in degrade[0].reason and "unknown query [hybrid]" in degrade[0].reason
    # Expansion's keyword-only variants ("vector", "search") still search the target, as plain keyword queries.
    keyword = [r.json["query"] for r in server.requests if kind(r) == "keyword"]
    assert all(find_terms(q, "knowledge_base_id") == ["kb-doc"] for q in keyword)
    assert sorted([c["term"]["tokens"] for c in q["bool"]["should"]] for q in keyword) == [["search"], ["vector"]]
    assert [kind(r) for r in server.requests].count("hybrid") == 1  # no retry: the hybrid path has no thresholds
    # New chunks score as the pipeline scores keyword-only hits: keyword weight 0.3 x BM25 normalised to the best.
    assert [(r.id, r.score, r.match_type) for r in state.search_results] == [
        ("c3", pytest.approx(0.3), MatchType.KEYWORD),
        ("c4", pytest.approx(0.15), MatchType.KEYWORD),
    ]
    expand = next(t for t in state.trace if t.action == "expand")
    assert expand.counts == {"variants": 2, "new_candidates": 2, "results": 2}
    assert run_row(state).counts["hybrid_hits"] == 0 and run_row(state).detail["server_fusion"]["targets"] == 1
    assert not [t for t in state.trace if t.action == "fallback"]


def test_zero_result_fallback_still_retries_the_targets_with_thresholds(
    server: ScriptedHTTPServer, stage_services: Clients
) -> None:
    cluster = StageCluster(DOCS)
    cluster.knn = {"kb-faq": [("f1", 0.575)]}  # cosine 0.15: below vector_threshold 0.2, above the relaxed 0.1
    server.set_fallback(cluster)
    state = search(stage_services, query="zzz", knowledge_base_ids=["kb-doc", "kb-faq"])

    fallback = [t for t in state.trace if t.action == "fallback"]
    assert len(fallback) == 1 and "vector threshold 0.1" in fallback[0].reason
    assert [(r.id, r.match_type) for r in state.search_results] == [("entry-1", MatchType.FAQ)]
    assert state.search_results[0].score == pytest.approx(0.15)
    kinds = [kind(r) for r in server.requests]
    assert kinds.count("hybrid") == 2 and kinds.count("knn") == 2  # first pass and the relaxed retry
    assert kinds.count("PUT") == 1  # one pipeline for both passes
    assert not [t for t in state.trace if t.action == "degrade"]


def test_scoped_search_with_server_hybrid_falls_back_to_the_items_chunks(
    server: ScriptedHTTPServer, stage_services: Clients
) -> None:
    stage_services.catalog.put_knowledge(Knowledge(id="kd", knowledge_base_id="kb-doc", filename="kd.md"))
    cluster = StageCluster(DOCS)
    chunks_in_order = {
        "hits": {"hits": [{"_id": c.id, "_score": None, "_source": cluster.docs[c.id]} for c in DOCS[:2]]}
    }
    server.set_fallback(lambda r: ok(chunks_in_order) if (r.json or {}).get("sort") else cluster(r))
    state = search(stage_services, query="zzz", knowledge_ids=["kd"], overrides={"embedding_top_k": 2})
    hybrid = [r for r in server.requests if kind(r) == "hybrid"]
    assert len(hybrid) == 1
    assert hybrid[0].json == build_hybrid_query(
        query_terms("zzz"), [0.0, 1.0, 0.0, 0.0], MFIELD, SearchFilter(knowledge_ids=("kd",)), 50
    )
    assert [r.id for r in state.search_results] == ["c1", "c2"]
    assert [t.action for t in state.trace if t.action == "fallback"] == ["fallback"]


ACME = {"term": {"tenant_id": "acme"}}
STATS = ok(
    {
        "hits": {"total": {"value": 1, "relation": "eq"}, "hits": []},
        "aggregations": {"knowledge_items": {"value": 1}, "spaces": {"buckets": []}},
    }
)
DELETED = ok({"took": 1, "timed_out": False, "total": 0, "deleted": 0, "failures": []})


def test_a_tenant_writes_its_id_and_filters_every_request_on_it(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    server.add(
        NO_INDEX,  # GET /t/_mapping
        ok({"acknowledged": True, "shards_acknowledged": True, "index": "t"}),  # PUT /t
        NO_HITS,  # chunk id conflict check
        bulk_ok,
        DELETED,  # the previous version
        NO_HITS,  # keyword search
        NO_HITS,  # fetch
        STATS,
        DELETED,  # the knowledge base
        bulk_ok,  # disable
    )
    idx = make_index(tenant_id="acme")
    idx.replace_knowledge("k1", [chunk("c1", "apple pie")])
    assert idx.keyword_search(["apple"], ALL, 3, 0.0) == []
    assert idx.fetch(["c1"]) == {}
    assert idx.stats().chunks == 1
    idx.delete_knowledge_base("kb1")
    idx.set_enabled(["c1"], False)
    assert server.pending == 0

    reqs = server.requests
    assert reqs[1].json == build_mapping({})  # a new index maps tenant_id from the start
    assert reqs[2].json["query"]["bool"]["filter"] == [ACME, {"terms": {"chunk_id": ["c1"]}}]
    lines = bulk_lines(reqs[3])
    # The document carries its tenant; its _id is the tenant's, so another tenant's chunk "c1" is another document.
    assert lines[0] == {"index": {"_id": "acme#c1"}} and lines[1]["tenant_id"] == "acme"
    assert reqs[4].json == {
        "query": {
            "bool": {
                "filter": [ACME, {"terms": {"knowledge_id": ["k1"]}}],
                "must_not": [{"term": {"version": lines[1]["version"]}}],
            }
        }
    }
    assert reqs[5].json == {
        "size": 3,
        "_source": ["chunk_id", "version"],
        "query": {"bool": {"should": [{"term": {"tokens": "apple"}}], "minimum_should_match": 1, "filter": [ACME]}},
    }
    assert reqs[6].json == {
        "size": 1,
        "query": {"bool": {"filter": [ACME, {"terms": {"chunk_id": ["c1"]}}]}},
        "_source": {"excludes": ["tokens", "vec_*"]},
    }
    assert reqs[7].json["query"] == {"bool": {"filter": [ACME]}}
    assert reqs[8].json == {"query": {"bool": {"filter": [ACME, {"term": {"knowledge_base_id": "kb1"}}]}}}
    assert bulk_lines(reqs[9]) == [{"update": {"_id": "acme#c1"}}, {"doc": {"enabled": False}}]


def test_an_index_from_before_tenants_gets_the_tenant_field_before_the_first_write(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    before = build_mapping({SPACE: 2})
    del before["mappings"]["properties"]["tenant_id"]
    server.add(ok({"t": before}), ok({"acknowledged": True}), NO_HITS, bulk_ok, DELETED)
    idx = make_index()
    idx.replace_knowledge("k1", [chunk("c1", "apple")], np.array([[1.0, 0.0]], dtype=np.float32), SPACE)
    reqs = server.requests
    # "dynamic": "strict" refuses unmapped fields, so the field is mapped before documents carry it.
    assert (reqs[1].method, reqs[1].path, reqs[1].json) == (
        "PUT",
        "/t/_mapping",
        {"properties": {"tenant_id": {"type": "keyword"}}},
    )
    lines = bulk_lines(reqs[3])
    assert lines[0] == {"index": {"_id": "c1"}} and lines[1]["tenant_id"] == "default"  # the _id is unchanged
    # The default tenant still reads documents written without the field (DEFAULT_SCOPE's second clause).
    assert reqs[2].json["query"]["bool"]["filter"][0] == DEFAULT_SCOPE


def test_services_build_the_opensearch_index_lazily(server: ScriptedHTTPServer, tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        index_backend="opensearch",
        opensearch_url=server.url,
        opensearch_index="ragstep-svc",
        opensearch_flavour="aoss",
        opensearch_auth="none",
    )
    index = Clients(settings).context().index
    assert isinstance(index, OSIndex) and isinstance(index, SearchIndex)
    assert (index.index, index.flavour, index.url) == ("ragstep-svc", "aoss", server.url)
    assert server.requests == []  # no connection until the first call
    assert index.tenant_id == "default" and not index.supports_server_hybrid
    assert Clients(settings).context("acme").index.tenant_id == "acme"  # one view of the shared index per tenant
    with pytest.raises(InputError, match="RAGSTEP_OPENSEARCH_URL"):
        _ = Clients(Settings(data_dir=tmp_path, index_backend="opensearch")).context().index
    with pytest.raises(InputError, match="lower case"):
        OSIndex(server.url, index="Ragstep")


def test_sigv4_signs_for_the_flavours_service(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    server.add(NO_HITS, NO_HITS)
    make_index(flavour="aoss", auth="sigv4").keyword_search(["apple"], ALL, 3, 0.0)
    make_index(flavour="es", auth="sigv4").keyword_search(["apple"], ALL, 3, 0.0)
    aoss, es = (r.headers for r in server.requests)
    assert aoss["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/aoss/aws4_request" in aoss["authorization"]
    assert "/eu-west-1/es/aws4_request" in es["authorization"]
    # AOSS requires the payload hash header, signed.
    assert len(aoss["x-amz-content-sha256"]) == 64 and "x-amz-content-sha256" in aoss["authorization"]


def test_index_created_concurrently_is_read_back(
    server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]
) -> None:
    server.add(
        NO_INDEX,
        error(400, "resource_already_exists_exception", "index [t/abc] already exists"),
        mapping_of({"other:model": 4}),
        ok({"acknowledged": True}),  # our space is added to what the other process created
    )
    make_index().ensure_index({SPACE: 8})
    assert [(r.method, r.path) for r in server.requests] == [
        ("GET", "/t/_mapping"),
        ("PUT", "/t"),
        ("GET", "/t/_mapping"),
        ("PUT", "/t/_mapping"),
    ]
    server.add(NO_INDEX, error(400, "mapper_parsing_exception", "unknown space type [cosinesimil] for faiss"))
    with pytest.raises(StorageError, match="RAGSTEP_OPENSEARCH_KNN_ENGINE=lucene"):
        make_index().ensure_index({SPACE: 8})
    # A Serverless collection has no lucene engine: no hint recommends it there.
    server.add(NO_INDEX, error(400, "mapper_parsing_exception", "unknown space type [cosinesimil] for faiss"))
    with pytest.raises(StorageError) as refused:
        make_index(flavour="aoss").ensure_index({SPACE: 8})
    assert "lucene" not in refused.value.message


def test_lucene_is_refused_on_aoss_at_configuration_time() -> None:
    with pytest.raises(ValidationError) as err:
        Settings(opensearch_flavour="aoss", opensearch_knn_engine="lucene")
    first = err.value.errors()[0]
    assert first["loc"] == ("opensearch_knn_engine",)
    assert "OpenSearch Serverless" in first["msg"] and "unset RAGSTEP_OPENSEARCH_KNN_ENGINE" in first["msg"]
    assert Settings(opensearch_flavour="es", opensearch_knn_engine="lucene").opensearch_knn_engine == "lucene"


def test_chunks_at_and_vectors_over_http(server: ScriptedHTTPServer, make_index: Callable[..., OSIndex]) -> None:
    a = chunk("c1", "one", kid="k1", chunk_index=2)
    b = chunk("c2", "two", kid="k2", chunk_index=0)
    found = [{"_id": c.id, "_score": None, "_source": build_document(c, version="v")} for c in (a, b)]
    with_vec = {"chunk_id": "c1", "version": "v", FIELD: [0.6, 0.8]}
    server.add(
        ok({"hits": {"hits": found}}),
        mapping_of({SPACE: 2}),
        ok({"hits": {"hits": [{"_id": "c1", "_score": 0.0, "_source": with_vec}]}}),
    )
    idx = make_index()
    assert idx.chunks_at({"k1": [2, 3, 2, -1], "k2": [0], "k3": []}) == {"k1": {2: a}, "k2": {0: b}}
    assert server.requests[0].json == {
        "size": 6,
        "query": {
            "bool": {
                "filter": [DEFAULT_SCOPE, {"term": {"enabled": True}}],
                "should": [
                    {"bool": {"filter": [{"term": {"knowledge_id": "k1"}}, {"terms": {"chunk_index": [2, 3]}}]}},
                    {"bool": {"filter": [{"term": {"knowledge_id": "k2"}}, {"terms": {"chunk_index": [0]}}]}},
                ],
                "minimum_should_match": 1,
            }
        },
        "sort": [{"chunk_index": "asc"}, {"chunk_id": "asc"}],
        "_source": {"excludes": ["tokens", "vec_*"]},
    }
    got = idx.vectors(["c1", "c2"], SPACE)
    assert list(got) == ["c1"] and got["c1"].dtype == np.float32
    assert got["c1"] == pytest.approx([0.6, 0.8])
    assert server.requests[2].json["query"]["bool"]["filter"] == [
        DEFAULT_SCOPE,
        {"terms": {"chunk_id": ["c1", "c2"]}},
        {"exists": {"field": FIELD}},
    ]
    assert idx.chunks_at({"k1": []}) == {} and idx.vectors([], SPACE) == {}
    assert len(server.requests) == 3


# ============================================================================================= live (real cluster)

LIVE_URL = os.environ.get("RAGSTEP_TEST_OPENSEARCH_URL")
live = pytest.mark.skipif(not LIVE_URL, reason="set RAGSTEP_TEST_OPENSEARCH_URL to run against a real OpenSearch")
DIM = 8


def unit_vectors(n: int, seed: int = 11) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


CORPUS = [
    ("e1", "ken", "kb-en", "Vector search finds similar embeddings quickly.", ChunkType.TEXT),
    ("e2", "ken", "kb-en", "Keyword search ranks documents with BM25 over tokens.", ChunkType.TEXT),
    ("e3", "ken", "kb-en", "Hybrid search fuses vector search and keyword search results.", ChunkType.FAQ),
    ("z1", "kzh", "kb-zh", "向量检索通过嵌入查找相似的文本。", ChunkType.TEXT),
    ("z2", "kzh", "kb-zh", "关键词检索使用BM25算法对文档排序。", ChunkType.TEXT),
    ("z3", "kzh", "kb-zh", "混合检索融合向量检索和关键词检索的结果。", ChunkType.FAQ),
]


def eventually(check: Callable[[], bool], timeout_s: float) -> bool:
    """AOSS makes deletions visible after its own refresh; a managed domain refreshes before answering."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(2)


def live_index(index: str, **kw: Any) -> OSIndex:
    assert LIVE_URL
    return OSIndex(
        LIVE_URL,
        index=index,
        flavour=os.environ.get("RAGSTEP_TEST_OPENSEARCH_FLAVOUR", "es"),  # type: ignore[arg-type]
        username=os.environ.get("RAGSTEP_TEST_OPENSEARCH_USERNAME"),
        password=os.environ.get("RAGSTEP_TEST_OPENSEARCH_PASSWORD"),
        verify_certs=os.environ.get("RAGSTEP_TEST_OPENSEARCH_VERIFY_CERTS", "1") not in ("0", "false"),
        engine=os.environ.get("RAGSTEP_TEST_OPENSEARCH_ENGINE", "faiss"),  # type: ignore[arg-type]
        **kw,
    )


@pytest.fixture
def live_pair(tmp_path: Path) -> Iterator[tuple[OSIndex, LocalSearchIndex, np.ndarray]]:
    remote = live_index(f"ragstep-test-{uuid.uuid4().hex[:12]}")
    local = LocalSearchIndex(tmp_path / "local", persist_snapshots=False)
    vectors = unit_vectors(len(CORPUS))
    by_knowledge: dict[str, list[int]] = {}
    for i, row in enumerate(CORPUS):
        by_knowledge.setdefault(row[1], []).append(i)
    try:
        for kid, rows in by_knowledge.items():
            chunks = [
                chunk(CORPUS[i][0], CORPUS[i][3], kid=kid, kb=CORPUS[i][2], chunk_type=CORPUS[i][4], chunk_index=n)
                for n, i in enumerate(rows)
            ]
            for index in (remote, local):
                index.replace_knowledge(kid, chunks, vectors[rows], SPACE)
        yield remote, local, vectors
    finally:
        remote.delete_index()


@live
@pytest.mark.live
def test_live_rankings_match_the_local_index(live_pair: tuple[OSIndex, LocalSearchIndex, np.ndarray]) -> None:
    remote, local, vectors = live_pair
    flavour = remote.flavour
    for query in ("vector search", "keyword BM25", "向量检索", "关键词检索的结果"):
        terms = query_terms(query)
        for flt in (ALL, SearchFilter(knowledge_base_ids=("kb-zh",)), SearchFilter(chunk_types=(ChunkType.FAQ,))):
            got = remote.keyword_search(terms, flt, 10, 0.0)
            want = local.keyword_search(terms, flt, 10, 0.0)
            assert {h.chunk_id for h in got} == {h.chunk_id for h in want}, (query, flt)
            if want:
                assert got[0].chunk_id == want[0].chunk_id, (query, flt)
                assert got[0].score == pytest.approx(1.0)
                if flavour == "es":  # same k1 and b: normalised scores close (Lucene's one-byte lengths aside)
                    for g, w in zip(got, want, strict=True):
                        assert g.score == pytest.approx(w.score, abs=0.15), (query, g, w)

    q = vectors[0] + 0.3 * vectors[3]
    for flt in (ALL, SearchFilter(knowledge_base_ids=("kb-zh",)), SearchFilter(knowledge_ids=("ken",))):
        got = remote.vector_search(q, SPACE, flt, 10, -1.0)
        want = local.vector_search(q, SPACE, flt, 10, -1.0)
        assert [h.chunk_id for h in got] == [h.chunk_id for h in want], flt
        for g, w in zip(got, want, strict=True):
            assert g.score == pytest.approx(w.score, abs=1e-3)
    # The threshold applies to the cosine, as locally.
    want_ids = [h.chunk_id for h in local.vector_search(q, SPACE, ALL, 10, 0.2)]
    assert [h.chunk_id for h in remote.vector_search(q, SPACE, ALL, 10, 0.2)] == want_ids

    fetched = remote.fetch(["z1", "e2", "nope"])
    assert set(fetched) == {"z1", "e2"} and fetched["z1"].content == CORPUS[3][3]
    assert [c.id for c in remote.knowledge_chunks("kzh", 10)] == ["z1", "z2", "z3"]
    assert remote.chunks_at({"kzh": [0, 2], "ken": [1]}) == local.chunks_at({"kzh": [0, 2], "ken": [1]})
    stored = remote.vectors(["e1", "z2", "nope"], SPACE)
    assert set(stored) == {"e1", "z2"}
    assert stored["z2"] == pytest.approx(local.vectors(["z2"], SPACE)["z2"], abs=1e-6)
    stats = remote.stats()
    assert (stats.chunks, stats.knowledge_items, stats.vector_spaces) == (6, 2, {SPACE: 6})


@live
@pytest.mark.live
def test_live_fusion_statistics(live_pair: tuple[OSIndex, LocalSearchIndex, np.ndarray]) -> None:
    """The vector sample request is one the cluster accepts, and the keyword gain it reads from ``GET /`` puts the
    cluster's raw BM25 on ragstep's scale (both score the same six chunks with the same statistics; tf 1 scores
    alike at k1 1.2 and 1.5 once each is multiplied by its k1 + 1)."""
    from ragstep.adapters.index.opensearch.statistics import build_sample_query

    remote, local, _vectors = live_pair
    sample = remote._search(build_sample_query(space_field(SPACE), ALL, 100, tenant_id=remote.tenant_id))
    rows = [h.source.get(space_field(SPACE)) for h in parse_search_response(sample)]
    assert len(rows) == 6 and all(r and len(r) == DIM for r in rows)
    remote_bg, local_bg = remote.vector_background(SPACE, ALL), local.vector_background(SPACE, ALL)
    assert remote_bg is not None and local_bg is not None  # six chunks are a background (MIN_ROWS), as locally
    terms = query_terms("keyword BM25")
    got, want = remote.keyword_search(terms, ALL, 3, 0.0), local.keyword_search(terms, ALL, 3, 0.0)
    assert got[0].chunk_id == want[0].chunk_id
    assert got[0].raw_score * 2.5 / remote.keyword_gain() == pytest.approx(want[0].raw_score, rel=0.2)


@live
@pytest.mark.live
def test_live_replace_disable_and_delete(live_pair: tuple[OSIndex, LocalSearchIndex, np.ndarray]) -> None:
    remote, _local, _vectors = live_pair
    settle = 5.0 if remote.flavour == "es" else 120.0
    new = [
        chunk("z4", "新的向量检索段落。", kid="kzh", kb="kb-zh"),
        chunk("z1", "向量检索的第二个版本。", kid="kzh", kb="kb-zh"),
    ]
    remote.replace_knowledge("kzh", new, unit_vectors(2, seed=5), SPACE)
    # The new chunks are searchable when replace returns; the old version goes (at once on a managed domain).
    assert {"z4", "z1"} <= {h.chunk_id for h in remote.keyword_search(query_terms("向量检索"), ALL, 10, 0.0)}
    assert eventually(lambda: set(remote.fetch(["z1", "z2", "z3", "z4"])) == {"z1", "z4"}, settle)
    assert remote.fetch(["z1"])["z1"].content == "向量检索的第二个版本。"

    assert remote.set_enabled(["e1", "nope"], False) == 1
    enabled = SearchFilter()
    assert eventually(
        lambda: "e1" not in {h.chunk_id for h in remote.keyword_search(query_terms("vector"), enabled, 10, 0.0)},
        settle,
    )
    assert remote.fetch(["e1"])["e1"].enabled is False

    assert remote.delete_knowledge(["ken"]) == 3
    assert eventually(lambda: remote.keyword_search(query_terms("search"), ALL, 10, 0.0) == [], settle)
    assert remote.delete_knowledge_base("kb-zh") == 2
    assert eventually(lambda: remote.stats().chunks == 0, settle)


@live
@pytest.mark.live
def test_live_server_hybrid_through_the_search_stage(
    live_pair: tuple[OSIndex, LocalSearchIndex, np.ndarray], tmp_path: Path
) -> None:
    remote, _local, vectors = live_pair
    if remote.flavour == "aoss":
        pytest.skip("OpenSearch Serverless has no hybrid query (server hybrid is refused there)")
    hybrid = live_index(remote.index, server_hybrid=True)
    ctx = Clients(Settings(data_dir=tmp_path / "stage")).context()
    ctx.index = hybrid  # in place of the adapter Clients would build from RAGSTEP_OPENSEARCH_* settings
    q = vectors[0] + 0.3 * vectors[3]
    ctx.register_embedder(PrecomputedEmbedder(SPACE, {"vector search": q}))
    for kb in ("kb-en", "kb-zh"):
        ctx.catalog.create_kb(KnowledgeBase(id=kb, name=kb, embedding_model=SPACE, created_at=time.time()))
    try:
        # The adapter alone: one hybrid query, the union of both clauses ranked by the pipeline's combined score.
        terms = query_terms("vector search")
        hits = hybrid.hybrid_search(terms, q, SPACE, ALL, 10)
        ids = [h.chunk_id for h in hits]
        keyword = {h.chunk_id for h in remote.keyword_search(terms, ALL, 10, 0.0)}
        vector = {h.chunk_id for h in remote.vector_search(q, SPACE, ALL, 10, -1.0)}
        assert ids and len(ids) == len(set(ids)) and set(ids) <= keyword | vector
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 + 1e-6 for s in scores)
        zh = hybrid.hybrid_search(terms, q, SPACE, SearchFilter(knowledge_base_ids=("kb-zh",)), 10)
        assert {h.chunk_id for h in zh} <= {"z1", "z2", "z3"}

        # The stage: server-side fusion for both knowledge bases, a second pipeline for other weights.
        state = chunk_search.run(
            new_state(SearchRequest(query="vector search", knowledge_base_ids=["kb-en", "kb-zh"]), ctx), ctx
        )
        assert not [t for t in state.trace if t.action == "degrade"]
        assert state.search_results and {r.id for r in state.search_results} <= {row[0] for row in CORPUS}
        assert all(r.metadata["retrieval"].get("fusion") == "server" for r in state.search_results)
        row = next(t for t in state.trace if t.action == "run")
        assert row.detail["server_fusion"]["targets"] == 1 and row.counts["hybrid_hits"] >= len(state.search_results)
        request = SearchRequest(
            query="vector search",
            knowledge_base_ids=["kb-en"],
            overrides={"rrf_keyword_weight": 0.5, "rrf_vector_weight": 0.5},
        )
        other = chunk_search.run(new_state(request, ctx), ctx)
        assert not [t for t in other.trace if t.action == "degrade"]
        assert {r.knowledge_base_id for r in other.search_results} == {"kb-en"}
        for name in (hybrid.pipeline_name(0.3, 0.7), hybrid.pipeline_name(0.5, 0.5)):
            assert name in hybrid._request("GET", f"/_search/pipeline/{name}", what="pipeline read")
    finally:
        hybrid.drop_search_pipelines()
