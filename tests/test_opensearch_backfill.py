"""Progressive indexing on OpenSearch (:mod:`ragstep.adapters.index.opensearch.backfill`), without a cluster and with
one when ``RAGSTEP_TEST_OPENSEARCH_URL`` is set.

Without a cluster, opensearch-py talks over real HTTP to a scripted server on 127.0.0.1 that holds the documents it
was given and answers each request the way the OpenSearch documentation says that request is answered: the
``update`` action runs our guard (its script is checked to be the one we send, and its parameters are evaluated as
the update API evaluates them: ``ctx.op = 'noop'`` leaves the document as it is and answers ``"result": "noop"``),
``exists`` in ``must_not`` keeps documents without the field, ``search_after`` pages by the sort values. The request
bodies are compared with the documented shapes, written out literally.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragstep.adapters.index.opensearch import (
    OpenSearchBackfillIndex,
    OpenSearchIndex,
    build_document,
    document_id,
    space_field,
)
from ragstep.adapters.index.opensearch import backfill as backfill_module
from ragstep.adapters.index.opensearch.backfill import GUARDED_VECTOR_SCRIPT
from ragstep.context import Clients
from ragstep.errors import InputError, StorageError
from ragstep.index_capabilities import vector_backfill
from ragstep.models import Chunk
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import query_terms
from ragstep.settings import Settings
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

SPACE = "openai:text-embedding-3-small"
FIELD = space_field(SPACE)
ALL = SearchFilter(enabled_only=False)
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


def unit(*rows: list[float]) -> np.ndarray:
    return np.asarray(rows, dtype=np.float32)


# ======================================================================================= a cluster over HTTP


def ok(body: Any) -> ScriptedResponse:
    return ScriptedResponse(200, body)


class Cluster:
    """The documents of index ``t`` and the answers OpenSearch gives to the requests the backfill sends."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.fields: dict[str, Any] = {}
        self.updates: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (action meta, script line) as received
        self.searches: list[dict[str, Any]] = []
        self.counts: list[dict[str, Any]] = []

    def index_phase_one(self, chunks: list[Chunk], tenant: str = "default") -> None:
        """What replace_knowledge without vectors stores (its own tests cover the request)."""
        for c in chunks:
            self.docs[document_id(c.id, tenant)] = build_document(c, version="v1", tenant_id=tenant)

    def __call__(self, req: RecordedRequest) -> ScriptedResponse:
        if req.path == "/t/_mapping" and req.method == "GET":
            return ok({"t": {"mappings": {"properties": {"chunk_id": {"type": "keyword"}, **self.fields}}}})
        if req.path == "/t/_mapping" and req.method == "PUT":
            self.fields.update(req.json["properties"])
            return ok({"acknowledged": True})
        if req.path == "/t/_search":
            self.searches.append(req.json)
            return self._search(req.json)
        if req.path == "/t/_count":
            self.counts.append(req.json)
            return self._count(req.json["query"])
        if req.path == "/t/_bulk":
            return self._bulk(req)
        if req.path == "/t/_delete_by_query":
            return self._delete_by_query(req.json["query"])
        raise AssertionError(f"unexpected request {req.method} {req.path}")

    def _search(self, body: dict[str, Any]) -> ScriptedResponse:
        if body["query"]["bool"].get("must_not", [{}])[0].get("term"):  # replace_knowledge's chunk id check
            return ok({"hits": {"total": {"value": 0, "relation": "eq"}, "hits": []}})
        kid = body["query"]["bool"]["filter"][1]["term"]["knowledge_id"]
        assert body["query"]["bool"]["must_not"] == [{"exists": {"field": "space"}}]
        rows = sorted(
            (d["chunk_index"], d["chunk_id"])
            for d in self.docs.values()
            if d["knowledge_id"] == kid and d.get("space") is None
        )
        after = tuple(body.get("search_after", ()))
        rows = [r for r in rows if not after or r > after][: body["size"]]
        hits = [{"_id": cid, "_score": None, "_source": {"chunk_id": cid}, "sort": [ci, cid]} for ci, cid in rows]
        return ok({"hits": {"total": {"value": len(hits), "relation": "eq"}, "hits": hits}})

    def _count(self, query: dict[str, Any]) -> ScriptedResponse:
        (missing,) = query["bool"]["must_not"]
        field = missing["exists"]["field"]
        kbs = next((f["terms"]["knowledge_base_id"] for f in query["bool"]["filter"] if "terms" in f), None)
        n = sum(
            1 for d in self.docs.values() if d.get(field) is None and (kbs is None or d["knowledge_base_id"] in kbs)
        )
        return ok({"count": n, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}})

    def _bulk(self, req: RecordedRequest) -> ScriptedResponse:
        assert req.headers["content-type"] == "application/x-ndjson" and req.query == {"refresh": ["wait_for"]}
        lines = [json.loads(line) for line in req.body.decode().splitlines()]
        items: list[dict[str, Any]] = []
        for meta_line, body in zip(lines[::2], lines[1::2], strict=True):
            if "index" in meta_line:  # replace_knowledge
                self.docs[meta_line["index"]["_id"]] = body
                items.append({"index": {"_index": "t", "_id": meta_line["index"]["_id"], "status": 201}})
                continue
            meta = meta_line["update"]
            self.updates.append((meta, body))
            items.append({"update": {"_index": "t", "_id": meta["_id"], **self._update(meta["_id"], body)}})
        return ok({"took": 3, "errors": any("error" in next(iter(i.values())) for i in items), "items": items})

    def _delete_by_query(self, query: dict[str, Any]) -> ScriptedResponse:
        kids = query["bool"]["filter"][1]["terms"]["knowledge_id"]
        keep = query["bool"]["must_not"][0]["term"]["version"]
        gone = [i for i, d in self.docs.items() if d["knowledge_id"] in kids and d["version"] != keep]
        for doc_id in gone:
            del self.docs[doc_id]
        return ok({"took": 1, "timed_out": False, "total": len(gone), "deleted": len(gone), "failures": []})

    def _update(self, doc_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """The update API with our script: read the document, run the guard, index the result (or not: noop)."""
        script = body["script"]
        assert script["source"] == GUARDED_VECTOR_SCRIPT and script["lang"] == "painless"
        p = script["params"]
        src = self.docs.get(doc_id)
        if src is None:
            reason = f"[{doc_id}]: document missing"
            return {"status": 404, "error": {"type": "document_missing_exception", "reason": reason}}
        # Painless compares the maps with equals(): 1 and 1.0 differ there, so compare the JSON, not Python values.
        same_doc = json.dumps(src["doc"], sort_keys=True) == json.dumps(p["doc"], sort_keys=True)
        if src.get("space") is not None or src["content"] != p["content"] or not same_doc:
            return {"status": 200, "result": "noop"}
        if p["vector"] is not None and len(p["vector"]) != self.fields[p["field"]]["dimension"]:
            reason = f"Vector dimension mismatch. Expected: {self.fields[p['field']]['dimension']}"
            return {"status": 400, "error": {"type": "mapper_parsing_exception", "reason": reason}}
        src["space"] = p["space"]
        if p["vector"] is not None:
            src[p["field"]] = p["vector"]
        return {"status": 200, "result": "updated"}


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, ScriptedHTTPServer]]:
    state = Cluster()
    with ScriptedHTTPServer(fallback=state) as srv:
        yield state, srv


