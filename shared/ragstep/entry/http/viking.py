"""``POST /v1/find`` and ``POST /v1/search``: OpenViking's two retrievals (:mod:`ragstep.app.viking`) over HTTP;
``POST /v1/remember``: a session's memories saved (:mod:`ragstep.app.memories`).

OpenViking's shapes, adapted: the target is a list of knowledge bases (names or ids) instead of a ``viking://``
URI; the answer is ``{query, memories, resources, skills, query_plan, layered, trace}`` (``ragstep find --json``).
Both take their context from :mod:`ragstep.entry.http.deps` (scope ``search``, see ``ROUTE_SCOPES``).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from pydantic import Field

from ragstep.app.memories import remember
from ragstep.app.viking import find, search
from ragstep.entry.http.deps import RequestContext, meter
from ragstep.entry.http.errors import error_doc
from ragstep.models.base import _Model
from ragstep.models.viking import FindResult

router = APIRouter(tags=["hierarchical retrieval"])

_SAID = {
    400: "the request cannot be served as asked (an empty query, a limit or budget out of range)",
    401: "no API key, or a malformed, unknown, revoked or expired one",
    403: "the API key lacks the scope this route needs",
    404: "an unknown knowledge base",
    413: "the request body is over RAGSTEP_MAX_REQUEST_BYTES",
    422: "the body is not what the route takes",
    429: "over the key's rate limit or the tenant's daily quota (see Retry-After)",
    500: "an internal error",
    502: "a model provider failed",
}
_ERRORS: dict[int | str, dict[str, Any]] = {s: error_doc(d) for s, d in _SAID.items()}


class FindRequest(_Model):
    query: Annotated[str, Field(min_length=1, max_length=8000)]
    #: Knowledge bases to search, by name or id.
    knowledge_bases: Annotated[list[str], Field(min_length=1, max_length=50)]
    limit: Annotated[int, Field(ge=1, le=200)] = 10
    #: When given, the matches also come as layered context within this many tokens.
    budget: Annotated[int, Field(ge=100, le=200_000)] | None = None


class HierarchicalSearchRequest(FindRequest):
    #: The chat session whose last messages the intent analyser reads.
    session_id: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    #: Whose memories memory queries search ("default" when not given).
    user: Annotated[str, Field(min_length=1, max_length=64)] | None = None


class RememberRequest(_Model):
    session_id: Annotated[str, Field(min_length=1, max_length=200)]
    user: Annotated[str, Field(min_length=1, max_length=64)] | None = None


class SavedMemory(_Model):
    category: str
    text: str


class RememberResponse(_Model):
    session_id: str
    user: str
    #: Who extracted them: the chat model's name, or ``rule`` (no model: the user's own statements).
    source: str
    saved: list[SavedMemory]
    #: What the user's memories already said (not saved again).
    duplicates: list[SavedMemory]


def _metered(http: Request, pipeline: str, result: FindResult) -> FindResult:
    usage = meter(http)
    usage.pipeline, usage.results = pipeline, result.total
    return result


@router.post("/v1/find", responses=_ERRORS, response_model_exclude_none=True)
def find_route(body: FindRequest, ctx: RequestContext, http: Request) -> FindResult:
    """One query through the knowledge bases' folder trees, no model (``ragstep find``)."""
    result = find(body.query, body.knowledge_bases, ctx, limit=body.limit, budget=body.budget)
    return _metered(http, "find", result)


@router.post("/v1/search", responses=_ERRORS, response_model_exclude_none=True)
def search_route(body: HierarchicalSearchRequest, ctx: RequestContext, http: Request) -> FindResult:
    """The intent analyser's 0-5 typed queries, each through the folder trees (``ragstep search --hierarchical``)."""
    result = search(
        body.query,
        body.knowledge_bases,
        ctx,
        limit=body.limit,
        budget=body.budget,
        session_id=body.session_id,
        user=body.user,
    )
    return _metered(http, "search", result)


@router.post("/v1/remember", responses=_ERRORS)
def remember_route(body: RememberRequest, ctx: RequestContext) -> RememberResponse:
    """Save a session's memories for ``user`` (``ragstep remember``): extracted by the chat model (a rule without
    one), deduplicated against what the user's memories already say."""
    report = remember(ctx, body.session_id, user=body.user)
    return RememberResponse(
        session_id=report.session_id,
        user=report.user,
        source=report.source,
        saved=[SavedMemory(category=m.category, text=m.text) for m in report.saved],
        duplicates=[SavedMemory(category=m.category, text=m.text) for m in report.duplicates],
    )
