"""Lambda function of the HTTP API: FastAPI through Mangum (the logic lives in ragstep.entry.aws.handlers)."""

from ragstep.entry.aws.handlers import api_handler as handler

__all__ = ["handler"]
