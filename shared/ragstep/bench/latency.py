"""``ragstep bench latency``: indexing throughput and query latency at scale, against two peer stacks.

The corpus is the msmarco-5k passages replicated to ``--docs`` chunks. Copy ``r`` of a passage (r >= 1) has its
sentences shuffled and `` (r)`` appended, so no two chunks are identical (the search stage drops exact duplicates);
the suffix has no Markdown punctuation, so the rerank stage still reads the copies as the plain prose they are.
Each chunk gets a seeded random unit vector (384 dims): the benchmark measures the machinery, not an embedding model,
and these vectors rarely clear the 0.2 vector threshold, so fused candidate lists come mostly from BM25.
Chunks go through the real index API, ``replace_knowledge``, in batches of ``--batch`` chunks; each batch is one
knowledge item whose chunks follow each other (as the chunks of one long document do), in a fresh temporary data dir.

Measured, each over the msmarco queries cycled to ``--queries`` (query vectors: seeded random unit vectors served by a
:class:`PrecomputedEmbedder`):

* ``index_chunks_per_s``: chunks / (replace_knowledge calls + the first snapshot build); embedding excluded.
* ``search``: the ``chunk_search`` stage (hybrid: BM25 + exact kNN, fused) with default settings.
* ``pipeline``: the whole ``knowledge_search`` pipeline (search, rerank, merge, top-k) with default settings, with
  the process's memos as they are (``pipeline``; msmarco has 50 queries, so from the 51st on a query repeats) and
  for a query new to the process (``pipeline_new_query``: token-set memo and ``re`` cache emptied first).
* ``post_search``: rerank + merge + top-k alone on 100 search candidates (``embedding_top_k=100``): a second pass
  over the same candidates (``post_search``: memos warm), with the token-set memo emptied before each query
  (``post_search_cold``), and with the ``re`` cache emptied too (``post_search_new_query``).
* Peers, in this process on the same texts and vectors, both fused with RRF (k=60, equal weights) as LangChain's
  ``EnsembleRetriever`` does, each retriever returning as many candidates as ours (150): ``rank_bm25``
  (``BM25Okapi`` over ``str.split()`` tokens, LangChain ``BM25Retriever``'s default preprocessing, scored with
  ``get_scores`` + full argsort as its ``get_top_n`` does) + numpy cosine; ``bm25s`` (its tokenizer with English
  stopwords) + numpy cosine. rank_bm25 scores every document in Python per query term, so it runs on the first
  ``--rank-bm25-queries`` queries only.

The corpus and its vectors are generated batch by batch while indexing, so the process's peak RSS is the index's,
not the benchmark's copy of the corpus (``--peers`` needs the whole corpus in memory: ``--peers none`` at a million
chunks). Also reported: the snapshot's and SQLite's size on disk, CPU time per query (wall-clock time on a shared
machine mostly measures waiting for a core), and a cold open: a new process opening the saved index, which must map
the snapshot rather than rebuild it.

The ragstep figures come from loops where ragstep runs alone. Peer ratios come from a later loop where ragstep and
each peer answer each query in turn (so noise, and what each one's memory traffic does to the others' caches, hit
all of them alike); ours is timed again there (``ours_search_p50_ms``, ``ours_pipeline_p50_ms``).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from ragstep.adapters.embedders import PrecomputedEmbedder
from ragstep.app.search import new_state
from ragstep.bench.cold_open import cold_open
from ragstep.bench.common import find_bench_dir, median, ms, peak_rss_mb, percentile
from ragstep.bench.latency_vectors import KINDS, CorpusVectors, query_vectors
from ragstep.context import Clients, Context
from ragstep.models import Chunk, Knowledge, KnowledgeBase, SearchRequest
from ragstep.pipeline import run_pipeline, run_stage
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import token_set
from ragstep.settings import Settings

DIM = 384
POOL = 150  # what chunk_search asks each retriever for at the default embedding_top_k (30): max(5 x 30, 50)
TOP = 30  # results the search returns at the default embedding_top_k
RRF_K = 60
POST_SEARCH_CANDIDATES = 100
WARM_UP_QUERY = "warm-up query outside the timed set"
VECTOR_LABELS = {"minilm": "MiniLM vectors tiled with noise", "e5": "e5 vectors tiled with noise"}
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def corpus_texts(bench_dir: Path, n: int, seed: int = 0) -> list[str]:
    """``n`` distinct passages: msmarco-5k, then shuffled-sentence copies with a numeric suffix."""
    return list(iter_corpus(bench_dir, n, seed))


def iter_corpus(bench_dir: Path, n: int, seed: int = 0) -> Iterator[str]:
    """The passages of :func:`corpus_texts`, one at a time (a million of them are ~0.5 GB of str objects)."""
    base = []
    for d in _jsonl(bench_dir / "msmarco-5k" / "corpus.jsonl"):
        text = f"{d.get('title') or ''} {d.get('text') or ''}".strip()
        if text:
            base.append(text)
    rng = random.Random(seed)
    for i in range(n):
        copy, k = divmod(i, len(base))
        text = base[k]
        if copy:
            sentences = _SENTENCE.split(text)
            rng.shuffle(sentences)
            text = f"{' '.join(sentences)} ({copy})"
        yield text


def corpus_batches(
    bench_dir: Path, n: int, batch: int, seed: int = 0, vectors: str = "random"
) -> Iterator[tuple[list[str], np.ndarray]]:
    """The corpus and its vectors (:mod:`.latency_vectors`), ``batch`` chunks at a time (never all in memory: at a
    million chunks the vectors alone are 1.5 GB). The same seed gives the same texts and vectors on every call."""
    source = CorpusVectors(vectors, bench_dir, DIM, seed)
    texts = iter_corpus(bench_dir, n, seed)
    for lo in range(0, n, batch):
        part = list(itertools.islice(texts, min(batch, n - lo)))
        yield part, source.next(len(part))


def query_texts(bench_dir: Path, n: int) -> list[str]:
    queries = [q["text"] for q in _jsonl(bench_dir / "msmarco-5k" / "queries.jsonl") if q.get("text", "").strip()]
    return [queries[i % len(queries)] for i in range(n)]


def unit_vectors(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.standard_normal((n, dim), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def forget_token_sets() -> None:
    """Empty the token-set memo the rerank and merge stages share (when this build has one)."""
    clear = getattr(token_set, "cache_clear", None)
    if clear is not None:
        clear()


def forget_query() -> None:
    """Make the next query new to the process: no memoised token sets and no compiled regular expressions.

    The 50 msmarco queries repeat when cycled; the rerank stage compiles a pattern per query phrase with ``re``,
    whose cache would otherwise serve every query after its first round. ``re.purge`` also drops our own
    ``re.sub(str, ...)`` patterns (a few, cheap to compile), so this slightly overstates the cost of a new query.
    """
    forget_token_sets()
    re.purge()


def summary(samples_ms: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": round(median(samples_ms), 3), "p95_ms": round(percentile(samples_ms, 95), 3)}


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return ms(time.perf_counter() - started)


# -- peers ----------------------------------------------------------------------------------------------------------


def rrf(rankings: Sequence[Sequence[int]], weights: Sequence[float], k: int = RRF_K) -> list[int]:
    """Weighted reciprocal rank fusion (LangChain ``EnsembleRetriever.weighted_reciprocal_rank``; ranks from 1)."""
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + weight / (rank + k)
    return sorted(scores, key=lambda d: -scores[d])


def dense_top(matrix: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    """Exact cosine top-k (rows and query are unit vectors): one matrix-vector product and a partial sort."""
    scores = matrix @ q
    k = min(k, scores.shape[0])
    part = np.argpartition(-scores, k - 1)[:k]
    return part[np.argsort(-scores[part])].tolist()


class RankBM25Peer:
    """LangChain's ``BM25Retriever`` (rank_bm25 ``BM25Okapi``) + numpy cosine, fused by RRF."""

    name = "rank_bm25"

    def __init__(self, texts: Sequence[str], matrix: np.ndarray) -> None:
        from rank_bm25 import BM25Okapi

        self.bm25 = BM25Okapi([t.split() for t in texts])  # LangChain's default_preprocessing_func: text.split()
        self.matrix = matrix

    def search(self, query: str, qvec: np.ndarray) -> list[int]:
        scores = self.bm25.get_scores(query.split())
        keyword = np.argsort(scores)[::-1][:POOL].tolist()  # rank_bm25's get_top_n
        return rrf([keyword, dense_top(self.matrix, qvec, POOL)], [0.5, 0.5])[:TOP]


