"""Lambda handlers of the Slack app: the Events API webhook (light, answers within 3 s) and its worker.

``webhook_handler`` serves ``POST /slack/events`` (an HTTP API route, payload format 2.0). Before its first answer
it loads only the standard library, Powertools' idempotency and parameters utilities and boto3 -- no pydantic, no
ragstep models or settings -- so a cold start stays well inside Slack's 3 s (README: Channels, cold start). It reads
its configuration from the environment itself:

* ``RAGSTEP_SLACK_SIGNING_SECRET`` -- the value, or ``ssm:/name`` / ``secretsmanager:name`` (fetched through
  Powertools parameters, cached ``RAGSTEP_SECRETS_MAX_AGE_S``; never logged);
* ``RAGSTEP_IDEMPOTENCY_BACKEND`` / ``RAGSTEP_IDEMPOTENCY_TABLE`` -- where event ids are remembered;
* ``RAGSTEP_SLACK_WORKER_FUNCTION`` -- the worker, invoked asynchronously with the event.

``worker_handler`` answers the event (:func:`ragstep.app.channels.slack_worker.answer_slack_event`) with the bot
token of ``RAGSTEP_SLACK_BOT_TOKEN`` (a secret reference too, resolved with the other settings).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstep.entry.aws.runtime import get_clients, logger, with_lambda_context

if TYPE_CHECKING:
    from ragstep.app.channels.slack_intake import SlackIntake
    from ragstep.ports import IdempotencyStore

_lock = threading.Lock()
_intakes: dict[str, SlackIntake] = {}
_lambda: Any = None


def raw_body(event: dict[str, Any]) -> bytes | None:
    """The request body exactly as Slack sent it (the signature covers these bytes); None when the event holds no
    body an HTTP API could have sent (not text, or invalid base64)."""
    body = event.get("body") or ""
    if not isinstance(body, str):
        return None
    if event.get("isBase64Encoded") is True:
        try:
            return base64.b64decode(body, validate=True)
        except ValueError:  # binascii.Error
            return None
    return body.encode("utf-8", errors="surrogatepass")


def _answer(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": status, "headers": {"content-type": "application/json"}, "body": json.dumps(body)}


def signing_secret() -> str:
    """``RAGSTEP_SLACK_SIGNING_SECRET``, resolved when it is a reference (the settings' rules, without loading them)."""
    value = os.environ.get("RAGSTEP_SLACK_SIGNING_SECRET", "")
    if not value.startswith(("ssm:", "secretsmanager:")):
        return value
    from aws_lambda_powertools.utilities import parameters

    max_age = int(os.environ.get("RAGSTEP_SECRETS_MAX_AGE_S") or 300)
    if value.startswith("ssm:"):
        secret: Any = parameters.get_parameter(value.removeprefix("ssm:"), decrypt=True, max_age=max_age)
    else:
        name, _, field = value.removeprefix("secretsmanager:").partition("#")
        secret = parameters.get_secret(name, max_age=max_age)
        if field:
            secret = json.loads(secret)[field]
    return secret.decode() if isinstance(secret, bytes) else str(secret)


def _hand_off(envelope: dict[str, Any]) -> None:
    global _lambda
    if _lambda is None:
        from ragstep.adapters._aws import aws_client

        # Short timeouts: the whole answer to Slack must fit in 3 s (an asynchronous invoke returns in tens of ms).
        _lambda = aws_client("lambda", timeout_s=2.0, max_retries=1)
    _lambda.invoke(
        FunctionName=os.environ["RAGSTEP_SLACK_WORKER_FUNCTION"],
        InvocationType="Event",
        Payload=json.dumps(envelope).encode(),
    )


def _intake(secret: str) -> SlackIntake:
    """One intake per signing secret (a rotated secret builds a new one; the store is Powertools' own per intake)."""
    intake = _intakes.get(secret)
    if intake is None:
        with _lock:
            intake = _intakes.get(secret)
            if intake is None:
                from ragstep.adapters.idempotency import make_idempotency_store
                from ragstep.app.channels.slack_intake import SlackIntake

                def store() -> IdempotencyStore:
                    return make_idempotency_store(
                        os.environ.get("RAGSTEP_IDEMPOTENCY_BACKEND") or "sqlite",
                        table=os.environ.get("RAGSTEP_IDEMPOTENCY_TABLE", ""),
                        path=Path(os.environ.get("RAGSTEP_DATA_DIR") or ".ragstep") / "idempotency.sqlite",
                    )

                _intakes.clear()
                intake = _intakes[secret] = SlackIntake(secret, store, _hand_off)
    return intake


def _webhook(event: Any, context: Any) -> dict[str, Any]:
    body = raw_body(event) if isinstance(event, dict) else None
    headers = event.get("headers") if isinstance(event, dict) else None
    if body is None or not isinstance(headers, dict | None):
        logger().info("slack webhook answered 400: not an HTTP API request event")
        return _answer(400, {"error": "invalid_request", "message": "not an HTTP API (payload 2.0) request"})
    text_headers = {str(k): v for k, v in (headers or {}).items() if isinstance(v, str)}
    reply = _intake(signing_secret()).handle(body, text_headers, context)
    if reply.status >= 400:
        logger().info("slack webhook answered %s", reply.status)
    return _answer(reply.status, reply.body)


def _worker(event: Any, context: Any) -> dict[str, Any]:
    """Answer one event the webhook handed off. Never raises: a failure is the outcome (logged, and said in the
    thread where there is one), since an asynchronous invocation that raises is retried and could answer twice."""
    from ragstep.app.channels.slack_intake import is_question
    from ragstep.app.channels.slack_worker import answer_slack_event
    from ragstep.errors import RagstepError

    event_id = event.get("event_id") if isinstance(event, dict) else None
    if not isinstance(event, dict) or not is_question(event):
        logger().warning("slack worker: refused an event that is no question for the bot")
        return {"event_id": event_id if isinstance(event_id, str) else None, "outcome": "refused: not a question event"}
    try:
        clients = get_clients()
        outcome = answer_slack_event(event, clients.context(clients.settings.slack_tenant), clients.slack)
    except RagstepError as exc:
        outcome = f"failed: {exc.message}"
    logger().info("slack event %s: %s", event_id, outcome)
    return {"event_id": event_id, "outcome": outcome}


webhook_handler = with_lambda_context(_webhook)
worker_handler = with_lambda_context(_worker)
