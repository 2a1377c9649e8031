"""Profiles' skipped stages and latency budgets, applied by the in-process executor (:mod:`ragstep.models.profiles`
says what each means).

How long a stage will take is learnt, not assumed: :class:`StageTimings` keeps, per process, an exponentially
weighted mean of each optional stage's measured durations (a new observation weighs :data:`ALPHA`). A stage not
seen yet in this process is expected to take nothing, so the first request runs it and teaches the estimate.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from ragstep.models import TraceEvent
from ragstep.models.profiles import DEGRADE_ORDER

ALPHA = 0.3


@dataclass
class StageTimings:
    """Per-process running means of a per-stage quantity: each stage's duration (ms) for latency budgets, its cost
    (USD) for cost budgets; thread-safe."""

    means: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def observe(self, stage: str, ms: float) -> None:
        with self._lock:
            old = self.means.get(stage)
            self.means[stage] = ms if old is None else (1 - ALPHA) * old + ALPHA * ms

    def expected(self, stage: str) -> float:
        return self.means.get(stage, 0.0)


@dataclass(frozen=True, slots=True)
class Budget:
    """A request's budget: when it started (monotonic) and how many milliseconds it may take."""

    started: float
    budget_ms: float

    def left_ms(self) -> float:
        return self.budget_ms - (time.monotonic() - self.started) * 1000.0


def skip_reason(
    stage: str, profile: str, skipped: list[str], budget: Budget | None, timings: StageTimings
) -> TraceEvent | None:
    """The trace row of not running ``stage`` (None: run it)."""
    if stage in skipped:
        return TraceEvent(stage=stage, action="skip", reason=f"profile {profile}: not run")
    if budget is None or stage not in DEGRADE_ORDER:
        return None
    left, needs = budget.left_ms(), timings.expected(stage)
    if needs > 0 and left < needs:
        return TraceEvent(
            stage=stage,
            action="degrade",
            reason=f"budget: {max(left, 0):.0f} ms left of {budget.budget_ms:.0f}, {stage} takes ~{needs:.0f} ms here",
            detail={"budget_ms": budget.budget_ms, "left_ms": round(left, 1), "expected_ms": round(needs, 1)},
        )
    return None