class Bm25sPeer:
    """bm25s (its tokenizer, English stopwords, no stemming) + numpy cosine, fused by RRF."""

    name = "bm25s"

    def __init__(self, texts: Sequence[str], matrix: np.ndarray) -> None:
        import bm25s

        self._bm25s = bm25s
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False)
        self.matrix = matrix
        self.size = len(texts)

    def search(self, query: str, qvec: np.ndarray) -> list[int]:
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)
        docs, _ = self.retriever.retrieve(tokens, k=min(POOL, self.size), show_progress=False)
        return rrf([docs[0].tolist(), dense_top(self.matrix, qvec, POOL)], [0.5, 0.5])[:TOP]


PEERS: dict[str, type] = {"rank_bm25": RankBM25Peer, "bm25s": Bm25sPeer}


# -- ragstep ---------------------------------------------------------------------------------------------------------


def build_index(
    ctx: Context, texts: Sequence[str], vectors: np.ndarray, model: str, batch: int
) -> tuple[KnowledgeBase, float, float]:
    """Index ``texts`` through ``replace_knowledge``; returns the knowledge base, write seconds, snapshot seconds."""
    batches = ((texts[lo : lo + batch], vectors[lo : lo + batch]) for lo in range(0, len(texts), batch))
    return build_index_batches(ctx, batches, model)


