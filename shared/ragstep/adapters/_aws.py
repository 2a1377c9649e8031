"""The one way ragstep's adapters talk to AWS: botocore clients from one shared Session, and their failures as
one-line errors.

* **One botocore data loader per process.** What makes a client slow to create is loading botocore's endpoint and
  service models (tens of milliseconds each time a fresh Session loads them). Every client is made from a Session
  that shares the process's one loader, so a cold start loads each model once however many adapters it builds.
  Credentials and region, on the other hand, are resolved per client, as boto3 documents them: a Session kept for
  the life of the process would pin the credentials it saw first (a changed role or environment would go unseen).
  Session creation is serialised by a lock (``Session.client`` is not thread-safe); the clients are thread-safe and
  are reused for the life of the adapter.
* **Standard retry mode** (exponential backoff with jitter on throttling and transient errors). ``adaptive`` adds
  client-side rate limiting that can stall every thread for seconds, rarely worth it in a short-lived Lambda.
* **Timeouts** on connect and read, so a stuck endpoint fails the call instead of the whole invocation.

``boto3`` and ``botocore`` are imported on first use: the embedded mode never loads them.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any

from ragstep import __version__
from ragstep.adapters._http import log, one_line
from ragstep.errors import ProviderError, mask_credentials

# Bedrock's ValidationException when the prompt is over the model's window ("Input is too long for requested model",
# "prompt is too long", "too many input tokens").
_CONTEXT_OVERFLOW = re.compile(r"too long|too many (?:input )?tokens|context (?:length|window)", re.IGNORECASE)

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

#: Defaults of the stores (DynamoDB, S3); model clients pass the provider settings instead.
STORE_TIMEOUT_S = 20.0
STORE_MAX_RETRIES = 5

_session_lock = threading.Lock()
_loader: Any = None


def aws_session() -> boto3.session.Session:
    """A new boto3 Session over the process's shared botocore data loader (created on first use).

    Not boto3's module-level default Session: that one is shared with any other library in the process and is not
    thread-safe.
    """
    global _loader
    import boto3
    import botocore.loaders
    import botocore.session

    with _session_lock:
        if _loader is None:
            _loader = botocore.loaders.create_loader()
        core = botocore.session.Session()
        core.register_component("data_loader", _loader)
        return boto3.session.Session(botocore_session=core)


def client_config(
    *,
    timeout_s: float = STORE_TIMEOUT_S,
    max_retries: int = STORE_MAX_RETRIES,
    retry_mode: str = "standard",
    max_pool_connections: int = 10,
) -> Config:
    """Our timeouts, retry budget (``max_retries`` after the first attempt) and user agent."""
    from botocore.config import Config

    return Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"mode": retry_mode, "total_max_attempts": max_retries + 1},
        max_pool_connections=max_pool_connections,
        user_agent_extra=f"ragstep/{__version__}",
    )


def aws_client(
    service: str,
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    timeout_s: float = STORE_TIMEOUT_S,
    max_retries: int = STORE_MAX_RETRIES,
    retry_mode: str = "standard",
    max_pool_connections: int = 10,
    config: Config | None = None,
) -> Any:
    """A client of ``service`` over the shared data loader (``config`` merged over :func:`client_config`).

    botocore's own errors (no region, unknown service) propagate: each adapter says what they mean for it.
    """
    merged = client_config(
        timeout_s=timeout_s, max_retries=max_retries, retry_mode=retry_mode, max_pool_connections=max_pool_connections
    )
    if config is not None:
        merged = merged.merge(config)
    session = aws_session()
    with _session_lock:  # Session.client is not thread-safe (the loader it shares is read under this lock)
        return session.client(service, region_name=region, endpoint_url=endpoint_url, config=merged)


class LazyAwsClient:
    """One :func:`aws_client` (``options`` are its keyword arguments), created on first use -- once, even when
    threads race to it -- then reused."""

    def __init__(self, service: str, **options: Any) -> None:
        self._service = service
        self._options = options
        self._client: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = aws_client(self._service, **self._options)
        return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def model_client(service: str, **options: Any) -> LazyAwsClient:
    """A lazily created client of a Bedrock service whose creation failures are :class:`ProviderError` s."""
    return _ModelClient(service, **options)


class _ModelClient(LazyAwsClient):
    def get(self) -> Any:
        from botocore.exceptions import BotoCoreError, NoRegionError

        try:
            return super().get()
        except NoRegionError as exc:
            raise ProviderError("Bedrock needs a region: set RAGSTEP_AWS_REGION or AWS_REGION") from exc
        except BotoCoreError as exc:
            raise ProviderError(f"cannot create a Bedrock client: {one_line(str(exc))}") from exc


def error_code(exc: Exception) -> str:
    """The service's error code of a botocore ``ClientError`` ("" for anything else)."""
    response = getattr(exc, "response", None)
    return str((response or {}).get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def boto_provider_error(source: str, exc: Exception) -> ProviderError:
    """The one-line :class:`ProviderError` for a botocore failure of a call to ``source``.

    ``ClientError`` (the service answered with an error, after botocore's retries) names the error code, the
    HTTP status and the retries spent; anything else (endpoint unreachable, timeouts, missing credentials) says
    the call could not be made.
    """
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        # botocore's text names endpoints and local paths: logged, the user gets the failure's kind.
        log.warning("%s could not be called: %s", source, one_line(str(exc), 1000))
        return ProviderError(f"{source} could not be called ({type(exc).__name__})")
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
    message = one_line(error.get("Message", "")) or "(no message)"
    if code == "ValidationException" and _CONTEXT_OVERFLOW.search(message):
        hint = (
            ": the prompt does not fit the model's context window; set RAGSTEP_CHAT_CONTEXT_WINDOW to the model's "
            "context size (in tokens)"
        )
    # The service's message can quote the request: logged (credentials masked by the logger's caller), not shown.
    log.warning("%s failed%s: %s: %s", source, after, code, mask_credentials(message))
    return ProviderError(f"{source} failed{after}: {code} (HTTP {meta.get('HTTPStatusCode', '?')}){hint}")
