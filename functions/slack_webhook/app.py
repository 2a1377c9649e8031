"""Lambda function of the Slack Events API webhook (the logic lives in ragstep.entry.aws.slack)."""

from ragstep.entry.aws.slack import webhook_handler as handler

__all__ = ["handler"]
