"""Progressive indexing on an OpenSearch domain (:class:`ragstep.index_capabilities.VectorBackfill`): a document's
chunks are indexed without a vector first (no ``space`` field, no ``vec_<slug>`` field: a ``knn_vector`` field may be
absent from a document), found by keyword search only, and given their vectors later by a guarded update.

The guarded write is one ``_bulk`` of ``update`` actions with a Painless ``script`` (the update API reads the
document on its shard, runs the script and indexes the result back under the document's version, so the check and
the write are one step per document; ``retry_on_conflict`` runs the script again on a write that raced it). The
script sets the vector only while the stored chunk has no ``space`` yet and its stored ``content`` and ``doc`` are
the chunk given; otherwise it sets ``ctx.op = 'noop'`` and the item answers ``"result": "noop"``. So a re-run batch
writes nothing twice, and a batch embedded from content that a re-ingest has since replaced lands nowhere.

``space`` (not the vector field) marks a chunk done, as :meth:`OpenSearchIndex.replace_knowledge` does: a zero
vector (``cosinesimil`` refuses it) gets the space without a vector, stays keyword-only, and is not asked for again.

Only the ``es`` flavour: Serverless vector collections have no update by id (see the package docstring), so there
is no guarded write to build on; :func:`index_class` keeps them on the one-phase ingest.

Documentation followed: https://docs.opensearch.org/latest/api-reference/document-apis/update-document/ (script,
``ctx.op = 'noop'``, ``retry_on_conflict``), https://docs.opensearch.org/latest/api-reference/document-apis/bulk/
(``update`` action and its script line) and https://docs.opensearch.org/latest/query-dsl/term/exists/.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragstep.adapters.index._replace import checked_replacement
from ragstep.adapters.index.opensearch.connection import log
from ragstep.adapters.index.opensearch.index import OpenSearchIndex
from ragstep.adapters.index.opensearch.queries import (
    build_document,
    build_filter,
    document_id,
    space_field,
    vector_values,
)
from ragstep.adapters.index.opensearch.responses import parse_search_response
from ragstep.adapters.index.opensearch.tokens import OpenSearchTokenUpgrade
from ragstep.errors import InputError, StorageError
from ragstep.ports import SearchFilter

if TYPE_CHECKING:
    import numpy as np

    from ragstep.adapters.index.opensearch.connection import Flavour
    from ragstep.models import Chunk

# The guard and the write in one script: a chunk that has a space already, or whose stored text or metadata differ
# from the chunk the vector was computed for, is left as it is.
GUARDED_VECTOR_SCRIPT = (
    "if (ctx._source.space != null || ctx._source.content != params.content || ctx._source.doc != params.doc) "
    "{ ctx.op = 'noop'; } else { ctx._source.space = params.space; "
    "if (params.vector != null) { ctx._source[params.field] = params.vector; } }"
)
# Times the update API runs the script again when another write changed the document between its read and write.
RETRY_ON_CONFLICT = 3
# Chunk ids per page of the missing-vector scan.
SCAN_PAGE = 1000
#: How long a count of keyword-only chunks serves the searches after it (:meth:`OpenSearchBackfillIndex.keyword_only`).
KEYWORD_ONLY_TTL_S = 15.0
EVERY_CHUNK = SearchFilter(enabled_only=False)  # a disabled chunk gets its vector too (enabling it needs no embedding)


def vector_update_action(
    chunk: Chunk, space: str, vector: Sequence[float] | None, tenant_id: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``_bulk`` ``update`` action that gives ``chunk`` its vector only if it has none and is stored as given."""
    stored = build_document(chunk, version="", tenant_id=tenant_id)  # the fields exactly as replace_knowledge wrote
    meta = {"_id": document_id(chunk.id, tenant_id), "retry_on_conflict": RETRY_ON_CONFLICT}
    params = {
        "space": space,
        "field": space_field(space),
        "vector": list(vector) if vector is not None else None,
        "content": stored["content"],
        "doc": stored["doc"],
    }
    return {"update": meta}, {"script": {"source": GUARDED_VECTOR_SCRIPT, "lang": "painless", "params": params}}


def missing_vectors_query(knowledge_id: str, tenant_id: str, size: int, after: Sequence[Any] | None) -> dict[str, Any]:
    """One page of the document's chunks without a space, in document order (``search_after`` the previous page)."""
    body: dict[str, Any] = {
        "size": size,
        "query": {
            "bool": {
                "filter": [*build_filter(EVERY_CHUNK, tenant_id), {"term": {"knowledge_id": knowledge_id}}],
                "must_not": [{"exists": {"field": "space"}}],
            }
        },
        "sort": [{"chunk_index": "asc"}, {"chunk_id": "asc"}],
        "_source": ["chunk_id"],
    }
    if after is not None:
        body["search_after"] = list(after)
    return body


