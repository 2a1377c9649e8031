"""From fused candidates to search results: :func:`hydrate` loads the best candidates from the index and drops
content duplicates (:func:`content_key`). Split from :mod:`ragstep.stages.search.chunk_search` to keep it short."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragstep.models import Chunk, ChunkType, MatchType, SearchResult
from ragstep.retrieval.fusion import Fused

if TYPE_CHECKING:
    from ragstep.context import Context


@dataclass(frozen=True, slots=True)
class ServerFused(Fused):
    """A hit of a server-side ``hybrid`` query: fused by the OpenSearch search pipeline, only the combined score and
    the rank in its list are known."""

    hybrid_rank: int = 0


#: Candidates past ``limit`` that :func:`hydrate` fetches in its first read, for a few duplicates.
HYDRATE_SPARE = 5


def content_key(text: str) -> str:
    """MD5 of lower-cased, whitespace-normalised content: two chunks with the same key are duplicates.

    ``split()`` and the regex ``\\s`` know the same whitespace (every code point checked), so the join is the
    ``re.sub(r"\\s+", " ", ...).strip()`` it replaced at 40% of the time."""
    return hashlib.md5(" ".join(text.lower().split()).encode("utf-8")).hexdigest()


def hydrate(fused: Sequence[Fused], ctx: Context, limit: int) -> list[SearchResult]:
    """Load the best fused candidates from the index, drop content duplicates, keep ``limit``.

    Up to ``2 x limit + 10`` candidates are read, so duplicates do not leave the list short, but in two fetches:
    the first ``limit + HYDRATE_SPARE``, then the rest only when duplicates or deleted chunks left the results short
    (reading and parsing the chunks that were never used was a measurable share of a query). The candidates are
    taken in the same order either way, so the results are the same."""
    head = fused[: limit * 2 + 10]
    seen: set[str] = set()
    out: list[SearchResult] = []
    first = limit + HYDRATE_SPARE
    for part in (head[:first], head[first:]):
        if part and len(out) < limit:
            chunks = ctx.index.fetch([f.chunk_id for f in part])
            _hydrate_part(part, chunks, seen, out, limit)
    return out


def _hydrate_part(
    part: Sequence[Fused], chunks: Mapping[str, Chunk], seen: set[str], out: list[SearchResult], limit: int
) -> None:
    """:func:`hydrate` for one fetched part of the candidates: results appended to ``out`` until it holds ``limit``,
    content keys added to ``seen``."""
    for f in part:
        chunk = chunks.get(f.chunk_id)
        if chunk is None:  # deleted between search and fetch
            continue
        # Parent-child ingestion: the child matched, its parent's text is what the result carries (children of one
        # parent then fold into one result here, as content duplicates).
        parent = chunk.metadata.get("parent_content")
        content = parent if isinstance(parent, str) and parent else chunk.content
        key = content_key(content)
        if key in seen:
            continue
        seen.add(key)
        retrieval: dict[str, object] = {
            k: v
            for k, v in (
                ("vector_score", f.vector_score),
                ("keyword_score", f.keyword_score),
                ("vector_rank", f.vector_rank),
                ("keyword_rank", f.keyword_rank),
            )
            if v is not None
        }
        if isinstance(f, ServerFused):  # fused by the OpenSearch search pipeline: only the combined score exists
            retrieval.update(fusion="server", hybrid_score=f.score, hybrid_rank=f.hybrid_rank)
        metadata = {**chunk.metadata, "retrieval": retrieval}
        start_at, end_at, match_type = chunk.start_at, chunk.end_at, f.match_type
        if content is not chunk.content:
            # The parent's span, so merge stitches and contains by the text the result shows; the child's is kept.
            del metadata["parent_content"]
            metadata.update(child_start_at=chunk.start_at, child_end_at=chunk.end_at)
            start_at = int(metadata.get("parent_start_at", start_at))
            end_at = int(metadata.get("parent_end_at", end_at))
            match_type = MatchType.PARENT
        out.append(
            SearchResult.from_chunk(
                chunk,
                id=chunk.parent_id if chunk.chunk_type == ChunkType.FAQ and chunk.parent_id else chunk.id,
                content=content,
                start_at=start_at,
                end_at=end_at,
                score=f.score,
                match_type=MatchType.FAQ if chunk.chunk_type == ChunkType.FAQ else match_type,
                metadata=metadata,
            )
        )
        if len(out) >= limit:
            break
