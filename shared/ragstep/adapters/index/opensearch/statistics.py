"""What fusion reads of an OpenSearch index, computed in one place (:class:`FusionStatistics`): the background of the
searched chunks' vectors and the scale of the keyword list's raw BM25.

* **Background** (a query's cosines are read from their mean ``q . m`` and spread ``sqrt(q' C q)`` over the chunks it
  searches, :mod:`ragstep.retrieval.background`): OpenSearch cannot average a ``knn_vector`` field, so the adapter
  takes what the local index takes, a sample of at most :data:`~ragstep.retrieval.background.SAMPLE_ROWS` of the
  vectors the filter lets through, and keeps its moments per (space, filter) for ``ttl_s`` seconds. One ``_search``
  (:func:`build_sample_query`: the filter of the vector search plus ``exists`` on the space's field, a
  ``function_score`` ``random_score`` seeded on ``chunk_id`` so the sample is uniform and the same on every call)
  per filter and container per ``ttl_s``; every query after it costs one dot product. Read at search time, not kept
  in a document updated by each ingest: a document summed by concurrent writers needs a compare-and-set that AOSS
  does not offer (it assigns document ids itself), and it could describe only whole knowledge bases, not a tag or a
  document filter. A knowledge base's centroid moves slowly with ingestion, so an answer ``ttl_s`` old reads the
  same. A failed sample request leaves the query without a background (fusion falls back to the declared scale)
  instead of failing the search.
* **Keyword gain** (BM25 points per nat of idf when a term saturates): ragstep's own BM25 keeps Okapi's ``k1 + 1``
  factor, and so does OpenSearch 2.x, whose ``BM25`` similarity is Lucene's ``LegacyBM25Similarity``; OpenSearch 3.0
  made Lucene's ``BM25Similarity`` (no factor) the default. The gain is read from the cluster's version (``GET /``)
  once per adapter: ``k1 + 1`` before 3.0 (``k1`` our mapping's 1.5, or Lucene's default 1.2 where the index has no
  custom similarity, as on AOSS), 1.0 from 3.0. AOSS answers no ``GET /``; its engine is 2.x: ``k1 + 1`` at 1.2.

* **Candidate scores** (:class:`~ragstep.index_capabilities.CandidateScores`: the exact cosine of a chunk only BM25
  found, the BM25 of one only the vectors found): the stored vectors of the named chunks, and the keyword search's
  own query restricted to them, one request each.

Documentation followed: function_score / random_score
https://docs.opensearch.org/latest/query-dsl/compound/function-score/, the similarity change
https://github.com/opensearch-project/OpenSearch/issues/17315, BM25 in Lucene
https://lucene.apache.org/core/9_0_0/core/org/apache/lucene/search/similarities/BM25Similarity.html.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from ragstep.adapters.index.opensearch.connection import OpenSearchConnection
from ragstep.adapters.index.opensearch.queries import MAX_WINDOW, build_filter, build_keyword_query, space_field
from ragstep.adapters.index.opensearch.responses import newest_per_chunk, parse_search_response
from ragstep.errors import StorageError
from ragstep.models import DEFAULT_TENANT
from ragstep.ports import SearchFilter
from ragstep.retrieval.background import SAMPLE_ROWS, Background, moments
from ragstep.retrieval.bm25 import BM25_K1

#: Seconds a sampled background is reused (per space and filter, per container).
BACKGROUND_TTL_S = 600.0
#: Lucene's default BM25 ``k1``: what an index without ragstep's custom similarity scores with (AOSS).
LUCENE_K1 = 1.2
_SEED = 32
#: Seconds before a failed sample request is tried again.
_RETRY_S = 60.0
_MAX_ENTRIES = 64


def build_sample_query(
    field_name: str, flt: SearchFilter, size: int = SAMPLE_ROWS, *, tenant_id: str = DEFAULT_TENANT
) -> dict[str, Any]:
    """A uniform, repeatable sample of the vectors of ``field_name`` that ``flt`` lets through: the vector search's
    filter, ``random_score`` seeded on ``chunk_id`` (a keyword field with doc values), only the vector returned."""
    return {
        "size": size,
        "_source": [field_name],
        "query": {
            "function_score": {
                "query": {"bool": {"filter": [*build_filter(flt, tenant_id), {"exists": {"field": field_name}}]}},
                "random_score": {"seed": _SEED, "field": "chunk_id"},
                "boost_mode": "replace",
            }
        },
    }


def sample_background(response: Mapping[str, Any], field_name: str) -> Background | None:
    """The moments of the sampled vectors (normalised to unit length, as the index compares them); None for fewer
    than the background's minimum rows."""
    rows = [h.source.get(field_name) for h in parse_search_response(response)]
    vectors = [np.asarray(v, dtype=np.float32) for v in rows if isinstance(v, list) and v]
    if not vectors or len({v.shape for v in vectors}) != 1:
        return None
    x = np.stack(vectors)
    norms = np.linalg.norm(x, axis=1)
    keep = (norms > 0) & np.isfinite(norms)
    return moments(x[keep] / norms[keep, None])


def keyword_gain(info: Mapping[str, Any] | None, *, custom_similarity: bool) -> float:
    """BM25 points per nat of idf a saturated term scores on this cluster (module docstring); ``info`` the body of
    ``GET /`` (None: not answered, as on AOSS)."""
    k1 = BM25_K1 if custom_similarity else LUCENE_K1
    version = (info or {}).get("version") or {}
    number = str(version.get("number", "")) if isinstance(version, Mapping) else ""
    major = number.split(".", 1)[0]
    if version.get("distribution") == "opensearch" and major.isdigit() and int(major) >= 3:
        return 1.0
    return k1 + 1.0


