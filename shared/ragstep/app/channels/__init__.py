"""Channels: where questions come from besides the HTTP API -- Slack (Events API), signed chatbot webhooks and
retrieval requested by events (EventBridge, SQS). README: Channels.

The modules a webhook loads before it answers (``ragstep.signing``, ``slack_intake``) import only the standard
library and Powertools' idempotency utility: a Slack webhook has 3 s to answer, cold start included.
"""
