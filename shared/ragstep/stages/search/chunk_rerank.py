"""``chunk_rerank``: score the search candidates with a reranker and choose a diverse few (WeKnora's rerank stage).

* The reranker reads each chunk with Markdown noise stripped (image links, URLs, HTML tags, table pipes, emphasis,
  list and heading markers; code bodies kept) plus image captions/OCR text and generated questions; it is asked the
  rewritten query when there is one.
* Each score's scale (a rerank model's; the model-free reranker's with vectors; without: token similarity alone)
  decides its threshold and weights (:mod:`ragstep.retrieval.calibration`): on the token scale no rerank threshold
  applies (the search stage's keyword threshold cut on that signal already) and the search score leads the
  composite (0.15 model / 0.75 base).
* Threshold chain, so over-strict settings never empty a good answer (WeKnora #713, #2391): keep scores >=
  ``rerank_threshold``; if none pass and the threshold is above 0.3, retry at max(0.3, 0.7 x threshold); if still
  none, keep the best one when it reaches 0.15. A failing reranker passes the candidates through un-reranked. The
  model-free reranker's scores (with or without vectors) meet no threshold: the search stage's thresholds cut on the
  same signals already (:mod:`ragstep.retrieval.calibration`).
* When even that keeps nothing, the rerank's list is empty and stays so: the merge and the final cut read it, not the
  search's candidates (WeKnora's rerank answers "search nothing" there), and a chat answer takes its no-context path
  (``empty_response`` or the fallback). The chain above is the one, traced, fallback (its ``rule`` says which step
  let results through); a later stage never undoes a rejection. Only a pipeline or profile that does not run the
  rerank (``rerank_results`` None) hands the search's candidates on.
* Composite = clamp01(0.6 x model + 0.3 x base + 0.1 x source weight) x position prior; with the model-free
  reranker's vectors the 0.6 becomes 0.6 x top^1.5 and the rest goes to ``base`` (``top``: the candidates' best
  calibrated cosine, :func:`vector_evidence`). ``base`` (the search score) is min-max normalised within the
  candidates first: an RRF score of ~0.016 would otherwise make its 30 % weight meaningless. Source weight 0.95 for
  web results, else 1. Position prior = 1 + clamp(1 - start/(end + 1), ±0.05).
* FAQ boost when FAQ priority is on, then MMR (lambda 0.7; redundancy = max Jaccard of token sets against what is
  already chosen) picks candidates until they come from ``min(n, rerank_top_k)`` documents (the merge stage folds a
  document's neighbouring chunks into one result; the final cut to ``rerank_top_k`` is filter_top_k's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ragstep.index_capabilities import scoped_reads
from ragstep.models import ChunkType, MatchType, PipelineState, RetrievalSettings, SearchResult, TraceEvent
from ragstep.models.scale import COMMON_SCALE, ScoreScale
from ragstep.ports import CandidateReranker, RerankCandidate, SearchFilter
from ragstep.retrieval.calibration import BASE_WEIGHT, MODEL_WEIGHT, RerankCalibration, RerankScale, rerank_calibration
from ragstep.retrieval.text import jaccard, token_set
from ragstep.stages.search.retrievers import query_scale

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "chunk_rerank"
SOURCE_WEIGHT = 0.1
RETRY_FLOOR, RETRY_FACTOR = 0.3, 0.7
WEB_SOURCE_WEIGHT = 0.95
POSITION_SPREAD = 0.05

_FENCE = re.compile(r"^\s*(```|~~~).*$", re.MULTILINE)
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_URL = re.compile(r"https?://\S+|www\.\S+")
_HTML = re.compile(r"<[^>]{1,200}>")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$", re.MULTILINE)
_LINE_MARKERS = re.compile(r"^\s{0,3}(?:#{1,6}\s+|[-*+]\s+|\d{1,3}[.)]\s+|>\s?)", re.MULTILINE)
_EMPHASIS = re.compile(r"(\*\*|__|~~|`)")
_SINGLE_EMPHASIS = re.compile(r"(?<![\w*])[*_](?=\S)([^*_\n]+?)(?<=\S)[*_](?![\w*])")
_BLANKS = re.compile(r"[ \t]+")
# Any character or pattern that one of the rules above could act on; plain prose skips them all. Checked as a
# character class, three substrings and a line-start pattern: one alternation of them all scans slower.
_MARKUP_CHARS = re.compile(r"[#*_|\[\]<>`~!]")
_MARKUP_LINE_START = re.compile(r"^\s*(?:[-+]|\d{1,3}[.)])\s", re.MULTILINE)


def _has_markup(text: str) -> bool:
    return (
        _MARKUP_CHARS.search(text) is not None
        or "http://" in text
        or "https://" in text
        or "www." in text
        or _MARKUP_LINE_START.search(text) is not None
    )


def _tidy_lines(text: str) -> str:
    """Runs of spaces and tabs as one space, lines stripped, empty lines dropped."""
    # A line without a tab or two spaces in a row has nothing to collapse: skip the substitution (~10 us a chunk).
    lines = ((_BLANKS.sub(" ", line) if "  " in line or "\t" in line else line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def clean_markdown(text: str) -> str:
    """What a reranker should read: the words, without Markdown's punctuation. Code bodies stay."""
    if not _has_markup(text):
        return _tidy_lines(text)
    text = _FENCE.sub("", text)
    text = _IMAGE.sub(lambda m: m.group(1), text)
    text = _LINK.sub(lambda m: m.group(1), text)
    text = _URL.sub("", text)
    text = _HTML.sub(" ", text)
    text = _TABLE_RULE.sub("", text)
    text = text.replace("|", " ")
    text = _LINE_MARKERS.sub("", text)
    text = _EMPHASIS.sub("", text)
    text = _SINGLE_EMPHASIS.sub(lambda m: m.group(1), text)
    return _tidy_lines(text)


