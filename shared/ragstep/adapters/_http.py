"""Plumbing shared by the model-provider adapters (embedders, rerankers): one-line messages, a JSON-over-HTTP
endpoint with retries, and botocore clients whose failures become :class:`~ragstep.errors.ProviderError`.

``httpx``, ``boto3`` and ``botocore`` are imported on first use, as in the adapters themselves.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ragstep import __version__
from ragstep.errors import ProviderError

if TYPE_CHECKING:
    import httpx
    from botocore.config import Config

EXCERPT_CHARS = 200


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
    """A client (httpx or botocore) created on first use -- once, even when threads race to it -- then reused."""

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
            try:
                response = client.post(self.url, json=payload)
            except httpx.TimeoutException as exc:
                last = f"timed out after {self.timeout_s:g}s ({type(exc).__name__})"
            except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                last = f"connection failed ({type(exc).__name__}: {one_line(str(exc), 120)})"
            except httpx.HTTPError as exc:  # bad URL scheme, proxy misconfiguration: retrying cannot help
                raise ProviderError(f"{self.source} request failed: {type(exc).__name__}: {exc}") from exc
            else:
                if response.is_success:
                    return self._decode(response)
                last = f"HTTP {response.status_code}: {one_line(response.text) or '(empty body)'}"
                if response.status_code != 429 and response.status_code < 500:
                    raise ProviderError(f"{self.source} rejected the request: {last}")
                retry_after = retry_after_s(response.headers)
            if attempt + 1 < attempts:
                time.sleep(self._delay_s(attempt, retry_after))
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
            raise ProviderError(
                f"{self.source} answered HTTP {response.status_code} with a body that is not JSON: "
                f"{one_line(response.text)}"
            ) from exc

    def _delay_s(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            # The server knows when its rate window resets; capped so a bogus header cannot park a worker.
            return min(retry_after, self._backoff_max_s)
        ceiling = min(self._backoff_max_s, self._backoff_base_s * 2**attempt)
        # Jitter spreads out clients that failed together (parallel ingest workers hitting one rate limit).
        return ceiling * random.uniform(0.5, 1.0)


# ---------------------------------------------------------------------------------------------------- botocore


def boto_client(
    service: str,
    *,
    region: str | None,
    endpoint_url: str | None,
    timeout_s: float,
    max_retries: int,
    retry_mode: str = "standard",
    max_pool_connections: int = 10,
    client_config: Config | None = None,
) -> Any:
    """A botocore client with our timeouts, retry budget and user agent (``client_config`` merged on top).

    Retries, backoff and timeouts are botocore's (``standard`` mode by default: ``adaptive`` adds client-side
    rate limiting that can stall every thread for seconds, which is rarely worth it in a short-lived Lambda).
    """
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, NoRegionError

    config = Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"mode": retry_mode, "total_max_attempts": max_retries + 1},
        max_pool_connections=max_pool_connections,
        user_agent_extra=f"ragstep/{__version__}",
    )
    if client_config is not None:
        config = config.merge(client_config)
    try:
        # A private Session: boto3's default session is shared module state and not thread-safe.
        return boto3.session.Session().client(service, region_name=region, endpoint_url=endpoint_url, config=config)
    except NoRegionError as exc:
        raise ProviderError("Bedrock needs a region: set RAGSTEP_AWS_REGION or AWS_REGION") from exc
    except BotoCoreError as exc:
        raise ProviderError(f"cannot create a Bedrock client: {one_line(str(exc))}") from exc


def boto_provider_error(source: str, exc: Exception) -> ProviderError:
    """The one-line :class:`ProviderError` for a botocore failure of a call to ``source``.

    ``ClientError`` (the service answered with an error, after botocore's retries) names the error code, the
    HTTP status and the retries spent; anything else (endpoint unreachable, timeouts, missing credentials) says
    the call could not be made.
    """
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return ProviderError(f"{source} could not be called: {one_line(str(exc))}")
    error = exc.response.get("Error", {})
    meta = exc.response.get("ResponseMetadata", {})
    code = error.get("Code", "UnknownError")
    retries = meta.get("RetryAttempts", 0)
    after = f" after {retries} retr{'y' if retries == 1 else 'ies'}" if retries else ""
    hint = (
        " (is access to this model enabled in this account and region?)"
        if code in ("AccessDeniedException", "ResourceNotFoundException")
        else ""
    )
    return ProviderError(
        f"{source} failed{after}: {code} (HTTP {meta.get('HTTPStatusCode', '?')}): "
        f"{one_line(error.get('Message', '')) or '(no message)'}{hint}"
    )


class LazyBotoClient(_LazyClient):
    """One :func:`boto_client` (``options`` are its keyword arguments), created on first use and reused."""

    def __init__(self, service: str, **options: Any) -> None:
        super().__init__()
        self._service = service
        self._options = options

    def _create(self) -> Any:
        return boto_client(self._service, **self._options)