@pytest.fixture
def make_index(cluster: tuple[Cluster, ScriptedHTTPServer]) -> Callable[..., OpenSearchBackfillIndex]:
    def make(**kw: Any) -> OpenSearchBackfillIndex:
        kw = {"index": "t", "auth": "none", "backoff_base_s": 0.0, "max_retries": 1, "sleep": lambda _s: None, **kw}
        return OpenSearchBackfillIndex(cluster[1].url, **kw)

    return make


DOC = [
    chunk("c1", "Vector search finds neighbours."),
    chunk("c2", "向量检索找到相似的文本。", chunk_index=1),
    chunk("c3", "Keyword search ranks by BM25.", chunk_index=2),
]


def test_phase_one_documents_have_neither_space_nor_vector() -> None:
    source = build_document(DOC[0], version="v1")
    assert "space" not in source and FIELD not in source  # a knn_vector field may be absent from a document


def test_the_guarded_update_follows_the_documented_bulk_update_shape(
    cluster: tuple[Cluster, ScriptedHTTPServer], make_index: Callable[..., OpenSearchBackfillIndex]
) -> None:
    state, _srv = cluster
    state.index_phase_one(DOC[:1])
    assert make_index().add_vectors(DOC[:1], unit([3.0, 4.0, 0.0]), SPACE) == 1
    # The space's field was mapped first (PUT _mapping), then one update action with its script line.
    assert state.fields[FIELD]["type"] == "knn_vector" and state.fields[FIELD]["dimension"] == 3
    ((meta, body),) = state.updates
    assert meta == {"_id": "c1", "retry_on_conflict": 3}
    stored = build_document(DOC[0], version="ignored")
    assert body == {
        "script": {
            "source": (
                "if (ctx._source.space != null || ctx._source.content != params.content || "
                "ctx._source.doc != params.doc) { ctx.op = 'noop'; } else { ctx._source.space = params.space; "
                "if (params.vector != null) { ctx._source[params.field] = params.vector; } }"
            ),
            "lang": "painless",
            "params": {
                "space": SPACE,
                "field": FIELD,
                "vector": pytest.approx([0.6, 0.8, 0.0]),
                "content": "Vector search finds neighbours.",
                "doc": stored["doc"],
            },
        }
    }
    assert state.docs["c1"][FIELD] == pytest.approx([0.6, 0.8, 0.0]) and state.docs["c1"]["space"] == SPACE