def rerank_text(r: SearchResult) -> str:
    parts = [clean_markdown(r.content)]
    for image in r.image_info:
        parts.extend(t for t in (image.caption, image.ocr_text) if t)
    questions = r.metadata.get("generated_questions") or []
    parts.extend(str(q) for q in questions if str(q).strip())
    graph = r.metadata.get("graph")
    if isinstance(graph, dict) and graph.get("node"):
        # A knowledge-graph result is about its entity, which the chunk itself may never name ("She was ...").
        parts.append(str(graph["node"]))
    return "\n".join(p for p in parts if p)


def threshold_chain(
    scores: Sequence[float], cfg: RetrievalSettings, exempt: Sequence[bool] = ()
) -> tuple[list[int], str]:
    """Indices that pass, and which rule let them through. ``exempt[i]``: candidate i is on a scale where no rerank
    threshold applies (:func:`ragstep.retrieval.calibration.rerank_calibration`) and always passes."""
    if exempt and all(exempt):
        return list(range(len(scores))), "no threshold on the token scale (keyword_threshold cut already)"
    free = [i for i, e in enumerate(exempt) if e]
    if free:
        rest = [i for i, e in enumerate(exempt) if not e]
        passed, rule = threshold_chain([scores[i] for i in rest], cfg)
        return sorted([*free, *(rest[j] for j in passed)]), f"{rule}; token scale unthresholded"
    keep = [i for i, s in enumerate(scores) if s >= cfg.rerank_threshold]
    if keep:
        return keep, f"score >= {cfg.rerank_threshold:g}"
    if cfg.rerank_threshold > RETRY_FLOOR:
        relaxed = max(RETRY_FLOOR, RETRY_FACTOR * cfg.rerank_threshold)
        keep = [i for i, s in enumerate(scores) if s >= relaxed]
        if keep:
            return keep, f"relaxed: score >= {relaxed:g}"
    if scores:
        best = int(np.argmax(scores))
        if scores[best] >= cfg.rerank_keep_best_min:
            return [best], f"best only: score {scores[best]:.3f} >= {cfg.rerank_keep_best_min:g}"
    return [], "nothing passed"


def normalise(values: Sequence[float]) -> list[float]:
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12:
        return [1.0] * len(values)  # no spread: every candidate gets full credit
    return [(v - lo) / (hi - lo) for v in values]


def position_prior(r: SearchResult) -> float:
    if r.start_at < 0:
        return 1.0
    return 1.0 + min(max(1.0 - r.start_at / (r.end_at + 1), -POSITION_SPREAD), POSITION_SPREAD)


def composite(model: float, base: float, r: SearchResult, calibration: RerankCalibration | None = None) -> float:
    source = WEB_SOURCE_WEIGHT if r.match_type == MatchType.WEB or r.chunk_type == ChunkType.WEB_SEARCH else 1.0
    wm, wb = (calibration.model_weight, calibration.base_weight) if calibration else (MODEL_WEIGHT, BASE_WEIGHT)
    raw = wm * model + wb * base + SOURCE_WEIGHT * source
    return min(max(raw, 0.0), 1.0) * position_prior(r)


