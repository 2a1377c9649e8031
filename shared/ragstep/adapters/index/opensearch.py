"""The :class:`~ragstep.ports.SearchIndex` on OpenSearch: a managed domain, a self-hosted cluster, or a Serverless
(AOSS) vector search collection.

Documents
---------
One document per chunk::

    chunk_id, knowledge_id, knowledge_base_id, tag_id, chunk_type, space, version   keyword (filters, bookkeeping)
    enabled                                                                          boolean
    chunk_index                                                                      integer (document order)
    tokens      text, ``whitespace`` analyzer: ragstep's own tokens joined by spaces
    content     text, ``index: false``: kept for display only
    doc         object, ``enabled: false``: the rest of the chunk JSON, stored in _source, never parsed
    vec_<slug>  knn_vector, one field per embedding space (HNSW, cosinesimil)

``tokens`` holds exactly what :func:`ragstep.retrieval.text.tokenize` produces (jieba for Han runs, a regex for the rest), and
the whitespace analyzer only splits on the spaces we put there, so BM25 runs on the same terms as the local index on
every flavour, AOSS included (which offers no Chinese analysis plugin). Queries send the same tokens as ``term``
queries, so the analyzer never sees query text either.

Scores
------
* Keyword: ``bool.should`` of one ``term`` query per distinct token (``minimum_should_match: 1``), filters in
  ``bool.filter`` (no scoring). The sum of the per-term BM25 scores is BM25 of the query, as in the local index; the
  hits are then normalised to the best one (1.0) and cut at the threshold exactly as there, the raw BM25 score kept
  in :attr:`Hit.raw_score`. On the ``es`` flavour the ``tokens`` field uses a BM25 similarity with the local index's
  k1 = 1.5 (Lucene drops BM25's constant ``k1 + 1`` factor, which the normalisation cancels anyway). Scores stay
  close to the local ones rather than equal: Lucene keeps statistics per shard, counts deleted documents until
  segments merge, and stores document lengths in one byte.
* Vector: a ``knn`` query with the filter *inside* the clause (efficient filtering: the engine searches among the
  allowed documents, so ``k`` results come back whenever ``k`` documents pass the filter). For ``cosinesimil``
  OpenSearch's ``_score`` is ``(2 - d) / 2`` with ``d = 1 - cos``, i.e. ``(1 + cos) / 2``; it is converted back to
  the cosine (``2 * score - 1``) before the threshold, so ``vector_threshold`` means what it means locally.
* Fusion of the two lists happens client-side in the search stage by default, for every backend.
  :meth:`hybrid_search` is the optional server-side alternative (``RAGSTEP_OPENSEARCH_SERVER_HYBRID``; AOSS lacks
  it): one ``hybrid`` query (keyword clause, then k-NN clause) run through a ``normalization-processor`` search
  pipeline that min-max normalises each clause's scores and takes their weighted arithmetic mean. The weights are
  the request's (``rrf_keyword_weight``, ``rrf_vector_weight``, normalised to sum to 1), so there is one pipeline
  per weight pair, named after the weights (:func:`search_pipeline_name`) and created by the adapter on first use
  (once per adapter instance; again if it disappears from the cluster). Only the combined score comes back, so
  ``vector_threshold`` and ``keyword_threshold`` do not apply on that path (see :meth:`hybrid_search`).

Replacing a knowledge item is not atomic
----------------------------------------
OpenSearch has no multi-document transactions. :meth:`OpenSearchIndex.replace_knowledge` therefore writes the new
chunks first, tagged with a fresh ``version`` (a time-ordered generation id), and only then deletes the item's
documents whose ``version`` differs. A concurrent reader sees the old chunks, or old and new together, never an
item without chunks. If the write fails half-way, the old version is still there (plus whatever new chunks made
it); running the replace again converges. On the ``es`` flavour the document ``_id`` is the chunk id, so an
unchanged chunk id is overwritten in place. While both versions are visible a search may return an old and a new
chunk with the same text; the search stage drops such duplicates by content. Two replaces of the *same* item
running at once can delete each other's chunks (each removes every version but its own): the caller must not run
them concurrently (ingestion handles one job per knowledge item); replaces of different items are independent.

Amazon OpenSearch Serverless (flavour ``aoss``)
-----------------------------------------------
Vector search collections assign document ids themselves (custom ids and upserts are for *search* collections
only), and the API has no ``_delete_by_query``, ``_update_by_query`` or ``refresh`` parameter. So on ``aoss``:

* chunks are found by their ``chunk_id`` field, never by ``_id``; readers collapse duplicates (which exist briefly
  during a replace) to the newest ``version``;
* deleting = collecting ``_id`` s with a ``search_after`` scan, then a ``_bulk`` of ``delete`` actions;
* :meth:`set_enabled` re-indexes the changed chunks under a new version and deletes the old documents;
* writes are not searchable at once, so a replace polls ``_count`` until its new chunks are visible (up to
  ``opensearch_visibility_timeout_s``) before deleting the previous version.

Transport
---------
opensearch-py's ``OpenSearch`` client over ``RequestsHttpConnection`` (its documented connection for SigV4), signed
with ``RequestsAWSV4SignerAuth`` (service ``es`` or ``aoss``), or basic auth, or no auth. The library is imported,
and the client created, on first use. Requests are retried here (the client's own retries are off) on HTTP 429,
502, 503, 504 and connection failures, with exponential backoff and jitter; ``_bulk`` items rejected with 429 are
retried on their own. What still fails becomes a :class:`~ragstep.errors.StorageError` naming the chunk ids and
OpenSearch's reasons.

Documentation followed (request and response shapes):

* knn_vector mapping, methods and engines: https://docs.opensearch.org/latest/mappings/supported-field-types/knn-vector/
  and https://docs.opensearch.org/latest/mappings/supported-field-types/knn-methods-engines/
* scores of each space: https://docs.opensearch.org/latest/mappings/supported-field-types/knn-spaces/
* efficient filtering: https://docs.opensearch.org/latest/vector-search/filter-search-knn/efficient-knn-filtering/
* k and size: https://docs.opensearch.org/latest/vector-search/vector-search-techniques/approximate-knn/
* bulk: https://docs.opensearch.org/latest/api-reference/document-apis/bulk/
* delete by query: https://docs.opensearch.org/latest/api-reference/document-apis/delete-by-query/
* search_after: https://docs.opensearch.org/latest/search-plugins/searching-data/paginate/
* whitespace analyzer: https://docs.opensearch.org/latest/analyzers/supported-analyzers/whitespace/
* enabled / index / index_options / similarity mapping parameters:
  https://docs.opensearch.org/latest/mappings/mapping-parameters/enabled/ (and index-parameter/, index-options/,
  similarity/), https://docs.opensearch.org/latest/im-plugin/similarity/
* hybrid query and normalization processor: https://docs.opensearch.org/latest/query-dsl/compound/hybrid/ and
  https://docs.opensearch.org/latest/search-plugins/search-pipelines/normalization-processor/
* Python client and SigV4: https://docs.opensearch.org/latest/clients/python-low-level/
* AOSS operations and collection types:
  https://docs.aws.amazon.com/opensearch-service/latest/developerguide/serverless-genref.html,
  https://docs.aws.amazon.com/opensearch-service/latest/developerguide/serverless-vector-search.html,
  https://docs.aws.amazon.com/solutions/latest/migration-assistant-for-amazon-opensearch-service/mts-collection-types.html
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, urlsplit

import numpy as np

from ragstep.adapters.index._replace import checked_replacement
from ragstep.errors import ConflictError, InputError, StorageError
from ragstep.models import Chunk
from ragstep.ports import Hit, IndexStats, SearchFilter
from ragstep.retrieval.text import tokenize
from ragstep.settings import SERVER_HYBRID_ON_AOSS

if TYPE_CHECKING:
    from ragstep.settings import Settings

log = logging.getLogger(__name__)

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
#: HTTP statuses worth another attempt (OpenSearch's "too many requests" and gateway errors).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Bulk requests are cut at this many actions or bytes (the bulk docs suggest 5-15 MB per request; small managed
#: domains accept at most 10 MiB).
BULK_MAX_ACTIONS = 500
BULK_MAX_BYTES = 5 * 1024 * 1024
#: Chunk ids per ``terms`` lookup.
LOOKUP_BATCH = 1000
SCAN_PAGE = 1000
_SLUG = re.compile(r"[^a-z0-9]+")
_AWS_HOST = re.compile(r"\.([a-z]{2}(?:-gov|-iso[a-z]*)?-[a-z]+-\d)\.(?:es|aoss)\.amazonaws\.com$")


# ================================================================================================ pure functions


def space_field(space: str) -> str:
    """The ``knn_vector`` field of an embedding space: ``vec_<slug>_<hash>``.

    Model ids contain ``:`` and ``.`` (``bedrock:amazon.titan-embed-text-v2:0``), and a dot in a field name means
    an object path to OpenSearch, so the name is slugged; the hash keeps two ids with the same slug apart.
    """
    slug = _SLUG.sub("_", space.lower()).strip("_")[:40] or "space"
    return f"vec_{slug}_{hashlib.sha1(space.encode('utf-8')).hexdigest()[:8]}"


def document_id(chunk_id: str) -> str:
    """The ``_id`` of a chunk on the ``es`` flavour: the chunk id, hashed when above OpenSearch's 512-byte limit."""
    raw = chunk_id.encode("utf-8")
    return chunk_id if len(raw) <= 512 else "sha256:" + hashlib.sha256(raw).hexdigest()


