"""The FastAPI routes of ``POST /v1/chat/completions`` (OpenAI Chat Completions compatible) and ``GET /v1/models``:
their OpenAPI declarations and dependencies. What they do (the bodies, the plan, the stream's frames) is
:mod:`ragstep.entry.http.completions`, which the streaming chat function's Starlette app serves too.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from ragstep.context import Context
from ragstep.entry.http.completions import ChatCompletionRequest, complete, model_list
from ragstep.entry.http.deps import meter, require_scope
from ragstep.entry.http.errors import error_doc

router = APIRouter()

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: error_doc(said)
    for status, said in {
        400: "the request cannot be served as asked: the message says what to change",
        401: "no API key, or a malformed, revoked or expired one",
        403: "the API key lacks the chat scope",
        404: "an unknown knowledge base, or a session this caller does not have",
        409: "the session has no running answer to stop",
        413: "the request body is over RAGSTEP_MAX_REQUEST_BYTES",
        422: "the body is not valid JSON or a field breaks its rule (the message names it)",
        429: "the API key's rate limit or the tenant's daily quota is used up",
        500: "an internal error (the server's log has the details)",
        502: "the chat, embedding or rerank provider failed",
        503: "the index, catalog, history or blob store cannot be used",
    }.items()
}


#: The chat routes' context: the caller's tenant, when its API key has the ``chat`` scope.
ChatContext = Annotated[Context, Depends(require_scope("chat"))]


@router.post(
    "/v1/chat/completions",
    response_model=None,
    responses={
        200: {
            "description": "a chat.completion (JSON), or with stream=true chat.completion.chunk frames (SSE)",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        **ERROR_RESPONSES,
    },
)
def chat_completions(body: ChatCompletionRequest, ctx: ChatContext, request: Request) -> Response:
    """OpenAI Chat Completions over the chat pipelines: answers grounded in the knowledge bases, streamed or not."""
    return complete(body, ctx, meter(request))


@router.get("/v1/models", responses={s: ERROR_RESPONSES[s] for s in (401, 403, 429, 500)})
def models(_: ChatContext) -> dict[str, Any]:
    """The pipeline profiles ``model`` may name (OpenAI's model list, for clients that offer a choice)."""
    return model_list()
