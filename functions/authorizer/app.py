"""Lambda authorizer of the HTTP API: API keys to tenants (the logic lives in ragstep.entry.aws.authorizer)."""

from ragstep.entry.aws.authorizer import authorizer_handler as handler

__all__ = ["handler"]