def test_missing_vectors_rerun_batch_and_keyword_only_count(
    cluster: tuple[Cluster, ScriptedHTTPServer], make_index: Callable[..., OpenSearchBackfillIndex]
) -> None:
    state, _srv = cluster
    idx = make_index()
    idx.replace_knowledge("k1", DOC)  # phase one over HTTP: no vectors
    state.index_phase_one([chunk("o1", "another document", kid="k2", kb="kb2")])
    assert all("space" not in d and FIELD not in d for d in state.docs.values())
    state.searches.clear()
    assert idx.missing_vectors("k1") == ["c1", "c2", "c3"]
    assert state.searches[0] == {
        "size": 1000,
        "query": {
            "bool": {
                "filter": [DEFAULT_SCOPE, {"term": {"knowledge_id": "k1"}}],
                "must_not": [{"exists": {"field": "space"}}],
            }
        },
        "sort": [{"chunk_index": "asc"}, {"chunk_id": "asc"}],
        "_source": ["chunk_id"],
    }
    assert idx.keyword_only(ALL, SPACE) == 4
    assert state.counts[0] == {
        "query": {"bool": {"filter": [DEFAULT_SCOPE], "must_not": [{"exists": {"field": FIELD}}]}}
    }
    assert idx.keyword_only(ALL, SPACE) == 4 and len(state.counts) == 1  # the next search's trace: no round trip

    batch, vectors = DOC[:2], unit([1.0, 0.0, 0.0], [0.0, 1.0, 0.0])
    assert idx.add_vectors(batch, vectors, SPACE) == 2
    landed = {cid: list(state.docs[cid][FIELD]) for cid in ("c1", "c2")}
    # The same batch again (a Map item retried after a timeout): every update is a noop, nothing changes or repeats.
    assert idx.add_vectors(batch, unit([0.0, 0.0, 1.0], [0.0, 0.0, 1.0]), SPACE) == 0
    assert {cid: state.docs[cid][FIELD] for cid in ("c1", "c2")} == landed
    assert len(state.docs) == 4  # updates by id: no second document per chunk
    assert idx.missing_vectors("k1") == ["c3"]
    assert idx.keyword_only(SearchFilter(knowledge_base_ids=("kb1",)), SPACE) == 1
    assert idx.add_vectors(DOC[2:], unit([0.0, 0.0, 1.0]), SPACE) == 1
    assert idx.missing_vectors("k1") == [] and idx.keyword_only(ALL, SPACE) == 1  # k2's chunk only


