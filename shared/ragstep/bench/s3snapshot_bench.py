"""``ragstep bench s3snapshot``: the S3-snapshot index at scale, against S3-compatible storage (moto on 127.0.0.1).

1. **Publish**: ``--docs`` chunks (msmarco-5k passages, shuffled copies beyond 5k; random unit vectors, 384 dims)
   written into one knowledge base as one generation, through the index's own write path (build, snapshot, upload,
   pointer swap). Reported: seconds, the generation's bytes and files.
2. **Cold load**: ``--runs`` fresh Python processes, each with an empty data dir, as a new search container: import,
   load the knowledge base from S3 (download + open), then the first query (BM25 + kNN over the pool the search
   stage asks for). Medians, and the processes' peak RSS.
3. **Warm search**: the same queries against the loaded S3-snapshot index (pointer checked at the default
   ``RAGSTEP_INDEX_S3_REFRESH_S``) and the local index over the same files, interleaved in one run; p50 and ratio.

The download rate is moto's, not S3's: moto serves objects from Python, so the cold-load figure is an upper bound
for the same bytes from S3 in-region.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ragstep.adapters.index._s3generations import Pointer
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.adapters.index.s3snapshot import S3SnapshotIndex
from ragstep.bench.common import find_bench_dir, median, ms, peak_rss_mb
from ragstep.bench.latency import POOL, corpus_texts, query_texts, summary, unit_vectors
from ragstep.errors import InputError, StorageError
from ragstep.models import Chunk
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import tokenize
from ragstep.settings import Settings

SPACE = "precomputed:bench-s3snapshot"
MARK = "RAGSTEP-S3SNAPSHOT "
REGION = "us-east-1"

# A new search container: only the standard library is loaded before the clock starts.
CHILD = r"""
import time
t0 = time.perf_counter()
import json, sys
import numpy as np
from ragstep.context import Clients
from ragstep.ports import SearchFilter
from ragstep.retrieval.text import tokenize
kb, query, qvec_file, pool, space, mark = sys.argv[1:7]
qvec = np.load(qvec_file)
index = Clients().context().index
t1 = time.perf_counter()
index.preload([kb])
t2 = time.perf_counter()
flt = SearchFilter(knowledge_base_ids=(kb,))
index.keyword_search(tokenize(query), flt, int(pool), 0.0)
index.vector_search(qvec, space, flt, int(pool), -1.0)
t3 = time.perf_counter()
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report the benchmark's own peak.
with open("/proc/self/status") as status:
    rss = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
print(mark + json.dumps({"import_ms": (t1 - t0) * 1e3, "load_ms": (t2 - t1) * 1e3, "first_query_ms": (t3 - t2) * 1e3,
                         "total_ms": (t3 - t0) * 1e3, "peak_rss_mb": rss}))
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _chunks(kb: str, texts: list[str], lo: int, hi: int) -> tuple[str, list[Chunk]]:
    kid = f"k{lo:07d}"
    return kid, [
        Chunk(id=f"{kid}-{j}", knowledge_id=kid, knowledge_base_id=kb, content=text, chunk_index=j)
        for j, text in enumerate(texts[lo:hi])
    ]


