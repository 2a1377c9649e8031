"""Where event-driven retrieval delivers a result (:class:`ragstep.ports.ResultDelivery`): an EventBridge bus, an
SQS queue, or a signed HTTPS callback retried with backoff.

The AWS clients come from :mod:`ragstep.adapters._aws` (one client policy: standard retries, timeouts), created on
first use; the callback client is one pooled ``httpx.Client``. Every failure is a
:class:`~ragstep.errors.ProviderError` that names the target kind and never the callback secret.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from typing import Any

from ragstep.adapters._aws import LazyAwsClient, boto_provider_error
from ragstep.adapters._http import display_url, one_line, retry_after_s
from ragstep.errors import ProviderError
from ragstep.models.retrieval_events import COMPLETED, SOURCE, ReplyTarget
from ragstep.signing import hmac_signature

#: Callback attempts (the first and the retries) and the backoff cap between them.
CALLBACK_ATTEMPTS = 4
CALLBACK_BACKOFF_MAX_S = 8.0


class ResultReplies:
    """Delivers result events; ``callback_secret`` signs callbacks (``X-Ragstep-Signature``)."""

    def __init__(
        self,
        *,
        callback_secret: str = "",
        callback_attempts: int = CALLBACK_ATTEMPTS,
        backoff_base_s: float = 0.5,
        timeout_s: float = 10.0,
    ) -> None:
        self._events = LazyAwsClient("events")
        self._sqs = LazyAwsClient("sqs")
        self._secret = callback_secret
        self._attempts = max(1, callback_attempts)
        self._backoff_base_s = backoff_base_s
        self._timeout_s = timeout_s
        self._http: Any = None

    def deliver(self, target: ReplyTarget, event: Mapping[str, Any]) -> str:
        """Send ``event`` (``{source, detail-type, detail}``) to ``target``; returns where it went, for logs."""
        body = json.dumps(event["detail"], ensure_ascii=False, separators=(",", ":"))
        if target.eventbridge:
            return self._to_bus(target.eventbridge, body)
        if target.sqs:
            return self._to_queue(target.sqs, json.dumps(event, ensure_ascii=False, separators=(",", ":")))
        assert target.callback  # ReplyTarget holds exactly one
        return self._to_callback(target.callback, json.dumps(event, ensure_ascii=False).encode())

    def _to_bus(self, bus: str, detail: str) -> str:
        entry = {"Source": SOURCE, "DetailType": COMPLETED, "Detail": detail, "EventBusName": bus}
        try:
            answer = self._events.get().put_events(Entries=[entry])
        except Exception as exc:
            raise boto_provider_error("EventBridge PutEvents", exc) from exc
        if answer.get("FailedEntryCount"):
            failed = answer["Entries"][0]
            raise ProviderError(
                f"EventBridge refused the result: {failed.get('ErrorCode')}: {failed.get('ErrorMessage')}"
            )
        return f"eventbridge:{bus}"

    def _to_queue(self, url: str, body: str) -> str:
        try:
            self._sqs.get().send_message(QueueUrl=url, MessageBody=body)
        except Exception as exc:
            raise boto_provider_error("SQS SendMessage", exc) from exc
        return f"sqs:{url}"

    def post_signed(self, url: str, payload: Mapping[str, Any], secret: str) -> str:
        """POST ``payload`` to ``url`` signed with ``secret`` (a chatbot webhook's reply), retried as callbacks are."""
        body = json.dumps(payload, ensure_ascii=False).encode()
        return self._to_callback(url, body, secret)

    def _to_callback(self, url: str, body: bytes, secret: str | None = None) -> str:
        import httpx

        if self._http is None:
            self._http = httpx.Client(timeout=self._timeout_s)
        last = ""
        for attempt in range(self._attempts):
            timestamp = str(int(time.time()))
            headers = {"Content-Type": "application/json", "X-Ragstep-Timestamp": timestamp}
            key = self._secret if secret is None else secret
            if key:
                headers["X-Ragstep-Signature"] = hmac_signature(key, timestamp, body)
            retry_after: float | None = None
            try:
                response = self._http.post(url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {one_line(str(exc), 120)}"
            else:
                if response.is_success:
                    return f"callback:{display_url(url)}"
                last = f"HTTP {response.status_code}"
                if response.status_code != 429 and response.status_code < 500 and response.status_code != 408:
                    break  # the receiver refused this result: sending it again cannot help
                retry_after = retry_after_s(response.headers)
            if attempt + 1 < self._attempts:
                ceiling = min(CALLBACK_BACKOFF_MAX_S, self._backoff_base_s * 2**attempt)
                time.sleep(
                    min(retry_after, CALLBACK_BACKOFF_MAX_S)
                    if retry_after is not None
                    else ceiling * random.uniform(0.5, 1)
                )
        raise ProviderError(f"callback {display_url(url)} failed after {attempt + 1} attempt(s): {last}")
