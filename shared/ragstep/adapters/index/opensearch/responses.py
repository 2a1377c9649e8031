"""OpenSearch responses parsed into hits, bulk items, mappings and statistics. Pure functions, no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragstep.models import Chunk
from ragstep.ports import Hit, IndexStats


def chunk_from_source(source: Mapping[str, Any]) -> Chunk:
    """Rebuild a chunk from a document's ``_source`` (the top-level ``enabled`` is authoritative)."""
    return Chunk.model_validate(
        {**source.get("doc", {}), "content": source.get("content", ""), "enabled": source.get("enabled", True)}
    )


@dataclass(frozen=True, slots=True)
class SearchHit:
    doc_id: str
    chunk_id: str
    version: str
    score: float
    source: dict[str, Any] = field(default_factory=dict)
    sort: list[Any] | None = None


def parse_search_response(response: Mapping[str, Any]) -> list[SearchHit]:
    """``hits.hits`` in response order; the chunk id comes from ``_source`` (``_id`` on aoss is not ours)."""
    out: list[SearchHit] = []
    for hit in (response.get("hits") or {}).get("hits") or []:
        source = hit.get("_source") or {}
        score = hit.get("_score")
        out.append(
            SearchHit(
                doc_id=str(hit.get("_id", "")),
                chunk_id=str(source.get("chunk_id") or hit.get("_id", "")),
                version=str(source.get("version", "")),
                score=float(score) if score is not None else 0.0,
                source=source,
                sort=hit.get("sort"),
            )
        )
    return out


def first_per_chunk(hits: Iterable[SearchHit]) -> list[SearchHit]:
    """Ranked hits with later copies of a chunk dropped (copies exist on aoss while a replace is under way)."""
    seen: set[str] = set()
    out = []
    for h in hits:
        if h.chunk_id not in seen:
            seen.add(h.chunk_id)
            out.append(h)
    return out


def newest_per_chunk(hits: Iterable[SearchHit]) -> list[SearchHit]:
    """One hit per chunk, the newest ``version`` winning, in the order the chunks first appear."""
    best: dict[str, SearchHit] = {}
    for h in hits:
        if h.chunk_id not in best or h.version > best[h.chunk_id].version:
            best[h.chunk_id] = h
    return list(best.values())


def keyword_hits(hits: Sequence[SearchHit], threshold: float) -> list[Hit]:
    """Raw BM25 hits (best first) -> normalised to the best hit, cut below ``threshold`` (as the local index)."""
    ranked = first_per_chunk(hits)
    if not ranked or ranked[0].score <= 0.0:
        return []
    top = ranked[0].score
    out = []
    for h in ranked:
        if h.score <= 0.0:
            break
        score = h.score / top
        if score < threshold:
            break  # best-first order: everything after scores lower
        out.append(Hit(h.chunk_id, score, h.score))
    return out


def cosine_from_score(score: float) -> float:
    """``cosinesimil``: ``_score = (2 - d) / 2`` with ``d = 1 - cos``, so ``cos = 2 * _score - 1``."""
    return max(-1.0, min(1.0, 2.0 * score - 1.0))


def vector_hits(hits: Sequence[SearchHit], threshold: float) -> list[Hit]:
    out = []
    for h in first_per_chunk(hits):
        cos = cosine_from_score(h.score)
        if cos >= threshold:
            out.append(Hit(h.chunk_id, cos, cos))
    return out


@dataclass(frozen=True, slots=True)
class BulkItem:
    action: str
    status: int
    doc_id: str
    result: str = ""
    error_type: str = ""
    error_reason: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and not self.error_type


def parse_bulk_response(response: Mapping[str, Any]) -> list[BulkItem]:
    """One :class:`BulkItem` per action, in request order (the order the bulk API answers in)."""
    out = []
    for item in response.get("items") or []:
        action, body = next(iter(item.items()))
        error = body.get("error") or {}
        if isinstance(error, str):
            error = {"type": "error", "reason": error}
        out.append(
            BulkItem(
                action=action,
                status=int(body.get("status", 0)),
                doc_id=str(body.get("_id", "")),
                result=str(body.get("result", "")),
                error_type=str(error.get("type", "")),
                error_reason=str(error.get("reason", "")),
            )
        )
    return out


def parse_mapping_response(response: Mapping[str, Any]) -> dict[str, int]:
    """``GET /<index>/_mapping`` -> {vector field: dimension} (the response is keyed by the concrete index)."""
    fields: dict[str, int] = {}
    for entry in response.values():
        properties = ((entry or {}).get("mappings") or {}).get("properties") or {}
        for name, spec in properties.items():
            if spec.get("type") == "knn_vector":
                fields[name] = int(spec.get("dimension", 0))
    return fields


def maps_field(response: Mapping[str, Any], name: str) -> bool:
    """Whether ``GET /<index>/_mapping`` maps the top-level field ``name`` (in every concrete index it names)."""
    entries = [((entry or {}).get("mappings") or {}).get("properties") or {} for entry in response.values()]
    return bool(entries) and all(name in properties for properties in entries)


def parse_stats_response(response: Mapping[str, Any]) -> IndexStats:
    total = (response.get("hits") or {}).get("total") or {}
    chunks = int(total.get("value", 0)) if isinstance(total, Mapping) else int(total)
    aggs = response.get("aggregations") or {}
    items = int((aggs.get("knowledge_items") or {}).get("value", 0))
    buckets = (aggs.get("spaces") or {}).get("buckets") or []
    return IndexStats(
        chunks=chunks, knowledge_items=items, vector_spaces={b["key"]: int(b["doc_count"]) for b in buckets}
    )
