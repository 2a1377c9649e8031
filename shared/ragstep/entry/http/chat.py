"""The FastAPI routes of ``POST /v1/chat/completions`` (OpenAI Chat Completions compatible) and ``GET /v1/models``:
their OpenAPI declarations and dependencies. What they do (the bodies, the plan, the stream's frames) is
:mod:`ragstep.entry.http.completions`, which the streaming chat function's Starlette app serves too. Their errors are
OpenAI's shape (:class:`~ragstep.entry.http.errors.OpenAIErrorBody`), not the rest of the API's.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from ragstep.context import Context
from ragstep.entry.http.completions import ChatCompletionRequest, complete
from ragstep.entry.http.deps import meter, require_scope
from ragstep.entry.http.errors import OpenAIErrorBody, error_doc
from ragstep.entry.http.model_ids import model_list, model_object

router = APIRouter()

#: Where the OpenAPI document defines :class:`OpenAIErrorBody` (the chat route's 400 declares it with its model).
OPENAI_ERROR_SCHEMA_REF = "#/components/schemas/OpenAIErrorBody"


def openai_error_doc(description: str) -> dict[str, Any]:
    """An error status of these routes in the OpenAPI document (see :func:`ragstep.entry.http.errors.error_doc`)."""
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": OPENAI_ERROR_SCHEMA_REF}}},
    }


#: What each error status of the chat and session routes means.
SAID: dict[int, str] = {
    400: "the request cannot be served as asked: the message says what to change",
    401: "no API key, or a malformed, revoked or expired one",
    403: "the API key lacks the chat scope",
    404: "an unknown knowledge base (in model or the body), or a session this caller does not have",
    409: "the session has no running answer to stop",
    413: "the request body is over RAGSTEP_MAX_REQUEST_BYTES",
    422: "the body is not valid JSON or a field breaks its rule (the message names it)",
    429: "the API key's rate limit or the tenant's daily quota is used up",
    500: "an internal error (the server's log has the details)",
    502: "the chat, embedding or rerank provider failed",
    503: "the index, catalog, history or blob store cannot be used",
}
#: The session routes' error bodies ({error, message}).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {status: error_doc(said) for status, said in SAID.items()}
#: The OpenAI-compatible routes' error bodies (OpenAI's shape).
OPENAI_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: openai_error_doc(said) for status, said in SAID.items()
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
        **OPENAI_ERROR_RESPONSES,
        # The one declared with its model: it puts the schema into the document, where the others refer to it.
        400: {"model": OpenAIErrorBody, "description": SAID[400]},
    },
)
def chat_completions(body: ChatCompletionRequest, ctx: ChatContext, request: Request) -> Response:
    """OpenAI Chat Completions over the chat pipelines: answers grounded in the knowledge bases, streamed or not."""
    return complete(body, ctx, meter(request))


@router.get("/v1/models", responses={s: OPENAI_ERROR_RESPONSES[s] for s in (401, 403, 429, 500)})
def models(ctx: ChatContext) -> dict[str, Any]:
    """What ``model`` may name (OpenAI's model list, for clients that offer a choice): the pipeline profiles, then
    ``ragstep/<name>`` for each knowledge base this API key may use."""
    return model_list(ctx)


@router.get("/v1/models/{model:path}", responses={s: OPENAI_ERROR_RESPONSES[s] for s in (401, 403, 404, 422, 429, 500)})
def retrieve_model(model: str, ctx: ChatContext) -> dict[str, Any]:
    """One model ``model`` may name (OpenAI's model retrieval): a pipeline profile, or ``ragstep/<name>`` of a
    knowledge base this API key may use (404 otherwise)."""
    return model_object(model, ctx)
