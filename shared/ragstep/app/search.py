"""Entry points shared by the CLI, the HTTP API and event handlers: build a state, run a pipeline."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ragstep.app.cost import cost_of, observe
from ragstep.app.session_access import require_session
from ragstep.context import Context
from ragstep.errors import InputError
from ragstep.models import PipelineState, SearchRequest, SearchResult, TraceEvent
from ragstep.models.base import check_markup
from ragstep.models.cost import CostReceipt
from ragstep.pipeline import run_pipeline
from ragstep.stages.search.scope import resolve_scope


def new_state(request: SearchRequest, ctx: Context, pipeline: str = "knowledge_search") -> PipelineState:
    """A fresh state of ``ctx``'s tenant: the effective retrieval settings (configured defaults + the request's
    overrides) and the request's knowledge bases and documents, read once here for every stage; the request's profile
    (:mod:`ragstep.app.profiles`) sets what the request leaves unset and which optional stages run."""
    from ragstep.app.profiles import plan_cost_budget, resolve, retrieval_overrides

    profile = resolve(request.profile, ctx)
    effective = retrieval_overrides(profile, request).apply(ctx.settings.retrieval_defaults())
    state = PipelineState(
        pipeline=pipeline,
        tenant_id=ctx.tenant_id,
        request=request,
        retrieval=effective,
        profile=profile.name,
        skip_stages=list(profile.skip),
        budget_ms=request.budget_ms,
        cost_budget_usd=request.cost_budget_usd,
    )
    return plan_cost_budget(resolve_scope(state, ctx), ctx)


def knowledge_search(request: SearchRequest, ctx: Context) -> PipelineState:
    """Run ``knowledge_search`` with the configured executor (``RAGSTEP_EXECUTOR``): in this process, or on the
    Step Functions state machine (:mod:`ragstep.pipeline.remote`). Both return the same final state.

    A ``session_id`` names a chat session the caller may see (its history's references join the results), else
    404, as chat answers (:func:`ragstep.app.session_access.require_session`)."""
    try:
        check_markup(request.query)  # as a chat question is checked: no route accepts what another refuses
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if request.session_id is not None:
        require_session(ctx, request.session_id)
    state = new_state(request, ctx)
    if ctx.settings.executor == "stepfunctions":
        from ragstep.pipeline.remote import run_remote

        final = run_remote(state, ctx, "knowledge_search")
    else:
        final = run_pipeline("knowledge_search", state, ctx)
    observe(final, ctx)
    return final


class SearchResponse(BaseModel):
    """The public answer of a search (``ragstep search --json`` and ``POST /v1/knowledge-search``)."""

    # Built when first used: a plain ``ragstep search`` prints without it.
    model_config = ConfigDict(defer_build=True)

    query: str
    request_id: str
    results: list[SearchResult]
    trace: list[TraceEvent]
    #: The profile that ran (ragstep.models.profiles).
    profile: str = "standard"
    #: What the request cost, estimated (ragstep.app.cost); present when the response is made with its context.
    usage: dict[str, CostReceipt] | None = None

    @classmethod
    def of(cls, state: PipelineState, ctx: Context | None = None) -> SearchResponse:
        return cls(
            query=state.request.query,
            request_id=state.request_id,
            results=state.results("final_results"),
            trace=state.trace,
            profile=state.profile,
            usage=None if ctx is None else {"cost": cost_of(state, ctx)},
        )


def search_response(state: PipelineState, ctx: Context | None = None) -> dict[str, Any]:
    """:class:`SearchResponse` of ``state`` as JSON-ready data (with its cost receipt when ``ctx`` is given)."""
    body = SearchResponse.of(state, ctx).model_dump(mode="json")
    if body["usage"] is None:
        del body["usage"]
    return body
