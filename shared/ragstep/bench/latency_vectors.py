"""The vectors of ``ragstep bench latency`` and ``bench cli``: seeded random unit vectors (the latency default: the
machinery, not a model), or the msmarco-5k passages' and queries' own embeddings, chunk ``i`` getting passage
``i mod 5000``'s moved by noise as ``bench vectors`` tiles them: ``minilm``, all-MiniLM-L6-v2 (``corpus.emb.npy``,
``queries.emb.npy``); ``e5``, multilingual-e5-small (``corpus.e5.npy``, ``queries.e5.npy``), the space of the embedded
model, so a query that model embeds finds the passages it is near.

Random 384-dim vectors have no neighbourhoods: the sign-bit first pass's calibration (:mod:`ragstep.retrieval.signs`)
finds it cannot rank their exact neighbours and every int8 code is scanned, while real embeddings take the pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ragstep.bench.vectors import NOISE_NORM

KINDS = ("random", "minilm", "e5")
#: The file stem of each kind of embedding vectors in a BEIR-layout set (``corpus.STEM.npy``, ``queries.STEM.npy``).
STEMS = {"minilm": "emb", "e5": "e5"}


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


class CorpusVectors:
    """Vectors of chunks ``lo..lo+n`` in corpus order, drawn from one seeded stream (call in order)."""

    def __init__(self, kind: str, bench_dir: Path, dim: int, seed: int) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown vectors {kind!r}: one of {', '.join(KINDS)}")
        self.kind, self.dim, self.rng = kind, dim, np.random.default_rng(seed)
        stem = STEMS.get(kind)
        self.base = np.load(bench_dir / "msmarco-5k" / f"corpus.{stem}.npy").astype(np.float32) if stem else None
        self.at = 0

    def next(self, n: int) -> np.ndarray:
        if self.base is None:
            return unit_vectors(self.rng, n, self.dim)
        out = self.base[np.arange(self.at, self.at + n) % len(self.base)]
        out += self.rng.normal(0.0, NOISE_NORM / np.sqrt(out.shape[1]), out.shape).astype(np.float32)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        self.at += n
        return out


def query_vectors(kind: str, bench_dir: Path, texts: Sequence[str], extra: int, dim: int, seed: int) -> np.ndarray:
    """Vectors of the distinct query ``texts`` (msmarco-5k's, in file order) and of ``extra`` further queries."""
    rng = np.random.default_rng([seed, 1])
    stem = STEMS.get(kind)
    if stem is None:
        return unit_vectors(rng, len(texts) + extra, dim)
    emb = np.load(bench_dir / "msmarco-5k" / f"queries.{stem}.npy").astype(np.float32)[: len(texts)]
    return np.concatenate((emb / np.linalg.norm(emb, axis=1, keepdims=True), unit_vectors(rng, extra, emb.shape[1])))


__all__ = ["KINDS", "CorpusVectors", "query_vectors", "unit_vectors"]
