"""OpenSearch request bodies: mappings, queries, documents and bulk actions. Pure functions, no I/O.

Every query a tenant's index sends carries :func:`tenant_filter` (see :mod:`ragstep.adapters.index.opensearch`).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ragstep.errors import InputError
from ragstep.models import DEFAULT_TENANT, Chunk
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import tokenize

Flavour = Literal["es", "aoss"]
Auth = Literal["auto", "sigv4", "basic", "none"]
Engine = Literal["faiss", "lucene"]

#: The local index's BM25 k1 and b (ragstep.adapters.index.local), used for the ``tokens`` field on ``es``.
BM25_K1 = 1.5
BM25_B = 0.75
SIMILARITY = "ragstep_bm25"
#: HNSW build parameters of every vector field.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 128
#: ``index.max_result_window``'s default: the most hits one search may return.
MAX_WINDOW = 10_000
#: Field values fetched with ranked hits (everything else stays on the server).
HIT_FIELDS = ["chunk_id", "version"]
#: Fields never needed when rebuilding a chunk.
CHUNK_EXCLUDES = ["tokens", "vec_*"]
#: What a full read (documents indexed again) asks ``_source`` for besides ``*``: the vector fields, by name.
FULL_SOURCE_INCLUDES = ["vec_*"]
#: HTTP statuses worth another attempt (OpenSearch's "too many requests" and gateway errors).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Bulk requests are cut at this many actions or bytes (the bulk docs suggest 5-15 MB per request; small managed
#: domains accept at most 10 MiB).
BULK_MAX_ACTIONS = 500
BULK_MAX_BYTES = 5 * 1024 * 1024
#: Chunk ids per ``terms`` lookup.
LOOKUP_BATCH = 1000
SCAN_PAGE = 1000
#: The keyword field naming a document's tenant, and its mapping.
TENANT_FIELD = "tenant_id"
TENANT_MAPPING: dict[str, Any] = {"type": "keyword"}
_SLUG = re.compile(r"[^a-z0-9]+")
_AWS_HOST = re.compile(r"\.([a-z]{2}(?:-gov|-iso[a-z]*)?-[a-z]+-\d)\.(?:es|aoss)\.amazonaws\.com$")


def space_field(space: str) -> str:
    """The ``knn_vector`` field of an embedding space: ``vec_<slug>_<hash>``.

    Model ids contain ``:`` and ``.`` (``bedrock:amazon.titan-embed-text-v2:0``), and a dot in a field name means
    an object path to OpenSearch, so the name is slugged; the hash keeps two ids with the same slug apart.
    """
    slug = _SLUG.sub("_", space.lower()).strip("_")[:40] or "space"
    return f"vec_{slug}_{hashlib.sha1(space.encode('utf-8')).hexdigest()[:8]}"


def document_id(chunk_id: str, tenant_id: str = DEFAULT_TENANT) -> str:
    """The ``_id`` of a chunk on the ``es`` flavour: the chunk id (``<tenant>#<chunk id>`` outside the default tenant,
    so two tenants' chunk ids never collide), hashed when above OpenSearch's 512-byte limit."""
    key = chunk_id if tenant_id == DEFAULT_TENANT else f"{tenant_id}#{chunk_id}"
    raw = key.encode("utf-8")
    return key if len(raw) <= 512 else "sha256:" + hashlib.sha256(raw).hexdigest()


def new_version() -> str:
    """A generation id that sorts by creation time (nanoseconds) with a random suffix against ties."""
    return f"{time.time_ns():020d}-{secrets.token_hex(4)}"


def tenant_filter(tenant_id: str) -> dict[str, Any]:
    """The non-scoring clause that keeps a request to ``tenant_id``'s documents.

    Every document written now carries ``tenant_id``, the default tenant's too. The default tenant also owns the
    documents that have no ``tenant_id`` at all: those written before tenants existed, so an existing index keeps
    working without reindexing. No other tenant can own such a document, so this widens nobody's view.
    """
    if tenant_id != DEFAULT_TENANT:
        return {"term": {TENANT_FIELD: tenant_id}}
    return {
        "bool": {
            "should": [
                {"term": {TENANT_FIELD: DEFAULT_TENANT}},
                {"bool": {"must_not": [{"exists": {"field": TENANT_FIELD}}]}},
            ],
            "minimum_should_match": 1,
        }
    }


def build_knn_field(dimension: int, engine: Engine = "faiss") -> dict[str, Any]:
    return {
        "type": "knn_vector",
        "dimension": dimension,
        "method": {
            "name": "hnsw",
            "space_type": "cosinesimil",
            "engine": engine,
            "parameters": {"ef_construction": HNSW_EF_CONSTRUCTION, "m": HNSW_M},
        },
    }


def build_mapping(
    dimension_by_space: Mapping[str, int], *, engine: Engine = "faiss", custom_similarity: bool = True
) -> dict[str, Any]:
    """The body of ``PUT /<index>``: k-NN enabled, the chunk fields, one vector field per space."""
    tokens: dict[str, Any] = {"type": "text", "analyzer": "whitespace", "index_options": "freqs"}
    index_settings: dict[str, Any] = {"knn": True}
    if custom_similarity:
        tokens["similarity"] = SIMILARITY
        index_settings["similarity"] = {SIMILARITY: {"type": "BM25", "k1": BM25_K1, "b": BM25_B}}
    properties: dict[str, Any] = {
        "chunk_id": {"type": "keyword"},
        TENANT_FIELD: dict(TENANT_MAPPING),
        "knowledge_id": {"type": "keyword"},
        "knowledge_base_id": {"type": "keyword"},
        "tag_id": {"type": "keyword"},
        "chunk_type": {"type": "keyword"},
        "space": {"type": "keyword"},
        "version": {"type": "keyword"},
        "enabled": {"type": "boolean"},
        "chunk_index": {"type": "integer"},
        "tokens": tokens,
        "content": {"type": "text", "index": False},
        "doc": {"type": "object", "enabled": False},
    }
    for space, dim in sorted(dimension_by_space.items()):
        properties[space_field(space)] = build_knn_field(dim, engine)
    return {"settings": {"index": index_settings}, "mappings": {"dynamic": "strict", "properties": properties}}


def build_filter(flt: SearchFilter, tenant_id: str = DEFAULT_TENANT) -> list[dict[str, Any]]:
    """The tenant and the SearchFilter as non-scoring clauses (empty restrictions add nothing)."""
    clauses: list[dict[str, Any]] = [tenant_filter(tenant_id)]
    if flt.enabled_only:
        clauses.append({"term": {"enabled": True}})
    for name, values in (
        ("knowledge_base_id", flt.knowledge_base_ids),
        ("knowledge_id", flt.knowledge_ids),
        ("tag_id", flt.tag_ids),
        ("chunk_type", tuple(str(t) for t in flt.chunk_types)),
    ):
        if values:
            clauses.append({"terms": {name: list(dict.fromkeys(values))}})
    return clauses


def _keyword_clause(tokens: Sequence[str], flt: SearchFilter, tenant_id: str) -> dict[str, Any]:
    terms = list(dict.fromkeys(t for t in tokens if t))
    if not terms:
        return {"match_none": {}}
    query: dict[str, Any] = {"should": [{"term": {"tokens": t}} for t in terms], "minimum_should_match": 1}
    query["filter"] = build_filter(flt, tenant_id)
    return {"bool": query}


def _knn_clause(vector: Sequence[float], field_name: str, flt: SearchFilter, k: int, tenant_id: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "vector": list(vector),
        "k": k,
        "filter": {"bool": {"filter": build_filter(flt, tenant_id)}},
    }
    return {"knn": {field_name: spec}}


def build_keyword_query(
    tokens: Sequence[str], flt: SearchFilter, top_k: int, *, tenant_id: str = DEFAULT_TENANT
) -> dict[str, Any]:
    """BM25 over pre-tokenized terms: one ``term`` query per distinct token, summed; filters do not score."""
    return {"size": top_k, "_source": HIT_FIELDS, "query": _keyword_clause(tokens, flt, tenant_id)}


def build_knn_query(
    vector: Sequence[float], field_name: str, flt: SearchFilter, top_k: int, *, tenant_id: str = DEFAULT_TENANT
) -> dict[str, Any]:
    """Approximate k-NN with the filter inside the ``knn`` clause (efficient filtering); ``size`` = ``k``."""
    return {"size": top_k, "_source": HIT_FIELDS, "query": _knn_clause(vector, field_name, flt, top_k, tenant_id)}


def build_hybrid_query(
    tokens: Sequence[str],
    vector: Sequence[float],
    field_name: str,
    flt: SearchFilter,
    top_k: int,
    *,
    tenant_id: str = DEFAULT_TENANT,
) -> dict[str, Any]:
    """A ``hybrid`` query: keyword first, vector second (the order the pipeline's weights follow)."""
    queries = [_keyword_clause(tokens, flt, tenant_id), _knn_clause(vector, field_name, flt, top_k, tenant_id)]
    return {"size": top_k, "_source": HIT_FIELDS, "query": {"hybrid": {"queries": queries}}}


def hybrid_weights(w_keyword: float, w_vector: float) -> tuple[float, float]:
    """The pipeline's weights, keyword first: normalised to sum to 1 (the processor requires it), 6 decimals."""
    total = w_keyword + w_vector
    if not (w_keyword >= 0 and w_vector >= 0 and total > 0):
        raise InputError("hybrid weights must be non-negative and not both zero")
    wk = round(w_keyword / total, 6)
    return wk, round(1.0 - wk, 6)


def search_pipeline_name(index: str, w_keyword: float = 0.3, w_vector: float = 0.7) -> str:
    """The search pipeline of one weight pair: ``<index>-hybrid-k<keyword>-v<vector>``, weights in millionths after
    normalisation (0.3/0.7 and 3/7 share ``<index>-hybrid-k300000-v700000``)."""
    wk, wv = hybrid_weights(w_keyword, w_vector)
    return f"{index}-hybrid-k{round(wk * 1_000_000)}-v{round(wv * 1_000_000)}"


def build_search_pipeline(w_keyword: float = 0.3, w_vector: float = 0.7) -> dict[str, Any]:
    """``PUT /_search/pipeline/<name>``: min-max normalisation, then a weighted arithmetic mean (weights sum to 1)."""
    wk, wv = hybrid_weights(w_keyword, w_vector)
    return {
        "description": "ragstep: min-max normalised BM25 and k-NN scores, weighted arithmetic mean",
        "phase_results_processors": [
            {
                "normalization-processor": {
                    "normalization": {"technique": "min_max"},
                    "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [wk, wv]}},
                }
            }
        ],
    }


def knowledge_query(
    knowledge_ids: Sequence[str], *, keep_version: str | None = None, tenant_id: str = DEFAULT_TENANT
) -> dict[str, Any]:
    """Every document of these knowledge items (except those of ``keep_version``)."""
    query: dict[str, Any] = {"filter": [tenant_filter(tenant_id), {"terms": {"knowledge_id": list(knowledge_ids)}}]}
    if keep_version is not None:
        query["must_not"] = [{"term": {"version": keep_version}}]
    return {"bool": query}


def knowledge_base_query(knowledge_base_id: str, *, tenant_id: str = DEFAULT_TENANT) -> dict[str, Any]:
    return {"bool": {"filter": [tenant_filter(tenant_id), {"term": {"knowledge_base_id": knowledge_base_id}}]}}


def chunk_ids_query(
    chunk_ids: Sequence[str], *, version: str | None = None, tenant_id: str = DEFAULT_TENANT
) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [tenant_filter(tenant_id), {"terms": {"chunk_id": list(chunk_ids)}}]
    if version is not None:
        clauses.append({"term": {"version": version}})
    return {"bool": {"filter": clauses}}


def build_chunks_at_query(
    wanted: Mapping[str, Sequence[int]], size: int, *, tenant_id: str = DEFAULT_TENANT
) -> dict[str, Any] | None:
    """Enabled chunks at these positions of these knowledge items, in document order (None: nothing wanted)."""
    should = []
    for kid, indexes in wanted.items():
        idx = sorted({int(i) for i in indexes if int(i) >= 0})
        if idx:
            should.append({"bool": {"filter": [{"term": {"knowledge_id": kid}}, {"terms": {"chunk_index": idx}}]}})
    if not should:
        return None
    return {
        "size": size,
        "query": {
            "bool": {
                "filter": [tenant_filter(tenant_id), {"term": {"enabled": True}}],
                "should": should,
                "minimum_should_match": 1,
            }
        },
        "sort": [{"chunk_index": "asc"}, {"chunk_id": "asc"}],
        "_source": {"excludes": CHUNK_EXCLUDES},
    }


def build_delete_by_query(query: Mapping[str, Any]) -> dict[str, Any]:
    return {"query": dict(query)}


def build_scan_query(query: Mapping[str, Any], size: int, search_after: Sequence[Any] | None = None) -> dict[str, Any]:
    """One page of document ids matching ``query``, in a stable order for ``search_after``."""
    body: dict[str, Any] = {
        "size": size,
        "query": dict(query),
        "_source": False,
        "sort": [{"chunk_id": "asc"}, {"version": "asc"}],
    }
    if search_after is not None:
        body["search_after"] = list(search_after)
    return body


def build_stats_query(*, tenant_id: str = DEFAULT_TENANT) -> dict[str, Any]:
    return {
        "size": 0,
        "track_total_hits": True,
        "query": {"bool": {"filter": [tenant_filter(tenant_id)]}},
        "aggs": {
            "knowledge_items": {"cardinality": {"field": "knowledge_id", "precision_threshold": 40000}},
            "spaces": {"terms": {"field": "space", "size": 1000}},
        },
    }


def vector_values(vector: np.ndarray) -> list[float]:
    """A float32 vector as JSON numbers: 7 decimals (float32 holds ~7 digits; the full float64 repr doubles the
    payload for nothing)."""
    return np.round(np.asarray(vector, dtype=np.float64), 7).tolist()


def build_document(
    chunk: Chunk,
    *,
    version: str,
    space: str | None = None,
    vector: Sequence[float] | None = None,
    tenant_id: str = DEFAULT_TENANT,
) -> dict[str, Any]:
    """The ``_source`` of one chunk (see the package docstring for the fields)."""
    text = chunk.index_text if chunk.index_text is not None else chunk.content
    source: dict[str, Any] = {
        "chunk_id": chunk.id,
        TENANT_FIELD: tenant_id,
        "knowledge_id": chunk.knowledge_id,
        "knowledge_base_id": chunk.knowledge_base_id,
        "tag_id": chunk.tag_id,
        "chunk_type": str(chunk.chunk_type),
        "chunk_index": chunk.chunk_index,
        "enabled": chunk.enabled,
        "version": version,
        "tokens": " ".join(tokenize(text)),
        "content": chunk.content,
        "doc": chunk.model_dump(mode="json", exclude={"content", "enabled", "embed_text"}),
    }
    if space:
        source["space"] = space
        if vector is not None:
            source[space_field(space)] = list(vector)
    return source


def build_bulk_body(actions: Iterable[tuple[Mapping[str, Any], Mapping[str, Any] | None]]) -> str:
    """NDJSON: each action line, then its source line when it has one; every line ends with a newline."""
    lines: list[str] = []
    for meta, source in actions:
        lines.append(dumps(meta))
        if source is not None:
            lines.append(dumps(source))
    return "".join(line + "\n" for line in lines)


def index_action(source: Mapping[str, Any], *, with_id: bool) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """``index`` with ``_id`` = the chunk id (es), or without (aoss: the collection assigns the id)."""
    tenant_id = source.get(TENANT_FIELD, DEFAULT_TENANT)
    meta: dict[str, Any] = {"_id": document_id(source["chunk_id"], tenant_id)} if with_id else {}
    return {"index": meta}, source


def delete_action(doc_id: str) -> tuple[dict[str, Any], None]:
    return {"delete": {"_id": doc_id}}, None


def enable_action(
    chunk_id: str, enabled: bool, tenant_id: str = DEFAULT_TENANT
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A partial-document ``update`` (es only: AOSS vector collections cannot update by id)."""
    return {"update": {"_id": document_id(chunk_id, tenant_id)}}, {"doc": {"enabled": enabled}}


def dumps(value: Any) -> str:
    """Compact JSON with non-ASCII kept (what ``_bulk`` lines and size estimates use)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def batched(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
