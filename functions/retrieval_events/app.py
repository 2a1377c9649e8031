"""Lambda function of event-driven retrieval (SQS batches; the logic lives in ragstep.entry.aws.retrieval_events)."""

from ragstep.entry.aws.retrieval_events import handler

__all__ = ["handler"]
