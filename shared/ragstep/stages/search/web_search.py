"""The web branch of ``chunk_search``: a web search engine's results, compressed WeKnora's way, as search results.

It runs beside the knowledge-base search when a request turns ``web_search`` on (see
:func:`ragstep.stages.search.chunk_search.run`), and never fails the request: an engine that is misconfigured,
unreachable, slow or answers garbage becomes a ``degrade`` row and the knowledge bases answer alone.

1. The engine is asked for ``web_search_max_results`` pages for the (rewritten) query; blacklisted URLs are dropped
   (invalid blacklist rules are logged once per process and ignored).
2. The pages join the session's temporary knowledge base: one passage per page, each URL once per session, kept in
   the tenant's response cache for the session's lifetime (the history's TTL) and removed with the session
   (:func:`forget_session`). Without a session the request's own pages are the whole base.
3. Compression (:mod:`ragstep.retrieval.web.compress`): passages at keyword or vector score >= 0.5 (vector scores
   when the knowledge bases' embedder is there), chosen round-robin across sites, one result per URL. When none
   passes, this request's pages are kept in the engine's order (score 0), since the engine found them for this query.

Web results carry ``match_type`` web, ``chunk_type`` web_search, their URL as ``knowledge_filename`` and in
``metadata.url``; the rerank stage weighs them 0.95.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from ragstep import deadline
from ragstep.errors import RagstepError
from ragstep.models import ChunkType, MatchType, PipelineState, SearchResult, TraceEvent
from ragstep.retrieval.web.blacklist import Blacklist, compile_blacklist
from ragstep.retrieval.web.compress import Passage, Scored, merge_passages, round_robin, score_passages
from ragstep.stages.search.retrievers import STAGE

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.models.web import WebPage

log = logging.getLogger(__name__)

#: Results of the web branch name this as their knowledge base (it is no knowledge base of the catalog).
WEB_KB = "web"
_CACHE_PREFIX = "web-search:v1:"


@dataclass(slots=True)
class WebOutcome:
    results: list[SearchResult] = field(default_factory=list)
    events: list[TraceEvent] = field(default_factory=list)


@lru_cache(maxsize=8)
def blacklist_of(rules: tuple[str, ...]) -> Blacklist:
    """The compiled rules; compiled (and an invalid rule reported) once per process per rule set."""
    blacklist = compile_blacklist(rules)
    for rule, why in blacklist.invalid:
        log.warning("web search blacklist rule %r ignored: %s", rule, why)
    return blacklist


def session_key(session_id: str) -> str:
    return _CACHE_PREFIX + session_id


def load_session(ctx: Context, session_id: str | None) -> list[Passage]:
    cache = ctx.cache
    if not session_id or cache is None:
        return []
    raw = cache.get(session_key(session_id))
    try:
        items = json.loads(raw) if raw else []
        return [Passage(**item) for item in items] if isinstance(items, list) else []
    except (ValueError, TypeError):  # an entry from another version: start the session's web base afresh
        return []


def save_session(ctx: Context, session_id: str | None, passages: list[Passage]) -> None:
    cache = ctx.cache
    if not session_id or cache is None:
        return
    ttl = ctx.settings.history_ttl_seconds or ctx.settings.cache_ttl_seconds
    cache.put(session_key(session_id), json.dumps([asdict(p) for p in passages]), ttl)


def forget_session(ctx: Context, session_id: str) -> None:
    """Remove a session's temporary web knowledge base (the cache port has no delete: the entry is overwritten
    empty and expires a second later)."""
    cache = ctx.cache
    if cache is not None:
        cache.put(session_key(session_id), "[]", 1)


def result_id(url: str) -> str:
    return "web-" + hashlib.sha1(url.encode("utf-8")).hexdigest()[:24]


def as_result(s: Scored, rank: int) -> SearchResult:
    p = s.passage
    rid = result_id(p.url)
    retrieval: dict[str, object] = {"keyword_score": round(s.keyword_score, 6), "web_rank": rank}
    if s.vector_score is not None:
        retrieval["vector_score"] = round(s.vector_score, 6)
    return SearchResult(
        id=rid,
        content=p.text,
        knowledge_id=rid,
        knowledge_base_id=WEB_KB,
        knowledge_title=p.title,
        knowledge_filename=p.url,
        score=s.score,
        match_type=MatchType.WEB,
        chunk_type=ChunkType.WEB_SEARCH,
        metadata={"url": p.url, "site": p.site, "provider": p.provider, "retrieval": retrieval},
    )


def _embed(
    state: PipelineState, ctx: Context, query: str, passages: list[Passage]
) -> tuple[list[Passage], str, list[float] | None]:
    """Passages with vectors of the knowledge bases' first embedding model, and the query's vector (none without an
    embedder). Vectors already in the session's base are reused."""
    model_id = next((kb.embedding_model for kb in state.knowledge_bases if kb.embedding_model != "none"), "")
    embedder = ctx.embedder(model_id) if model_id else None
    if embedder is None:
        return passages, "", None
    missing = [i for i, p in enumerate(passages) if model_id not in p.vectors]
    if missing:
        matrix = embedder.embed([passages[i].text for i in missing])
        passages = list(passages)
        for row, i in zip(matrix, missing, strict=True):
            p = passages[i]
            passages[i] = Passage(p.url, p.title, p.snippet, p.body, p.provider, {**p.vectors, model_id: row.tolist()})
    return passages, model_id, embedder.embed_query(query).tolist()