def new_version() -> str:
    """A generation id that sorts by creation time (nanoseconds) with a random suffix against ties."""
    return f"{time.time_ns():020d}-{secrets.token_hex(4)}"


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


def build_filter(flt: SearchFilter) -> list[dict[str, Any]]:
    """The SearchFilter as non-scoring clauses (empty restrictions add nothing)."""
    clauses: list[dict[str, Any]] = []
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


def _keyword_clause(tokens: Sequence[str], flt: SearchFilter) -> dict[str, Any]:
    terms = list(dict.fromkeys(t for t in tokens if t))
    if not terms:
        return {"match_none": {}}
    query: dict[str, Any] = {"should": [{"term": {"tokens": t}} for t in terms], "minimum_should_match": 1}
    clauses = build_filter(flt)
    if clauses:
        query["filter"] = clauses
    return {"bool": query}


def _knn_clause(vector: Sequence[float], field_name: str, flt: SearchFilter, k: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"vector": list(vector), "k": k}
    clauses = build_filter(flt)
    if clauses:
        spec["filter"] = {"bool": {"filter": clauses}}
    return {"knn": {field_name: spec}}


def build_keyword_query(tokens: Sequence[str], flt: SearchFilter, top_k: int) -> dict[str, Any]:
    """BM25 over pre-tokenized terms: one ``term`` query per distinct token, summed; filters do not score."""
    return {"size": top_k, "_source": HIT_FIELDS, "query": _keyword_clause(tokens, flt)}


def build_knn_query(vector: Sequence[float], field_name: str, flt: SearchFilter, top_k: int) -> dict[str, Any]:
    """Approximate k-NN with the filter inside the ``knn`` clause (efficient filtering); ``size`` = ``k``."""
    return {"size": top_k, "_source": HIT_FIELDS, "query": _knn_clause(vector, field_name, flt, top_k)}


def build_hybrid_query(
    tokens: Sequence[str], vector: Sequence[float], field_name: str, flt: SearchFilter, top_k: int
) -> dict[str, Any]:
    """A ``hybrid`` query: keyword first, vector second (the order the pipeline's weights follow)."""
    queries = [_keyword_clause(tokens, flt), _knn_clause(vector, field_name, flt, top_k)]
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


def knowledge_query(knowledge_ids: Sequence[str], *, keep_version: str | None = None) -> dict[str, Any]:
    """Every document of these knowledge items (except those of ``keep_version``)."""
    query: dict[str, Any] = {"filter": [{"terms": {"knowledge_id": list(knowledge_ids)}}]}
    if keep_version is not None:
        query["must_not"] = [{"term": {"version": keep_version}}]
    return {"bool": query}


def knowledge_base_query(knowledge_base_id: str) -> dict[str, Any]:
    return {"bool": {"filter": [{"term": {"knowledge_base_id": knowledge_base_id}}]}}


def chunk_ids_query(chunk_ids: Sequence[str], *, version: str | None = None) -> dict[str, Any]:
    clauses: list[dict[str, Any]] = [{"terms": {"chunk_id": list(chunk_ids)}}]
    if version is not None:
        clauses.append({"term": {"version": version}})
    return {"bool": {"filter": clauses}}


