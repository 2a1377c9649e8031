"""Entry points shared by the CLI, the HTTP API and event handlers: build a state, run a pipeline."""

from __future__ import annotations

from typing import Any

from .models import PipelineState, SearchRequest
from .pipeline import run_pipeline
from .services import Services


def new_state(request: SearchRequest, services: Services, pipeline: str = "knowledge_search") -> PipelineState:
    """A fresh state with the effective retrieval settings (configured defaults + the request's overrides)."""
    effective = request.overrides.apply(services.settings.retrieval_defaults())
    return PipelineState(pipeline=pipeline, request=request, retrieval=effective)


def resolve_kb_refs(request: SearchRequest, services: Services) -> SearchRequest:
    """Accept knowledge base names as well as ids; unknown ones fail here with the list of known names."""
    ids = [services.require_kb(ref).id for ref in request.knowledge_base_ids]
    return request.model_copy(update={"knowledge_base_ids": ids})


def knowledge_search(request: SearchRequest, services: Services) -> PipelineState:
    """Run ``knowledge_search`` with the configured executor (``RAGSTEP_EXECUTOR``): in this process, or on the
    Step Functions state machine (:mod:`ragstep.pipeline.remote`). Both return the same final state."""
    request = resolve_kb_refs(request, services)
    state = new_state(request, services)
    if services.settings.executor == "stepfunctions":
        from .pipeline.remote import run_remote

        return run_remote(state, services, "knowledge_search")
    return run_pipeline("knowledge_search", state, services)


def search_response(state: PipelineState) -> dict[str, Any]:
    """The public JSON shape of a search (``ragstep search --json`` and ``POST /v1/knowledge-search``)."""
    return {
        "query": state.request.query,
        "request_id": state.request_id,
        "results": [r.model_dump(mode="json") for r in state.final_results],
        "trace": [t.model_dump(mode="json") for t in state.trace],
    }