def run_s3snapshot(
    docs: int = 100_000,
    queries: int = 200,
    *,
    runs: int = 3,
    bench_dir: str | Path | None = None,
    batch: int = 1000,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    if docs < 1 or queries < 1 or runs < 1 or batch < 1:
        raise InputError("--docs, --queries, --runs and --batch must be positive")
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # moto[server] is in the bench and dev extras
        raise InputError("this benchmark serves S3 with moto: pip install 'ragstep[bench]'") from exc
    say = progress or (lambda _msg: None)
    folder = find_bench_dir(bench_dir)
    rng = np.random.default_rng(seed)
    texts = corpus_texts(folder, docs, seed)
    vectors = unit_vectors(rng, docs)
    qtexts = query_texts(folder, queries)
    qvecs = unit_vectors(rng, queries)
    out: dict[str, Any] = {"docs": docs, "queries": queries, "runs": runs}

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": REGION,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    tmp = Path(tempfile.mkdtemp(prefix="ragstep-bench-s3snapshot-"))
    try:
        import boto3

        bucket = f"bench-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=bucket)
        # No size limits here: the benchmark measures what the limits are derived from.
        settings = Settings(index_s3_bucket=bucket, index_s3_max_bytes=1 << 40, index_s3_warn_bytes=1 << 40)
        kb = uuid.uuid4().hex

        say(f"publishing {docs} chunks as one generation")
        writer = S3SnapshotIndex.from_settings(settings, "default", tmp / "writer")

        def load_all(index: LocalSearchIndex) -> int:
            for lo in range(0, docs, batch):
                kid, chunks = _chunks(kb, texts, lo, min(lo + batch, docs))
                index.replace_knowledge(kid, chunks, vectors[lo : lo + len(chunks)], SPACE)
            return docs

        started = time.perf_counter()
        writer.apply_change(kb, load_all)
        out["publish_s"] = round(time.perf_counter() - started, 2)
        pointer = writer.store.pointer(kb)
        if not isinstance(pointer, Pointer):
            raise StorageError(f"the knowledge base {kb} has no pointer after its write")
        out["generation_mb"] = round(pointer.size / 1e6, 3)
        out["generation_files"] = len(pointer.files)
        out["bytes_per_chunk"] = round(pointer.size / docs)

        # What the storage itself serves: one plain GET of the largest file, read to the end (the cold load's floor
        # is the generation's bytes at about this rate, spread over a few parallel transfers).
        biggest = max(pointer.files, key=lambda name: pointer.files[name])
        started = time.perf_counter()
        body = boto3.client("s3", region_name=REGION).get_object(
            Bucket=bucket, Key=f"{writer.store.root}{kb}/{pointer.folder}/{biggest}"
        )["Body"]
        while body.read(8 * 1024 * 1024):
            pass
        out["storage_get_mb_s"] = round(pointer.files[biggest] / 1e6 / (time.perf_counter() - started), 1)

        say(f"cold loads: {runs} fresh processes")
        qfile = tmp / "qvec.npy"
        np.save(qfile, qvecs[0])
        child_env = {
            **os.environ,
            "RAGSTEP_INDEX_BACKEND": "s3snapshot",
            "RAGSTEP_INDEX_S3_BUCKET": bucket,
        }
        samples: list[dict[str, float]] = []
        for r in range(runs):
            data_dir = tmp / f"cold-{r}"
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, kb, qtexts[0], str(qfile), str(POOL), SPACE, MARK],
                env={**child_env, "RAGSTEP_DATA_DIR": str(data_dir)},
                capture_output=True,
                text=True,
                check=False,
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith(MARK)), None)
            if proc.returncode != 0 or line is None:
                raise InputError(f"cold-load process failed: {proc.stderr.strip()[-2000:]}")
            samples.append(json.loads(line[len(MARK) :]))
            shutil.rmtree(data_dir, ignore_errors=True)
        out["cold"] = {k: round(median([s[k] for s in samples]), 1) for k in samples[0]}

        say(f"warm search: {queries} queries, S3-snapshot and local index interleaved")
        reader = S3SnapshotIndex.from_settings(settings, "default", tmp / "reader")
        reader.preload([kb])
        local_copy = tmp / "local"
        shutil.copytree(tmp / "writer" / kb / pointer.folder, local_copy)
        local = LocalSearchIndex(local_copy)
        flt = SearchFilter(knowledge_base_ids=(kb,))

        def query(index: Any, i: int) -> float:
            started = time.perf_counter()
            index.keyword_search(tokenize(qtexts[i]), flt, POOL, 0.0)
            index.vector_search(qvecs[i], SPACE, flt, POOL, -1.0)
            return ms(time.perf_counter() - started)

        for index in (reader, local):  # warm-up: the first query maps the snapshot's pages
            query(index, 0)
        s3_ms: list[float] = []
        local_ms: list[float] = []
        for i in range(queries):
            if i % 2:  # alternate who goes first, so neither always gets the warmer cache
                s3_ms.append(query(reader, i))
                local_ms.append(query(local, i))
            else:
                local_ms.append(query(local, i))
                s3_ms.append(query(reader, i))
        out["warm_s3snapshot"] = summary(s3_ms)
        out["warm_local"] = summary(local_ms)
        out["warm_ratio_p50"] = round(median(s3_ms) / median(local_ms), 3)
        out["peak_rss_mb"] = peak_rss_mb()
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def render(r: dict[str, Any]) -> str:
    cold = r["cold"]
    lines = [
        f"S3-snapshot index, {r['docs']} chunks (384-dim vectors), S3 served by moto on 127.0.0.1",
        f"  publish (build + snapshot + upload + swap): {r['publish_s']} s; generation {r['generation_mb']} MB in "
        f"{r['generation_files']} files ({r['bytes_per_chunk']} bytes/chunk)",
        f"  cold load, median of {r['runs']} fresh processes: import {cold['import_ms']} ms, load {cold['load_ms']} ms,"
        f" first query {cold['first_query_ms']} ms, total {cold['total_ms']} ms; peak RSS {cold['peak_rss_mb']} MB"
        f" (the storage serves one GET at {r['storage_get_mb_s']} MB/s)",
        f"  warm search p50 ({r['queries']} queries, BM25 + kNN, pool {POOL}): S3-snapshot "
        f"{r['warm_s3snapshot']['p50_ms']} ms, local {r['warm_local']['p50_ms']} ms, ratio {r['warm_ratio_p50']}",
    ]
    return "\n".join(lines)


__all__ = ["render", "run_s3snapshot"]
