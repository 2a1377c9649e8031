"""Lambda function that answers a Slack event in its thread (the logic lives in ragstep.entry.aws.slack)."""

from ragstep.entry.aws.slack import worker_handler as handler

__all__ = ["handler"]