def build_index_batches(
    ctx: Context, batches: Iterable[tuple[Sequence[str], np.ndarray]], model: str
) -> tuple[KnowledgeBase, float, float]:
    """:func:`build_index` over ``(texts, vectors)`` batches, one knowledge item each."""
    kb = ctx.catalog.create_kb(
        KnowledgeBase(id=uuid.uuid4().hex, name="bench-latency", embedding_model=model, created_at=time.time())
    )
    write_s = 0.0
    for b, (batch_texts, batch_vectors) in enumerate(batches):
        kid = f"k{b:05d}"
        knowledge = Knowledge(id=kid, knowledge_base_id=kb.id, title=kid, filename=f"{kid}.txt", status="completed")
        chunks, pos = [], 0
        for j, text in enumerate(batch_texts):
            chunks.append(
                Chunk(
                    id=f"{kid}-{j}",
                    knowledge_id=kid,
                    knowledge_base_id=kb.id,
                    content=text,
                    chunk_index=j,
                    start_at=pos,
                    end_at=pos + len(text),
                    knowledge_title=kid,
                    knowledge_filename=knowledge.filename,
                )
            )
            pos += len(text) + 1
        started = time.perf_counter()
        ctx.index.replace_knowledge(kid, chunks, batch_vectors, model)
        write_s += time.perf_counter() - started
        ctx.catalog.put_knowledge(knowledge.model_copy(update={"chunk_count": len(chunks)}))
    started = time.perf_counter()
    ctx.index.keyword_search(["warm"], SearchFilter(), 1, 0.0)  # builds (and saves) the snapshot
    return kb, write_s, time.perf_counter() - started


