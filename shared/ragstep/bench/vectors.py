"""``ragstep bench vectors``: the local index's vector retrieval (int8 scan + exact rescoring, and the float32 exact
scan) against numpy exact search and faiss (``IndexFlatIP``, ``IndexHNSWFlat``) on the same vectors, in one run.

The vectors are the English set's precomputed all-MiniLM-L6-v2 embeddings (``msmarco-5k/corpus.emb.npy``, 384 dims),
tiled to ``--docs`` rows with small Gaussian noise (a fixed seed: every run indexes the same vectors) and
re-normalised; queries are the set's query vectors, tiled the same way. Every system answers each query in turn (the
order rotating), so the load of a shared machine falls on all of them alike: compare the ratios, not the absolute
milliseconds. Recall@10 is measured against numpy's exact top 10. faiss is optional (``pip install faiss-cpu``, in
the ``bench`` extra): without it those rows are reported as missing.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragstep.bench.common import find_bench_dir, fmt, median, ms, percentile

K = 10
#: Norm of the noise added to each tiled copy (a cosine of ~0.96 to the vector it copies): copies are near, not equal.
NOISE_NORM = 0.3
HNSW_M = 32
HNSW_EF_SEARCH = 128
_BATCH = 2000


def tiled(base: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit rows: ``base`` repeated, each copy moved by noise of norm ~``NOISE_NORM``."""
    out = np.tile(base.astype(np.float32), (-(-n // len(base)), 1))[:n]
    out += rng.normal(0.0, NOISE_NORM / np.sqrt(base.shape[1]), out.shape).astype(np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out


def _index(root: Path, matrix: np.ndarray, factor: int) -> tuple[Any, float]:
    """A local index of ``matrix`` (ids ``c<row>``, int8 snapshot written to disk), and its build seconds."""
    from ragstep.adapters.index.local import LocalSearchIndex
    from ragstep.models import Chunk

    idx = LocalSearchIndex(root, vector_storage="int8", rescore_factor=factor)
    for lo in range(0, len(matrix), _BATCH):
        rows = range(lo, min(lo + _BATCH, len(matrix)))
        chunks = [Chunk(id=f"c{i}", knowledge_id=f"k{lo}", knowledge_base_id="kb", content=f"v{i}") for i in rows]
        idx.replace_knowledge(f"k{lo}", chunks, matrix[lo : rows.stop], "s")
    started = time.perf_counter()
    idx.snapshot()
    return idx, time.perf_counter() - started


def _ids(hits: Sequence[Any]) -> list[int]:
    return [int(h.chunk_id[1:]) for h in hits]


def run_vectors(
    docs: int = 100_000,
    queries: int = 200,
    *,
    factor: int = 4,
    hnsw: bool = True,
    bench_dir: str | Path | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    from ragstep.adapters.index.local import LocalSearchIndex
    from ragstep.ports import SearchFilter

    say = progress or (lambda _msg: None)
    folder = find_bench_dir(bench_dir) / "msmarco-5k"
    rng = np.random.default_rng(seed)
    matrix = tiled(np.load(folder / "corpus.emb.npy"), docs, rng)
    qs = tiled(np.load(folder / "queries.emb.npy"), queries, rng)
    flt = SearchFilter()
    systems: dict[str, Callable[[np.ndarray], list[int]]] = {}

    def numpy_exact(q: np.ndarray) -> list[int]:
        scores = matrix @ q
        part = np.argpartition(-scores, K - 1)[:K]
        return part[np.argsort(-scores[part], kind="stable")].tolist()

    systems["numpy exact (float32)"] = numpy_exact
    out: dict[str, Any] = {"docs": docs, "queries": queries, "dim": int(matrix.shape[1]), "rescore_factor": factor}
    with tempfile.TemporaryDirectory(prefix="ragstep-bench-vectors-") as tmp:
        say(f"indexing {docs:,} vectors")
        idx, build_s = _index(Path(tmp), matrix, factor)
        # The same snapshot on disk, opened by a process configured for float32: it scans the matrix exactly.
        exact_idx = LocalSearchIndex(Path(tmp), vector_storage="float32")
        gen = next((Path(tmp) / "snapshots").glob("gen-*"))
        size = {p: (gen / f"space0_{p}.npy").stat().st_size for p in ("matrix", "codes", "qoffset", "qstep")}
        scanned = size["codes"] + size["qoffset"] + size["qstep"]
        signs = gen / "space0_signs.npy"  # the sign-bit pass's codes, when the index uses it (ragstep.retrieval.signs)
        out["snapshot"] = {
            "build_s": round(build_s, 2),
            "float32_matrix_bytes": size["matrix"],
            "int8_scanned_bytes": scanned,
            "int8_over_float32": round(scanned / size["matrix"], 4),
            "sign_bits_bytes": signs.stat().st_size if signs.exists() else None,
        }
        systems["ragstep int8 + rescore"] = lambda q: _ids(idx.vector_search(q, "s", flt, K, -1.0))
        systems["ragstep float32 exact"] = lambda q: _ids(exact_idx.vector_search(q, "s", flt, K, -1.0))
        out["faiss"] = importlib.util.find_spec("faiss") is not None
        if out["faiss"]:
            import faiss

            threads = max(1, min(4, os.cpu_count() or 1))  # what the local index's own scan uses
            out["faiss_threads"] = threads

            def searcher(index: Any, n: int) -> Callable[[np.ndarray], list[int]]:
                def search(q: np.ndarray) -> list[int]:
                    # OpenMP threads that spin on a loaded machine can cost more than they give: both are timed.
                    faiss.omp_set_num_threads(n)
                    return [int(i) for i in index.search(q[None, :], K)[1][0]]

                return search

            flat = faiss.IndexFlatIP(matrix.shape[1])
            flat.add(matrix)
            systems["faiss IndexFlatIP (1 thread)"] = searcher(flat, 1)
            systems[f"faiss IndexFlatIP ({threads} threads)"] = searcher(flat, threads)
            if hnsw:
                say("building faiss HNSW")
                faiss.omp_set_num_threads(threads)
                graph = faiss.IndexHNSWFlat(matrix.shape[1], HNSW_M, faiss.METRIC_INNER_PRODUCT)
                started = time.perf_counter()
                graph.add(matrix)
                out["hnsw_build_s"] = round(time.perf_counter() - started, 2)
                graph.hnsw.efSearch = HNSW_EF_SEARCH
                systems[f"faiss HNSW (M={HNSW_M}, ef={HNSW_EF_SEARCH}, 1 thread)"] = searcher(graph, 1)
        names = list(systems)
        times: dict[str, list[float]] = {n: [] for n in names}
        found: dict[str, int] = dict.fromkeys(names, 0)
        say(f"timing {queries} queries x {len(names)} systems")
        for i, q in enumerate(qs):
            truth = set(numpy_exact(q))
            for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate who goes first
                started = time.perf_counter()
                got = systems[name](q)
                times[name].append(time.perf_counter() - started)
                found[name] += len(truth & set(got[:K]))
    p50 = {name: ms(median(times[name])) for name in names}
    # Against the faster of faiss's two flat configurations in this run.
    flat_p50 = min((v for name, v in p50.items() if name.startswith("faiss IndexFlatIP")), default=None)
    out["systems"] = [
        {
            "system": name,
            "p50_ms": p50[name],
            "p95_ms": ms(percentile(times[name], 95)),
            "recall_at_10": round(found[name] / (K * queries), 4),
            "x_faster_than_faiss_flat": round(flat_p50 / p50[name], 2) if flat_p50 else None,
        }
        for name in names
    ]
    return out


def render(r: dict[str, Any]) -> str:
    snap = r["snapshot"]
    lines = [
        f"vector retrieval at {r['docs']:,} x {r['dim']} (msmarco-5k MiniLM vectors tiled with noise), "
        f"{r['queries']} queries, k={K}, int8 rescoring {r['rescore_factor']}x",
        f"{'system':<40} {'p50 ms':>8} {'p95 ms':>8} {'R@10':>7} {'x faiss flat (best)':>20}",
    ]
    for row in r["systems"]:
        lines.append(
            f"{row['system']:<40} {fmt(row['p50_ms'], 2):>8} {fmt(row['p95_ms'], 2):>8} "
            f"{row['recall_at_10']:>7.4f} {fmt(row['x_faster_than_faiss_flat']):>20}"
        )
    lines.append(
        f"snapshot vectors: float32 matrix {snap['float32_matrix_bytes'] / 2**20:.1f} MiB; int8 codes + ranges "
        f"{snap['int8_scanned_bytes'] / 2**20:.1f} MiB = {snap['int8_over_float32']:.1%}"
    )
    if snap.get("sign_bits_bytes"):
        lines.append(
            f"first pass: sign bits of every row ({snap['sign_bits_bytes'] / 2**20:.1f} MiB), then the int8 codes of "
            "the nearest by Hamming distance (ragstep.retrieval.signs)"
        )
    if not r["faiss"]:
        lines.append("faiss not installed (pip install faiss-cpu): its rows are missing")
    elif "hnsw_build_s" in r:
        lines.append(f"faiss threads {r['faiss_threads']}; HNSW build {r['hnsw_build_s']} s")
    return "\n".join(lines)


__all__ = ["render", "run_vectors", "tiled"]