class FusionStatistics:
    """The per-container cache of one OpenSearch index's fusion inputs (module docstring). ``search`` sends a
    ``_search`` body; ``info`` reads ``GET /`` (None where the service has none)."""

    def __init__(
        self,
        search: Callable[[Mapping[str, Any]], Any],
        info: Callable[[], Mapping[str, Any] | None],
        *,
        tenant_id: str = DEFAULT_TENANT,
        custom_similarity: bool = True,
        ttl_s: float = BACKGROUND_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._search = search
        self._info = info
        self._tenant_id = tenant_id
        self._custom_similarity = custom_similarity
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._backgrounds: dict[tuple[str, SearchFilter], tuple[float, Background | None]] = {}
        self._gain: float | None = None

    def background(self, field_name: str, flt: SearchFilter) -> Background | None:
        """The background of ``field_name``'s vectors that ``flt`` lets through, sampled at most every ``ttl_s``."""
        key = (field_name, flt)
        now = self._clock()
        with self._lock:
            held = self._backgrounds.get(key)
        if held is not None and now < held[0]:
            return held[1]
        try:
            body = build_sample_query(field_name, flt, tenant_id=self._tenant_id)
            found, until = sample_background(self._search(body), field_name), now + self._ttl_s
        except StorageError:
            # An older sample, or none (fusion reads the declared scale), and no new request for a while: a query
            # asks several times (threshold, fusion), and a failing cluster should not get each of them.
            found, until = (held[1] if held is not None else None), now + min(self._ttl_s, _RETRY_S)
        with self._lock:
            if len(self._backgrounds) >= _MAX_ENTRIES:
                self._backgrounds.clear()
            self._backgrounds[key] = (until, found)
        return found

    def keyword_gain(self) -> float:
        """BM25 points per nat of idf on this cluster's scale, read once."""
        if self._gain is None:
            try:
                info = self._info()
            except StorageError:  # not kept: the next query asks again
                return keyword_gain(None, custom_similarity=self._custom_similarity)
            self._gain = keyword_gain(info, custom_similarity=self._custom_similarity)
        return self._gain


class FusionInputs(OpenSearchConnection):
    """The fusion statistics of :class:`~ragstep.adapters.index.opensearch.index.OpenSearchIndex` (which sets
    ``tenant_id``): :meth:`vector_background` (:class:`ragstep.retrieval.background.BackgroundIndex`) and
    :attr:`keyword_gain`, both from one :class:`FusionStatistics` made at first use."""

    tenant_id: str
    _fusion: FusionStatistics | None = None

    def _statistics(self) -> FusionStatistics:
        if self._fusion is None:  # two threads may both make one; either serves
            self._fusion = FusionStatistics(
                lambda body: self._search(body, what="vector sample"),
                self._cluster_info,
                tenant_id=self.tenant_id,
                custom_similarity=self.flavour == "es",
            )
        return self._fusion

    def _cluster_info(self) -> Mapping[str, Any] | None:
        if self.flavour == "aoss":
            return None  # no GET / on a collection
        info = self._request("GET", "/", what="cluster info")
        return info if isinstance(info, Mapping) else None

    def vector_background(self, space: str, flt: SearchFilter) -> Background | None:
        """Where a query's cosines sit among ``flt``'s vectors in ``space`` (a cached sample; module docstring)."""
        name = space_field(space)
        if self._dimension(name) is None:
            return None
        return self._statistics().background(name, flt)

    def keyword_gain(self) -> float:
        """BM25 points per nat of idf a saturated term scores on this cluster (module docstring;
        :class:`ragstep.index_capabilities.KeywordGain`)."""
        return self._statistics().keyword_gain()

    def cosines(self, vector: np.ndarray, space: str, chunk_ids: Sequence[str]) -> dict[str, float]:
        """Exact cosines of named chunks (:class:`~ragstep.index_capabilities.CandidateScores`): their stored
        vectors, one request, times the unit query."""
        found: dict[str, np.ndarray] = cast(Any, self).vectors(chunk_ids, space) if chunk_ids else {}
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(q))
        if not found or not np.isfinite(norm) or norm == 0.0 or q.shape[0] != next(iter(found.values())).shape[0]:
            return {}
        return dict(zip(found, (np.stack(list(found.values())) @ (q / norm)).tolist(), strict=True))

    def bm25_scores(self, tokens: Sequence[str], flt: SearchFilter, chunk_ids: Sequence[str]) -> dict[str, float]:
        """The cluster's raw BM25 of named chunks (:class:`~ragstep.index_capabilities.CandidateScores`): the
        keyword search's own query, restricted to them (same statistics, same units as its hits)."""
        ids = list(dict.fromkeys(chunk_ids))[:MAX_WINDOW]
        if not ids or not any(tokens):
            return {}
        body = build_keyword_query(tokens, flt, min(2 * len(ids), MAX_WINDOW), tenant_id=self.tenant_id)
        body["query"]["bool"]["filter"].append({"terms": {"chunk_id": ids}})
        hits = newest_per_chunk(parse_search_response(self._search(body, what="candidate BM25")))
        return {h.chunk_id: h.score for h in hits if h.score > 0.0}


__all__ = [
    "BACKGROUND_TTL_S",
    "LUCENE_K1",
    "FusionInputs",
    "FusionStatistics",
    "build_sample_query",
    "keyword_gain",
    "sample_background",
]
