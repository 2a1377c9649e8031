"""``chunk_merge``: turn ranked chunks into readable, non-redundant context (WeKnora's merge stage).

1. History references: from the most recent turn of the session that had references, those that share enough
   words with the query (Jaccard >= 0.15) come back at 0.6 x their score, at most 3, as ``history`` matches.
2. Chunks of one document and type that overlap or touch are merged through their character offsets (when their
   content is exactly their span); otherwise a chunk inside another is absorbed, and consecutive chunks are joined
   with a blank line. The best score wins; constituent ids go to ``sub_chunk_ids``; images merge by URL.
3. FAQ hits read "Q: <standard question>\\nAnswer:\\n- <answer>...".
4. A text chunk under 350 characters grows with its neighbours (previous first, then next) until it has 350, never
   beyond 850.
5. Partial duplicates go: one chunk contained in another, or token-overlap coefficient >= 0.85; the lower score goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragstep.index_capabilities import scoped_reads
from ragstep.models import ChunkType, ImageInfo, MatchType, PipelineState, RetrievalSettings, SearchResult, TraceEvent
from ragstep.retrieval.text import jaccard, overlap_coefficient, token_set

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.models import Chunk

STAGE = "chunk_merge"
_LAST_INDEX = "chunk_index_end"  # metadata key: the last chunk_index a merged result covers


def exact(r: SearchResult) -> bool:
    """The content is exactly the source text between the offsets (no repeated header, no FAQ rendering)."""
    return r.end_at > r.start_at and len(r.content) == r.end_at - r.start_at


def last_index(r: SearchResult) -> int:
    return int(r.metadata.get(_LAST_INDEX, r.chunk_index))


def _images(a: Sequence[ImageInfo], b: Sequence[ImageInfo]) -> list[ImageInfo]:
    by_url = {i.url: i for i in b}
    by_url.update({i.url: i for i in a})  # the first result's description wins
    return list(by_url.values())


def _ids(r: SearchResult) -> list[str]:
    return [r.id, *r.sub_chunk_ids] if r.id not in r.sub_chunk_ids else list(r.sub_chunk_ids)


def combine(first: SearchResult, second: SearchResult, content: str, start_at: int, end_at: int) -> SearchResult:
    """``first`` (the earlier one in the document) grown to cover ``second``."""
    best = first if first.score >= second.score else second
    ids = list(dict.fromkeys([*_ids(first), *_ids(second)]))
    lo = min(first.chunk_index, second.chunk_index)
    hi = max(last_index(first), last_index(second))
    return first.spanning(
        content=content,
        start_at=start_at,
        end_at=end_at,
        chunk_index=lo,
        sub_chunk_ids=ids,
        metadata={**first.metadata, _LAST_INDEX: hi} if hi != lo else first.metadata,
        image_info=_images(first.image_info, second.image_info),
    ).rescored(best.score, match_type=best.match_type)


def try_join(cur: SearchResult, nxt: SearchResult) -> SearchResult | None:
    """``cur`` and ``nxt`` (sorted by start_at) as one result, or None when they are apart."""
    if exact(cur) and exact(nxt) and nxt.start_at <= cur.end_at:
        # Overlapping or adjacent spans of the same text: stitch them through the offsets.
        tail = nxt.content[cur.end_at - nxt.start_at :] if nxt.end_at > cur.end_at else ""
        return combine(cur, nxt, cur.content + tail, cur.start_at, max(cur.end_at, nxt.end_at))
    if nxt.start_at >= cur.start_at and nxt.end_at <= cur.end_at and nxt.end_at > nxt.start_at:
        return combine(cur, nxt, cur.content, cur.start_at, cur.end_at)  # contained: absorb
    if nxt.chunk_index == last_index(cur) + 1:
        return combine(cur, nxt, f"{cur.content}\n\n{nxt.content}", cur.start_at, max(cur.end_at, nxt.end_at))
    return None


def merge_adjacent(results: Sequence[SearchResult]) -> list[SearchResult]:
    groups: dict[tuple[str, str], list[SearchResult]] = {}
    for r in results:
        groups.setdefault((r.knowledge_id, str(r.chunk_type)), []).append(r)
    out: list[SearchResult] = []
    for (_, ctype), items in groups.items():
        if ctype == ChunkType.FAQ:  # FAQ entries are independent answers, never stitched together
            out.extend(items)
            continue
        items.sort(key=lambda r: (r.start_at, r.end_at, r.chunk_index))
        cur = items[0]
        for nxt in items[1:]:
            joined = try_join(cur, nxt)
            if joined is None:
                out.append(cur)
                cur = nxt
            else:
                cur = joined
        out.append(cur)
    return out


def render_faq(r: SearchResult) -> SearchResult:
    question = r.metadata.get("standard_question")
    answers = r.metadata.get("answers")
    if r.chunk_type != ChunkType.FAQ or not question or not answers:
        return r
    content = f"Q: {question}\nAnswer:\n" + "\n".join(f"- {a}" for a in answers)
    return r if content == r.content else r.with_content(content)


def needs_context(r: SearchResult, cfg: RetrievalSettings) -> bool:
    return (
        r.chunk_type == ChunkType.TEXT
        and r.match_type != MatchType.HISTORY
        and (len(r.content) < cfg.short_context_min_chars)
    )


def neighbour_window(r: SearchResult) -> range:
    # Neighbours are small (chunk_size ~512): three on each side always reach 850 characters.
    return range(r.chunk_index - 3, last_index(r) + 4)


def expand_short(r: SearchResult, near: dict[int, Chunk], cfg: RetrievalSettings) -> SearchResult:
    """Grow a short text chunk with its neighbours (previous first, then next) to at least ``min`` characters."""
    if not needs_context(r, cfg):
        return r
    cur = r
    grew = True
    while grew and len(cur.content) < cfg.short_context_min_chars:
        grew = False
        for idx in (cur.chunk_index - 1, last_index(cur) + 1):  # previous first, then next
            chunk = near.get(idx)
            if chunk is None:
                continue
            neighbour = _as_result(chunk, r)
            first, second = (neighbour, cur) if idx < cur.chunk_index else (cur, neighbour)
            joined = try_join(first, second)
            if joined is None or len(joined.content) > cfg.short_context_max_chars:
                continue
            cur = joined.rescored(r.score, match_type=r.match_type, id=r.id)
            grew = True
            break
    return cur


def _as_result(chunk: Chunk, like: SearchResult) -> SearchResult:
    return SearchResult.from_chunk(
        chunk,
        score=0.0,
        match_type=MatchType.NEARBY,
        sub_chunk_ids=[],
        metadata={k: v for k, v in like.metadata.items() if k != _LAST_INDEX},
    )


def drop_partial_duplicates(results: Sequence[SearchResult], threshold: float) -> tuple[list[SearchResult], int]:
    """Best first; a result contained in (or mostly overlapping) one already kept is dropped.

    The dropped copy's identity is kept on the result that stays (``metadata["duplicates"]``): the text is the same,
    so the answer can still cite every source that said it.
    """
    kept: list[tuple[SearchResult, frozenset[str], list[dict[str, object]]]] = []
    dropped = 0
    for r in sorted(results, key=lambda r: -r.score):
        tokens = token_set(r.content)
        owner = next(
            (
                dups
                for k, kt, dups in kept
                if r.content in k.content or k.content in r.content or overlap_coefficient(tokens, kt) >= threshold
            ),
            None,
        )
        if owner is None:
            kept.append((r, tokens, []))
            continue
        dropped += 1
        owner.append(
            {"id": r.id, "knowledge_id": r.knowledge_id, "knowledge_filename": r.knowledge_filename, "score": r.score}
        )
    out = []
    for r, _, dups in kept:
        if dups:
            r = r.with_metadata({**r.metadata, "duplicates": [*r.metadata.get("duplicates", []), *dups]})
        out.append(r)
    return out, dropped


def history_references(state: PipelineState, ctx: Context, cfg: RetrievalSettings) -> list[SearchResult]:
    session = state.request.session_id
    if not session or cfg.history_max_references == 0:
        return []
    turns = ctx.history.recent(session, limit=20)
    latest = next((t for t in reversed(turns) if t.references), None)
    if latest is None:
        return []
    query = token_set(state.search_query)
    scored = [(jaccard(query, token_set(ref.content)), ref) for ref in latest.references]
    chosen = sorted((s for s in scored if s[0] >= cfg.history_min_jaccard), key=lambda s: -s[0])
    return [
        ref.rescored(ref.score * cfg.history_score_factor, match_type=MatchType.HISTORY)
        for _, ref in chosen[: cfg.history_max_references]
    ]


def run(state: PipelineState, ctx: Context) -> PipelineState:
    cfg = state.retrieval
    # The rerank's list when it ran, even empty (it rejected every candidate: nothing is put back); the search's
    # only when no rerank ran (a profile without it).
    field, source = state.latest("rerank_results", "search_results")
    history = history_references(state, ctx, cfg)
    present = {r.id for r in source}
    candidates = [*source, *(h for h in history if h.id not in present)]
    stitched = [render_faq(r) for r in merge_adjacent(candidates)]
    wanted: dict[str, list[int]] = {}
    for r in stitched:
        if needs_context(r, cfg):
            wanted.setdefault(r.knowledge_id, []).extend(neighbour_window(r))
    # One read for every short result, in the results' own knowledge bases (a cold S3-snapshot container loads
    # only those).
    index = scoped_reads(ctx.index, (r.knowledge_base_id for r in stitched if r.knowledge_id in wanted))
    near = index.chunks_at(wanted) if wanted else {}
    merged = [expand_short(r, near.get(r.knowledge_id, {}), cfg) for r in stitched]
    merged, dropped = drop_partial_duplicates(merged, cfg.duplicate_overlap_threshold)
    event = TraceEvent(
        stage=STAGE,
        counts={
            "input": len(source),
            "history": len(history),
            "merged": len(candidates) - len(stitched),
            "duplicates_dropped": dropped,
            "output": len(merged),
        },
        reason="the rerank kept none of the candidates" if field == "rerank_results" and not source else None,
        detail={"source": field or "none"},
    )
    return state.with_results("merge_results", merged, event)