def mmr(
    relevance: Sequence[float],
    token_sets: Sequence[frozenset[str]],
    k: int,
    lam: float,
    groups: Sequence[str] | None = None,
) -> list[int]:
    """Maximal marginal relevance: each pick maximises lam x relevance - (1 - lam) x max Jaccard to the picked.

    ``groups``: each candidate's document; picking stops at ``k`` distinct documents instead of ``k`` candidates,
    so that the merge stage, which folds a document's neighbouring chunks into one result, still has ``k`` results
    to give (``ragstep search --top-k 10`` on passages cut into three chunks returned 5 results)."""
    chosen: list[int] = []
    picked: set[str] = set()
    remaining = list(range(len(relevance)))
    redundancy = [0.0] * len(relevance)
    while remaining and (len(picked) if groups is not None else len(chosen)) < k:
        best = max(remaining, key=lambda i: (lam * relevance[i] - (1 - lam) * redundancy[i], -i))
        chosen.append(best)
        if groups is not None:
            picked.add(groups[best])
        remaining.remove(best)
        for i in remaining:
            redundancy[i] = max(redundancy[i], jaccard(token_sets[i], token_sets[best]))
    return chosen


def score_scales(state: PipelineState, ctx: Context) -> list[RerankScale]:
    """The scale of each candidate's rerank score: a rerank model's, or the model-free reranker's with or without a
    query vector for the candidate's embedding model (a keyword-only knowledge base has none), its cosines read
    relative to one another when the model declares no scale (``token_relative``)."""
    if not isinstance(ctx.reranker, CandidateReranker):
        return ["rerank_model"] * len(state.results("search_results"))
    vectors = state.query_embeddings
    relative = {m for m, scale in query_scales(state, ctx).items() if scale is None}
    out: list[RerankScale] = []
    for r in state.results("search_results"):
        model = _kb_model(state, r.knowledge_base_id)
        out.append("token_relative" if model in relative else "token_vector" if model in vectors else "token")
    return out


def query_scales(state: PipelineState, ctx: Context) -> dict[str, ScoreScale | None]:
    """Each candidate embedding model's query scale (:func:`~ragstep.stages.search.retrievers.query_scale`) over the
    candidates' knowledge bases of that model; None: read the model's cosines relative to one another."""
    kbs: dict[str, set[str]] = {}
    for r in state.results("search_results"):
        kbs.setdefault(_kb_model(state, r.knowledge_base_id), set()).add(r.knowledge_base_id)
    return {
        m: query_scale(ctx, m, state.query_embeddings.get(m), SearchFilter(knowledge_base_ids=tuple(sorted(ids))))
        for m, ids in kbs.items()
        if m in state.query_embeddings
    }


def vector_evidence(state: PipelineState, ctx: Context, scales: Sequence[RerankScale]) -> list[float | None]:
    """For each candidate on the ``token_vector`` scale, the best calibrated cosine (0-1) among the candidates of its
    embedding model: the vector list's evidence as the search stage's fusion read it (the cosines the candidates
    carry from the search, read on the model's declared scale). None where there is none: another scale, or no
    candidate of the model with a cosine (a list fused by the search server)."""
    candidates = state.results("search_results")
    models = [
        _kb_model(state, r.knowledge_base_id) if s == "token_vector" else None
        for r, s in zip(candidates, scales, strict=True)
    ]
    best: dict[str, float] = {}  # the best raw cosine per model: calibration is increasing, so it is read once
    for r, model in zip(candidates, models, strict=True):
        cosine = r.metadata.get("retrieval", {}).get("vector_score") if model is not None else None
        if model is not None and isinstance(cosine, int | float) and cosine > best.get(model, -math.inf):
            best[model] = float(cosine)
    # A model without a scale (none declared, none the index can tell) has no absolute evidence to read: None, the
    # fixed weights (the reranker reads its cosines relative, :func:`ragstep.retrieval.token_vector.relative_cosines`).
    read = query_scales(state, ctx)
    tops = {m: min(max(sc.calibrate(best[m]), 0.0), 1.0) for m in best if (sc := read.get(m)) is not None}
    return [tops.get(model) if model is not None else None for model in models]


