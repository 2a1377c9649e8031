"""Errors users can act on.

Every error raised on purpose derives from :class:`RagstepError` and carries a one-line message that says what to fix.
The CLI maps them to exit code 2, the HTTP API to a 4xx JSON body, and the state machine does not retry them.
"""

from __future__ import annotations


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


class NotFoundError(InputError):
    http_status = 404
    code = "not_found"


class ConflictError(InputError):
    http_status = 409
    code = "conflict"


class StorageError(RagstepError):
    """The data dir, bucket or table cannot be used (permissions, disk, corruption)."""

    http_status = 503
    code = "storage_unavailable"


class ProviderError(RagstepError):
    """A model provider (embedding, rerank, chat) failed after retries."""

    http_status = 502
    code = "provider_error"


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
