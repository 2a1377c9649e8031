"""Which profile a request runs (:mod:`ragstep.models.profiles`): the built-in ones and those the deployment
defines (``RAGSTEP_PROFILES``, JSON ``{name: {description, retrieval, chat, skip}}``; a deployment's profile of a
built-in name replaces it)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ragstep.context import Context
from ragstep.errors import InputError
from ragstep.models import RetrievalOverrides, SearchRequest
from ragstep.models.profiles import BUILTIN_PROFILES, DEFAULT_PROFILE, OPTIONAL_STAGES, Profile


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
