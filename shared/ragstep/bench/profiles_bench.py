"""``ragstep bench profiles --set DIR``: what each profile (``quick``, ``standard``, ``deep``) costs in latency and
gives in quality, on a BEIR-layout set.

The corpus is indexed once, as ``ragstep bench quality`` indexes it (:func:`ragstep.bench.quality.build_index`, the
set's precomputed vectors when it has them, keyword search only otherwise); then every judged query is searched
through ``knowledge_search`` once per profile, exactly as ``POST /v1/knowledge-search`` with ``"profile": NAME``
and nothing else runs it (no overrides: each profile's own candidate counts and result cut). The profiles take turns
query by query, each starting a different query first, so a warming cache or a busier moment of the machine falls on
all of them alike. Reported per profile: p50 / p95 milliseconds per search (in this process, the index warm),
nDCG@10 and Recall@10 of the results returned (documents ranked by their best passage, the sources the merge stage
folded counted, as ``bench quality``'s ``pipeline`` run), the mean number of results, the optional stages the
profile skipped (none in ``knowledge_search``, which has no optional stage: there a profile changes how wide the
search and the result cut are), and the mean cost receipt (:mod:`ragstep.app.cost`, as the AWS deployment would
bill the search) per 1,000 queries.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ragstep.app.cost import cost_of
from ragstep.app.profiles import resolve
from ragstep.app.search import knowledge_search
from ragstep.bench.metrics import evaluate
from ragstep.bench.quality import DEFAULT_VECTORS, build_index, load_beir, sources
from ragstep.context import Clients
from ragstep.errors import InputError
from ragstep.models import SearchRequest, check_query
from ragstep.models.profiles import OPTIONAL_STAGES
from ragstep.settings import Settings

PROFILES = ("quick", "standard", "deep")
#: The stages a profile may leave out (a ``skip`` row of another stage is not the profile's: e.g. chunk_search's
#: vector retrieval on a knowledge base without an embedding model).
OPTIONAL = frozenset(OPTIONAL_STAGES)


def _percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(share * len(ordered) + 0.5) - 1))]


def _askable(text: str) -> bool:
    try:
        check_query(text)
    except ValueError:
        return False
    return True


def run_profiles(
    folder: Path,
    *,
    profiles: tuple[str, ...] = PROFILES,
    vectors: str = DEFAULT_VECTORS,
    queries: int | None = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Each of ``profiles`` over the judged queries of the set in ``folder`` (the first ``queries`` of them)."""
    bench = load_beir(folder, vectors)
    judged = [(qid, text) for qid, text in bench.queries if qid in bench.qrels and _askable(text)]
    if queries is not None:
        judged = judged[:queries]
    if not judged:
        raise InputError(f"{folder}: no judged query to ask")
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-") as tmp:
        ctx = Clients(Settings(data_dir=Path(tmp), **(settings or {}))).context()
        for profile in profiles:  # an unknown one fails before the corpus is indexed
            resolve(profile, ctx)
        kb, ingest_s = build_index(bench, ctx)

        def search(text: str, profile: str) -> Any:
            return knowledge_search(SearchRequest(query=text, knowledge_base_ids=[kb.id], profile=profile), ctx)

        for profile in profiles:  # each path warm before any figure is taken
            search(judged[0][1], profile)
        times: dict[str, list[float]] = {p: [] for p in profiles}
        rankings: dict[str, dict[str, list[str]]] = {p: {} for p in profiles}
        results: dict[str, list[int]] = {p: [] for p in profiles}
        costs: dict[str, list[float]] = {p: [] for p in profiles}
        skipped: dict[str, set[str]] = {p: set() for p in profiles}
        for i, (qid, text) in enumerate(judged):
            turn = i % len(profiles)
            for profile in profiles[turn:] + profiles[:turn]:
                started = time.perf_counter()
                state = search(text, profile)
                times[profile].append((time.perf_counter() - started) * 1000)
                rankings[profile][qid] = sources(state.final_results)
                results[profile].append(len(state.final_results))
                costs[profile].append(cost_of(state, ctx).total_usd)
                skipped[profile].update(t.stage for t in state.trace if t.action == "skip" and t.stage in OPTIONAL)
        qrels = {qid: bench.qrels[qid] for qid, _ in judged}
        runs = {}
        for profile in profiles:
            quality = evaluate(rankings[profile], qrels)
            runs[profile] = {
                "p50_ms": round(statistics.median(times[profile]), 1),
                "p95_ms": round(_percentile(times[profile], 0.95), 1),
                "ndcg@10": quality["ndcg@10"],
                "recall@10": quality["recall@10"],
                "mean_results": round(statistics.fmean(results[profile]), 2),
                "usd_per_1000": round(statistics.fmean(costs[profile]) * 1000, 5),
                "skipped": sorted(skipped[profile]),
            }
    return {
        "set": bench.name,
        "queries": len(judged),
        "documents": len(bench.corpus),
        "vectors": "precomputed" if bench.corpus_emb is not None else "none (keyword only)",
        "ingest_s": round(ingest_s, 1),
        "runs": runs,
    }


def render(r: dict[str, Any]) -> str:
    from ragstep.entry.cli.console import table

    rows = [
        (
            name,
            f"{m['p50_ms']:.1f}",
            f"{m['p95_ms']:.1f}",
            f"{m['ndcg@10']:.4f}",
            f"{m['recall@10']:.4f}",
            f"{m['mean_results']:.1f}",
            f"{m['usd_per_1000']:.4f}",
            ", ".join(m["skipped"]) or "-",
        )
        for name, m in r["runs"].items()
    ]
    head = (
        f"{r['set']}: {r['queries']} judged queries, {r['documents']:,} documents, vectors: {r['vectors']} "
        f"(ingest {r['ingest_s']} s)"
    )
    heads = ("profile", "p50 ms", "p95 ms", "nDCG@10", "Recall@10", "results", "est. USD/1k", "skipped")
    return "\n".join([head, "", table(heads, rows)])
