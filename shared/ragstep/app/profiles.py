"""Which profile a request runs (:mod:`ragstep.models.profiles`): the built-in ones and those the deployment
defines (``RAGSTEP_PROFILES``, JSON ``{name: {description, retrieval, chat, skip}}``; a deployment's profile of a
built-in name replaces it)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ragstep.context import Context
from ragstep.errors import InputError
from ragstep.models import PipelineState, RetrievalOverrides, SearchRequest, TraceEvent
from ragstep.models.profiles import BUILTIN_PROFILES, DEFAULT_PROFILE, DEGRADE_ORDER, OPTIONAL_STAGES, Profile


def profiles(ctx: Context) -> dict[str, Profile]:
    out = dict(BUILTIN_PROFILES)
    for name, spec in ctx.settings.profiles.items():
        try:
            profile = Profile.model_validate({**spec, "name": name})
        except ValidationError as exc:
            raise InputError(f"RAGSTEP_PROFILES[{name!r}] is invalid: {exc.errors()[0]['msg']}") from None
        wrong = [s for s in profile.skip if s not in OPTIONAL_STAGES]
        if wrong:
            raise InputError(f"RAGSTEP_PROFILES[{name!r}] skips {wrong[0]!r}; only {', '.join(OPTIONAL_STAGES)} can be")
        out[name] = profile
    return out


def resolve(name: str | None, ctx: Context) -> Profile:
    known = profiles(ctx)
    chosen = known.get(name or DEFAULT_PROFILE)
    if chosen is None:
        raise InputError(f"unknown profile {name!r}; choose from {', '.join(sorted(known))}")
    return chosen


def retrieval_overrides(profile: Profile, request: SearchRequest) -> RetrievalOverrides:
    """The profile's retrieval settings under the request's own overrides (what the request names wins)."""
    given: dict[str, Any] = request.overrides.model_dump(exclude_none=True)
    try:
        return RetrievalOverrides.model_validate({**profile.retrieval, **given})
    except ValidationError as exc:
        raise InputError(f"profile {profile.name!r}: {exc.errors()[0]['msg']}") from None


def plan_cost_budget(state: PipelineState, ctx: Context) -> PipelineState:
    """Give up optional stages, in :data:`DEGRADE_ORDER`, until what the request is expected to cost fits its
    ``cost_budget_usd``; each one given up is a ``degrade`` trace row (the executor then passes over it).

    What a stage is expected to cost is learnt, as its expected time is for ``budget_ms``: the mean of what it cost in
    this process's earlier receipts (:func:`ragstep.app.cost.observe`); a stage not priced yet is expected to cost
    nothing, so the first request runs it and teaches the estimate. The answer's model call is never given up: when
    even the smallest plan is over the budget, a row says so and the receipt shows ``over_budget``.
    """
    budget = state.cost_budget_usd
    if budget is None:
        return state
    from ragstep.app.cost import REQUEST
    from ragstep.pipeline.definitions import get_pipeline

    costs = ctx.clients.stage_costs
    skipped = list(state.skip_stages)
    names = [n for n in get_pipeline(state.pipeline).stage_names() if n not in skipped]
    expected = costs.expected(REQUEST) + sum(costs.expected(n) for n in names)
    rows: list[TraceEvent] = []
    for stage in DEGRADE_ORDER:
        if expected <= budget:
            break
        if stage in names and costs.expected(stage) > 0:
            skipped.append(stage)
            expected -= costs.expected(stage)
            rows.append(
                TraceEvent(
                    stage=stage,
                    action="degrade",
                    reason=f"cost budget: ${budget:.6f}; {stage} costs ~${costs.expected(stage):.6f} here",
                    detail={"cost_budget_usd": budget, "expected_usd": round(costs.expected(stage), 10)},
                )
            )
    if expected > budget:
        rows.append(
            TraceEvent(
                stage="cost_budget",
                action="degrade",
                reason=f"expected ~${expected:.6f} with every optional stage given up, over the ${budget:.6f} budget",
                detail={"cost_budget_usd": budget, "expected_usd": round(expected, 10)},
            )
        )
    return state.model_copy(update={"skip_stages": skipped, "trace": [*state.trace, *rows]})