def keyword_only_query(flt: SearchFilter, space: str, tenant_id: str) -> dict[str, Any]:
    """The chunks ``flt`` lets through without a vector in ``space`` (a ``_count`` query)."""
    return {"bool": {"filter": build_filter(flt, tenant_id), "must_not": [{"exists": {"field": space_field(space)}}]}}


class OpenSearchBackfillIndex(OpenSearchTokenUpgrade):
    """:class:`OpenSearchIndex` on a domain (flavour ``es``) that also takes vectors after the chunks (see the
    module docstring): the class :func:`index_class` picks for it, so ingest embeds in a second phase there. Being a
    domain's, it can also fold old documents' keyword tokens in place (:mod:`.tokens`)."""

    def _require_domain(self) -> None:
        if self.flavour != "es":
            raise InputError(
                "vectors after the chunks need OpenSearch's update by id, which Serverless vector collections lack; "
                "use OpenSearchIndex for flavour 'aoss' (the ingest then embeds before it indexes)"
            )

    def missing_vectors(self, knowledge_id: str) -> list[str]:
        self._require_domain()
        out: list[str] = []
        after: list[Any] | None = None
        while True:
            body = missing_vectors_query(knowledge_id, self.tenant_id, SCAN_PAGE, after)
            resp = self._search(body, what=f"scan of knowledge {knowledge_id}'s chunks without vectors")
            hits = (resp.get("hits") or {}).get("hits") or []
            out.extend(h.chunk_id for h in parse_search_response(resp))
            after = hits[-1].get("sort") if len(hits) == SCAN_PAGE else None
            if not after:
                return list(dict.fromkeys(out))

    def add_vectors(self, chunks: Sequence[Chunk], vectors: np.ndarray, space: str) -> int:
        """One guarded ``update`` per chunk (:data:`GUARDED_VECTOR_SCRIPT`); returns how many answered ``updated``.
        A chunk gone meanwhile (404) or still contended after the retries (409) did not get its vector: the next
        :meth:`missing_vectors` names it again if it still lacks one. Any other refusal is a StorageError."""
        self._require_domain()
        if not chunks:
            return 0
        vecs = checked_replacement(chunks[0].knowledge_id, chunks, vectors, space)  # unit rows, zero rows zero
        assert vecs is not None
        self.ensure_index({space: int(vecs.shape[1])})  # maps the space's field; a wrong dimension is refused
        actions = [
            vector_update_action(c, space, vector_values(row) if row.any() else None, self.tenant_id)
            for c, row in zip(chunks, vecs, strict=True)
        ]
        what = f"vectors of knowledge {chunks[0].knowledge_id}"
        items = self._bulk(actions, what=what, params=self._write_params())
        self.__dict__.pop("_keyword_only_held", None)  # this process's own write: its next count is read afresh
        failed = [(c.id, i) for c, i in zip(chunks, items, strict=True) if not i.ok and i.status not in (404, 409)]
        if failed:
            raise StorageError(f"OpenSearch rejected the {what}: {self._describe_failures(failed)}; run it again")
        return sum(1 for i in items if i.ok and i.result == "updated")

    def keyword_only(self, flt: SearchFilter, space: str) -> int:
        """One ``_count``, held :data:`KEYWORD_ONLY_TTL_S` per filter and space: the figure is for the trace and
        moves only while an ingest embeds, so the searches that follow within seconds reuse it instead of paying a
        round trip each. A search has its results by the time its trace asks, so a failed count is logged and read
        as 0 rather than failing the search (and not held)."""
        held: dict[tuple[SearchFilter, str], tuple[int, float]] = self.__dict__.setdefault("_keyword_only_held", {})
        now = time.monotonic()
        found = held.get((flt, space))
        if found is not None and found[1] > now:
            return found[0]
        try:
            count = self._count(keyword_only_query(flt, space, self.tenant_id))
        except StorageError as exc:
            log.warning("count of chunks without vectors left out of the trace: %s", exc.message)
            return 0
        held[(flt, space)] = (count, now + KEYWORD_ONLY_TTL_S)
        return count


def index_class(flavour: Flavour) -> type[OpenSearchIndex]:
    """The index class of a flavour: a domain takes vectors later, a Serverless collection with its chunks."""
    return OpenSearchIndex if flavour == "aoss" else OpenSearchBackfillIndex
