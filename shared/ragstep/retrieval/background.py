"""Where a query's cosines sit in the corpus it searches: the background a vector hit's cosine is read against.

An embedding model's cosines are not read as they come: e5's unrelated text scores ~0.77, MiniLM's ~0. A model
declares where its unrelated text sits (:class:`~ragstep.models.scale.ScoreScale`), but that zero was measured on
one corpus and one language pair (e5: msmarco, English questions over English passages), and it moves with both:
English questions over Russian passages sit at ~0.71 (xquad-en-ru), Chinese over Chinese at ~0.82 (cmrc2018-zh).
Read at 0.77, a cross-lingual query's best passage (~0.80) looked unrelated: the similarity threshold dropped half
the queries' vector hits, fusion gave the rest almost no weight, and the hybrid ranked at 0.51 where the vectors
alone reach 0.91 (issue 32).

The background is the query's own: the mean and standard deviation of its cosine to every chunk of the searched
knowledge bases. Both follow from the chunks' mean vector ``m`` and covariance ``C`` (``mu = q . m``, ``sigma^2 =
q' C q``), which an index takes once per snapshot and filter from a sample of its rows (:data:`SAMPLE_ROWS`:
the mean, and the sample centred on it for ``C``); a query then costs one dot product for the mean and one product
with the sample for the spread. Nothing is fitted: the zero is this corpus's, for this query. Fusion reads a vector
hit as its distance from that mean in standard deviations (:func:`ragstep.retrieval.fusion.fuse_evidence`); the
similarity threshold reads it on :func:`query_scale`.

Kept per snapshot, not stored: a snapshot is what a search reads, so a document added or deleted moves the
statistics at the next search with no rebuild asked for, and ingest does nothing more. Taking the sample costs the
first search of a snapshot ~10 ms at 100k chunks of 384 dimensions (the S3-snapshot index stores each generation's
centroid with it; OpenSearch samples and caches).

:func:`query_scale` makes the query's scale: its zero is ``mu``; its span is the model's declared one (a property
of the model: how far a relevant passage sits above the unrelated ones) or, for a model that declares none, ``sigma``
in the common scale's units (:data:`COMMON_SD`). An index that cannot tell (OpenSearch) leaves the declared scale
as it is, and a model without one is then read relative (:func:`ragstep.ports.declared_scale`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ragstep.models.scale import ScoreScale
from ragstep.ports import SearchFilter

#: Rows sampled (evenly spaced over the filter's rows): a 384-dimension mean settles well before that (its error
#: ~sigma / 45, under 0.001 for e5), and a query's spread to within ~3 %.
SAMPLE_ROWS = 2048
#: The common scale is MiniLM's (thresholds are written on it). Its query-to-passage cosines on msmarco-5k have a
#: standard deviation of 0.104 about their mean: one unit of the common scale is 1 / 0.104 standard deviations of
#: the background. Used only for a model that declares no span, to put its cosines in those units.
COMMON_SD = 0.104
#: Fewer chunks than this are no background for the similarity threshold's scale or the rerank stage's: their mean
#: is the query's few candidates themselves (a knowledge base of a dozen chunks, a narrow tag), and the declared
#: scale is read instead (:func:`query_scale`), with one addition for the threshold: a chunk that stands out from the
#: others passes too (:func:`standout_cosine`).
MIN_ROWS = 100
#: Fusion reads a background from this many chunks on (one row has no spread). Below :data:`MIN_ROWS` it fell back
#: to the declared-scale rule issue 32 replaced: cut into knowledge bases of 50-80 chunks, the cross-lingual set's
#: hybrid nDCG@10 fell to 0.59 where its vectors alone reach 0.94; read against their own chunks, 0.94
#: (BENCHMARKS.md, "Small knowledge bases, passage-level answer sets ...").
MIN_FUSION_ROWS = 2
_MAX_FILTERS = 64


@dataclass(slots=True)
class Background:
    """A sample of a knowledge base's chunk vectors: their mean, and the sample centred on it (float32 rows)."""

    mean: np.ndarray
    centred: np.ndarray

    def size(self) -> int:
        """How many chunks the background stands for: its sample's rows (a sample is every row below
        :data:`SAMPLE_ROWS`, so this is below :data:`MIN_ROWS` exactly when the chunks are)."""
        return int(self.centred.shape[0])

    def variance(self, q: np.ndarray) -> float:
        """``q' C q``: the variance of the unit query's cosine to the sample's vectors, as ``|X q|^2 / (n - 1)`` of
        the centred sample ``X``. Fusion reads every query's spread: building ``C`` (``d x d``) instead cost the
        first search of each snapshot 0.15 s at 384 dimensions and 0.5 s at 1,536, against ~0.1 ms a query."""
        n = max(self.centred.shape[0] - 1, 1)
        projected = (self.centred @ np.asarray(q, dtype=np.float32)).astype(np.float64)
        return max(float(projected @ projected) / n, 0.0)


@runtime_checkable
class BackgroundIndex(Protocol):
    """An index that can describe the vectors a filter covers (the local index; OpenSearch cannot, cheaply)."""

    def vector_background(self, space: str, flt: SearchFilter) -> Background | None:
        """The background of ``space``'s vectors that ``flt`` lets through, None when it holds fewer than two."""


