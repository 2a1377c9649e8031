"""Plumbing shared by the adapters that speak HTTP: one-line messages, URLs fit for logs, and a JSON-over-HTTP
endpoint with retries whose failures become :class:`~ragstep.errors.ProviderError` (AWS clients: :mod:`._aws`).

What a provider answered on failure (its body, its URL) is for the operator, not the user: :func:`provider_failure`
logs it on the ``ragstep.providers`` logger, credentials masked, and the error says only which provider failed and
what kind of failure it was (:func:`status_class`).

``httpx`` is imported on first use, as in the adapters themselves.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ragstep import __version__, deadline
from ragstep.errors import ProviderError, mask_credentials

if TYPE_CHECKING:
    import httpx

EXCERPT_CHARS = 200
#: How much of a provider's error body the log keeps.
LOG_BODY_CHARS = 1000

log = logging.getLogger("ragstep.providers")


def one_line(text: str, limit: int = EXCERPT_CHARS) -> str:
    """Collapse whitespace and cut, so provider bodies (HTML error pages, JSON) fit in a one-line message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def display_url(url: str) -> str:
    """The URL without credentials or query string: messages end up in logs and API responses."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def status_class(status: int) -> str:
    """What an HTTP status means for the user, in a few fixed words (the provider's own text is never shown)."""
    if status in (401, 403):
        return "refused the credentials"
    if status == 404:
        return "does not know the model or endpoint"
    if status == 408 or status == 504:
        return "timed out"
    if status == 413:
        return "found the request too large"
    if status == 429:
        return "is rate limiting requests"
    if 400 <= status < 500:
        return "rejected the request"
    if status >= 500:
        return "failed on its side"
    return "answered unexpectedly"


def provider_failure(source: str, url: str, status: int, body: str, *, hint: str = "") -> ProviderError:
    """The error for a provider's HTTP error answer: ``source`` (the provider and model, no URL), the status and its
    class, and ``hint`` (what to fix). The body and the URL are logged, never put in the message."""
    log.warning(
        "%s at %s answered HTTP %d: %s",
        source,
        display_url(url),
        status,
        mask_credentials(one_line(body, LOG_BODY_CHARS)) or "(empty body)",
    )
    return ProviderError(f"{source} {status_class(status)} (HTTP {status}){hint}")


def log_detail(source: str, url: str, what: str, detail: str) -> None:
    """Log what the user's message leaves out (a body that is not JSON, a connection error's text)."""
    log.warning("%s at %s %s: %s", source, display_url(url), what, mask_credentials(one_line(detail, LOG_BODY_CHARS)))


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms`` (OpenAI), ``Retry-After`` seconds or date."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            seconds = float(value) / 1000
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds):
            return max(0.0, seconds)
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if not math.isnan(seconds) else None


class _LazyClient:
    """A client created on first use -- once, even when threads race to it -- then reused."""

    def __init__(self) -> None:
        self._client: Any = None
        self._lock = threading.Lock()

    def _create(self) -> Any:
        raise NotImplementedError

    def get(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._create()
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


# ------------------------------------------------------------------------------------------------------ httpx


class JSONEndpoint(_LazyClient):
    """``POST`` JSON to one URL and decode the JSON answer, retrying what a retry can fix.

    Retried: HTTP 429 and 5xx (honouring ``Retry-After``, capped at ``backoff_max_s``), timeouts, connection
    errors; otherwise exponential backoff with jitter. Any other 4xx fails at once. After the last attempt the
    error is a :class:`ProviderError` that starts with ``source`` and ends with what the server last answered.
    Under a request deadline (:mod:`ragstep.deadline`) an attempt waits at most the time left, and a retry that could
    not finish in time is not started: the error says the deadline stopped it.

    One ``httpx.Client`` per endpoint, created on first use and reused, so calls share pooled connections.
    """

    def __init__(
        self,
        url: str,
        *,
        source: str,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
    ) -> None:
        self.url = url
        self.source = source
        self.timeout_s = timeout_s
        self._api_key = api_key or None
        self._max_retries = max_retries
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        super().__init__()

    @property
    def client(self) -> httpx.Client | None:
        """The pooled client, None until the first call (or after :meth:`close`)."""
        return self._client

    def post(self, payload: Any) -> Any:
        import httpx

        client: httpx.Client = self.get()
        attempts = self._max_retries + 1
        last = ""
        for attempt in range(attempts):
            retry_after: float | None = None
            # Never longer than the request's deadline allows (ragstep.deadline; no deadline = the configured one).
            timeout_s = deadline.attempt_timeout(self.timeout_s)
            if timeout_s is None:
                raise ProviderError(f"{self.source} {deadline.out_of_time(attempt)}{f'; last: {last}' if last else ''}")
            try:
                response = client.post(self.url, json=payload, timeout=timeout_s)
            except httpx.TimeoutException as exc:
                last = f"timed out after {timeout_s:g}s ({type(exc).__name__})"
            except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                log_detail(self.source, self.url, "connection failed", f"{type(exc).__name__}: {exc}")
                last = f"connection failed ({type(exc).__name__})"
            except httpx.HTTPError as exc:  # bad URL scheme, proxy misconfiguration: retrying cannot help
                log_detail(self.source, self.url, "request failed", f"{type(exc).__name__}: {exc}")
                raise ProviderError(f"{self.source} request failed ({type(exc).__name__}); check its URL") from exc
            else:
                if response.is_success:
                    return self._decode(response)
                status = response.status_code
                error = provider_failure(self.source, self.url, status, response.text)
                if status != 429 and status < 500:
                    raise error
                last = f"HTTP {status} ({status_class(status)})"
                retry_after = retry_after_s(response.headers)
            if attempt + 1 < attempts:
                delay = self._delay_s(attempt, retry_after)
                if not deadline.may_retry(delay):  # the retry could not finish before the caller's time is up
                    raise ProviderError(f"{self.source} {deadline.out_of_time(attempt + 1)}; last: {last}")
                time.sleep(delay)
        plural = "s" if attempts != 1 else ""
        raise ProviderError(f"{self.source} failed after {attempts} attempt{plural}: {last}")

    # -- internals -------------------------------------------------------------------------------------------

    def _create(self) -> httpx.Client:
        import httpx

        headers = {"Accept": "application/json", "User-Agent": f"ragstep/{__version__}"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return httpx.Client(timeout=httpx.Timeout(self.timeout_s), headers=headers)

    def _decode(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            log_detail(self.source, self.url, "answered a body that is not JSON", response.text)
            raise ProviderError(
                f"{self.source} answered HTTP {response.status_code} with a body that is not JSON"
            ) from exc

    def _delay_s(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            # The server knows when its rate window resets; capped so a bogus header cannot park a worker.
            return min(retry_after, self._backoff_max_s)
        ceiling = min(self._backoff_max_s, self._backoff_base_s * 2**attempt)
        # Jitter spreads out clients that failed together (parallel ingest workers hitting one rate limit).
        return ceiling * random.uniform(0.5, 1.0)
