"""Entry points shared by the CLI, the HTTP API and event handlers: build a state, run a pipeline."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ragstep.context import Context
from ragstep.models import PipelineState, SearchRequest, SearchResult, TraceEvent
from ragstep.pipeline import run_pipeline
from ragstep.stages.search.scope import resolve_scope


def new_state(request: SearchRequest, ctx: Context, pipeline: str = "knowledge_search") -> PipelineState:
    """A fresh state of ``ctx``'s tenant: the effective retrieval settings (configured defaults + the request's
    overrides) and the request's knowledge bases and documents, read once here for every stage."""
    effective = request.overrides.apply(ctx.settings.retrieval_defaults())
    state = PipelineState(pipeline=pipeline, tenant_id=ctx.tenant_id, request=request, retrieval=effective)
    return resolve_scope(state, ctx)


def knowledge_search(request: SearchRequest, ctx: Context) -> PipelineState:
    """Run ``knowledge_search`` with the configured executor (``RAGSTEP_EXECUTOR``): in this process, or on the
    Step Functions state machine (:mod:`ragstep.pipeline.remote`). Both return the same final state."""
    state = new_state(request, ctx)
    if ctx.settings.executor == "stepfunctions":
        from ragstep.pipeline.remote import run_remote

        return run_remote(state, ctx, "knowledge_search")
    return run_pipeline("knowledge_search", state, ctx)


class SearchResponse(BaseModel):
    """The public answer of a search (``ragstep search --json`` and ``POST /v1/knowledge-search``)."""

    # Built when first used: a plain ``ragstep search`` prints without it.
    model_config = ConfigDict(defer_build=True)

    query: str
    request_id: str
    results: list[SearchResult]
    trace: list[TraceEvent]

    @classmethod
    def of(cls, state: PipelineState) -> SearchResponse:
        return cls(
            query=state.request.query, request_id=state.request_id, results=state.final_results, trace=state.trace
        )


def search_response(state: PipelineState) -> dict[str, Any]:
    """:class:`SearchResponse` of ``state`` as JSON-ready data."""
    return SearchResponse.of(state).model_dump(mode="json")
