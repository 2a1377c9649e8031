"""``POST /v1/webhooks/{integration}``: signed chatbot messages (:mod:`ragstep.app.channels.webhooks`).

These routes authenticate by the integration's HMAC signature, not by an API key: a chat platform signs with the
secret it shares with this integration, and the integration's configuration names the tenant and knowledge bases
its questions may use. The context comes from the process's clients (:func:`ragstep.entry.http.deps.clients_of`)
for that configured tenant -- never from the request.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.responses import JSONResponse

from ragstep.entry.http.deps import clients_of
from ragstep.entry.http.errors import error_doc, error_response

router = APIRouter()


def _webhooks(request: Request) -> Any:
    from ragstep.app.channels.webhooks import Webhooks

    found = getattr(request.app.state, "webhooks", None)
    if found is None:
        found = request.app.state.webhooks = Webhooks(clients_of(request))
    return found


@router.post(
    "/v1/webhooks/{integration}",
    status_code=200,
    responses={
        409: error_doc("another delivery of this message id is being answered; send it again after Retry-After")
    },
)
async def webhook(integration: str, request: Request, background: BackgroundTasks) -> JSONResponse:
    """A signed ``{conversation_id, message_id, text, user}``: answered in the response (``mode: sync``), or
    acknowledged with 202 and answered by a signed POST to the integration's callback URL (``mode: callback``).

    A sync message whose id another delivery is answering right now gets 409 ``in_progress`` with ``Retry-After``;
    sent again after it, the recorded answer. Every bad, stale, missing or malformed signature, and an unknown
    integration, is the same 401."""
    from starlette.concurrency import run_in_threadpool

    from ragstep.app.channels.webhooks import MessageInProgress

    hooks = _webhooks(request)
    body = await request.body()
    message = hooks.verify(
        integration, body, request.headers.get("x-ragstep-timestamp"), request.headers.get("x-ragstep-signature")
    )
    if hooks.integration(integration).mode == "callback":
        background.add_task(_answer_quietly, hooks, integration, message)
        return JSONResponse({"accepted": True, "message_id": message.message_id}, status_code=202)
    try:
        answer = await run_in_threadpool(hooks.answer, integration, message)
    except MessageInProgress as exc:
        return error_response(409, exc.code, exc.message, headers={"Retry-After": str(exc.retry_after)})
    return JSONResponse(answer)


def _answer_quietly(hooks: Any, integration: str, message: Any) -> None:
    """A callback-mode answer after the 202: failures are logged (the platform was answered already)."""
    import logging

    from ragstep.app.channels.webhooks import MessageInProgress

    try:
        hooks.answer(integration, message)
    except MessageInProgress:
        pass  # a concurrent delivery of the same message is answering it
    except Exception:
        logging.getLogger(__name__).exception("webhook %s: answering message failed", integration)
