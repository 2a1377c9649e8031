"""WeKnora's compression of web results, as pure functions.

A session's web results form a small temporary knowledge base: one passage per page (``[sourceUrl]: url``, title,
snippet, body), each URL added once per session. Each request searches it with the (rewritten) query: a passage
is kept when its keyword score (BM25 over the session's passages, normalised to the best) or its vector score
(cosine, when the knowledge bases' embedder is available) reaches its threshold (0.5 and 0.5). The references are
then chosen round-robin across source sites -- each site's best passage first, sites in order of their best --
so one site with many pages cannot crowd out the others, and consolidated by URL.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ragstep.retrieval.text import tokenize

_K1 = 1.2
_B = 0.75


@dataclass(frozen=True, slots=True)
class Passage:
    url: str
    title: str
    snippet: str = ""
    body: str = ""
    #: The engine that found it, and the query it answered first (shown in the result's metadata).
    provider: str = ""
    #: Embedding model id -> the passage's vector (kept with the session's passages so it is computed once).
    vectors: dict[str, list[float]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        body = self.body if self.body != self.snippet else ""
        return "\n".join(line for line in (f"[sourceUrl]: {self.url}", self.title, self.snippet, body) if line)

    @property
    def site(self) -> str:
        host = (urlsplit(self.url).hostname or "").lower()
        return host.removeprefix("www.")


@dataclass(frozen=True, slots=True)
class Scored:
    passage: Passage
    score: float
    keyword_score: float
    vector_score: float | None


def merge_passages(known: Sequence[Passage], new: Sequence[Passage]) -> tuple[list[Passage], int]:
    """The session's passages with the new ones added, each URL once (the first version stays); and how many were
    added."""
    out = list(known)
    seen = {p.url for p in known}
    added = 0
    for p in new:
        if p.url not in seen:
            seen.add(p.url)
            out.append(p)
            added += 1
    return out, added


def keyword_scores(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 of ``query`` over ``texts`` (the corpus is the texts themselves), normalised so the best is 1.0."""
    terms = set(tokenize(query))
    docs = [Counter(tokenize(t)) for t in texts]
    if not terms or not docs:
        return [0.0] * len(texts)
    avg = sum(sum(d.values()) for d in docs) / len(docs) or 1.0
    n = len(docs)
    raw: list[float] = []
    for d in docs:
        length = sum(d.values())
        s = 0.0
        for term in terms:
            tf = d.get(term, 0)
            if tf:
                df = sum(1 for other in docs if term in other)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / avg))
        raw.append(s)
    best = max(raw)
    return [r / best if best > 0 else 0.0 for r in raw]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def score_passages(
    query: str,
    passages: Sequence[Passage],
    *,
    query_vector: Sequence[float] | None,
    model_id: str,
    vector_threshold: float,
    keyword_threshold: float,
) -> list[Scored]:
    """The passages that pass either threshold, best first (score: the better of the two)."""
    keyword = keyword_scores(query, [p.text for p in passages])
    out: list[Scored] = []
    for p, kw in zip(passages, keyword, strict=True):
        vec = p.vectors.get(model_id) if query_vector is not None else None
        vs = cosine(query_vector, vec) if query_vector is not None and vec else None
        if kw >= keyword_threshold or (vs is not None and vs >= vector_threshold):
            out.append(Scored(p, max(kw, vs or 0.0), kw, vs))
    out.sort(key=lambda s: -s.score)
    return out


def round_robin(scored: Sequence[Scored], limit: int) -> list[Scored]:
    """Up to ``limit`` passages taken one per site in turn (sites ordered by their best passage), consolidated by
    URL (a URL appears once, at its best score)."""
    by_site: dict[str, list[Scored]] = {}
    best_of_url: dict[str, Scored] = {}
    for s in scored:
        if s.passage.url not in best_of_url or s.score > best_of_url[s.passage.url].score:
            best_of_url[s.passage.url] = s
    for s in sorted(best_of_url.values(), key=lambda s: -s.score):
        by_site.setdefault(s.passage.site, []).append(s)
    queues = list(by_site.values())  # dicts keep insertion order: sites by their best passage
    picked: list[Scored] = []
    depth = 0
    while len(picked) < limit and any(depth < len(q) for q in queues):
        for q in queues:
            if depth < len(q) and len(picked) < limit:
                picked.append(q[depth])
        depth += 1
    return picked
