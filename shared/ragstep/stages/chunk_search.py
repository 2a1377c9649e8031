"""``chunk_search``: hybrid retrieval (vector kNN + BM25) over the requested knowledge bases and items.

Follows WeKnora's search stage:

* Targets: whole knowledge bases, or a scope (knowledge items, tags) where both thresholds are forced to 0 because
  the user already chose what to read.
* Knowledge bases are grouped by embedding model; the query is embedded once per model and the vector is kept in the
  state (``query_embeddings``) for later stages.
* Candidate pool per retriever: ``max(5 x embedding_top_k, 50) x number of knowledge bases``, capped at 500.
* Fusion: weighted RRF (or min-max, a setting); deduplication by chunk id and by a hash of the normalised content.
* An embedding failure degrades the search to keywords only; the trace says so.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import NotFoundError, ProviderError
from ..fusion import Fused, fuse_minmax, fuse_rrf
from ..models import PipelineState, RetrievalSettings, SearchRequest, SearchResult, TraceEvent
from ..ports import Hit, SearchFilter
from ..text import query_terms

if TYPE_CHECKING:
    from ..services import Services

STAGE = "chunk_search"
POOL_CAP = 500
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Target:
    """One search scope sharing an embedding model."""

    flt: SearchFilter
    model: str
    scoped: bool


def candidate_pool(match_count: int, n_kbs: int) -> int:
    return min(max(5 * match_count, 50) * max(1, n_kbs), POOL_CAP)


def content_key(text: str) -> str:
    """MD5 of lower-cased, whitespace-normalised content: two chunks with the same key are duplicates."""
    return hashlib.md5(_SPACES.sub(" ", text.lower()).strip().encode("utf-8")).hexdigest()


def resolve_targets(request: SearchRequest, services: Services) -> tuple[list[Target], int]:
    """Search targets grouped by embedding model, and the number of knowledge bases involved."""
    catalog = services.catalog
    tags = tuple(request.tag_ids)
    by_model: dict[str, list[str]] = {}
    for ref in dict.fromkeys(request.knowledge_base_ids):
        kb = services.require_kb(ref)
        by_model.setdefault(kb.embedding_model, []).append(kb.id)
    items_by_model: dict[str, list[str]] = {}
    kb_ids = {kb_id for ids in by_model.values() for kb_id in ids}
    for kid in dict.fromkeys(request.knowledge_ids):
        item = catalog.get_knowledge(kid)
        if item is None:
            raise NotFoundError(f"unknown knowledge item {kid!r}; list them with `ragstep kb list`")
        kb = services.require_kb(item.knowledge_base_id)
        items_by_model.setdefault(kb.embedding_model, []).append(kid)
        kb_ids.add(kb.id)
    targets = [
        Target(SearchFilter(knowledge_base_ids=tuple(ids), tag_ids=tags), model, scoped=bool(tags))
        for model, ids in by_model.items()
    ]
    targets += [
        Target(SearchFilter(knowledge_ids=tuple(ids)), model, scoped=True) for model, ids in items_by_model.items()
    ]
    return targets, len(kb_ids)


def _best_per_chunk(lists: Sequence[Sequence[Hit]]) -> list[Hit]:
    """Union of several hit lists of one retriever, each chunk at its best score, best first."""
    if len(lists) == 1:
        return list(lists[0])
    best: dict[str, Hit] = {}
    for hits in lists:
        for h in hits:
            if h.chunk_id not in best or h.score > best[h.chunk_id].score:
                best[h.chunk_id] = h
    return sorted(best.values(), key=lambda h: (-h.score, h.chunk_id))


def fuse(vector: Sequence[Hit], keyword: Sequence[Hit], cfg: RetrievalSettings) -> list[Fused]:
    if cfg.fusion == "minmax":
        return fuse_minmax(vector, keyword, w_vector=cfg.rrf_vector_weight, w_keyword=cfg.rrf_keyword_weight)
    return fuse_rrf(vector, keyword, k=cfg.rrf_k, w_vector=cfg.rrf_vector_weight, w_keyword=cfg.rrf_keyword_weight)


def hydrate(fused: Sequence[Fused], services: Services, limit: int) -> list[SearchResult]:
    """Load the best fused candidates from the index, drop content duplicates, keep ``limit``."""
    # Over-fetch a little so content duplicates do not leave the list short.
    head = fused[: limit * 2 + 10]
    chunks = services.index.fetch([f.chunk_id for f in head])
    seen: set[str] = set()
    out: list[SearchResult] = []
    for f in head:
        chunk = chunks.get(f.chunk_id)
        if chunk is None:  # deleted between search and fetch
            continue
        key = content_key(chunk.content)
        if key in seen:
            continue
        seen.add(key)
        retrieval = {
            k: v
            for k, v in (
                ("vector_score", f.vector_score),
                ("keyword_score", f.keyword_score),
                ("vector_rank", f.vector_rank),
                ("keyword_rank", f.keyword_rank),
            )
            if v is not None
        }
        out.append(
            SearchResult(
                id=chunk.id,
                content=chunk.content,
                knowledge_id=chunk.knowledge_id,
                knowledge_base_id=chunk.knowledge_base_id,
                knowledge_title=chunk.knowledge_title,
                knowledge_filename=chunk.knowledge_filename,
                chunk_index=chunk.chunk_index,
                start_at=chunk.start_at,
                end_at=chunk.end_at,
                score=f.score,
                match_type=f.match_type,
                chunk_type=chunk.chunk_type,
                tag_id=chunk.tag_id,
                sub_chunk_ids=list(chunk.sub_chunk_ids),
                metadata={**chunk.metadata, "retrieval": retrieval},
                image_info=list(chunk.image_info),
            )
        )
        if len(out) >= limit:
            break
    return out


def run(state: PipelineState, services: Services) -> PipelineState:
    cfg = state.retrieval
    query = state.search_query
    targets, n_kbs = resolve_targets(state.request, services)
    pool = candidate_pool(cfg.embedding_top_k, n_kbs)
    terms = query_terms(query)
    events: list[TraceEvent] = []
    embeddings = dict(state.query_embeddings)
    failed_models: set[str] = set()

    keyword_lists: list[list[Hit]] = []
    vector_lists: list[list[Hit]] = []
    for target in targets:
        kw_threshold = 0.0 if target.scoped else cfg.keyword_threshold
        keyword_lists.append(services.index.keyword_search(terms, target.flt, pool, kw_threshold))

        if target.model in failed_models:
            continue
        embedder = services.embedder(target.model)
        if embedder is None:
            events.append(
                TraceEvent(stage=STAGE, action="skip", reason="no embedding model: keyword (BM25) search only")
            )
            continue
        if target.model not in embeddings:
            try:
                embeddings[target.model] = [float(x) for x in embedder.embed_query(query)]
            except ProviderError as exc:
                failed_models.add(target.model)
                events.append(
                    TraceEvent(
                        stage=STAGE,
                        action="degrade",
                        reason=f"embedding failed, keyword search only: {exc.message}",
                        detail={"model": target.model},
                    )
                )
                continue
        vec = np.asarray(embeddings[target.model], dtype=np.float32)
        v_threshold = 0.0 if target.scoped else cfg.vector_threshold
        vector_lists.append(services.index.vector_search(vec, target.model, target.flt, pool, v_threshold))

    keyword_hits = _best_per_chunk(keyword_lists) if keyword_lists else []
    vector_hits = _best_per_chunk(vector_lists) if vector_lists else []
    fused = fuse(vector_hits, keyword_hits, cfg)
    results = hydrate(fused, services, cfg.embedding_top_k)
    events.append(
        TraceEvent(
            stage=STAGE,
            counts={
                "vector_hits": len(vector_hits),
                "keyword_hits": len(keyword_hits),
                "fused": len(fused),
                "results": len(results),
            },
            detail={
                "query": query,
                "original_query": state.request.query if query != state.request.query else None,
                "keywords": terms,
                "pool": pool,
                "targets": len(targets),
                "fusion": cfg.fusion,
            },
        )
    )
    return state.model_copy(
        update={"search_results": results, "query_embeddings": embeddings, "trace": [*state.trace, *events]}
    )
