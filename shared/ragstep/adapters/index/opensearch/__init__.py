"""The :class:`~ragstep.ports.SearchIndex` on OpenSearch: a managed domain, a self-hosted cluster, or a Serverless
(AOSS) vector search collection.

Documents
---------
One document per chunk::

    chunk_id, tenant_id, knowledge_id, knowledge_base_id, tag_id, chunk_type,       keyword (filters, bookkeeping)
    space, version
    enabled                                                                          boolean
    chunk_index                                                                      integer (document order)
    tokens      text, ``whitespace`` analyzer: ragstep's own tokens joined by spaces
    content     text, ``index: false``: kept for display only
    doc         object, ``enabled: false``: the rest of the chunk JSON, stored in _source, never parsed
    vec_<slug>  knn_vector, one field per embedding space (HNSW, cosinesimil)

``tokens`` holds exactly what :func:`ragstep.retrieval.text.tokenize` produces (jieba for Han runs, a regex for the
rest), and the whitespace analyzer only splits on the spaces we put there, so BM25 runs on the same terms as the local
index on every flavour, AOSS included (which offers no Chinese analysis plugin). Queries send the same tokens as
``term`` queries, so the analyzer never sees query text either. Tokens fold Latin accents since tokenizer version 2
(:data:`ragstep.retrieval.text.TOKENIZER_VERSION`); documents indexed before keep their unfolded tokens, so the search
stage sends each query term's unfolded form too (:func:`ragstep.retrieval.text.keyword_terms`): a query typed with
accents finds them as before; ``ragstep kb upgrade-tokens`` folds their tokens in place on a domain (:mod:`.tokens`),
and ingesting a document again gives it the folded tokens anywhere.

Tenants
-------
Tenants share one index. An :class:`OpenSearchIndex` is one tenant's view (``tenant_id``, from
:meth:`OpenSearchIndex.from_settings`): every document it writes carries ``tenant_id``, and every query, count,
deletion, scan, fetch and statistic it sends filters on it (:func:`~.queries.tenant_filter`). The default tenant also
matches documents without the field, so indexes written before tenants existed keep working unchanged; an index whose
mapping lacks the field gets it added before the first write. On ``es`` another tenant's document ``_id`` is
``<tenant>#<chunk id>``, so equal chunk ids of two tenants never overwrite each other. BM25 statistics stay per shard,
not per tenant (Lucene has no per-filter statistics); the local index, which has a folder per tenant, has none of this.

Layout: :mod:`.queries` (request bodies) and :mod:`.responses` (parsing) are pure; :mod:`.connection` holds the client,
retries and mapping; :mod:`.index` the :class:`OpenSearchIndex` itself; :mod:`.backfill` its subclass for domains,
which takes vectors after the chunks (progressive indexing, a guarded update) and, through :mod:`.tokens`, folds old
documents' keyword tokens in place (another guarded update); :mod:`.statistics` what client-side fusion reads of
the index (the query's vector background from a cached sample, the scale of the cluster's raw BM25).

Scores
------
* Keyword: ``bool.should`` of one ``term`` query per distinct token (``minimum_should_match: 1``), filters in
  ``bool.filter`` (no scoring). The sum of the per-term BM25 scores is BM25 of the query, as in the local index; the
  hits are then normalised to the best one (1.0) and cut at the threshold exactly as there, the raw BM25 score kept
  in :attr:`Hit.raw_score`. On the ``es`` flavour the ``tokens`` field uses a BM25 similarity with the local index's
  k1 = 1.5 (Lucene drops BM25's constant ``k1 + 1`` factor, which the normalisation cancels anyway). Scores stay
  close to the local ones rather than equal: Lucene keeps statistics per shard, counts deleted documents until
  segments merge, and stores document lengths in one byte. Statistics: the local index scores with the joint
  statistics of the knowledge bases searched (:mod:`ragstep.retrieval.bm25`); Lucene cannot take statistics from
  the request, so here every document of a shard -- every knowledge base and tenant in it -- is scored with that
  shard's. Scores of several knowledge bases therefore do compare (one scale for all), but a search over one
  knowledge base is weighted by the whole shard's term frequencies, and ingesting into one knowledge base can
  reorder another's results. Known limitation; with one primary shard (OpenSearch's default, which the index we
  create keeps) the statistics are index-wide.
* Vector: a ``knn`` query with the filter *inside* the clause (efficient filtering: the engine searches among the
  allowed documents, so ``k`` results come back whenever ``k`` documents pass the filter). For ``cosinesimil``
  OpenSearch's ``_score`` is ``(2 - d) / 2`` with ``d = 1 - cos``, i.e. ``(1 + cos) / 2``; it is converted back to
  the cosine (``2 * score - 1``) before the threshold, so ``vector_threshold`` means what it means locally.
* Fusion of the two lists happens client-side in the search stage by default, for every backend, with the same
  inputs (:mod:`.statistics`).
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

from ragstep.adapters.index.opensearch.backfill import OpenSearchBackfillIndex, index_class
from ragstep.adapters.index.opensearch.connection import IndexMissing, OpenSearchConnection
from ragstep.adapters.index.opensearch.index import OpenSearchIndex
from ragstep.adapters.index.opensearch.queries import (
    TENANT_FIELD,
    build_bulk_body,
    build_chunks_at_query,
    build_delete_by_query,
    build_document,
    build_filter,
    build_hybrid_query,
    build_keyword_query,
    build_knn_query,
    build_mapping,
    build_scan_query,
    build_search_pipeline,
    build_stats_query,
    chunk_ids_query,
    delete_action,
    document_id,
    enable_action,
    index_action,
    knowledge_base_query,
    knowledge_query,
    search_pipeline_name,
    space_field,
    tenant_filter,
)
from ragstep.adapters.index.opensearch.responses import (
    BulkItem,
    SearchHit,
    chunk_from_source,
    cosine_from_score,
    keyword_hits,
    newest_per_chunk,
    parse_bulk_response,
    parse_mapping_response,
    parse_search_response,
    parse_stats_response,
    vector_hits,
)

__all__ = [
    "TENANT_FIELD",
    "BulkItem",
    "IndexMissing",
    "OpenSearchBackfillIndex",
    "OpenSearchConnection",
    "OpenSearchIndex",
    "SearchHit",
    "build_bulk_body",
    "build_chunks_at_query",
    "build_delete_by_query",
    "build_document",
    "build_filter",
    "build_hybrid_query",
    "build_keyword_query",
    "build_knn_query",
    "build_mapping",
    "build_scan_query",
    "build_search_pipeline",
    "build_stats_query",
    "chunk_from_source",
    "chunk_ids_query",
    "cosine_from_score",
    "delete_action",
    "document_id",
    "enable_action",
    "index_action",
    "index_class",
    "keyword_hits",
    "knowledge_base_query",
    "knowledge_query",
    "newest_per_chunk",
    "parse_bulk_response",
    "parse_mapping_response",
    "parse_search_response",
    "parse_stats_response",
    "search_pipeline_name",
    "space_field",
    "tenant_filter",
    "vector_hits",
]
