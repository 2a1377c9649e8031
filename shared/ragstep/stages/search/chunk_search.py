"""``chunk_search``: hybrid retrieval (vector kNN + BM25) over the requested knowledge bases and items.

WeKnora's search stage (v0.7) plus RAGFlow's zero-result fallback:

* Targets: whole knowledge bases, or a scope (knowledge items, tags) where both thresholds are forced to 0 because
  the user already chose what to read. Knowledge bases are grouped by embedding model; the query is embedded once per
  model and the vector kept in the state (``query_embeddings``) for later stages. One keyword search covers every
  target's knowledge bases, so BM25 ranks them all with their joint statistics (``retrievers.keyword_targets``).
* Candidate pool per retriever: ``min(max(5 x embedding_top_k, 50) x number of knowledge bases, 500)``.
* Every retriever call runs concurrently (bounded); one that fails or is too slow is dropped with a ``degrade`` trace
  row instead of failing the request. An embedding failure turns those knowledge bases to keywords only. The keyword
  searches start before the query is embedded and run while it is (:func:`~.retrievers.start_keyword`).
* FAQ knowledge bases index one row per question (standard and similar); when the vector hits fill the pool but name
  fewer than ``embedding_top_k`` distinct entries, the search is repeated with a larger k (up to 5 rounds, starting at
  ``min(3 x embedding_top_k, 500)`` and doubling). A hit whose negative question equals the query is dropped; with FAQ
  priority on, FAQ scores are boosted and near-certain hits are flagged as direct answers.
* Fusion (absolute by default: each hit's cosine and BM25 read as how unlikely they would be for a chunk unrelated to
  the query, in nats, from the query's cosine mean and spread over the searched chunks and each term's idf, and the
  two added, a chunk only BM25 found read at its exact cosine where the index can score named chunks (else at the
  vector list's lowest where the pool cut that list); where the index cannot describe its vectors, the previous
  rule on the model's declared scale; or adaptive, fixed min-max, DBSF, weighted RRF: :mod:`ragstep.retrieval.fusion`),
  then deduplication by chunk id and by a hash of the normalised content.
* Server-side fusion (an OpenSearch index with ``RAGSTEP_OPENSEARCH_SERVER_HYBRID``): a non-FAQ target with a query
  vector runs one ``hybrid`` query instead of the keyword + vector pair. Its hits come back fused by the search
  pipeline (min-max per clause, then the mean weighted by the request's ``rrf_keyword_weight`` /
  ``rrf_vector_weight``), join the fused list as they are (match type hybrid) and are merged with the other targets'
  client-fused lists, each chunk at its best score. The server returns only the combined score, so
  ``vector_threshold`` and ``keyword_threshold`` do not apply on that path (a target's candidates are the best
  ``pool`` of both clauses); FAQ targets and targets without a vector keep the pair and their thresholds. With
  ``fusion=minmax``, ``adaptive`` or ``absolute`` (the default) both sides compute a weighted mean of scores in 0-1
  (the server min-max with the configured weights; adaptive min-max vectors and BM25 relative to the best, with the
  query's; absolute calibrated cosines weighted by the best one's ^1.5 and BM25 relative to the best weighted by
  the best's raw BM25), so merged
  scores compare; with ``rrf`` the
  client-fused scores are on RRF's far smaller scale.
* Expansion: fewer than ``embedding_top_k`` results -> up to 5 keyword-only variants of the query widen the keyword
  list (new chunks join at its tail, scored below its last hit, so the first pass's ranking is kept:
  :func:`tail_scored`). On a server-hybrid target new chunks are scored as the pipeline scores a keyword-only hit
  (normalised keyword weight x BM25 normalised to the best).
* Nothing at all -> a scoped search returns the chosen knowledge items' chunks in document order; otherwise one retry
  with relaxed thresholds (vector min(0.17, threshold / 2), keyword 0.1), when some target had thresholds to relax.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from ragstep.errors import InputError
from ragstep.index_capabilities import keyword_gain as index_keyword_gain
from ragstep.index_capabilities import vector_backfill
from ragstep.models import (
    ChunkType,
    KnowledgeBaseType,
    MatchType,
    PipelineState,
    RetrievalSettings,
    SearchRequest,
    SearchResult,
    TraceEvent,
)
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.ports import Hit, SearchFilter, score_scale
from ragstep.retrieval.background import QueryBackground
from ragstep.retrieval.bm25 import BM25_K1
from ragstep.retrieval.expansion import expansion_variants
from ragstep.retrieval.fusion import Fused, fuse_adaptive, fuse_dbsf, fuse_evidence, fuse_minmax, fuse_rrf
from ragstep.retrieval.keyword_language import question_keyword_terms
from ragstep.retrieval.text import keyword_terms
from ragstep.stages.search.hydrate import ServerFused, hydrate
from ragstep.stages.search.hydrate import content_key as content_key  # imported from here by other stages, tests
from ragstep.stages.search.retrievers import (
    STAGE,
    Target,
    Task,
    best_per_chunk,
    embed_query,
    fusion_background,
    fusion_scale,
    keyword_only_cosines,
    run_concurrently,
    search_pass,
    start_keyword,
    uses_server_hybrid,
)
from ragstep.stages.search.scope import is_resolved, resolve_scope

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.stages.search.web_search import WebBranch


def candidate_pool(match_count: int, n_kbs: int, cfg: RetrievalSettings | None = None) -> int:
    cfg = cfg or RetrievalSettings()
    return min(max(cfg.candidate_pool_multiplier * match_count, cfg.candidate_pool_min) * max(1, n_kbs),
               cfg.candidate_pool_max)  # fmt: skip


def resolve_targets(state: PipelineState) -> tuple[list[Target], int]:
    """Search targets grouped by (embedding model, knowledge base type), and the number of knowledge bases.

    Documents named by ``knowledge_ids`` are the whole scope when given (inside the named knowledge bases, which
    :func:`~ragstep.stages.search.scope.resolve_scope` checked); otherwise the named knowledge bases are."""
    request = state.request
    kbs = {kb.id: kb for kb in state.knowledge_bases}
    tags = tuple(request.tag_ids)
    if state.knowledge_scope:
        item_groups: dict[tuple[str, bool], list[str]] = {}
        for kid, kb_id in state.knowledge_scope.items():
            kb = kbs[kb_id]
            item_groups.setdefault((kb.embedding_model, kb.type == KnowledgeBaseType.FAQ), []).append(kid)
        targets = [
            Target(SearchFilter(knowledge_ids=tuple(ids), tag_ids=tags), model, scoped=True, faq=faq)
            for (model, faq), ids in item_groups.items()
        ]
        return targets, len(set(state.knowledge_scope.values()))
    kb_groups: dict[tuple[str, bool], list[str]] = {}
    for kb_id in request.knowledge_base_ids:
        kb = kbs[kb_id]
        kb_groups.setdefault((kb.embedding_model, kb.type == KnowledgeBaseType.FAQ), []).append(kb.id)
    targets = [
        Target(SearchFilter(knowledge_base_ids=tuple(ids), tag_ids=tags), model, scoped=bool(tags), faq=faq)
        for (model, faq), ids in kb_groups.items()
    ]
    return targets, len(request.knowledge_base_ids)


def fuse(
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    cfg: RetrievalSettings,
    scale: ScoreScale | None = COMMON_SCALE,
    pool: int | None = None,
    background: QueryBackground | None = None,
    keyword_gain: float = BM25_K1 + 1.0,
    cosines: Mapping[str, float] | None = None,
) -> list[Fused]:
    """The configured fusion of one vector and one keyword list; ``background``: the query's cosine mean and spread
    over the searched chunks (:func:`~.retrievers.fusion_background`), ``scale``: the vector list's query scale
    (for the fallback where there is no background, :func:`~.retrievers.fusion_scale`), ``pool``: how many hits the
    vector search asked for, all three read by ``absolute`` fusion only
    (:func:`~ragstep.retrieval.fusion.fuse_evidence`: each hit scored by how unlikely its cosine and its BM25 would
    be for an unrelated chunk); a list that holds the whole pool was cut by it, not by the similarity threshold,
    and a chunk it left out counts at its lowest cosine (``vector_floor``) unless ``cosines`` holds its exact one
    (:func:`~.retrievers.keyword_only_cosines`)."""
    weights = {"w_vector": cfg.rrf_vector_weight, "w_keyword": cfg.rrf_keyword_weight}
    if cfg.fusion == "absolute":
        full = pool is not None and len(vector) >= pool
        return fuse_evidence(
            vector, keyword, background=background, keyword_gain=keyword_gain, vector_scale=scale, vector_floor=full,
            cosines=cosines, **weights,
        )  # fmt: skip
    if cfg.fusion == "adaptive":
        return fuse_adaptive(vector, keyword, **weights)
    if cfg.fusion == "minmax":
        return fuse_minmax(vector, keyword, **weights)
    if cfg.fusion == "dbsf":
        return fuse_dbsf(vector, keyword, **weights)
    return fuse_rrf(vector, keyword, k=cfg.rrf_k, w_vector=cfg.rrf_vector_weight, w_keyword=cfg.rrf_keyword_weight)


def server_fused(hits: Sequence[Hit]) -> list[Fused]:
    """Hybrid-query hits as fused candidates: their combined score as is, no client-side fusion."""
    return [ServerFused(h.chunk_id, h.score, MatchType.HYBRID, hybrid_rank=i + 1) for i, h in enumerate(hits)]


def keyword_only_fused(hits: Sequence[Hit], cfg: RetrievalSettings) -> list[Fused]:
    """Expansion hits of a server-hybrid target, scored as the search pipeline scores a chunk that only the keyword
    clause found: the normalised keyword weight x its BM25 normalised to the best hit (never above the hits that
    both clauses found strongly, as an unweighted keyword list would be)."""
    total = cfg.rrf_keyword_weight + cfg.rrf_vector_weight
    wk = cfg.rrf_keyword_weight / total if total > 0 else 0.0
    return [
        Fused(h.chunk_id, wk * h.score, MatchType.KEYWORD, keyword_score=h.score, keyword_rank=i + 1)
        for i, h in enumerate(hits)
    ]


def tail_scored(added: Sequence[Hit], keyword: Sequence[Hit]) -> list[Hit]:
    """Expansion hits on the first pass's keyword scale, below its last hit.

    Each variant's scores come normalised to its own best hit (1.0), so as they came a variant's best outscored all
    but the first pass's best, and fusion's min-max and the rerank stage's base score (both read scores, not
    positions) ranked it there (on msmarco-5k keyword-only that alone took the pipeline's nDCG@10 well below the
    search stage's: `ragstep bench quality`). A variant is a re-cut of the query's words searched with the same BM25
    statistics, so its raw score over the first pass's best raw score is on the first pass's scale (and at most
    the chunk's score for the whole query, which the first pass left out). Capped just below the last hit, so the
    first pass's ranking is kept whatever the variant."""
    if not added:
        return []
    floor = float(np.nextafter(keyword[-1].score, 0.0)) if keyword else 1.0
    best_raw = keyword[0].raw_score if keyword else 0.0
    out = []
    for h in added:
        score = h.raw_score / best_raw if best_raw > 0 and h.raw_score > 0 else h.score * floor
        out.append(Hit(h.chunk_id, min(score, floor), h.raw_score))
    return out


def merge_fused(*lists: Sequence[Fused]) -> list[Fused]:
    """Several fused rankings (client-side and server-side) as one: each chunk at its best score, best first; equal
    scores keep their lists' order. One list comes back as it is."""
    filled = [lst for lst in lists if lst]
    if len(filled) <= 1:
        return list(filled[0]) if filled else []
    best: dict[str, Fused] = {}
    for lst in filled:
        for f in lst:
            if f.chunk_id not in best or f.score > best[f.chunk_id].score:
                best[f.chunk_id] = f
    return sorted(best.values(), key=lambda f: -f.score)


def rank(
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
    server: Sequence[Fused],
    cfg: RetrievalSettings,
    scale: ScoreScale | None = COMMON_SCALE,
    pool: int | None = None,
    background: QueryBackground | None = None,
    keyword_gain: float = BM25_K1 + 1.0,
    cosines: Callable[[Sequence[Hit], Sequence[Hit]], dict[str, float]] | None = None,
) -> list[Fused]:
    """The stage's ranking: the client-fused vector and keyword lists merged with the server-fused candidates;
    ``keyword_gain``: the index's BM25 points per nat of idf (:func:`ragstep.index_capabilities.keyword_gain`);
    ``cosines``: the exact cosines of the candidates only the keyword list holds, given both lists (:func:`fuse`)."""
    exact = cosines(vector, keyword) if cosines is not None and background is not None else None
    return merge_fused(fuse(vector, keyword, cfg, scale, pool, background, keyword_gain, exact), server)


def server_fusion_detail(ctx: Context, cfg: RetrievalSettings, targets: int) -> dict[str, object]:
    """What the trace says about server-side fusion: how many targets used it, through which search pipeline."""
    detail: dict[str, object] = {"targets": targets, "normalization": "min_max", "combination": "arithmetic_mean"}
    hybrid_index = uses_server_hybrid(ctx)
    with contextlib.suppress(InputError):  # weights both 0: the hybrid calls failed and say why in degrade rows
        if hybrid_index is not None:
            detail["pipeline"] = hybrid_index.pipeline_name(cfg.rrf_keyword_weight, cfg.rrf_vector_weight)
    detail["thresholds_applied"] = False
    return detail


def keyword_only_chunks(ctx: Context, targets: Sequence[Target]) -> int:
    """Chunks in the searched scope still waiting for their vector (progressive indexing,
    :mod:`ragstep.app.ingest_vectors`): the vector search could not see them, only the keyword search could."""
    backfill = vector_backfill(ctx.index)
    if backfill is None:
        return 0
    return sum(backfill.keyword_only(t.flt, t.model) for t in targets if t.model != "none")


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def apply_faq_rules(
    results: list[SearchResult],
    query: str,
    cfg: RetrievalSettings,
    scales: Mapping[str, ScoreScale] | None = None,
) -> tuple[list[SearchResult], int]:
    """Drop FAQ hits whose negative question is the query; with FAQ priority, boost and flag direct answers.

    ``scales``: each knowledge base's embedding model's declared cosine scale (:func:`faq_scales`). A direct answer
    is a hit whose cosine, read on the common scale, reaches ``faq_direct_answer_threshold``: on e5's raw cosines
    0.9 is a loose paraphrase (common scale 0.65), not the near-copy the threshold means."""
    q = _norm(query)
    kept: list[SearchResult] = []
    dropped = 0
    for r in results:
        if r.chunk_type != ChunkType.FAQ:
            kept.append(r)
            continue
        if any(_norm(str(n)) == q for n in r.metadata.get("negative_questions", [])):
            dropped += 1
            continue
        if cfg.faq_priority_enabled:
            retrieval = r.metadata.get("retrieval", {})
            if "vector_score" in retrieval:
                scale = (scales or {}).get(r.knowledge_base_id, COMMON_SCALE)
                similarity = scale.calibrate(retrieval["vector_score"])
            else:
                similarity = retrieval.get("keyword_score", 0.0)
            meta = dict(r.metadata)
            if similarity >= cfg.faq_direct_answer_threshold:
                meta["faq_direct_answer"] = True
            r = r.rescored(min(r.score * cfg.faq_score_boost, 1.0), metadata=meta)
        kept.append(r)
    if cfg.faq_priority_enabled:
        kept.sort(key=lambda r: -r.score)
    return kept, dropped


def faq_scales(state: PipelineState, ctx: Context) -> dict[str, ScoreScale]:
    """Knowledge base id -> its embedding model's declared cosine scale, for :func:`apply_faq_rules` (empty when
    FAQ priority is off: nothing reads it)."""
    if not state.retrieval.faq_priority_enabled:
        return {}
    return {kb.id: score_scale(ctx.embedder(kb.embedding_model)) for kb in state.knowledge_bases}


def scoped_fallback(request: SearchRequest, ctx: Context, limit: int) -> list[SearchResult]:
    """The chosen knowledge items' chunks in document order (RAGFlow: a scoped search never comes back empty)."""
    out: list[SearchResult] = []
    for kid in request.knowledge_ids:
        for chunk in ctx.index.knowledge_chunks(kid, limit - len(out)):
            out.append(
                SearchResult.from_chunk(
                    chunk,
                    score=0.0,
                    match_type=MatchType.KEYWORD,
                    sub_chunk_ids=[],
                    metadata={**chunk.metadata, "retrieval": {"fallback": "scoped_knowledge"}},
                )
            )
        if len(out) >= limit:
            break
    return out


# -- the stage ------------------------------------------------------------------------------------------------------


def run(state: PipelineState, ctx: Context) -> PipelineState:
    if not is_resolved(state):  # a state written by hand (a sample event); the use cases resolve it beforehand
        state = resolve_scope(state, ctx)
    cfg = state.retrieval
    request = state.request
    query = state.search_query
    # Web search runs on its own thread beside everything below; its results join the knowledge bases' at the end.
    web: WebBranch | None = None
    if cfg.web_search:  # its module (page fetching, passage scoring) loads for the requests that use it
        from ragstep.stages.search.web_search import WebBranch

        web = WebBranch(state, ctx)
    targets, n_kbs = resolve_targets(state)
    pool = candidate_pool(cfg.embedding_top_k, n_kbs, cfg)
    # Folded, plus the unfolded forms an index written before folding holds, and a Spanish verb's written forms.
    terms = question_keyword_terms(query)
    # BM25 needs no query vector: the keyword searches run on the pool while the query is embedded here.
    early = start_keyword(state, ctx, cfg, targets, terms, pool)
    embeddings, vectors, events = embed_query(state, ctx, targets, query)

    first = search_pass(
        ctx, cfg, targets, terms, vectors, pool,
        vector_threshold=cfg.vector_threshold, keyword_threshold=cfg.keyword_threshold, early=early,
    )  # fmt: skip
    events += first.events
    vector_hits, keyword_hits, hybrid_hits = first.vector, first.keyword, first.hybrid
    server = server_fused(hybrid_hits)
    # What client-side fusion reads of the index: the targets fused on the server need none of it.
    fused_here = [t for i, t in enumerate(targets) if i not in first.hybrid_targets]
    scale = fusion_scale(ctx, fused_here, vectors)
    background = fusion_background(ctx, fused_here, vectors) if cfg.fusion == "absolute" else None
    gain = index_keyword_gain(ctx.index) if fused_here and cfg.fusion == "absolute" else BM25_K1 + 1.0
    cosines = partial(keyword_only_cosines, ctx, fused_here, vectors) if background is not None else None
    ranked = partial(rank, cfg=cfg, scale=scale, pool=pool, background=background, keyword_gain=gain, cosines=cosines)
    results = hydrate(ranked(vector_hits, keyword_hits, server), ctx, cfg.embedding_top_k)
    detail: dict[str, object] = {}

    if cfg.enable_query_expansion and len(results) < cfg.embedding_top_k:
        variants = expansion_variants(query, cfg.expansion_max_variants)
        if variants:
            match_count = max(2 * cfg.embedding_top_k, 2 * cfg.rerank_top_k)
            kthr = cfg.keyword_threshold * cfg.expansion_keyword_threshold_factor
            tasks: list[Task] = [
                (f"expansion {v!r} #{i}", partial(ctx.index.keyword_search, keyword_terms(v), t.flt, match_count,
                                                  0.0 if t.scoped else kthr))
                for v in variants
                for i, t in enumerate(targets)
            ]  # fmt: skip
            found, more_events = run_concurrently(ctx, tasks, cfg)
            events += more_events
            # Client-fused targets: new chunks join the keyword list's tail. Server-hybrid targets have no keyword
            # list: new chunks join the server-fused candidates, scored as a keyword-only hit of the pipeline.
            on_server = {f"expansion {v!r} #{i}" for v in variants for i in first.hybrid_targets}
            client_found = [hits for name, hits in found.items() if name not in on_server]
            server_found = [hits for name, hits in found.items() if name in on_server]
            known = {h.chunk_id for h in keyword_hits}
            added = tail_scored(
                [h for h in best_per_chunk(client_found) if h.chunk_id not in known] if client_found else [],
                keyword_hits,
            )
            seen = known | {h.chunk_id for h in vector_hits} | {h.chunk_id for h in hybrid_hits}
            added_server = [h for h in best_per_chunk(server_found) if h.chunk_id not in seen] if server_found else []
            if added or added_server:
                keyword_hits = [*keyword_hits, *added]
                server = [*server, *keyword_only_fused(added_server, cfg)]
                results = hydrate(ranked(vector_hits, keyword_hits, server), ctx, cfg.embedding_top_k)
            events.append(
                TraceEvent(
                    stage=STAGE,
                    action="expand",
                    counts={
                        "variants": len(variants),
                        "new_candidates": len(added) + len(added_server),
                        "results": len(results),
                    },
                    detail={"variants": variants},
                )
            )

    scales = faq_scales(state, ctx)
    results, negatives = apply_faq_rules(results, query, cfg, scales)
    if negatives:
        detail["faq_negative_dropped"] = negatives

    if not results:
        if request.knowledge_ids:
            results = scoped_fallback(request, ctx, cfg.embedding_top_k)
            events.append(
                TraceEvent(
                    stage=STAGE,
                    action="fallback",
                    reason="no match in the chosen knowledge items: returning their chunks in order",
                    counts={"results": len(results)},
                )
            )
        elif any(not t.scoped and i not in first.hybrid_targets for i, t in enumerate(targets)):
            # Only targets searched with thresholds can find more (scoped ones have none, nor do server-hybrid ones).
            relaxed_v = min(cfg.fallback_vector_threshold, cfg.vector_threshold / 2)
            retry = search_pass(
                ctx, cfg, targets, terms, vectors, pool,
                vector_threshold=relaxed_v, keyword_threshold=cfg.fallback_keyword_threshold,
            )  # fmt: skip
            events += retry.events
            vector_hits, keyword_hits, hybrid_hits = retry.vector, retry.keyword, retry.hybrid
            server = server_fused(hybrid_hits)
            results, _ = apply_faq_rules(hydrate(ranked(vector_hits, keyword_hits, server), ctx, cfg.embedding_top_k),
                                         query, cfg, scales)  # fmt: skip
            events.append(
                TraceEvent(
                    stage=STAGE,
                    action="fallback",
                    reason=f"no results: retried with vector threshold {relaxed_v:g}, "
                    f"keyword threshold {cfg.fallback_keyword_threshold:g}",
                    counts={"results": len(results)},
                )
            )

    if web is not None:
        web_found = web.join()
        events += web_found.events
        results = [*results, *web_found.results]

    events.append(
        TraceEvent(
            stage=STAGE,
            counts={
                "vector_hits": len(vector_hits),
                "keyword_hits": len(keyword_hits),
                **({"hybrid_hits": len(hybrid_hits)} if first.hybrid_targets else {}),
                "results": len(results),
                **({"faq_rounds": first.faq_rounds} if first.faq_rounds else {}),
                **({"keyword_only_chunks": waiting} if (waiting := keyword_only_chunks(ctx, targets)) else {}),
            },
            detail={
                "query": query,
                "original_query": request.query if query != request.query else None,
                "keywords": terms,
                "pool": pool,
                "targets": len(targets),
                "fusion": cfg.fusion,
                **(
                    {"server_fusion": server_fusion_detail(ctx, cfg, len(first.hybrid_targets))}
                    if first.hybrid_targets
                    else {}
                ),
                **detail,
            },
        )
    )
    return state.with_results("search_results", results, *events, query_embeddings=embeddings)