def search_web(state: PipelineState, ctx: Context) -> WebOutcome:
    """The web branch's results and trace rows (a ``degrade`` row, no results, when the engine fails)."""
    started = time.perf_counter()
    cfg = state.retrieval
    query = state.search_query
    out = WebOutcome()
    blacklist = blacklist_of(tuple(ctx.settings.web_search_blacklist))
    try:
        provider = ctx.web_search
        pages: list[WebPage] = provider.search(query, cfg.web_search_max_results)
    except RagstepError as exc:
        out.events.append(TraceEvent(stage=STAGE, action="degrade", reason=f"web search: {exc.message}"))
        return out
    kept = [p for p in pages if not blacklist.blocks(p.url)]
    new = [Passage(p.url, p.title, p.snippet, p.content, provider.name) for p in kept]
    session_id = state.request.session_id
    passages, added = merge_passages(load_session(ctx, session_id), new)
    detail: dict[str, object] = {"provider": provider.name}
    model_id, query_vector = "", None
    try:
        passages, model_id, query_vector = _embed(state, ctx, query, passages)
    except RagstepError as exc:  # vectors are a refinement: keyword scores still compress the base
        out.events.append(TraceEvent(stage=STAGE, action="degrade", reason=f"web search: keywords only: {exc.message}"))
    save_session(ctx, session_id, passages)
    scored = score_passages(
        query, passages, query_vector=query_vector, model_id=model_id,
        vector_threshold=cfg.web_search_vector_threshold, keyword_threshold=cfg.web_search_keyword_threshold,
    )  # fmt: skip
    picked = round_robin(scored, cfg.web_search_max_results)
    if not picked and new:
        picked = [Scored(p, 0.0, 0.0, None) for p in new[: cfg.web_search_max_results]]
        detail["compression"] = "no passage reached the thresholds: the engine's results in its order"
    out.results = [as_result(s, rank) for rank, s in enumerate(picked, start=1)]
    if blacklist.invalid:
        detail["blacklist_invalid"] = [rule for rule, _ in blacklist.invalid]
    out.events.append(
        TraceEvent(
            stage=STAGE,
            action="expand",
            reason="web search",
            duration_ms=round((time.perf_counter() - started) * 1000.0, 3),
            counts={
                "pages": len(pages),
                "blacklisted": len(pages) - len(kept),
                "session_passages": len(passages),
                "added": added,
                "passed": len(scored),
                "results": len(out.results),
                "sites": len({s.passage.site for s in picked}),
            },
            detail=detail,
        )
    )
    return out


class WebBranch:
    """:func:`search_web` on its own thread, started before the knowledge-base search and joined after it.

    Its own thread rather than the retrievers' pool: a slow engine must not hold a worker the retrievers wait for.
    The engine's HTTP timeout bounds the call; :meth:`join` waits that long (plus a grace second) at most.
    """

    def __init__(self, state: PipelineState, ctx: Context) -> None:
        self._timeout_s = ctx.settings.web_search_timeout_s + 1.0
        self._outcome: WebOutcome | None = None
        # In the request's contextvars context: the engine's timeout then stops at the request's deadline too.
        run = contextvars.copy_context().run
        self._thread = threading.Thread(
            target=run, args=(self._run, state, ctx), name="ragstep-web-search", daemon=True
        )
        self._thread.start()

    def _run(self, state: PipelineState, ctx: Context) -> None:
        try:
            self._outcome = search_web(state, ctx)
        except Exception as exc:  # a bug in the web branch must not fail the knowledge-base search
            log.exception("web search failed")
            reason = f"web search failed: {type(exc).__name__}"
            self._outcome = WebOutcome(events=[TraceEvent(stage=STAGE, action="degrade", reason=reason)])

    def join(self) -> WebOutcome:
        wait_s = self._timeout_s
        left = deadline.remaining_s()
        if left is not None:  # the knowledge-base results must still reach the caller in time
            wait_s = max(0.0, min(wait_s, left))
        self._thread.join(wait_s)
        if self._outcome is None:
            reason = f"web search: no answer within {wait_s:g}s"
            return WebOutcome(events=[TraceEvent(stage=STAGE, action="degrade", reason=reason)])
        return self._outcome
