"""Slack's Web API over httpx (:class:`ragstep.ports.MessageChannel`): post a message in a thread, edit it.

httpx rather than slack_sdk's WebClient: httpx is already in every function's layer, and the two methods used here
are a JSON POST each (slack_sdk would add ~4.5 MB to the layer for them). Rate limits (HTTP 429 + ``Retry-After``)
and 5xx are retried by :class:`~ragstep.adapters._http.JSONEndpoint`; Slack's ``{"ok": false, "error": ...}``
becomes a :class:`~ragstep.errors.ProviderError` naming the method and Slack's error code (never the token).
"""

from __future__ import annotations

from typing import Any

from ragstep.adapters._http import JSONEndpoint
from ragstep.errors import ProviderError

DEFAULT_API_URL = "https://slack.com/api"


class SlackWebClient:
    """``chat.postMessage`` and ``chat.update`` with a bot token; one pooled HTTP client per method."""

    def __init__(self, token: str, *, api_url: str = DEFAULT_API_URL, timeout_s: float = 10.0) -> None:
        if not token:
            raise ProviderError(
                "no Slack bot token: set RAGSTEP_SLACK_BOT_TOKEN (xoxb-..., or an ssm:/secretsmanager: reference to it)"
            )
        base = api_url.rstrip("/")
        self._endpoints = {
            method: JSONEndpoint(
                f"{base}/{method}", source=f"Slack {method}", api_key=token, timeout_s=timeout_s, max_retries=3
            )
            for method in ("chat.postMessage", "chat.update")
        }

    def _call(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        answer = self._endpoints[method].post(payload)
        if not isinstance(answer, dict) or not answer.get("ok"):
            error = answer.get("error", "unknown_error") if isinstance(answer, dict) else "not a JSON object"
            raise ProviderError(f"Slack {method} failed: {error}")
        return answer

    def post(self, channel: str, text: str, *, thread_ts: str | None = None) -> str:
        payload: dict[str, Any] = {"channel": channel, "text": text, "unfurl_links": False}
        if thread_ts:
            payload["thread_ts"] = thread_ts
        return str(self._call("chat.postMessage", payload).get("ts", ""))

    def update(self, channel: str, ts: str, text: str) -> None:
        self._call("chat.update", {"channel": channel, "ts": ts, "text": text})

    def close(self) -> None:
        for endpoint in self._endpoints.values():
            endpoint.close()