def run_latency(
    docs: int = 100_000,
    queries: int = 200,
    *,
    bench_dir: str | Path | None = None,
    batch: int = 1000,
    rank_bm25_queries: int = 30,
    seed: int = 0,
    peers: Sequence[str] = ("rank_bm25", "bm25s"),
    kind: str = "random",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    if docs < 1 or queries < 1 or batch < 1 or kind not in KINDS:
        from ragstep.errors import InputError

        raise InputError(f"--docs, --queries and --batch must be positive, --vectors one of {', '.join(KINDS)}")
    say = progress or (lambda _msg: None)
    folder = find_bench_dir(bench_dir)
    qtexts = query_texts(folder, queries)
    distinct = [*dict.fromkeys(qtexts), WARM_UP_QUERY]
    # The corpus is generated batch by batch while indexing (corpus_batches), so query vectors get their own stream.
    qvecs = dict(zip(distinct, query_vectors(kind, folder, distinct[:-1], 1, DIM, seed), strict=True))
    model = "precomputed:bench-latency"
    out: dict[str, Any] = {"docs": docs, "queries": queries, "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    out["vectors"] = kind
    notes: list[str] = []

    out["peak_rss_before_index_mb"] = peak_rss_mb()  # the process before the corpus exists

    with tempfile.TemporaryDirectory(prefix="ragstep-bench-latency-") as tmp:
        ctx = Clients(Settings(data_dir=Path(tmp))).context()
        ctx.register_embedder(PrecomputedEmbedder(model, qvecs))
        say(f"indexing {docs:,} chunks in batches of {batch:,} ...")
        cpu = time.process_time()
        kb, write_s, snapshot_s = build_index_batches(ctx, corpus_batches(folder, docs, batch, seed, kind), model)
        # CPU time includes generating the corpus (shuffling sentences, drawing vectors): an upper bound
        out["index_cpu_s"] = round(time.process_time() - cpu, 1)
        out["index_chunks_per_s"] = round(docs / (write_s + snapshot_s), 1)
        out["index_write_s"] = round(write_s, 2)
        out["snapshot_build_s"] = round(snapshot_s, 2)
        out["peak_rss_after_index_mb"] = peak_rss_mb()
        index_root = Path(getattr(ctx.index, "root", tmp))
        out["snapshot_mb"] = round(_folder_bytes(index_root / "snapshots") / 2**20, 1)
        out["sqlite_mb"] = round(sum(p.stat().st_size for p in index_root.glob("index.sqlite*")) / 2**20, 1)

        def request(text: str, **overrides: Any) -> Any:
            return new_state(SearchRequest(query=text, knowledge_base_ids=[kb.id], overrides=overrides), ctx)

        def search(text: str) -> Any:
            return run_stage("chunk_search", request(text), ctx)

        def pipeline(text: str) -> Any:
            return run_pipeline("knowledge_search", request(text), ctx)

        # Warm-up on a query outside the timed set: stage modules, thread pools, the snapshot's lazy structures.
        pipeline(WARM_UP_QUERY)
        search(WARM_UP_QUERY)
        # ragstep alone (no peer in memory, nothing else in the loop): the headline figures.
        say(f"timing {queries} queries: search stage, pipeline ...")
        search_ms, pipeline_ms, search_cpu, pipeline_cpu = [], [], [], []
        for text in qtexts:
            cpu = time.process_time()
            search_ms.append(_timed(partial(search, text)))
            search_cpu.append(ms(time.process_time() - cpu))
            cpu = time.process_time()
            pipeline_ms.append(_timed(partial(pipeline, text)))
            pipeline_cpu.append(ms(time.process_time() - cpu))
        out.update({f"search_{k}": v for k, v in summary(search_ms).items()})
        out.update({f"pipeline_{k}": v for k, v in summary(pipeline_ms).items()})
        # CPU time of the process (all its threads) per query: what a query costs when other work holds the cores
        # and wall-clock time mostly measures waiting for them.
        out["search_cpu_p50_ms"] = round(median(search_cpu), 3)
        out["pipeline_cpu_p50_ms"] = round(median(pipeline_cpu), 3)

        say(f"timing {queries} queries new to the process: pipeline ...")
        pipeline_new_ms = []
        for text in qtexts:
            forget_query()
            pipeline_new_ms.append(_timed(partial(pipeline, text)))
        out.update({f"pipeline_new_query_{k}": v for k, v in summary(pipeline_new_ms).items()})

        # Post-search stages on 100 candidates; the search that produces them is not timed.
        say(f"timing rerank + merge + top-k on {POST_SEARCH_CANDIDATES} candidates x {queries} queries ...")
        wide = {"embedding_top_k": POST_SEARCH_CANDIDATES}
        states = [run_stage("chunk_search", request(t, **wide), ctx) for t in qtexts]

        def post(state: Any) -> Any:
            for stage in ("chunk_rerank", "chunk_merge", "filter_top_k"):
                state = run_stage(stage, state, ctx)
            return state

        for s in states:  # untimed: the "warm" pass sees candidates and queries the process has seen before
            post(s)
        warm = [_timed(partial(post, s)) for s in states]
        cold, new_query = [], []
        for s in states:
            forget_token_sets()
            cold.append(_timed(partial(post, s)))
        for s in states:
            forget_query()
            new_query.append(_timed(partial(post, s)))
        out["post_search_p50_ms"] = round(median(warm), 3)
        out["post_search_cold_p50_ms"] = round(median(cold), 3)
        out["post_search_new_query_p50_ms"] = round(median(new_query), 3)
        out["post_search_candidates"] = round(sum(len(s.search_results) for s in states) / len(states), 1)
        if getattr(token_set, "cache_clear", None) is None:
            notes.append("ragstep.retrieval.text.token_set is not memoised in this build: cold = warm")
        del states
        out["peak_rss_ragstep_mb"] = peak_rss_mb()
        say("cold open: a new process maps the saved snapshot ...")
        out["cold_open"] = cold_open(index_root, qtexts[0], qvecs[qtexts[0]], model)

        # Peers: the same texts and vectors (and query vectors), in this process.
        built: dict[str, Any] = {}
        texts: list[str] = []
        vectors = np.zeros((0, DIM), dtype=np.float32)
        if peers:
            parts = list(corpus_batches(folder, docs, batch, seed, kind))
            texts = [t for part, _ in parts for t in part]
            vectors = np.concatenate([v for _, v in parts])
            del parts
        index_rate: dict[str, float] = {}
        for name in peers:
            say(f"peer {name}: indexing {docs:,} chunks ...")
            started = time.perf_counter()
            try:
                built[name] = PEERS[name](texts, vectors)
            except ImportError as exc:
                notes.append(f"peer {name} skipped: {exc} (pip install 'ragstep[bench]')")
                continue
            index_rate[name] = round(docs / (time.perf_counter() - started), 1)
            built[name].search(WARM_UP_QUERY, qvecs[WARM_UP_QUERY])
        limits = {name: (min(rank_bm25_queries, queries) if name == "rank_bm25" else queries) for name in built}

        # Ratios: one loop, every system on each query in turn, so the machine's noise (and what each system's
        # memory traffic does to the others' caches) falls on all of them alike.
        if built:
            say(f"timing {queries} queries, ragstep and peers in turn ...")
        mixed_search: list[float] = []
        mixed_pipeline: list[float] = []
        peer_ms: dict[str, list[float]] = {name: [] for name in built}
        for i, text in enumerate(qtexts if built else ()):
            mixed_search.append(_timed(partial(search, text)))
            mixed_pipeline.append(_timed(partial(pipeline, text)))
            for name, peer in built.items():
                if i < limits[name]:
                    peer_ms[name].append(_timed(partial(peer.search, text, qvecs[text])))

        peer_out: dict[str, Any] = {}
        for name in built:
            samples = peer_ms[name]
            # Ours in the same loop, on the same queries (rank_bm25 runs on a prefix of them).
            ours = median(mixed_search[: len(samples)])
            ours_pipeline = median(mixed_pipeline[: len(samples)])
            peer_out[name] = {
                **summary(samples),
                "queries": len(samples),
                "index_chunks_per_s": index_rate[name],
                "ours_search_p50_ms": round(ours, 3),
                "ours_pipeline_p50_ms": round(ours_pipeline, 3),
                "ratio_vs_search": round(median(samples) / ours, 2),
                "ratio_vs_pipeline": round(median(samples) / ours_pipeline, 2),
            }
            if len(samples) < queries:
                notes.append(
                    f"{name} timed on the first {len(samples)} of {queries} queries (it is slow); its ratios compare "
                    "with ours on the same queries"
                )
        out["peers"] = peer_out
    out["peak_rss_mb"] = peak_rss_mb()
    out["notes"] = notes
    return out


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def render(r: dict[str, Any]) -> str:
    from ragstep.entry.cli.console import table

    lines = [
        f"latency at {r['docs']:,} chunks, {r['queries']} queries (384-dim "
        f"{VECTOR_LABELS.get(r.get('vectors', 'random'), 'random vectors')})",
        f"indexing: {r['index_chunks_per_s']:,.0f} chunks/s (writes {r['index_write_s']} s + snapshot "
        f"{r['snapshot_build_s']} s; embedding excluded; {r['index_cpu_s']} s of CPU time)",
        "",
    ]
    rows = [
        ("chunk_search stage (hybrid)", r["search_p50_ms"], r["search_p95_ms"], "1.00", "", r["queries"]),
        ("knowledge_search pipeline", r["pipeline_p50_ms"], r["pipeline_p95_ms"], "", "1.00", r["queries"]),
        ("  CPU time per query (p50): search, pipeline", r["search_cpu_p50_ms"], r["pipeline_cpu_p50_ms"], "", "", ""),
        (
            "knowledge_search pipeline, new query",
            r["pipeline_new_query_p50_ms"],
            r["pipeline_new_query_p95_ms"],
            "",
            "",
            r["queries"],
        ),
    ]
    headers = ("what", "p50 ms", "p95 ms", "p50 / search p50", "p50 / pipeline p50", "queries")
    lines.append(table(headers, rows))
    if r["peers"]:
        peer_rows = []
        for name, p in r["peers"].items():
            ratios = f"{p['ratio_vs_search']:.2f}", f"{p['ratio_vs_pipeline']:.2f}"
            ours = p["ours_search_p50_ms"], p["ours_pipeline_p50_ms"]
            peer_rows.append((f"{name} + cosine, RRF", p["p50_ms"], p["p95_ms"], *ours, *ratios, p["queries"]))
        peer_headers = ["peer", "p50 ms", "p95 ms", "ours: search", "pipeline", "peer/search", "peer/pipeline"]
        peer_headers.append("queries")
        lines += [
            "",
            "peers, timed in turn with ours on each query (p50 ms; ratios of p50s):",
            table(peer_headers, peer_rows),
        ]
    lines += [
        "",
        f"rerank + merge + top-k on {r['post_search_candidates']:.0f} candidates: p50 {r['post_search_p50_ms']} ms, "
        f"token-set memo emptied {r['post_search_cold_p50_ms']} ms, new query {r['post_search_new_query_p50_ms']} ms",
        f"peak RSS: {r['peak_rss_before_index_mb']} MiB before the corpus, {r['peak_rss_after_index_mb']} MiB after "
        f"indexing it, {r['peak_rss_ragstep_mb']} MiB after searching, {r['peak_rss_mb']} MiB at the end (peers)",
        f"on disk: snapshot {r['snapshot_mb']:,} MiB, SQLite {r['sqlite_mb']:,} MiB; load average "
        f"{r['load_avg_1m_before']} before the run",
    ]
    c = r.get("cold_open", {})
    if "open_ms" in c:
        lines.append(
            f"cold open (new process): open {c['open_ms']} ms ({'rebuilt' if c['rebuilt'] else 'mapped, no rebuild'}), "
            f"first keyword search {c['first_keyword_ms']} ms, first vector search {c['first_vector_ms']} ms"
        )
    elif c:
        lines.append(f"cold open failed: {c.get('error')}")
    lines += [f"note: {n}" for n in r["notes"]]
    return "\n".join(lines)
