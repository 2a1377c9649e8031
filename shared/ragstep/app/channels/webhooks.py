"""Generic chatbot webhooks: ``POST /v1/webhooks/{integration}`` -- the adapter other chat platforms plug into.

An integration is configured in ``RAGSTEP_WEBHOOK_INTEGRATIONS`` (JSON, by name)::

    {"teams": {"secret": "ssm:/stack/teams-secret", "mode": "callback", "callback_url": "https://bot.example/reply",
               "knowledge_bases": ["docs"], "tenant": "default", "pipeline": "rag"}}

A request is signed like ragstep's callbacks: ``X-Ragstep-Timestamp`` and ``X-Ragstep-Signature: sha256=<hex
HMAC-SHA256(secret, "{timestamp}.{raw body}")>``, at most 300 s old. Its body is ``{conversation_id, message_id,
text, user}``; the conversation is the chat session (history per conversation). ``mode: sync`` answers in the
response (for fast pipelines); ``mode: callback`` acknowledges at once (202) and POSTs the answer and its references,
signed the same way, to ``callback_url``. Both are idempotent by ``message_id``: a repeated message gets the recorded
answer (sync) or nothing more (callback).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, ValidationError

from ragstep.app.channels.slack_worker import ensure_session
from ragstep.context import Clients
from ragstep.errors import ConflictError, InputError, RagstepError, UnauthorizedError
from ragstep.models.base import _Model
from ragstep.settings import resolve_secret
from ragstep.signing import hmac_request_ok

#: Messages are remembered this long per integration and message id.
DEDUPE_TTL_S = 24 * 3600
LOCAL_BUDGET_MS = 120_000
#: How long a concurrent duplicate is told to wait before asking again (the first delivery is still answering).
IN_PROGRESS_RETRY_S = 5
_NO_SECRET = secrets.token_hex(32)


class MessageInProgress(ConflictError):
    """The same message id is being answered by another delivery right now: 409 with ``Retry-After``; asked again
    after it, the recorded answer comes back."""

    code = "in_progress"

    def __init__(self, message: str, retry_after: int = IN_PROGRESS_RETRY_S) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class WebhookMessage(_Model):
    conversation_id: str = Field(min_length=1, max_length=200)
    message_id: str = Field(min_length=1, max_length=200)
    text: str
    user: str = ""


@dataclass(frozen=True)
class Integration:
    name: str
    secret: str = field(repr=False)
    mode: Literal["sync", "callback"] = "sync"
    callback_url: str = ""
    knowledge_bases: tuple[str, ...] = ()
    tenant: str = "default"
    pipeline: str = "rag"


def integrations(raw: str, max_age_s: int = 300) -> dict[str, Integration]:
    """The integrations ``RAGSTEP_WEBHOOK_INTEGRATIONS`` configures (secrets given by reference are resolved)."""
    if not raw.strip():
        return {}
    where = "RAGSTEP_WEBHOOK_INTEGRATIONS"
    try:
        table = json.loads(raw)
    except ValueError:
        raise InputError(f'{where} is not JSON; write {{"<name>": {{"secret": ..., "mode": ...}}}}') from None
    if not isinstance(table, dict):
        raise InputError(f"{where} must be a JSON object of integrations by name")
    found: dict[str, Integration] = {}
    for name, conf in table.items():
        if not isinstance(conf, dict) or not conf.get("secret"):
            raise InputError(f"{where}: integration {name!r} needs a secret")
        mode = conf.get("mode", "sync")
        if mode not in ("sync", "callback") or (mode == "callback" and not conf.get("callback_url")):
            raise InputError(f"{where}: integration {name!r}: mode is sync, or callback with a callback_url")
        found[name] = Integration(
            name=name,
            secret=resolve_secret(str(conf["secret"]), max_age=max_age_s, setting=f"{where}.{name}.secret"),
            mode=mode,
            callback_url=str(conf.get("callback_url", "")),
            knowledge_bases=tuple(conf.get("knowledge_bases", ())),
            tenant=str(conf.get("tenant", "default")),
            pipeline=str(conf.get("pipeline", "rag")),
        )
    return found


class Webhooks:
    """Verifies, deduplicates and answers webhook messages for ``clients``."""

    def __init__(self, clients: Clients) -> None:
        self.clients = clients
        self._lock = threading.Lock()
        self._once: Any = None
        self._config: Any = None

    def verify(self, name: str, body: bytes, timestamp: str | None, signature: str | None) -> WebhookMessage:
        """The message of a signed request; :class:`UnauthorizedError` for an unknown integration or a bad, stale
        or missing signature (the same answer for both: the caller learns no integration names)."""
        settings = self.clients.settings
        integration = integrations(settings.webhook_integrations, settings.secrets_max_age_s).get(name)
        # An unknown integration is checked against a secret nobody has: the same work and answer as a bad signature.
        secret = integration.secret if integration is not None else _NO_SECRET
        if not hmac_request_ok(secret, timestamp, body, signature, time.time()) or integration is None:
            raise UnauthorizedError("invalid, stale or missing X-Ragstep-Signature for this integration")
        try:
            return WebhookMessage.model_validate_json(body)
        except ValidationError as exc:
            from ragstep.models.unknown_fields import first_problem

            raise InputError(first_problem(exc, WebhookMessage) or "invalid message") from None

    def integration(self, name: str) -> Integration:
        settings = self.clients.settings
        return integrations(settings.webhook_integrations, settings.secrets_max_age_s)[name]

    def _answer_once(self) -> tuple[Any, Any]:
        with self._lock:
            if self._once is None:
                from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

                self._config = IdempotencyConfig(
                    event_key_jmespath="[integration, message_id]",
                    raise_on_no_idempotency_key=True,
                    expires_after_seconds=DEDUPE_TTL_S,
                )
                self._once = idempotent_function(
                    self._answer,
                    data_keyword_argument="job",
                    persistence_store=self.clients.idempotency,
                    config=self._config,
                    key_prefix="webhook-message",
                )
            return self._once, self._config

    def _answer(self, job: dict[str, Any]) -> dict[str, Any]:
        from ragstep.app.answers import answer_references
        from ragstep.app.chat import run_chat
        from ragstep.models import ChatRequest

        integration = self.integration(job["integration"])
        ctx = self.clients.context(integration.tenant)
        session_id = f"webhook-{integration.name}-{job['conversation_id']}"
        ensure_session(ctx, session_id)
        request = ChatRequest(
            query=job["text"],
            knowledge_base_ids=list(integration.knowledge_bases),
            session_id=session_id,
            pipeline=integration.pipeline,
        )
        reply: dict[str, Any] = {"conversation_id": job["conversation_id"], "message_id": job["message_id"]}
        try:
            state = run_chat(request, ctx)
        except RagstepError as exc:
            reply["error"] = {"type": exc.code, "message": exc.message}
        else:
            references = answer_references(state)
            reply["answer"] = state.chat.answer
            reply["references"] = [r.model_dump(mode="json") for r in references]
        if integration.mode == "callback":
            self.clients.replies.post_signed(integration.callback_url, reply, integration.secret)
        return reply

    def answer(self, name: str, message: WebhookMessage, lambda_context: Any = None) -> dict[str, Any]:
        """The answer of ``message`` (the recorded one for a repeated message id), sent to the integration's callback
        when its mode is ``callback``."""
        from ragstep.adapters.idempotency import LocalDeadline

        once, config = self._answer_once()
        config.register_lambda_context(lambda_context if lambda_context is not None else LocalDeadline(LOCAL_BUDGET_MS))
        from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

        job = {"integration": name, **message.model_dump()}
        try:
            result: dict[str, Any] = once(job=job)
        except IdempotencyAlreadyInProgressError:
            raise MessageInProgress(
                f"message {message.message_id!r} is being answered by another delivery; "
                f"send it again after {IN_PROGRESS_RETRY_S} s for its answer"
            ) from None
        return result