def moments(vectors: np.ndarray) -> Background | None:
    """The background of a sample of unit vectors (rows); None for fewer than :data:`MIN_FUSION_ROWS` rows."""
    if vectors.shape[0] < MIN_FUSION_ROWS:
        return None
    x = np.asarray(vectors, dtype=np.float32)
    mean = x.mean(axis=0, dtype=np.float64)
    return Background(mean, x - mean.astype(np.float32))


def sample_rows(rows: np.ndarray, limit: int = SAMPLE_ROWS) -> np.ndarray:
    """At most ``limit`` of ``rows``, evenly spaced (deterministic: the same snapshot gives the same sample)."""
    if rows.shape[0] <= limit:
        return rows
    return rows[np.linspace(0, rows.shape[0] - 1, limit).astype(np.int64)]


class Backgrounds:
    """The local index's backgrounds per (snapshot, space, filter), for the snapshot in use only: computed at the
    first query of a filter, then read (a new snapshot, or more than :data:`_MAX_FILTERS` filters, starts over)."""

    def __init__(self) -> None:
        self._snap: object = None  # held, so a new snapshot can never be mistaken for it
        self._cache: dict[tuple[str, SearchFilter], Background | None] = {}
        self._lock = threading.Lock()

    def of(self, snap: Any, space: str, flt: SearchFilter) -> Background | None:
        """``snap``: the local index's snapshot (its ``spaces``; a space's ``allowed`` rows and ``take``)."""
        sp = snap.spaces.get(space)
        if sp is None:
            return None
        with self._lock:
            if snap is not self._snap or len(self._cache) >= _MAX_FILTERS:
                self._snap, self._cache = snap, {}
            if (space, flt) not in self._cache:
                self._cache[space, flt] = moments(sp.take(sample_rows(sp.allowed(snap, flt)[1])))
            return self._cache[space, flt]


def _unit(query: np.ndarray | Sequence[float]) -> np.ndarray | None:
    q = np.asarray(query, dtype=np.float64).reshape(-1)
    norm = float(np.linalg.norm(q))
    return None if norm == 0.0 or not math.isfinite(norm) else q / norm


@dataclass(frozen=True, slots=True)
class QueryBackground:
    """A query's cosines over the chunks it searches: their mean and standard deviation (what fusion reads a vector
    hit against, :func:`ragstep.retrieval.fusion.fuse_evidence`)."""

    mean: float
    sd: float

    def z(self, cosine: float) -> float:
        """How many standard deviations ``cosine`` sits above the query's mean cosine."""
        return (cosine - self.mean) / self.sd


def query_background(background: Background, query: np.ndarray | Sequence[float]) -> tuple[float, float]:
    """The mean and standard deviation of the query's cosine to the sample's vectors: ``q . m``, ``sqrt(q' C q)``."""
    q = _unit(query)
    if q is None:
        return 0.0, 0.0
    return float(q @ background.mean), math.sqrt(background.variance(q))


def query_scale(
    declared: ScoreScale | None, background: Background | None, query: np.ndarray | Sequence[float]
) -> ScoreScale | None:
    """The query's cosine scale: zero at its background mean, the declared span (or, declared none, its background
    standard deviation in the common scale's units). Without a background, or one of fewer than :data:`MIN_ROWS`
    chunks, the declared scale (None: none)."""
    q = _unit(query) if background is not None else None
    if background is None or q is None or background.size() < MIN_ROWS:
        return declared
    if declared is not None:  # the mean alone: one dot product
        return ScoreScale(zero=float(q @ background.mean), span=declared.span)
    mu, sigma = query_background(background, q)
    return ScoreScale(zero=mu, span=sigma / COMMON_SD) if sigma > 0.0 else None


def standout_cosine(
    background: Background | None, query: np.ndarray | Sequence[float], threshold: float
) -> float | None:
    """Below :data:`MIN_ROWS` chunks, the cosine from which a chunk stands out from the query's others; None for a
    larger background (its scale is the query's already, :func:`query_scale`) or one with no spread.

    Standing out is read in the query's own cosines over the ``n`` chunks, their mean and standard deviation, and
    is two things: ``threshold`` above the mean in the common scale's units of spread (``threshold / COMMON_SD``
    standard deviations, the scale :func:`query_scale` gives a model that declares no span: the similarity
    threshold's 0.2 is 1.9 of them), and above where the best of ``n`` chunks unrelated to the query sits by chance,
    the normal quantile ``n / (n + 1)`` (1.7 standard deviations for 22 chunks, 1.1 for 6). The second is what a
    relaxed threshold (the retry's 0.1, one standard deviation) cannot go under: the best of a few dozen chunks is
    nearly always one standard deviation above their mean, standing out or not.

    The declared scale a small knowledge base is read on puts its bar where the model's unrelated text sits, which
    is not where every query's is: a short question ("Who approves big purchases?") sits below it, at 0.750 mean
    cosine over a 22-chunk knowledge base for e5, whose unrelated level is 0.77. The bar (0.81, 0.79 on the retry)
    was then 3.6 (2.4) standard deviations above the query's own background, more than the best of 22 chunks
    reaches, and the vector search came back empty however far its best chunk stood out. The similarity threshold
    takes the lower of the two bars: a chunk passes when it clears the declared one or stands out from the rest
    (never a higher bar than before)."""
    if background is None or background.size() >= MIN_ROWS:
        return None
    mu, sigma = query_background(background, query)
    if sigma <= 0.0:
        return None
    from statistics import NormalDist  # only a small knowledge base's search loads it

    n = background.size()
    return mu + max(threshold / COMMON_SD, NormalDist().inv_cdf(n / (n + 1))) * sigma
