"""Errors users can act on.

Every error raised on purpose derives from :class:`RagstepError` and carries a one-line message that says what to fix.
The CLI maps them to exit code 2, the HTTP API to a 4xx JSON body, and the state machine does not retry them.
"""

from __future__ import annotations

import re


class RagstepError(Exception):
    """Base class; ``http_status`` is what the API answers with."""

    http_status = 500
    code = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        # The pipeline state at the failing stage (with ``error`` set), when the error came from a pipeline run.
        self.state: object | None = None

    def to_dict(self) -> dict[str, str]:
        return {"error": self.code, "message": self.message}


class InputError(RagstepError):
    """The request or file is wrong; retrying the same input will fail the same way."""

    http_status = 400
    code = "invalid_input"


class NoTextError(InputError):
    """A document in which nothing finds text: blank, a picture OCR reads nothing in, a page of markup only. Named,
    it fails; found in a folder (an icon beside the docs), it is skipped (:func:`ragstep.app.ingest.ingest_file`)."""


class NotFoundError(InputError):
    http_status = 404
    code = "not_found"


class InvalidFieldError(InputError):
    """A request field breaks its rule (the use case's own check of what the API's body validation checks): 422,
    as the API answers every body that fails validation, whichever route finds it."""

    http_status = 422


class ConflictError(InputError):
    http_status = 409
    code = "conflict"


class StorageError(RagstepError):
    """The data dir, bucket or table cannot be used (permissions, disk, corruption)."""

    http_status = 503
    code = "storage_unavailable"


class ProviderError(RagstepError):
    """A model provider (embedding, rerank, chat, web search) failed after retries.

    Its message reaches users (API bodies, stream error events, the CLI), so it names the provider and what kind of
    failure it was, never what the provider answered: a provider's error body can quote the request's credentials
    and name internal hosts. Adapters log that body (:func:`mask_credentials` applied) and raise a short message;
    the message is masked here too, so a body that slips into one still shows no key.
    """

    http_status = 502
    code = "provider_error"

    def __init__(self, message: str) -> None:
        super().__init__(mask_credentials(message))


# What a credential looks like in text a provider sent back: an Authorization header's value, a ``key=value`` /
# ``"key": "value"`` pair whose name says secret, or a token with a well-known prefix (OpenAI ``sk-``, Slack
# ``xox?-``, AWS access key ids, GitHub ``gh?_``, Google ``AIza``), and any long opaque run of letters and digits.
_CREDENTIALS = (
    re.compile(r"(?i)\b(bearer|basic)(\s+)(?!\*\*\*)[\w.~+/=-]{4,}"),
    re.compile(
        r"(?i)(\b(?:authorization|x-api-key|api[-_]?key|access[-_]?token|secret(?:[-_]?key)?|password|token|key)"
        r"[\"']?\s*[:=]\s*[\"']?)(?!\*\*\*)(?:(?:bearer|basic)\s+)?[^\s\"',;&}]{4,}"
    ),
    re.compile(
        r"\b(?:sk|pk|rk)-[\w-]{8,}|\bxox[abposr]-[\w-]{8,}|\bA[SK]IA[0-9A-Z]{16}\b|\bgh[pousr]_\w{16,}"
        r"|\bAIza[\w-]{20,}"
    ),
    re.compile(r"\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{32,}\b"),
)
MASK = "***"


def mask_credentials(text: str) -> str:
    """``text`` with anything that looks like a credential replaced by ``***`` (for logs and error messages)."""
    text = _CREDENTIALS[1].sub(lambda m: f"{m.group(1)}{MASK}", text)
    text = _CREDENTIALS[0].sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    for pattern in _CREDENTIALS[2:]:
        text = pattern.sub(MASK, text)
    return text


class StateTooLargeError(RagstepError):
    """The pipeline state cannot be brought under the transport limit even after offloading results."""

    http_status = 413
    code = "state_too_large"


class ForbiddenError(RagstepError):
    """The caller is known but may not do this (an API key without the scope, or limited to other knowledge bases)."""

    http_status = 403
    code = "forbidden"


class UnauthorizedError(RagstepError):
    """No API key, or one that is malformed, unknown, revoked or expired."""

    http_status = 401
    code = "unauthorized"


class RateLimitedError(RagstepError):
    """Over a rate limit or quota; ``retry_after`` is how many seconds until a retry can succeed."""

    http_status = 429
    code = "rate_limited"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = max(1, retry_after)
