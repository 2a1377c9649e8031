"""What the routes every app of the API serves do: ``GET /healthz`` and ``POST /v1/knowledge-search``. The FastAPI
app (:mod:`ragstep.entry.http.app`) and the streaming chat function's Starlette app
(:mod:`ragstep.entry.http.chat_app`) both answer with these."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from ragstep import __version__
from ragstep.app.search import SearchResponse, knowledge_search
from ragstep.context import Context
from ragstep.entry.http.auth import Meter
from ragstep.models import SearchRequest


class Health(BaseModel):
    status: Literal["ok"]
    version: str


def health() -> Health:
    return Health(status="ok", version=__version__)


def search(body: SearchRequest, ctx: Context, usage: Meter) -> SearchResponse:
    """Same JSON as ``ragstep search --json``; the usage record gets the pipeline, how many results and the cost
    receipt's total."""
    state = knowledge_search(body, ctx)
    usage.pipeline, usage.results = state.pipeline, len(state.results("final_results"))
    response = SearchResponse.of(state, ctx)
    usage.add_cost(response.usage["cost"] if response.usage else None)
    return response