def model_scores(state: PipelineState, ctx: Context, texts: list[str]) -> list[float]:
    """Scores from the configured reranker; the local one also gets each chunk's vector and the query vector."""
    reranker = ctx.reranker
    query = state.search_query
    if not isinstance(reranker, CandidateReranker):
        return list(reranker.rerank(query, texts))
    candidates = state.results("search_results")
    models = {kb_id: _kb_model(state, kb_id) for kb_id in {r.knowledge_base_id for r in candidates}}
    by_model: dict[str, list[int]] = {}
    for i, r in enumerate(candidates):
        by_model.setdefault(models[r.knowledge_base_id], []).append(i)
    scores = [0.0] * len(candidates)
    scales = query_scales(state, ctx)
    for model, idxs in by_model.items():
        qvec = state.query_embeddings.get(model)
        # Only the candidates' knowledge bases: a cold container (S3-snapshot index) loads those, no others.
        index = scoped_reads(ctx.index, (candidates[i].knowledge_base_id for i in idxs))
        vecs = index.vectors([candidates[i].id for i in idxs], model) if qvec is not None else {}
        items = [
            RerankCandidate(
                content=texts[i],
                title=candidates[i].knowledge_title,
                important_keywords=_keywords(candidates[i].metadata.get("important_keywords")),
                vector=vecs.get(candidates[i].id),
            )
            for i in idxs
        ]
        # The model's cosines read on the common scale, where the rerank threshold is written (README, thresholds),
        # through the query's own scale (its background in these knowledge bases, the model's declared span).
        scale = scales.get(model) if qvec is not None else COMMON_SCALE
        for i, s in zip(idxs, reranker.rerank_candidates(query, items, qvec, cosine_scale=scale), strict=True):
            scores[i] = s
    return scores


def _keywords(value: object) -> tuple[str, ...]:
    """``important_keywords`` as a tuple, whether stored as a list or as one string."""
    if not value:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(k) for k in value)  # type: ignore[attr-defined]


def _kb_model(state: PipelineState, kb_id: str) -> str:
    kb = state.kb(kb_id)
    return kb.embedding_model if kb else "none"


def run(state: PipelineState, ctx: Context) -> PipelineState:
    cfg = state.retrieval
    candidates = state.results("search_results")
    if not candidates:
        event = TraceEvent(stage=STAGE, action="skip", reason="no search results to rerank")
        return state.with_results("rerank_results", [], event)
    texts = [rerank_text(r) for r in candidates]
    try:
        scores = model_scores(state, ctx, texts)
    except Exception as exc:  # a provider outage must not cost the user their results
        message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        event = TraceEvent(
            stage=STAGE, action="degrade", reason=f"reranker failed, results passed through un-reranked: {message}"
        )
        return state.with_results("rerank_results", list(candidates), event)

    scales = score_scales(state, ctx)
    evidence = vector_evidence(state, ctx, scales)
    calibrations = [
        rerank_calibration(scale, cfg.rerank_threshold, e) for scale, e in zip(scales, evidence, strict=True)
    ]
    keep, rule = threshold_chain(scores, cfg, [c.threshold is None for c in calibrations])
    base = normalise([r.score for r in candidates])
    chosen: list[SearchResult] = []
    relevance: list[float] = []
    for i in keep:
        r = candidates[i]
        value = composite(scores[i], base[i], r, calibrations[i])
        if cfg.faq_priority_enabled and r.chunk_type == ChunkType.FAQ:
            value = min(value * cfg.faq_score_boost, 1.0)
        relevance.append(value)
        meta = {**r.metadata, "rerank": {"model": round(scores[i], 6), "base": round(base[i], 6)}}
        chosen.append(r.rescored(value, metadata=meta))
    # Token sets of the content (Markdown punctuation is never a token), shared with the merge stage's cache.
    token_sets = [token_set(candidates[i].content) for i in keep]
    groups = [r.knowledge_id for r in chosen]
    order = mmr(relevance, token_sets, min(len(chosen), cfg.rerank_top_k), cfg.mmr_lambda, groups)
    results = [chosen[i] for i in order]
    event = TraceEvent(
        stage=STAGE,
        counts={"input": len(candidates), "passed": len(keep), "output": len(results)},
        detail={
            "reranker": ctx.reranker.name,
            "rule": rule,
            "mmr_lambda": cfg.mmr_lambda,
            "scales": sorted({c.scale for c in calibrations}),
        },
    )
    return state.with_results("rerank_results", results, event)
