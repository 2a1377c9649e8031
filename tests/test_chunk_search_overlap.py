"""chunk_search starts the keyword (BM25) searches before the query is embedded, and they run while it is.

Shown without timing: an OpenAI-compatible embedding API and an OpenSearch-compatible index, both real HTTP servers
on 127.0.0.1, write what they see to one log. The embedding API holds its answer until the index has received the
BM25 query (bounded wait), so the log reads "keyword request, then embedding answer" only when the keyword search was
under way while the query was being embedded; before, the BM25 query was sent after the embedding came back.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.adapters.embedders import OpenAIEmbedder
from ragstep.adapters.index.opensearch import build_document, build_mapping
from ragstep.app.search import new_state
from ragstep.context import Clients, Context
from ragstep.models import Chunk, KnowledgeBase, KnowledgeBaseType, MatchType, PipelineState, SearchRequest
from ragstep.settings import Settings
from ragstep.stages.search import chunk_search
from support.opensearch_queries import find_terms
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse

MODEL = "openai:overlap-test"
QVEC = [1.0, 0.0, 0.0, 0.0]
#: How long the embedding API waits for the BM25 query before it answers anyway (only a regression waits this long).
WAIT_S = 10.0


def chunk(cid: str, content: str, kb: str, index: int, **kw: Any) -> Chunk:
    return Chunk(id=cid, knowledge_id=f"k-{kb}", knowledge_base_id=kb, content=content, chunk_index=index, **kw)


DOCS = [
    chunk("c1", "Vector search finds neighbours.", "kb-doc", 0),
    chunk("c2", "Keyword search ranks with BM25.", "kb-doc", 1),
    chunk("f1", "What is keyword search?", "kb-faq", 0, chunk_type="faq", parent_id="entry-1"),
]


def hits(*pairs: tuple[str, float]) -> ScriptedResponse:
    rows = [{"_id": c, "_score": s, "_source": {"chunk_id": c, "version": "v"}} for c, s in pairs]
    return ScriptedResponse(200, {"hits": {"hits": rows}})


class Services:
    """The two far ends and the shared log of what arrived at them, in order."""

    def __init__(self, index: ScriptedHTTPServer, embeddings: ScriptedHTTPServer) -> None:
        self.index, self.embeddings = index, embeddings
        self.log: list[str] = []
        self.lock = threading.Lock()
        self.bm25_arrived = threading.Event()
        self.docs = {c.id: build_document(c, version="v") for c in DOCS}
        #: The keyword hits per knowledge base id the BM25 query filters on ("" for a query over several).
        self.keyword: dict[str, list[tuple[str, float]]] = {"kb-doc": [("c2", 3.0)]}
        self.knn: list[tuple[str, float]] = [("c1", 0.9)]  # cosinesimil score 0.9: cosine 0.8
        index.set_fallback(self.answer_index)
        embeddings.set_fallback(self.answer_embedding)

    def note(self, event: str) -> None:
        with self.lock:
            self.log.append(event)

    def answer_index(self, req: RecordedRequest) -> ScriptedResponse:
        if (req.method, req.path) == ("GET", "/t/_mapping"):
            return ScriptedResponse(200, {"t": build_mapping({MODEL: len(QVEC)})})
        query = (req.json or {}).get("query", {})
        if "knn" in query:
            self.note("knn")
            return hits(*self.knn)
        ids = find_terms(query, "chunk_id")
        if ids is not None:
            return ScriptedResponse(200, {"hits": {"hits": [{"_id": i, "_source": self.docs[i]} for i in ids]}})
        if query.get("bool", {}).get("should"):
            kbs = find_terms(query, "knowledge_base_id") or []
            self.note("bm25 " + ",".join(kbs))
            self.bm25_arrived.set()
            return hits(*self.keyword.get(kbs[0] if len(kbs) == 1 else "", []))
        return ScriptedResponse(400, {"error": {"type": "unexpected_request", "reason": str(req.json)}})

    def answer_embedding(self, req: RecordedRequest) -> ScriptedResponse:
        self.note("embedding request")
        # Bounded: without the overlap the BM25 query only comes after this answer, and the log says so.
        self.bm25_arrived.wait(WAIT_S)
        self.note("embedding answer")
        return ScriptedResponse(200, {"data": [{"index": 0, "embedding": QVEC}]})


@pytest.fixture
def services() -> Iterator[Services]:
    with ScriptedHTTPServer() as index, ScriptedHTTPServer() as embeddings:
        yield Services(index, embeddings)


def context(services: Services, tmp_path: Path, *, server_hybrid: bool = False, embed_url: str = "") -> Context:
    settings = Settings(
        data_dir=tmp_path / "data",
        index_backend="opensearch",
        opensearch_url=services.index.url,
        opensearch_index="t",
        opensearch_auth="none",
        opensearch_max_retries=0,
        opensearch_server_hybrid=server_hybrid,
        cache_backend="none",
    )
    ctx = Clients(settings).context()
    base_url = embed_url or f"{services.embeddings.url}/v1"
    ctx.register_embedder(OpenAIEmbedder("overlap-test", base_url=base_url, max_retries=0))
    for kb_id, kb_type in (("kb-doc", KnowledgeBaseType.DOCUMENT), ("kb-faq", KnowledgeBaseType.FAQ)):
        ctx.catalog.create_kb(
            KnowledgeBase(id=kb_id, name=kb_id, type=kb_type, embedding_model=MODEL, created_at=time.time())
        )
    return ctx


def search(ctx: Context, query: str, *kbs: str) -> PipelineState:
    # Two results are enough: no expansion variants (more keyword searches) in the log.
    request = SearchRequest(query=query, knowledge_base_ids=list(kbs), overrides={"embedding_top_k": 2})
    return chunk_search.run(new_state(request, ctx), ctx)


def before(log: list[str], first: str, then: str) -> bool:
    return log.index(first) < log.index(then)


def test_the_bm25_query_is_sent_while_the_query_is_embedded(services: Services, tmp_path: Path) -> None:
    state = search(context(services, tmp_path), "keyword search", "kb-doc")

    # The keyword search reached the index before the embedding API answered (the two requests themselves may
    # arrive in either order); the k-NN search needs the vector.
    assert sorted(services.log) == ["bm25 kb-doc", "embedding answer", "embedding request", "knn"]
    assert before(services.log, "bm25 kb-doc", "embedding answer")
    assert services.log[-2:] == ["embedding answer", "knn"]
    # Both retrievers' hits are fused as when they ran one after the other.
    assert [(r.id, r.match_type) for r in state.search_results] == [("c1", MatchType.VECTOR), ("c2", MatchType.KEYWORD)]
    assert state.query_embeddings[MODEL] == QVEC
    row = next(t for t in state.trace if t.stage == "chunk_search" and t.action == "run")
    assert row.counts == {"vector_hits": 1, "keyword_hits": 1, "results": 2}
    assert not [t for t in state.trace if t.action in ("degrade", "expand", "fallback")]
    # The embedding API got the query once, the embedding request body as OpenAI documents it.
    (embedding,) = services.embeddings.requests
    assert embedding.path == "/v1/embeddings" and embedding.json["input"] == ["keyword search"]


def test_server_hybrid_starts_only_the_faq_keyword_search_early(services: Services, tmp_path: Path) -> None:
    # The document knowledge base waits for the vector (one hybrid query fused on the server); the FAQ one keeps the
    # keyword + k-NN pair, and its keyword search starts before the query is embedded.
    services.keyword = {"kb-faq": [("f1", 2.0)]}
    services.knn = []
    hybrid: list[RecordedRequest] = []

    def answer(req: RecordedRequest) -> ScriptedResponse:
        if req.method == "PUT":  # the search pipeline, created on first use
            return ScriptedResponse(200, {"acknowledged": True})
        if "search_pipeline" in req.query:
            hybrid.append(req)
            services.note("hybrid")
            return hits(("c1", 0.9))
        return services.answer_index(req)

    services.index.set_fallback(answer)
    state = search(context(services, tmp_path, server_hybrid=True), "keyword search", "kb-doc", "kb-faq")

    assert sorted(services.log) == ["bm25 kb-faq", "embedding answer", "embedding request", "hybrid", "knn"]
    assert before(services.log, "bm25 kb-faq", "embedding answer")
    assert sorted(services.log[-2:]) == ["hybrid", "knn"]
    assert find_terms(hybrid[0].json["query"], "knowledge_base_id") == ["kb-doc"]
    assert {r.id: r.match_type for r in state.search_results} == {"c1": MatchType.HYBRID, "entry-1": MatchType.FAQ}
    assert not [t for t in state.trace if t.action == "degrade"]


def test_failed_embedding_under_server_hybrid_searches_every_knowledge_base_by_keywords_at_once(
    services: Services, tmp_path: Path, unused_port: int
) -> None:
    # The early keyword search covered the FAQ knowledge base only; with no vector the document one falls back to
    # keywords too, and BM25 must rank both with their joint statistics: one call over both, whose hits are used.
    services.keyword = {"": [("c2", 3.0), ("f1", 1.0)], "kb-faq": [("f1", 2.0)]}
    ctx = context(services, tmp_path, server_hybrid=True, embed_url=f"http://127.0.0.1:{unused_port}/v1")
    state = search(ctx, "keyword search", "kb-doc", "kb-faq")

    joint = [e for e in services.log if e.startswith("bm25 ") and "," in e]
    assert joint == ["bm25 kb-doc,kb-faq"]
    assert "knn" not in services.log and "hybrid" not in services.log
    assert [(r.id, r.match_type) for r in state.search_results] == [
        ("c2", MatchType.KEYWORD),
        ("entry-1", MatchType.FAQ),
    ]
    (degrade,) = [t for t in state.trace if t.action == "degrade"]
    assert "embedding failed, keyword search only" in (degrade.reason or "")
    row = next(t for t in state.trace if t.stage == "chunk_search" and t.action == "run")
    assert row.counts["keyword_hits"] == 2 and row.counts["vector_hits"] == 0


@pytest.fixture
def unused_port() -> int:
    with socket.socket() as sock:  # bound and closed: a connection to it is refused
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