def test_a_stale_batch_lands_nowhere(
    cluster: tuple[Cluster, ScriptedHTTPServer], make_index: Callable[..., OpenSearchBackfillIndex]
) -> None:
    state, _srv = cluster
    # Re-ingested after the batch was embedded: same chunk ids, new text (c1) and a moved chunk (c2).
    state.index_phase_one([chunk("c1", "Vector search, second edition."), chunk("c2", DOC[1].content, chunk_index=5)])
    idx = make_index()
    assert idx.add_vectors(DOC[:2], unit([1.0, 0.0, 0.0], [0.0, 1.0, 0.0]), SPACE) == 0
    assert all("space" not in d and FIELD not in d for d in state.docs.values())
    assert idx.missing_vectors("k1") == ["c1", "c2"]
    # A chunk deleted meanwhile (404) is not an error and lands nowhere either.
    assert idx.add_vectors([DOC[2]], unit([0.0, 0.0, 1.0]), SPACE) == 0


def test_a_zero_vector_marks_the_chunk_done_without_a_vector(
    cluster: tuple[Cluster, ScriptedHTTPServer], make_index: Callable[..., OpenSearchBackfillIndex]
) -> None:
    state, _srv = cluster
    state.index_phase_one(DOC[:2])
    idx = make_index()
    assert idx.add_vectors(DOC[:2], unit([0.0, 0.0, 0.0], [0.0, 2.0, 0.0]), SPACE) == 2
    assert state.updates[0][1]["script"]["params"]["vector"] is None  # cosinesimil refuses a zero vector
    assert FIELD not in state.docs["c1"] and state.docs["c1"]["space"] == SPACE
    assert idx.missing_vectors("k1") == [] and idx.keyword_only(ALL, SPACE) == 1


def test_a_tenant_writes_onto_its_own_documents_only(
    cluster: tuple[Cluster, ScriptedHTTPServer], make_index: Callable[..., OpenSearchBackfillIndex]
) -> None:
    state, _srv = cluster
    state.index_phase_one(DOC[:1], tenant="acme")
    state.index_phase_one(DOC[:1])  # the default tenant's chunk of the same id
    acme = make_index(tenant_id="acme")
    assert acme.missing_vectors("k1") == ["c1"]
    assert state.searches[0]["query"]["bool"]["filter"][0] == {"term": {"tenant_id": "acme"}}
    assert acme.add_vectors(DOC[:1], unit([1.0, 0.0, 0.0]), SPACE) == 1
    assert state.updates[0][0]["_id"] == "acme#c1"
    assert FIELD in state.docs["acme#c1"] and FIELD not in state.docs["c1"]


