"""The Slack Events API webhook's decision, kept light: verify, answer ``url_verification``, drop what is not a
question for the bot, deduplicate by ``event_id``, hand the work off, answer 200 -- all well within Slack's 3 s.

Slack retries an event it got no 200 for within 3 s (``X-Slack-Retry-Num`` 1, 2, 3, over about five minutes) with
the same ``event_id``. The first delivery writes an idempotency record (a conditional write: Powertools idempotency,
DynamoDB on AWS, SQLite locally) before the hand-off; a retry, or a concurrent duplicate, finds it and starts
nothing. The record lives :data:`DEDUPE_TTL_S`, well past Slack's retry window. A hand-off that fails removes the
record and answers 500, so Slack's next retry tries again: an event is neither lost nor answered twice.

Standard library and Powertools idempotency only (no pydantic, no ragstep models).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ragstep.signing import slack_request_ok

if TYPE_CHECKING:
    from ragstep.ports import IdempotencyStore

log = logging.getLogger(__name__)

#: How long an ``event_id`` is remembered: Slack retries for about five minutes; an hour is well past that.
DEDUPE_TTL_S = 3600
#: The events the bot answers: mentions in channels and messages in its direct-message conversations.
ANSWERED = ("app_mention", "message")
#: Message subtypes that are edits, joins, deletions, bot posts ...: never a new question.
_QUESTION_SUBTYPES = (None, "", "file_share", "thread_broadcast")

#: How long a hand-off may hold its in-progress record outside Lambda (where the invocation's remaining time bounds
#: it): a process that dies mid-hand-off blocks that event's retries no longer than this.
LOCAL_HANDOFF_BUDGET_MS = 10_000

Handoff = Callable[[dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: dict[str, Any] = field(default_factory=dict)


def _unauthorized() -> Reply:
    return Reply(401, {"error": "unauthorized", "message": "invalid or stale Slack signature"})


def bot_user_ids(envelope: Mapping[str, Any]) -> set[str]:
    """The bot users this app is installed as (Slack lists them in ``authorizations``)."""
    authorizations = envelope.get("authorizations")
    return {
        str(a.get("user_id"))
        for a in (authorizations if isinstance(authorizations, list) else ())
        if isinstance(a, Mapping) and a.get("is_bot") and a.get("user_id")
    }


def is_question(envelope: Mapping[str, Any]) -> bool:
    """Whether an ``event_callback`` is something the bot answers: a mention, or a direct message; never a bot's
    message (its own included), an edit or any other message subtype."""
    event = envelope.get("event")
    if not isinstance(event, Mapping) or event.get("type") not in ANSWERED:
        return False
    if event.get("bot_id") or event.get("bot_profile") or event.get("subtype") not in _QUESTION_SUBTYPES:
        return False
    if not event.get("user") or event.get("user") in bot_user_ids(envelope):
        return False
    if event.get("type") == "message" and event.get("channel_type") != "im":
        return False  # channel messages reach the bot as app_mention when they mention it
    return bool(str(event.get("text") or "").strip()) and bool(event.get("channel")) and bool(event.get("ts"))


class SlackIntake:
    """What the webhook does with one request (``handle``); the hand-off is the caller's (an asynchronous Lambda
    invoke on AWS, a worker thread in ``ragstep slack serve``)."""

    def __init__(
        self,
        signing_secret: str,
        store: Callable[[], IdempotencyStore],
        handoff: Handoff,
        *,
        ttl_s: int = DEDUPE_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = signing_secret
        self._store = store
        self._handoff = handoff
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._accept: Callable[..., dict[str, Any]] | None = None
        self._config: Any = None

    def _accepting(self) -> tuple[Callable[..., dict[str, Any]], Any]:
        """The deduplicating hand-off, built on the first event that needs it: url_verification and forged requests
        never load Powertools idempotency or the store's client (boto3 on AWS)."""
        with self._lock:
            if self._accept is None:
                from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

                config = IdempotencyConfig(
                    event_key_jmespath="event_id", raise_on_no_idempotency_key=True, expires_after_seconds=self._ttl_s
                )
                handoff = self._handoff

                def accept(envelope: dict[str, Any]) -> dict[str, Any]:
                    handoff(envelope)
                    return {"ok": True, "event_id": envelope["event_id"]}

                self._accept = idempotent_function(
                    accept,
                    data_keyword_argument="envelope",
                    persistence_store=self._store(),
                    config=config,
                    key_prefix="slack-event",
                )
                self._config = config
            return self._accept, self._config

    def handle(self, body: bytes, headers: Mapping[str, str], lambda_context: Any = None) -> Reply:
        lower = {k.lower(): v for k, v in headers.items()}
        timestamp, signature = lower.get("x-slack-request-timestamp"), lower.get("x-slack-signature")
        if not slack_request_ok(self._secret, timestamp, body, signature, self._clock()):
            return _unauthorized()
        try:
            envelope = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the decoder goes
            return Reply(400, {"error": "invalid_request", "message": "the body is not JSON (or is nested too deep)"})
        if not isinstance(envelope, dict):
            return Reply(400, {"error": "invalid_request", "message": "the body is not a JSON object"})
        kind = envelope.get("type")
        if kind == "url_verification":
            return Reply(200, {"challenge": str(envelope.get("challenge", ""))})
        if kind != "event_callback" or not is_question(envelope) or not envelope.get("event_id"):
            return Reply(200, {"ok": True, "ignored": True})
        return self._dedupe_and_hand_off(envelope, lower.get("x-slack-retry-num"), lambda_context)

    def _dedupe_and_hand_off(self, envelope: dict[str, Any], retry: str | None, lambda_context: Any) -> Reply:
        from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

        accept, config = self._accepting()
        from ragstep.adapters.idempotency import LocalDeadline

        deadline: Any = lambda_context if lambda_context is not None else LocalDeadline(LOCAL_HANDOFF_BUDGET_MS)
        config.register_lambda_context(deadline)
        try:
            accept(envelope=envelope)
        except IdempotencyAlreadyInProgressError:
            log.info("slack event %s: a concurrent delivery is handing it off", envelope["event_id"])
            return Reply(200, {"ok": True, "duplicate": True})
        except Exception:
            log.exception("slack event %s: hand-off failed; Slack will retry", envelope["event_id"])
            return Reply(500, {"error": "unavailable", "message": "could not start the answer; retry"})
        if retry:
            log.info("slack event %s: retry %s", envelope["event_id"], retry)
        return Reply(200, {"ok": True})
