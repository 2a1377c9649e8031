"""Where an embedding model's cosines sit, so thresholds written for one scale hold for every model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScoreScale:
    """A model's cosines mapped onto the common scale, MiniLM's (unrelated text ~0, a relevant passage ~0.5, a near
    copy ~1), the one every similarity threshold in the settings is written in.

    ``calibrate`` is ``(cosine - zero) / span``: monotonic, so rankings never change; ``raw`` maps a threshold back,
    for an index that filters raw cosines. The identity (zero 0, span 1) is for models already on that scale.
    """

    zero: float = 0.0
    span: float = 1.0

    def calibrate(self, cosine: float) -> float:
        return (cosine - self.zero) / self.span

    def raw(self, calibrated: float) -> float:
        return self.zero + calibrated * self.span


#: Models that declare no scale are taken to be on the common one.
COMMON_SCALE = ScoreScale()
