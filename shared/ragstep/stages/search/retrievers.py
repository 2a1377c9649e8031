"""The retrievers of ``chunk_search``: which searches run for which targets, concurrently, and what they found.

A retriever that fails or is slower than ``retriever_timeout_s`` becomes a ``degrade`` row of the trace and the
search goes on with the others (WeKnora's rule: one broken retriever must not cost the user every result).

The keyword (BM25) searches need no query vector, so the first pass starts them (:func:`start_keyword`) before the
query is embedded: the embedding (a remote API's tens to hundreds of ms, or the local engine's load and encode, which
release the GIL) and the keyword search (and on a process's first query the snapshot it opens) overlap.
:func:`search_pass` then starts the vector searches and gathers all of them under one deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from ragstep.errors import ProviderError
from ragstep.index_capabilities import HybridSearch, candidate_scores, server_hybrid
from ragstep.models import PipelineState, RetrievalSettings, TraceEvent
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.ports import Hit, SearchFilter, declared_scale
from ragstep.retrieval.background import BackgroundIndex, QueryBackground, query_background, standout_cosine
from ragstep.retrieval.background import query_scale as background_scale
from ragstep.stages.embedding_cache import query_embedding

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "chunk_search"


@dataclass(frozen=True, slots=True)
class Target:
    """One search scope sharing an embedding model and a knowledge base type."""

    flt: SearchFilter
    model: str
    scoped: bool
    faq: bool = False


@dataclass
class Pass:
    """What one round of retrieval found."""

    vector: list[Hit] = field(default_factory=list)
    keyword: list[Hit] = field(default_factory=list)
    #: Hits of the server-side hybrid queries, already fused (best first), and the targets that ran one.
    hybrid: list[Hit] = field(default_factory=list)
    hybrid_targets: frozenset[int] = frozenset()
    events: list[TraceEvent] = field(default_factory=list)
    faq_rounds: int = 0


def query_scale(
    ctx: Context, model: str, vector: np.ndarray | Sequence[float] | None, flt: SearchFilter
) -> ScoreScale | None:
    """Where ``vector``'s cosines sit among the chunks ``flt`` covers: zero at the query's background mean, the
    model's declared span (:func:`ragstep.retrieval.background.query_scale`); the declared scale where the index
    cannot tell (None: the model declares none, its cosines are read relative)."""
    declared = declared_scale(ctx.embedder(model))
    index = ctx.index
    if vector is None or not isinstance(index, BackgroundIndex):
        return declared
    return background_scale(declared, index.vector_background(model, flt), vector)


def threshold_scale(ctx: Context, model: str, vector: np.ndarray, flt: SearchFilter) -> ScoreScale:
    """The scale the similarity threshold reads ``vector``'s cosines on: the query's (:func:`query_scale`), its zero
    never above the model's declared one. The threshold cuts unrelated text: a query's background below the model's
    unrelated level (a question in another language than the corpus) lowers the bar, but a corpus on one topic,
    whose mean cosine is on-topic text rather than unrelated, does not raise it (an FAQ on COVID-19 vaccines: mean
    0.84 for e5, whose unrelated level is 0.77; read at 0.84 the threshold cut 59 % of the relevant entries)."""
    scale = query_scale(ctx, model, vector, flt) or COMMON_SCALE
    declared = declared_scale(ctx.embedder(model))
    if declared is not None and declared.zero < scale.zero:
        return ScoreScale(zero=declared.zero, span=scale.span)
    return scale


def similarity_bar(ctx: Context, model: str, vector: np.ndarray, flt: SearchFilter, threshold: float) -> float:
    """The raw cosine the similarity ``threshold`` puts the vector search's cut at: the threshold on
    :func:`threshold_scale`; below 100 chunks, lowered to where a chunk stands out from the query's other cosines
    when that is lower (:func:`ragstep.retrieval.background.standout_cosine`)."""
    bar = threshold_scale(ctx, model, vector, flt).raw(threshold)
    index = ctx.index
    if isinstance(index, BackgroundIndex):
        standout = standout_cosine(index.vector_background(model, flt), vector, threshold)
        if standout is not None:
            return min(bar, standout)
    return bar


def fusion_scale(ctx: Context, targets: Sequence[Target], vectors: Mapping[str, np.ndarray]) -> ScoreScale | None:
    """The vector list's scale for fusion: the query's scale (:func:`query_scale`) when every target searched with
    a vector reads on one, the common scale when none was (keywords only), None when they differ or a model
    declares none and the index cannot tell (fusion then reads the cosines relative)."""
    scales = {query_scale(ctx, t.model, vectors[t.model], t.flt) for t in targets if t.model in vectors}
    return scales.pop() if len(scales) == 1 else (COMMON_SCALE if not scales else None)


def fusion_background(
    ctx: Context, targets: Sequence[Target], vectors: Mapping[str, np.ndarray]
) -> QueryBackground | None:
    """The query's cosine mean and spread over what its vector searches cover, for fusion to read each vector hit's
    surprise (:func:`ragstep.retrieval.fusion.fuse_evidence`); None where the index cannot describe its vectors, a
    filter covers too few chunks, or the targets' backgrounds differ (several models' or filters' cosines in one
    list: fusion then falls back to the declared scales)."""
    index = ctx.index
    if not isinstance(index, BackgroundIndex):
        return None
    found: set[QueryBackground] = set()
    for t in targets:
        if t.model not in vectors:
            continue
        background = index.vector_background(t.model, t.flt)
        if background is None:
            return None
        found.add(QueryBackground(*query_background(background, vectors[t.model])))
    return found.pop() if len(found) == 1 else None


def keyword_only_cosines(
    ctx: Context,
    targets: Sequence[Target],
    vectors: Mapping[str, np.ndarray],
    vector: Sequence[Hit],
    keyword: Sequence[Hit],
) -> dict[str, float]:
    """The exact cosine of each chunk only the keyword list holds (one the similarity threshold or the pool cut from
    the vector list), for fusion to read its vector evidence instead of none
    (:func:`ragstep.retrieval.fusion.fuse_evidence`); empty where the index cannot score named chunks
    (:class:`~ragstep.index_capabilities.CandidateScores`) or the targets searched several models' spaces.

    The other way round (the BM25 of a chunk only the vectors found: its words were under the keyword list's cut) is
    not read, although the same capability gives it: measured, it never gained and cost covid-faq 0.0018 and
    cmrc2018-zh 0.0009 nDCG@10 (BENCHMARKS.md, "Both scores for every candidate"). Such a chunk shares only the
    query's common words, if any; a paraphrase the vectors found shares none, an on-topic distractor shares a few,
    and those few points lifted the distractor over the paraphrase."""
    index = candidate_scores(ctx.index)
    if index is None or not vector or not keyword:
        return {}
    models = {t.model for t in targets if t.model in vectors}
    if len(models) != 1:
        return {}
    model = models.pop()
    in_vector = {h.chunk_id for h in vector}
    missing = [h.chunk_id for h in keyword if h.chunk_id not in in_vector]
    return index.cosines(vectors[model], model, missing) if missing else {}


def vector_scale(ctx: Context, models: Iterable[str]) -> ScoreScale | None:
    """The declared cosine scale of the vector list, whose hits come from the query embeddings of ``models``: that
    model's scale when they are one model (or several on one scale), None when their scales differ (the list then
    merges cosines of several scales by raw value, and fusion cannot read them on one scale) or when a model
    declares none (:func:`~ragstep.ports.declared_scale`: its cosines are read relative to one another only)."""
    scales = {declared_scale(ctx.embedder(m)) for m in models}
    return scales.pop() if len(scales) == 1 else (COMMON_SCALE if not scales else None)


def best_per_chunk(lists: Sequence[Sequence[Hit]]) -> list[Hit]:
    """Union of several hit lists of one retriever, each chunk at its best score, best first."""
    if len(lists) == 1:
        return list(lists[0])
    best: dict[str, Hit] = {}
    for hits in lists:
        for h in hits:
            if h.chunk_id not in best or h.score > best[h.chunk_id].score:
                best[h.chunk_id] = h
    return sorted(best.values(), key=lambda h: (-h.score, h.chunk_id))


def uses_server_hybrid(ctx: Context) -> HybridSearch | None:
    """The index, when it fuses on the server (an OpenSearch index with ``RAGSTEP_OPENSEARCH_SERVER_HYBRID`` on)."""
    return server_hybrid(ctx.index)


#: A named retriever call: a list of hits, or (hits, rounds) for the FAQ vector search.
Task = tuple[str, Callable[[], object]]
#: A named retriever call already running on the pool.
Running = tuple[str, Future]


def run_concurrently(
    ctx: Context, tasks: list[Task], cfg: RetrievalSettings, running: Sequence[Running] = ()
) -> tuple[dict, list[TraceEvent]]:
    """Run retriever calls on the shared pool; failures and time-outs become ``degrade`` events, never errors.

    ``running``: calls submitted earlier (:func:`start_keyword`), gathered after ``tasks`` and under the same
    deadline, which starts once every call is under way (so an early call never has less time than before)."""
    results: dict[str, object] = {}
    events: list[TraceEvent] = []
    if len(tasks) == 1 and not running:  # no thread hop for the common single-retriever case
        name, fn = tasks[0]
        try:
            results[name] = fn()
        except Exception as exc:
            events.append(_degrade(name, exc))
        return results, events
    futures: list[Running] = [(name, ctx.executor.submit(fn)) for name, fn in tasks]
    futures += running
    # A lone call (an early keyword search, when the embedding failed and no vector search followed) is waited for as
    # the single-call path waits: without a time limit.
    deadline = None if len(futures) == 1 else time.monotonic() + cfg.retriever_timeout_s
    for name, fut in futures:
        try:
            results[name] = fut.result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            fut.cancel()
            events.append(
                TraceEvent(stage=STAGE, action="degrade", reason=f"{name} slower than {cfg.retriever_timeout_s}s")
            )
        except Exception as exc:
            events.append(_degrade(name, exc))
    return results, events


def _degrade(name: str, exc: Exception) -> TraceEvent:
    message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
    return TraceEvent(stage=STAGE, action="degrade", reason=f"{name} failed, dropped: {message}")


def faq_vector_search(
    ctx: Context, vec: np.ndarray, target: Target, match_count: int, threshold: float, cfg: RetrievalSettings
) -> tuple[list[Hit], int]:
    """Vector search over FAQ question rows, widened until enough distinct entries are found.

    Several rows (phrasings) belong to one entry, so k hits can name far fewer than k entries. While the hits fill
    k but name fewer than ``match_count`` entries, search again with twice the k: k starts at
    ``min(3 x match_count, 500)``, at most ``faq_max_rounds`` rounds.
    """
    index = ctx.index
    cap = cfg.candidate_pool_max
    k = min(3 * match_count, cap)
    hits = index.vector_search(vec, target.model, target.flt, k, threshold)
    rounds = 1
    while rounds < cfg.faq_max_rounds and len(hits) >= k and k < cap:
        chunks = index.fetch([h.chunk_id for h in hits])
        if len({c.parent_id or c.id for c in chunks.values()}) >= match_count:
            break
        k = min(k * 2, cap)
        hits = index.vector_search(vec, target.model, target.flt, k, threshold)
        rounds += 1
    return hits, rounds


def keyword_targets(targets: Sequence[Target]) -> list[Target]:
    """The targets' keyword searches as few calls as possible: one, over the union of their knowledge bases (or
    items), when they differ in nothing else (the usual case: knowledge bases grouped apart only by embedding model
    or type). BM25 scores of different knowledge bases compare only when one call scores them with the joint
    statistics (:mod:`ragstep.retrieval.bm25`); separate calls are each normalised to their own best hit, so
    their merged list mixed two scales."""
    if len(targets) <= 1:
        return list(targets)
    first = targets[0]
    if any(
        t.scoped != first.scoped
        or t.flt.tag_ids != first.flt.tag_ids
        or t.flt.chunk_types != first.flt.chunk_types
        or t.flt.enabled_only != first.flt.enabled_only
        or bool(t.flt.knowledge_base_ids) != bool(first.flt.knowledge_base_ids)
        or bool(t.flt.knowledge_ids) != bool(first.flt.knowledge_ids)
        for t in targets
    ):
        return list(targets)
    flt = SearchFilter(
        knowledge_base_ids=tuple(dict.fromkeys(k for t in targets for k in t.flt.knowledge_base_ids)),
        knowledge_ids=tuple(dict.fromkeys(k for t in targets for k in t.flt.knowledge_ids)),
        tag_ids=first.flt.tag_ids,
        chunk_types=first.flt.chunk_types,
        enabled_only=first.flt.enabled_only,
    )
    return [Target(flt, first.model, first.scoped, any(t.faq for t in targets))]


def fused_on_server(hybrid_index: HybridSearch | None, target: Target, has_vector: bool) -> bool:
    """Whether ``target`` runs one hybrid query (fused on the server) instead of the keyword + vector pair."""
    return hybrid_index is not None and has_vector and not target.faq


def keyword_tasks(
    ctx: Context, keyword: Sequence[Target], terms: Sequence[str], pool: int, threshold: float
) -> list[Task]:
    """The keyword searches of the targets ``keyword`` (as few calls as :func:`keyword_targets` makes them)."""
    index = ctx.index
    return [
        (f"keyword search #{i}", partial(index.keyword_search, terms, t.flt, pool, 0.0 if t.scoped else threshold))
        for i, t in enumerate(keyword_targets(keyword))
    ]


@dataclass(frozen=True, slots=True)
class EarlyKeyword:
    """Keyword searches started before the query was embedded: those of the targets ``targets``, at ``threshold``."""

    targets: tuple[Target, ...]
    threshold: float
    calls: tuple[Running, ...]

    def cancel(self) -> None:
        for _, fut in self.calls:
            fut.cancel()  # one already running finishes, unread


def start_keyword(
    state: PipelineState,
    ctx: Context,
    cfg: RetrievalSettings,
    targets: Sequence[Target],
    terms: Sequence[str],
    pool: int,
) -> EarlyKeyword | None:
    """Start the first pass's keyword searches on the pool, for :func:`search_pass` to gather; None when no query
    needs embedding (nothing to overlap: the pass runs as it always has, a single call on the calling thread).

    On an index that fuses on the server, a non-FAQ target whose model has an embedder is expected to get its
    vector and run a hybrid query, so its keyword search is not started; should its embedding fail, it falls back
    to keywords, and :func:`search_pass` starts the keyword calls again (the targets' BM25 is one joint call)."""
    embedders = {m: ctx.embedder(m) for m in dict.fromkeys(t.model for t in targets)}
    if all(e is None or m in state.query_embeddings for m, e in embedders.items()):
        return None
    hybrid_index = uses_server_hybrid(ctx)
    keyword = tuple(t for t in targets if not fused_on_server(hybrid_index, t, embedders[t.model] is not None))
    if not keyword:
        return None
    calls = tuple(
        (name, ctx.executor.submit(fn)) for name, fn in keyword_tasks(ctx, keyword, terms, pool, cfg.keyword_threshold)
    )
    return EarlyKeyword(keyword, cfg.keyword_threshold, calls)


def search_pass(
    ctx: Context,
    cfg: RetrievalSettings,
    targets: Sequence[Target],
    terms: Sequence[str],
    vectors: dict[str, np.ndarray],
    pool: int,
    *,
    vector_threshold: float,
    keyword_threshold: float,
    early: EarlyKeyword | None = None,
) -> Pass:
    """One round of retrieval; ``early``: the keyword searches :func:`start_keyword` started, used when they are
    the ones this pass needs."""
    tasks: list[Task] = []
    hybrid_index = uses_server_hybrid(ctx)
    hybrid_targets: set[int] = set()
    keyword: list[Target] = []
    for i, t in enumerate(targets):
        vec = vectors.get(t.model)
        if hybrid_index is not None and vec is not None and not t.faq:  # fused_on_server, spelled out for mypy
            # One query fused on the server replaces the keyword + vector pair; no thresholds (module docstring).
            fn = partial(
                hybrid_index.hybrid_search, terms, vec, t.model, t.flt, pool,
                w_keyword=cfg.rrf_keyword_weight, w_vector=cfg.rrf_vector_weight,
            )  # fmt: skip
            tasks.append((f"hybrid search #{i}", fn))
            hybrid_targets.add(i)
            continue
        keyword.append(t)
        if vec is None:
            continue
        # The threshold is on the common similarity scale; the index compares the model's raw cosines, so it gets
        # the cosine the query's scale puts there (:func:`query_scale`; e5 on msmarco: 0.2 -> ~0.81, English
        # questions over Russian passages ~0.75; below 100 chunks, where a chunk stands out if that is lower:
        # :func:`similarity_bar`). Scoped: any cosine >= 0 passes.
        vthr = 0.0 if t.scoped else similarity_bar(ctx, t.model, vec, t.flt, vector_threshold)
        search: Callable[[], object]
        if t.faq:
            search = partial(faq_vector_search, ctx, vec, t, cfg.embedding_top_k, vthr, cfg)
        else:
            search = partial(ctx.index.vector_search, vec, t.model, t.flt, pool, vthr)
        tasks.append((f"vector search #{i}", search))
    running: tuple[Running, ...] = ()
    if early is not None and early.targets == tuple(keyword) and early.threshold == keyword_threshold:
        running = early.calls
    else:
        if early is not None:  # an embedding failed and its hybrid target searches by keywords: one joint BM25 call
            early.cancel()
        tasks += keyword_tasks(ctx, keyword, terms, pool, keyword_threshold)
    found, events = run_concurrently(ctx, tasks, cfg, running)
    out = Pass(events=events, hybrid_targets=frozenset(hybrid_targets))
    vector_lists, keyword_lists, hybrid_lists = [], [], []
    for name, value in found.items():
        if name.startswith("hybrid"):
            hybrid_lists.append(value)
        elif name.startswith("keyword"):
            keyword_lists.append(value)
        elif isinstance(value, tuple):  # FAQ search: (hits, rounds)
            vector_lists.append(value[0])
            out.faq_rounds = max(out.faq_rounds, value[1])
        else:
            vector_lists.append(value)
    out.vector = best_per_chunk(vector_lists) if vector_lists else []
    out.keyword = best_per_chunk(keyword_lists) if keyword_lists else []
    out.hybrid = best_per_chunk(hybrid_lists) if hybrid_lists else []
    return out


def embed_query(
    state: PipelineState, ctx: Context, targets: Sequence[Target], query: str
) -> tuple[dict[str, list[float]], dict[str, np.ndarray], list[TraceEvent]]:
    """One query embedding per embedding model (reused from the state when an earlier stage computed it)."""
    stored = dict(state.query_embeddings)
    vectors: dict[str, np.ndarray] = {}
    events: list[TraceEvent] = []
    for model in dict.fromkeys(t.model for t in targets):
        embedder = ctx.embedder(model)
        if embedder is None:
            events.append(
                TraceEvent(stage=STAGE, action="skip", reason="no embedding model: keyword (BM25) search only")
            )
            continue
        if model not in stored:
            try:
                stored[model], hit = query_embedding(ctx, embedder, query)
                if hit:  # the query-embedding cache answered: no embedding call
                    events.append(TraceEvent(stage=STAGE, reason="query_embedding_cached", detail={"model": model}))
            except ProviderError as exc:
                events.append(
                    TraceEvent(
                        stage=STAGE,
                        action="degrade",
                        reason=f"embedding failed, keyword search only: {exc.message}",
                        detail={"model": model},
                    )
                )
                continue
        vectors[model] = np.asarray(stored[model], dtype=np.float32)
    return stored, vectors, events