def test_missing_vectors_pages_with_search_after(
    cluster: tuple[Cluster, ScriptedHTTPServer],
    make_index: Callable[..., OpenSearchBackfillIndex],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, _srv = cluster
    monkeypatch.setattr(backfill_module, "SCAN_PAGE", 2)
    state.index_phase_one([chunk(f"p{i}", f"text {i}", chunk_index=i) for i in range(5)])
    assert make_index().missing_vectors("k1") == [f"p{i}" for i in range(5)]
    assert [s.get("search_after") for s in state.searches] == [None, [1, "p1"], [3, "p3"]]


def test_refusals_wrong_dimensions_and_bad_input(
    cluster: tuple[Cluster, ScriptedHTTPServer], make_index: Callable[..., OpenSearchBackfillIndex]
) -> None:
    state, _srv = cluster
    state.index_phase_one(DOC)
    idx = make_index()
    assert idx.add_vectors(DOC[:1], unit([1.0, 0.0, 0.0]), SPACE) == 1
    with pytest.raises(InputError, match="holds 3-dimensional vectors, got 4"):
        idx.add_vectors(DOC[1:2], unit([1.0, 0.0, 0.0, 0.0]), SPACE)
    with pytest.raises(InputError, match="expected 2 vectors"):
        idx.add_vectors(DOC[1:3], unit([1.0, 0.0, 0.0]), SPACE)
    assert len(state.updates) == 1  # bad input fails before any write
    state.fields[FIELD]["dimension"] = 2  # a mapping changed behind the adapter's back: the item is refused
    with pytest.raises(StorageError, match=r"c2: HTTP 400 .*Vector dimension mismatch"):
        idx.add_vectors(DOC[1:2], unit([1.0, 0.0, 0.0]), SPACE)


def test_the_capability_is_declared_for_domains_only(
    tmp_path: Path, cluster: tuple[Cluster, ScriptedHTTPServer]
) -> None:
    url = cluster[1].url

    def index_of(flavour: str) -> Any:
        settings = Settings(
            data_dir=tmp_path, index_backend="opensearch", opensearch_url=url, opensearch_flavour=flavour
        )
        return Clients(settings).context().index

    domain = index_of("es")
    assert isinstance(domain, OpenSearchBackfillIndex) and vector_backfill(domain) is domain
    serverless = index_of("aoss")
    assert type(serverless) is OpenSearchIndex and vector_backfill(serverless) is None
    with pytest.raises(InputError, match="update by id"):
        OpenSearchBackfillIndex(url, flavour="aoss", auth="none").add_vectors(DOC[:1], unit([1.0, 0.0, 0.0]), SPACE)
    assert cluster[1].requests == []  # declared, not probed


# ================================================================================================== live cluster

LIVE_URL = os.environ.get("RAGSTEP_TEST_OPENSEARCH_URL")
live = pytest.mark.skipif(not LIVE_URL, reason="set RAGSTEP_TEST_OPENSEARCH_URL to run against a real OpenSearch")


@pytest.fixture
def live_index() -> Iterator[OpenSearchBackfillIndex]:
    assert LIVE_URL
    if os.environ.get("RAGSTEP_TEST_OPENSEARCH_FLAVOUR", "es") != "es":
        pytest.skip("vectors after the chunks need a domain (flavour es); Serverless collections cannot update by id")
    index = OpenSearchBackfillIndex(
        LIVE_URL,
        index=f"ragstep-test-{uuid.uuid4().hex[:12]}",
        username=os.environ.get("RAGSTEP_TEST_OPENSEARCH_USERNAME"),
        password=os.environ.get("RAGSTEP_TEST_OPENSEARCH_PASSWORD"),
        verify_certs=os.environ.get("RAGSTEP_TEST_OPENSEARCH_VERIFY_CERTS", "1") not in ("0", "false"),
        engine=os.environ.get("RAGSTEP_TEST_OPENSEARCH_ENGINE", "faiss"),  # type: ignore[arg-type]
    )
    try:
        yield index
    finally:
        index.delete_index()


@live
@pytest.mark.live
def test_live_vectors_after_the_chunks(live_index: OpenSearchBackfillIndex) -> None:
    idx = live_index
    vectors = unit([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0])
    idx.replace_knowledge("k1", DOC)  # phase one: no vectors
    assert idx.missing_vectors("k1") == ["c1", "c2", "c3"]
    assert {h.chunk_id for h in idx.keyword_search(query_terms("search"), ALL, 10, 0.0)} == {"c1", "c3"}
    assert idx.keyword_only(ALL, SPACE) == 3

    assert idx.add_vectors(DOC[:2], vectors[:2], SPACE) == 2
    assert idx.add_vectors(DOC[:2], vectors[1::-1], SPACE) == 0  # a re-run batch changes nothing
    assert idx.vectors(["c1", "c2"], SPACE)["c1"] == pytest.approx([1.0, 0.0, 0.0])
    assert idx.missing_vectors("k1") == ["c3"] and idx.keyword_only(ALL, SPACE) == 1
    assert [h.chunk_id for h in idx.vector_search(vectors[0], SPACE, ALL, 1, 0.0)] == ["c1"]

    # Ingested again with c3's text changed before its batch landed: every chunk is indexed anew without a vector,
    # and the old batch's vector for c3 lands nowhere while c1 and c2 (unchanged) take theirs again.
    idx.replace_knowledge("k1", [*DOC[:2], chunk("c3", "Keyword search, revised.", chunk_index=2)])
    assert idx.missing_vectors("k1") == ["c1", "c2", "c3"]
    assert idx.add_vectors(DOC, vectors, SPACE) == 2
    assert idx.missing_vectors("k1") == ["c3"] and idx.keyword_only(ALL, SPACE) == 1


def test_a_failed_count_leaves_the_trace_without_it(
    cluster: tuple[Cluster, ScriptedHTTPServer], make_index: Callable[..., OpenSearchBackfillIndex]
) -> None:
    _state, srv = cluster
    reason = {"error": {"type": "search_phase_execution_exception", "reason": "all shards failed"}, "status": 400}
    srv.add(ScriptedResponse(400, reason))
    assert make_index().keyword_only(ALL, SPACE) == 0  # the search it belongs to has its results already
    assert srv.requests[0].path == "/t/_count"


def test_the_cli_phases_on_a_domain_embed_each_chunk_once(
    cluster: tuple[Cluster, ScriptedHTTPServer], tmp_path: Path, plain_environment: None
) -> None:
    """``ragstep ingest`` on OpenSearch: keyword-searchable chunks first, then ``embed_pending`` (the second phase
    the CLI and ``ragstep serve`` run) adds every vector through the guarded update, each chunk embedded once."""
    from ragstep.app.ingest import ingest_file
    from ragstep.app.ingest_vectors import embed_pending, pending_documents
    from ragstep.models import KnowledgeBase
    from test_ingest_pipeline import SPACE as EMBEDDING_SPACE
    from test_ingest_pipeline import embeddings_answer, write

    state, os_server = cluster
    embedded: list[str] = []

    def embed(request: RecordedRequest) -> ScriptedResponse:
        embedded.extend(request.json["input"])
        return embeddings_answer(request)

    with ScriptedHTTPServer(fallback=embed) as embedding_server:
        settings = Settings(
            data_dir=tmp_path / "data",
            index_backend="opensearch",
            opensearch_url=os_server.url,
            opensearch_index="t",
            opensearch_auth="none",
            embedding_base_url=f"{embedding_server.url}/v1",
        )
        ctx = Clients(settings).context()
        kb = ctx.catalog.create_kb(
            KnowledgeBase(id="kb1", name="docs", embedding_model=EMBEDDING_SPACE, created_at=time.time())
        )
        text = "# Glaciers\n\n" + "\n\n".join(f"Glacier paragraph {i}: ice and moraine." for i in range(30))
        result = ingest_file(write(tmp_path / "docs", "glacier.md", text), kb, ctx, keywords_first=True)
        assert result.status == "indexed" and result.chunks >= 2, result.error
        assert embedded == [] and len(state.docs) == result.chunks
        assert all("space" not in d for d in state.docs.values())

        outcome = embed_pending(kb, ctx)
        assert (outcome.documents, outcome.chunks, outcome.failed) == (1, result.chunks, [])
        assert len(embedded) == result.chunks and pending_documents(kb, ctx) == []
        field = space_field(EMBEDDING_SPACE)
        assert all(d["space"] == EMBEDDING_SPACE and d[field] for d in state.docs.values())