def build_chunks_at_query(wanted: Mapping[str, Sequence[int]], size: int) -> dict[str, Any] | None:
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
        "query": {"bool": {"filter": [{"term": {"enabled": True}}], "should": should, "minimum_should_match": 1}},
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


def build_stats_query() -> dict[str, Any]:
    return {
        "size": 0,
        "track_total_hits": True,
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
) -> dict[str, Any]:
    """The ``_source`` of one chunk (see the module docstring for the fields)."""
    text = chunk.index_text if chunk.index_text is not None else chunk.content
    source: dict[str, Any] = {
        "chunk_id": chunk.id,
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


def chunk_from_source(source: Mapping[str, Any]) -> Chunk:
    """Rebuild a chunk from a document's ``_source`` (the top-level ``enabled`` is authoritative)."""
    return Chunk.model_validate(
        {**source.get("doc", {}), "content": source.get("content", ""), "enabled": source.get("enabled", True)}
    )


def build_bulk_body(actions: Iterable[tuple[Mapping[str, Any], Mapping[str, Any] | None]]) -> str:
    """NDJSON: each action line, then its source line when it has one; every line ends with a newline."""
    lines: list[str] = []
    for meta, source in actions:
        lines.append(_dumps(meta))
        if source is not None:
            lines.append(_dumps(source))
    return "".join(line + "\n" for line in lines)


def index_action(source: Mapping[str, Any], *, with_id: bool) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """``index`` with ``_id`` = the chunk id (es), or without (aoss: the collection assigns the id)."""
    meta: dict[str, Any] = {"_id": document_id(source["chunk_id"])} if with_id else {}
    return {"index": meta}, source


def delete_action(doc_id: str) -> tuple[dict[str, Any], None]:
    return {"delete": {"_id": doc_id}}, None


def enable_action(chunk_id: str, enabled: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """A partial-document ``update`` (es only: AOSS vector collections cannot update by id)."""
    return {"update": {"_id": document_id(chunk_id)}}, {"doc": {"enabled": enabled}}


@dataclass(frozen=True, slots=True)
class SearchHit:
    doc_id: str
    chunk_id: str
    version: str
    score: float
    source: dict[str, Any] = field(default_factory=dict)
    sort: list[Any] | None = None


def parse_search_response(response: Mapping[str, Any]) -> list[SearchHit]:
    """``hits.hits`` in response order; the chunk id comes from ``_source`` (``_id`` on aoss is not ours)."""
    out: list[SearchHit] = []
    for hit in (response.get("hits") or {}).get("hits") or []:
        source = hit.get("_source") or {}
        score = hit.get("_score")
        out.append(
            SearchHit(
                doc_id=str(hit.get("_id", "")),
                chunk_id=str(source.get("chunk_id") or hit.get("_id", "")),
                version=str(source.get("version", "")),
                score=float(score) if score is not None else 0.0,
                source=source,
                sort=hit.get("sort"),
            )
        )
    return out


def first_per_chunk(hits: Iterable[SearchHit]) -> list[SearchHit]:
    """Ranked hits with later copies of a chunk dropped (copies exist on aoss while a replace is under way)."""
    seen: set[str] = set()
    out = []
    for h in hits:
        if h.chunk_id not in seen:
            seen.add(h.chunk_id)
            out.append(h)
    return out


def newest_per_chunk(hits: Iterable[SearchHit]) -> list[SearchHit]:
    """One hit per chunk, the newest ``version`` winning, in the order the chunks first appear."""
    best: dict[str, SearchHit] = {}
    for h in hits:
        if h.chunk_id not in best or h.version > best[h.chunk_id].version:
            best[h.chunk_id] = h
    return list(best.values())


def keyword_hits(hits: Sequence[SearchHit], threshold: float) -> list[Hit]:
    """Raw BM25 hits (best first) -> normalised to the best hit, cut below ``threshold`` (as the local index)."""
    ranked = first_per_chunk(hits)
    if not ranked or ranked[0].score <= 0.0:
        return []
    top = ranked[0].score
    out = []
    for h in ranked:
        if h.score <= 0.0:
            break
        score = h.score / top
        if score < threshold:
            break  # best-first order: everything after scores lower
        out.append(Hit(h.chunk_id, score, h.score))
    return out


def cosine_from_score(score: float) -> float:
    """``cosinesimil``: ``_score = (2 - d) / 2`` with ``d = 1 - cos``, so ``cos = 2 * _score - 1``."""
    return max(-1.0, min(1.0, 2.0 * score - 1.0))


def vector_hits(hits: Sequence[SearchHit], threshold: float) -> list[Hit]:
    out = []
    for h in first_per_chunk(hits):
        cos = cosine_from_score(h.score)
        if cos >= threshold:
            out.append(Hit(h.chunk_id, cos, cos))
    return out


@dataclass(frozen=True, slots=True)
class BulkItem:
    action: str
    status: int
    doc_id: str
    result: str = ""
    error_type: str = ""
    error_reason: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.error_type


def parse_bulk_response(response: Mapping[str, Any]) -> list[BulkItem]:
    """One :class:`BulkItem` per action, in request order (the order the bulk API answers in)."""
    out = []
    for item in response.get("items") or []:
        action, body = next(iter(item.items()))
        error = body.get("error") or {}
        if isinstance(error, str):
            error = {"type": "error", "reason": error}
        out.append(
            BulkItem(
                action=action,
                status=int(body.get("status", 0)),
                doc_id=str(body.get("_id", "")),
                result=str(body.get("result", "")),
                error_type=str(error.get("type", "")),
                error_reason=str(error.get("reason", "")),
            )
        )
    return out


def parse_mapping_response(response: Mapping[str, Any]) -> dict[str, int]:
    """``GET /<index>/_mapping`` -> {vector field: dimension} (the response is keyed by the concrete index)."""
    fields: dict[str, int] = {}
    for entry in response.values():
        properties = ((entry or {}).get("mappings") or {}).get("properties") or {}
        for name, spec in properties.items():
            if spec.get("type") == "knn_vector":
                fields[name] = int(spec.get("dimension", 0))
    return fields


def parse_stats_response(response: Mapping[str, Any]) -> IndexStats:
    total = (response.get("hits") or {}).get("total") or {}
    chunks = int(total.get("value", 0)) if isinstance(total, Mapping) else int(total)
    aggs = response.get("aggregations") or {}
    items = int((aggs.get("knowledge_items") or {}).get("value", 0))
    buckets = (aggs.get("spaces") or {}).get("buckets") or []
    return IndexStats(
        chunks=chunks, knowledge_items=items, vector_spaces={b["key"]: int(b["doc_count"]) for b in buckets}
    )


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _display(url: str) -> str:
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


def _chunks_of(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# ======================================================================================================= adapter


class _Missing(Exception):
    """HTTP 404 from OpenSearch (index or pipeline not found); callers decide what that means."""


class OpenSearchIndex:
    """The :class:`ragstep.ports.SearchIndex` on OpenSearch (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        index: str = "ragstep-chunks",
        flavour: Flavour = "es",
        auth: Auth = "auto",
        username: str | None = None,
        password: str | None = None,
        region: str | None = None,
        verify_certs: bool = True,
        engine: Engine = "faiss",
        timeout_s: float = 30.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 10.0,
        visibility_timeout_s: float = 120.0,
        server_hybrid: bool = False,
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not url:
            raise InputError("opensearch_url is empty; set RAGSTEP_OPENSEARCH_URL to the domain or collection URL")
        if flavour not in ("es", "aoss"):
            raise InputError(f"opensearch flavour must be 'es' or 'aoss', not {flavour!r}")
        if not index or index != index.lower() or index.startswith(("_", "-", "+")):
            raise InputError(f"OpenSearch index name {index!r} must be lower case and not start with _, - or +")
        if server_hybrid and flavour == "aoss":
            raise InputError(SERVER_HYBRID_ON_AOSS)
        self.url = url.rstrip("/")
        self.index = index
        self.flavour: Flavour = flavour
        self.server_hybrid = server_hybrid
        self._auth_mode = auth
        self._username = username
        self._password = password
        self._region = region
        self._verify_certs = verify_certs
        self._engine: Engine = engine
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._visibility_timeout_s = visibility_timeout_s
        self._sleep = sleep
        self._os = client
        self._lock = threading.Lock()
        self._fields: dict[str, int] | None = None  # vector field -> dimension, None until the mapping is read
        # Search pipelines this instance has created (one per weight pair). Its own lock, held across the PUT so
        # concurrent first searches send one request; never self._lock, which _client() takes.
        self._pipelines: set[str] = set()
        self._pipeline_lock = threading.Lock()
        self._path = "/" + quote(index, safe="")

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenSearchIndex:
        if not settings.opensearch_url:
            raise InputError(
                "index backend 'opensearch' needs RAGSTEP_OPENSEARCH_URL (the domain endpoint or the AOSS "
                "collection endpoint, e.g. https://abc123.us-east-1.aoss.amazonaws.com)"
            )
        password = settings.opensearch_password.get_secret_value() if settings.opensearch_password else None
        return cls(
            settings.opensearch_url,
            index=settings.opensearch_index,
            flavour=settings.opensearch_flavour,
            auth=settings.opensearch_auth,
            username=settings.opensearch_username,
            password=password,
            region=settings.aws_region,
            verify_certs=settings.opensearch_verify_certs,
            engine=settings.opensearch_knn_engine,
            timeout_s=settings.opensearch_timeout_s,
            max_retries=settings.opensearch_max_retries,
            visibility_timeout_s=settings.opensearch_visibility_timeout_s,
            server_hybrid=settings.opensearch_server_hybrid,
        )

    # -- the client --------------------------------------------------------------------------------------------

    def _client(self) -> Any:
        with self._lock:
            if self._os is None:
                from opensearchpy import OpenSearch, RequestsHttpConnection

                self._os = OpenSearch(
                    hosts=[self.url],
                    http_auth=self._http_auth(),
                    verify_certs=self._verify_certs,
                    ssl_show_warn=self._verify_certs,
                    connection_class=RequestsHttpConnection,
                    pool_maxsize=20,
                    timeout=self._timeout_s,
                    # Retries (with backoff, which the client's own lack) happen in _request.
                    max_retries=0,
                    retry_on_status=(),
                    retry_on_timeout=False,
                )
            return self._os

    def _http_auth(self) -> Any:
        mode = self._auth_mode
        host = urlsplit(self.url).hostname or ""
        if mode == "auto":
            mode = "basic" if self._username else ("sigv4" if host.endswith(".amazonaws.com") else "none")
        if mode == "none":
            return None
        if mode == "basic":
            if not self._username:
                raise InputError("opensearch_auth is 'basic' but RAGSTEP_OPENSEARCH_USERNAME is not set")
            return (self._username, self._password or "")
        import boto3
        from opensearchpy import RequestsAWSV4SignerAuth

        match = _AWS_HOST.search(host)
        region = (
            (match.group(1) if match else None)
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or self._region
            or boto3.Session().region_name
        )
        if not region:
            raise InputError(f"cannot tell the AWS region of {host}; set AWS_REGION")
        credentials = boto3.Session().get_credentials()
        if credentials is None:
            raise StorageError("no AWS credentials found to sign OpenSearch requests (SigV4); configure a role")
        return RequestsAWSV4SignerAuth(credentials, region, "aoss" if self.flavour == "aoss" else "es")

    def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        missing_ok: bool = False,
        timeout_s: float | None = None,
    ) -> Any:
        """One call, retried on 429/502/503/504 and connection failures. A 404 raises :class:`_Missing` when
        ``missing_ok`` (the caller knows what a missing index means), a :class:`StorageError` otherwise."""
        from opensearchpy.exceptions import ConnectionError as OSConnectionError
        from opensearchpy.exceptions import OpenSearchException, TransportError

        client = self._client()
        attempts = self._max_retries + 1
        last = ""
        for attempt in range(attempts):
            try:
                return client.transport.perform_request(
                    method,
                    path,
                    params=dict(params) if params else None,
                    body=body,
                    headers=headers,
                    timeout=timeout_s,
                )
            except OSConnectionError as exc:  # includes timeouts
                last = f"{type(exc).__name__}: {_one_line(str(exc.info or exc.error), 160)}"
            except TransportError as exc:
                status = exc.status_code if isinstance(exc.status_code, int) else 0
                detail = self._error_detail(exc)
                if status == 404 and missing_ok:
                    raise _Missing(detail) from exc
                last = f"HTTP {status} {detail}"
                if status not in RETRY_STATUSES:
                    hint = ""
                    if status in (401, 403):
                        hint = "; check the credentials and the " + (
                            "collection's data access policy" if self.flavour == "aoss" else "access policy"
                        )
                    raise StorageError(f"OpenSearch {what} failed at {_display(self.url)}: {last}{hint}") from exc
            except OpenSearchException as exc:  # e.g. a proxy's HTML page where JSON was expected
                raise StorageError(
                    f"OpenSearch {what} failed at {_display(self.url)}: {type(exc).__name__}: {_one_line(str(exc))}"
                ) from exc
            if attempt + 1 < attempts:
                self._sleep(self._delay_s(attempt))
        raise StorageError(
            f"OpenSearch {what} failed at {_display(self.url)} after {attempts} attempt"
            f"{'s' if attempts != 1 else ''}: {last}"
        )

    @staticmethod
    def _error_detail(exc: Any) -> str:
        info = exc.info if isinstance(exc.info, Mapping) else {}
        error = info.get("error", exc.error)
        if isinstance(error, Mapping):
            reason = error.get("reason") or ""
            causes = error.get("root_cause") or []
            if not reason and causes:
                reason = causes[0].get("reason", "")
            return _one_line(f"{error.get('type', 'error')}: {reason}")
        return _one_line(str(error))

    def _delay_s(self, attempt: int) -> float:
        ceiling = min(self._backoff_max_s, self._backoff_base_s * 2**attempt)
        return ceiling * random.uniform(0.5, 1.0)

    # -- index and mapping -------------------------------------------------------------------------------------

    def ensure_index(self, dimension_by_space: Mapping[str, int] | None = None) -> None:
        """Create the index if it is missing, and add a vector field for every space it does not map yet.

        Idempotent; a space already mapped with another dimension is an :class:`InputError`.
        """
        wanted = dict(dimension_by_space or {})
        fields = self._load_fields(create_with=wanted)
        missing = {}
        for space, dim in wanted.items():
            name = space_field(space)
            if name not in fields:
                missing[space] = dim
            elif fields[name] != dim:
                raise self._dimension_error(space, fields[name], dim)
        if missing:
            properties = {space_field(s): build_knn_field(d, self._engine) for s, d in missing.items()}
            try:
                self._request("PUT", f"{self._path}/_mapping", what="mapping update", body={"properties": properties})
            except StorageError:
                self._fields = None  # another process may have mapped the field meanwhile: read it again
                fields = self._load_fields()
                for space, dim in missing.items():
                    if fields.get(space_field(space)) not in (None, dim):
                        raise self._dimension_error(space, fields[space_field(space)], dim) from None
                raise
            with self._lock:
                self._fields = {**(self._fields or {}), **{space_field(s): d for s, d in missing.items()}}

    def _load_fields(self, *, create_with: Mapping[str, int] | None = None) -> dict[str, int]:
        """The mapped vector fields (cached); with ``create_with``, a missing index is created with those spaces."""
        if self._fields is not None:
            return self._fields
        try:
            fields = parse_mapping_response(
                self._request("GET", f"{self._path}/_mapping", what="mapping read", missing_ok=True)
            )
        except _Missing:
            if create_with is None:
                return {}
            if self._create_index(create_with):
                fields = {space_field(s): d for s, d in create_with.items()}
            else:  # another process created it first, perhaps with other spaces: read what it made
                fields = parse_mapping_response(self._request("GET", f"{self._path}/_mapping", what="mapping read"))
        with self._lock:
            self._fields = fields
        return fields

    def _create_index(self, dimension_by_space: Mapping[str, int]) -> bool:
        """Create the index; False when another process created it meanwhile."""
        body = build_mapping(dimension_by_space, engine=self._engine, custom_similarity=self.flavour == "es")
        try:
            self._request("PUT", self._path, what="index creation", body=body)
        except StorageError as exc:
            if "resource_already_exists_exception" in exc.message:
                return False
            if self._engine == "faiss" and "HTTP 400" in exc.message:
                raise StorageError(
                    f"{exc.message}; the faiss engine supports cosinesimil from OpenSearch 2.19: on an older "
                    "cluster set RAGSTEP_OPENSEARCH_KNN_ENGINE=lucene"
                ) from exc
            raise
        return True

    def delete_index(self) -> None:
        """Drop the whole index (used by the live tests); a missing index is fine."""
        with contextlib.suppress(_Missing):
            self._request("DELETE", self._path, what="index deletion", missing_ok=True)
        with self._lock:
            self._fields = None

    def _dimension_error(self, space: str, have: int, got: int) -> InputError:
        return InputError(
            f"embedding space {space!r} holds {have}-dimensional vectors, got {got}; "
            "re-embed the knowledge base or use another embedding model id"
        )

    # -- low-level operations ----------------------------------------------------------------------------------

    def _search(self, body: Mapping[str, Any], *, what: str = "search", params: Mapping[str, str] | None = None) -> Any:
        try:
            return self._request("POST", f"{self._path}/_search", what=what, body=body, params=params, missing_ok=True)
        except _Missing:
            return {"hits": {"hits": []}}  # no index yet: nothing indexed, nothing found

    def _count(self, query: Mapping[str, Any]) -> int:
        try:
            resp = self._request(
                "POST", f"{self._path}/_count", what="count", body={"query": dict(query)}, missing_ok=True
            )
        except _Missing:
            return 0
        return int(resp.get("count", 0))

    def _bulk(
        self,
        actions: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
        *,
        what: str,
        params: Mapping[str, str] | None = None,
    ) -> list[BulkItem]:
        """Send ``actions`` in size-bounded requests; items rejected with 429 are sent again on their own.

        Returns one item per action, in order; the caller decides which failures matter.
        """
        results: list[BulkItem | None] = [None] * len(actions)
        for batch in self._batches(actions):
            pending = list(batch)
            for attempt in range(self._max_retries + 1):
                body = build_bulk_body(actions[i] for i in pending)
                resp = self._request(
                    "POST",
                    f"{self._path}/_bulk",
                    what=what,
                    params=params,
                    body=body,
                    headers={"Content-Type": "application/x-ndjson"},
                )
                items = parse_bulk_response(resp)
                if len(items) != len(pending):
                    raise StorageError(
                        f"OpenSearch {what}: the bulk response has {len(items)} items for {len(pending)} actions"
                    )
                retry = []
                for pos, item in zip(pending, items, strict=True):
                    results[pos] = item
                    if item.status == 429:
                        retry.append(pos)
                if not retry or attempt == self._max_retries:
                    break
                pending = retry
                self._sleep(self._delay_s(attempt))
        return [r for r in results if r is not None]

    @staticmethod
    def _batches(actions: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]]) -> list[list[int]]:
        batches: list[list[int]] = []
        current: list[int] = []
        size = 0
        for i, (meta, source) in enumerate(actions):
            n = len(_dumps(meta)) + (len(_dumps(source).encode("utf-8")) if source is not None else 0) + 2
            if current and (len(current) >= BULK_MAX_ACTIONS or size + n > BULK_MAX_BYTES):
                batches.append(current)
                current, size = [], 0
            current.append(i)
            size += n
        if current:
            batches.append(current)
        return batches

    def _write_params(self) -> dict[str, str]:
        # wait_for: the bulk returns once its documents are searchable, so the old version can go next. AOSS has
        # no refresh parameter (see _await_visible).
        return {"refresh": "wait_for"} if self.flavour == "es" else {}

    def _delete_matching(self, query: Mapping[str, Any], *, what: str) -> int:
        """Delete every document matching ``query``; returns how many went."""
        if self.flavour == "es":
            try:
                resp = self._request(
                    "POST",
                    f"{self._path}/_delete_by_query",
                    what=what,
                    params={"refresh": "true", "conflicts": "proceed"},
                    body=build_delete_by_query(query),
                    missing_ok=True,
                    # Runs to completion in one request (a knowledge base can hold many chunks).
                    timeout_s=max(self._timeout_s, 300.0),
                )
            except _Missing:
                return 0
            failures = resp.get("failures") or []
            if failures:
                first = failures[0]
                cause = first.get("cause") or {}
                raise StorageError(
                    f"OpenSearch {what}: {len(failures)} deletions failed, e.g. document {first.get('id', '?')}: "
                    f"{cause.get('type', 'error')}: {_one_line(cause.get('reason', ''))}"
                )
            return int(resp.get("deleted", 0))
        doc_ids = self._scan_ids(query)
        if not doc_ids:
            return 0
        items = self._bulk([delete_action(d) for d in doc_ids], what=what)
        failed = [(d, i) for d, i in zip(doc_ids, items, strict=True) if not i.ok and i.status != 404]
        if failed:
            raise StorageError(f"OpenSearch {what}: could not delete {self._describe_failures(failed)}")
        return sum(1 for i in items if i.ok and i.result == "deleted")

    def _scan_ids(self, query: Mapping[str, Any]) -> list[str]:
        """Every ``_id`` matching ``query`` (search_after pages; AOSS has no _delete_by_query)."""
        ids: list[str] = []
        after: list[Any] | None = None
        while True:
            hits = parse_search_response(
                self._search(build_scan_query(query, SCAN_PAGE, after), what="scan for deletion")
            )
            ids.extend(h.doc_id for h in hits)
            if len(hits) < SCAN_PAGE or hits[-1].sort is None:
                return ids
            after = hits[-1].sort

    def _await_visible(self, query: Mapping[str, Any], expected: int, *, what: str) -> None:
        """AOSS: wait until ``expected`` documents match ``query`` (writes become searchable after a refresh that
        the collection schedules itself), so deleting the previous version never leaves readers with nothing."""
        if self.flavour == "es" or expected <= 0:
            return
        deadline = time.monotonic() + self._visibility_timeout_s
        delay = 0.5
        while True:
            seen = self._count(query)
            if seen >= expected:
                return
            if time.monotonic() >= deadline:
                log.warning(
                    "%s: %d of %d new documents searchable after %.0fs; going on",
                    what,
                    seen,
                    expected,
                    self._visibility_timeout_s,
                )
                return
            self._sleep(delay)
            delay = min(delay * 2, 5.0)

    @staticmethod
    def _describe_failures(failed: Sequence[tuple[str, BulkItem]], limit: int = 5) -> str:
        parts = [
            f"{key}: HTTP {i.status} {i.error_type}: {_one_line(i.error_reason, 160)}" for key, i in failed[:limit]
        ]
        more = f" (and {len(failed) - limit} more)" if len(failed) > limit else ""
        return f"{len(failed)} chunk{'s' if len(failed) != 1 else ''} ({'; '.join(parts)}){more}"

    # -- writes --------------------------------------------------------------------------------------------------

    def replace_knowledge(
        self,
        knowledge_id: str,
        chunks: Sequence[Chunk],
        vectors: np.ndarray | None = None,
        space: str | None = None,
    ) -> None:
        """Write the new chunks under a new version, then delete the item's other versions (not atomic: readers see
        the old chunks, or old and new, never none; see the module docstring)."""
        vecs = checked_replacement(knowledge_id, chunks, vectors, space)
        rows: list[list[float] | None] = [None] * len(chunks)
        dims: dict[str, int] = {}
        if vecs is not None and space:
            for i, row in enumerate(vecs):
                # cosinesimil rejects zero vectors; such a chunk is kept (keyword-searchable) without a vector.
                if row.any():
                    rows[i] = vector_values(row)
            dims[space] = int(vecs.shape[1])
        else:
            space = None

        self.ensure_index(dims)
        self._check_conflicts(knowledge_id, [c.id for c in chunks])
        version = new_version()
        sources = [build_document(c, version=version, space=space, vector=rows[i]) for i, c in enumerate(chunks)]
        items = self._bulk(
            [index_action(s, with_id=self.flavour == "es") for s in sources],
            what=f"indexing of knowledge {knowledge_id}",
            params=self._write_params(),
        )
        failed = [(c.id, i) for c, i in zip(chunks, items, strict=True) if not i.ok]
        if failed:
            raise StorageError(
                f"OpenSearch rejected {self._describe_failures(failed)} of knowledge {knowledge_id}; its previous "
                "chunks are still searchable, retry the ingestion"
            )
        self._await_visible(
            {"bool": {"filter": [{"term": {"knowledge_id": knowledge_id}}, {"term": {"version": version}}]}},
            len(chunks),
            what=f"replace of knowledge {knowledge_id}",
        )
        self._delete_matching(
            knowledge_query([knowledge_id], keep_version=version),
            what=f"removal of knowledge {knowledge_id}'s old chunks",
        )

    def _check_conflicts(self, knowledge_id: str, chunk_ids: Sequence[str]) -> None:
        """A chunk id owned by another knowledge item is a conflict (as in the local index), not an overwrite."""
        for batch in _chunks_of(list(chunk_ids), LOOKUP_BATCH):
            body = {
                "size": 1,
                "_source": ["chunk_id", "knowledge_id"],
                "query": {
                    "bool": {
                        "filter": [{"terms": {"chunk_id": list(batch)}}],
                        "must_not": [{"term": {"knowledge_id": knowledge_id}}],
                    }
                },
            }
            hits = parse_search_response(self._search(body, what="chunk id check"))
            if hits:
                raise ConflictError(
                    f"a chunk id of knowledge {knowledge_id} is already used by another knowledge item: chunk "
                    f"{hits[0].chunk_id} belongs to {hits[0].source.get('knowledge_id', '?')}"
                )

    def delete_knowledge(self, knowledge_ids: Sequence[str]) -> int:
        ids = list(dict.fromkeys(knowledge_ids))
        if not ids:
            return 0
        return sum(
            self._delete_matching(knowledge_query(list(batch)), what="deletion of knowledge items")
            for batch in _chunks_of(ids, LOOKUP_BATCH)
        )

    def delete_knowledge_base(self, knowledge_base_id: str) -> int:
        return self._delete_matching(
            knowledge_base_query(knowledge_base_id), what=f"deletion of knowledge base {knowledge_base_id}"
        )

    def set_enabled(self, chunk_ids: Sequence[str], enabled: bool) -> int:
        """Returns how many of the chunks exist (already in the wanted state or not, as SQLite's rowcount)."""
        ids = list(dict.fromkeys(chunk_ids))
        if not ids:
            return 0
        if self.flavour == "es":
            items = self._bulk(
                [enable_action(c, enabled) for c in ids], what="enable/disable", params=self._write_params()
            )
            failed = [(c, i) for c, i in zip(ids, items, strict=True) if not i.ok and i.status != 404]
            if failed:
                raise StorageError(f"OpenSearch could not enable/disable {self._describe_failures(failed)}")
            return sum(1 for i in items if i.ok)
        # aoss: no update by id in vector collections -> index a changed copy under a new version, drop the old one.
        found = self._lookup(ids, full=True)
        stale = [h for h in found if bool(h.source.get("enabled", True)) != enabled]
        if stale:
            version = new_version()
            copies = [{**h.source, "enabled": enabled, "version": version} for h in stale]
            items = self._bulk([index_action(s, with_id=False) for s in copies], what="enable/disable")
            failed = [(h.chunk_id, i) for h, i in zip(stale, items, strict=True) if not i.ok]
            if failed:
                raise StorageError(f"OpenSearch could not enable/disable {self._describe_failures(failed)}")
            self._await_visible(
                chunk_ids_query([h.chunk_id for h in stale], version=version), len(stale), what="enable/disable"
            )
            deletions = self._bulk([delete_action(h.doc_id) for h in stale], what="enable/disable")
            failed = [(h.chunk_id, i) for h, i in zip(stale, deletions, strict=True) if not i.ok and i.status != 404]
            if failed:
                raise StorageError(f"OpenSearch could not remove the old copies of {self._describe_failures(failed)}")
        return len({h.chunk_id for h in found})

    # -- reads ---------------------------------------------------------------------------------------------------

    def _lookup(self, chunk_ids: Sequence[str], *, full: bool = False) -> list[SearchHit]:
        """Every document of these chunks, the newest version per chunk (``full``: vectors and tokens included)."""
        hits: list[SearchHit] = []
        factor = 2 if self.flavour == "aoss" else 1  # room for the copies a replace leaves for a moment
        for batch in _chunks_of(list(dict.fromkeys(chunk_ids)), LOOKUP_BATCH):
            body: dict[str, Any] = {"size": min(len(batch) * factor, MAX_WINDOW), "query": chunk_ids_query(batch)}
            if not full:
                body["_source"] = {"excludes": CHUNK_EXCLUDES}
            hits.extend(parse_search_response(self._search(body, what="fetch")))
        return newest_per_chunk(hits)

    def fetch(self, chunk_ids: Sequence[str]) -> dict[str, Chunk]:
        return {h.chunk_id: chunk_from_source(h.source) for h in self._lookup(chunk_ids)}

    def knowledge_chunks(self, knowledge_id: str, limit: int) -> list[Chunk]:
        if limit <= 0:
            return []
        factor = 2 if self.flavour == "aoss" else 1
        body = {
            "size": min(limit * factor, MAX_WINDOW),
            "query": {"bool": {"filter": [{"term": {"knowledge_id": knowledge_id}}, {"term": {"enabled": True}}]}},
            "sort": [{"chunk_index": "asc"}, {"chunk_id": "asc"}],
            "_source": {"excludes": CHUNK_EXCLUDES},
        }
        hits = newest_per_chunk(parse_search_response(self._search(body, what="knowledge chunks")))
        return [chunk_from_source(h.source) for h in hits[:limit]]

    def chunks_at(self, wanted: Mapping[str, Sequence[int]]) -> dict[str, dict[int, Chunk]]:
        """Enabled chunks by knowledge id and chunk_index (several rows at one index: the first in id order)."""
        out: dict[str, dict[int, Chunk]] = {}
        items = list(wanted.items())
        factor = 4 if self.flavour == "aoss" else 2  # FAQ phrasings share an index; aoss may hold copies briefly
        for start in range(0, len(items), 100):
            part = dict(items[start : start + 100])
            count = sum(len({int(i) for i in v if int(i) >= 0}) for v in part.values())
            body = build_chunks_at_query(part, min(count * factor, MAX_WINDOW))
            if body is None:
                continue
            for h in newest_per_chunk(parse_search_response(self._search(body, what="chunks by position"))):
                chunk = chunk_from_source(h.source)
                out.setdefault(chunk.knowledge_id, {}).setdefault(chunk.chunk_index, chunk)
        return out

    def vectors(self, chunk_ids: Sequence[str], space: str) -> dict[str, np.ndarray]:
        """Stored unit vectors of these chunks in ``space`` (float32); chunks without one are left out."""
        name = space_field(space)
        ids = list(dict.fromkeys(chunk_ids))
        if not ids or self._dimension(name) is None:
            return {}
        factor = 2 if self.flavour == "aoss" else 1
        out: dict[str, np.ndarray] = {}
        for batch in _chunks_of(ids, LOOKUP_BATCH):
            body = {
                "size": min(len(batch) * factor, MAX_WINDOW),
                "query": {"bool": {"filter": [{"terms": {"chunk_id": list(batch)}}, {"exists": {"field": name}}]}},
                "_source": ["chunk_id", "version", name],
            }
            for h in newest_per_chunk(parse_search_response(self._search(body, what="vector read"))):
                values = h.source.get(name)
                if values:
                    out[h.chunk_id] = np.asarray(values, dtype=np.float32)
        return out

    def stats(self) -> IndexStats:
        return parse_stats_response(self._search(build_stats_query(), what="stats"))

    def keyword_search(self, tokens: Sequence[str], flt: SearchFilter, top_k: int, threshold: float) -> list[Hit]:
        if top_k <= 0 or not any(tokens):
            return []
        body = build_keyword_query(tokens, flt, min(top_k, MAX_WINDOW))
        return keyword_hits(parse_search_response(self._search(body, what="keyword search")), threshold)

    def _dimension(self, name: str) -> int | None:
        """The dimension of a vector field, None when unmapped (the mapping is read again once before saying so:
        another process may have added the space since we cached it)."""
        fields = self._load_fields()
        if name not in fields:
            with self._lock:
                self._fields = None
            fields = self._load_fields()
        return fields.get(name)

    def _query_vector(self, vector: np.ndarray, space: str) -> tuple[str, list[float]] | None:
        """The field of ``space`` and the unit query vector; None when nothing is embedded in ``space``."""
        name = space_field(space)
        dim = self._dimension(name)
        if dim is None:
            return None
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != dim:
            raise InputError(f"query vector has {q.shape[0]} dimensions, the {space!r} space has {dim}")
        norm = float(np.linalg.norm(q))
        if not math.isfinite(norm) or norm == 0.0:
            return None
        return name, vector_values(q / norm)

    def vector_search(
        self, vector: np.ndarray, space: str, flt: SearchFilter, top_k: int, threshold: float
    ) -> list[Hit]:
        if top_k <= 0:
            return []
        target = self._query_vector(vector, space)
        if target is None:
            return []
        body = build_knn_query(target[1], target[0], flt, min(top_k, MAX_WINDOW))
        return vector_hits(parse_search_response(self._search(body, what="vector search")), threshold)

    # -- optional server-side hybrid --------------------------------------------------------------------------

    def pipeline_name(self, w_keyword: float = 0.3, w_vector: float = 0.7) -> str:
        """The search pipeline :meth:`hybrid_search` uses for these weights (see :func:`search_pipeline_name`)."""
        return search_pipeline_name(self.index, w_keyword, w_vector)

    def ensure_search_pipeline(self, w_keyword: float = 0.3, w_vector: float = 0.7) -> str:
        """Create the normalization-processor pipeline of these weights unless this instance already did; returns
        its name. :meth:`hybrid_search` calls it, so there is no set-up step.

        Thread-safe: concurrent first calls wait for a single ``PUT``. The ``PUT`` creates or overwrites, and the
        name is derived from the weights, so other processes writing the same pipeline write the same body. A
        failed ``PUT`` is not remembered: the next call tries again.
        """
        self._require_hybrid()
        name = self.pipeline_name(w_keyword, w_vector)
        if name in self._pipelines:
            return name
        with self._pipeline_lock:
            if name not in self._pipelines:
                self._request(
                    "PUT",
                    "/_search/pipeline/" + quote(name, safe=""),
                    what="search pipeline creation",
                    body=build_search_pipeline(w_keyword, w_vector),
                )
                self._pipelines.add(name)
        return name

    def drop_search_pipelines(self) -> None:
        """Delete the search pipelines this instance created (used by the live tests; missing ones are fine)."""
        with self._pipeline_lock:
            names, self._pipelines = sorted(self._pipelines), set()
        for name in names:
            with contextlib.suppress(_Missing):
                self._request(
                    "DELETE",
                    "/_search/pipeline/" + quote(name, safe=""),
                    what="search pipeline deletion",
                    missing_ok=True,
                )

    def hybrid_search(
        self,
        tokens: Sequence[str],
        vector: np.ndarray,
        space: str,
        flt: SearchFilter,
        top_k: int,
        *,
        w_keyword: float = 0.3,
        w_vector: float = 0.7,
    ) -> list[Hit]:
        """One ``hybrid`` query scored by the search pipeline of ``(w_keyword, w_vector)`` (min-max per clause, then
        the weighted mean): already fused hits, best first, with the combined score in both ``score`` and
        ``raw_score``. The pipeline is created on first use (:meth:`ensure_search_pipeline`), and created again
        if the cluster no longer has it. Needs the neural-search plugin (OpenSearch 2.10+).

        No thresholds: only the combined score comes back, and min-max normalisation is relative to each result
        set (its best hit is 1, its worst near 0), so neither ``vector_threshold`` (a cosine) nor
        ``keyword_threshold`` (BM25 relative to the best hit) can be applied to it. The candidates are the best
        ``top_k`` of the union of both clauses.

        Nothing embedded in ``space`` yet: keyword hits only (BM25 normalised to the best, no threshold). No index
        yet: nothing found.
        """
        self._require_hybrid()
        if top_k <= 0:
            return []
        target = self._query_vector(vector, space)
        if target is None:
            return self.keyword_search(tokens, flt, top_k, 0.0)
        body = build_hybrid_query(tokens, target[1], target[0], flt, min(top_k, MAX_WINDOW))
        name = self.ensure_search_pipeline(w_keyword, w_vector)
        try:
            try:
                resp = self._hybrid_request(body, name)
            except StorageError as exc:
                # OpenSearch answers a search through an unknown pipeline with HTTP 400 "Pipeline <name> is not
                # defined": someone deleted it (or the endpoint now points at another cluster). Create it again.
                if f"Pipeline {name} is not defined" not in exc.message:
                    raise
                log.warning("search pipeline %s vanished from %s; creating it again", name, _display(self.url))
                with self._pipeline_lock:
                    self._pipelines.discard(name)
                resp = self._hybrid_request(body, self.ensure_search_pipeline(w_keyword, w_vector))
        except _Missing:
            return []  # the index went away after its mapping was read: nothing indexed, nothing found
        return [Hit(h.chunk_id, h.score, h.score) for h in first_per_chunk(parse_search_response(resp))]

    def _hybrid_request(self, body: Mapping[str, Any], pipeline: str) -> Any:
        return self._request(
            "POST",
            f"{self._path}/_search",
            what="hybrid search",
            params={"search_pipeline": pipeline},
            body=body,
            missing_ok=True,
        )

    def _require_hybrid(self) -> None:
        if self.flavour == "aoss":
            raise InputError(SERVER_HYBRID_ON_AOSS)
