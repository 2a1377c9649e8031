"""Lambda function of the HTTP API: FastAPI through Mangum (the logic lives in ragstep.handlers)."""

from ragstep.handlers import api_handler as handler

__all__ = ["handler"]
