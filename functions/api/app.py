"""Lambda function of the HTTP API: FastAPI through Mangum (the logic lives in ragstep.entry.aws.api)."""

from ragstep.entry.aws.api import api_handler as handler

__all__ = ["handler"]
