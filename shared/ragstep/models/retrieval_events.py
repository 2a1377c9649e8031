"""Event-driven retrieval: the request another service sends (EventBridge ``ragstep.RetrievalRequested`` or an SQS
message) and where its result goes. README: Channels, Event-driven retrieval."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from ragstep.models.base import DEFAULT_TENANT, _Model, check_identifier, check_tenant, empty_list
from ragstep.models.search import RetrievalOverrides

#: EventBridge ``detail-type`` of a request and of its result; ``source`` of the result.
REQUESTED = "ragstep.RetrievalRequested"
COMPLETED = "ragstep.RetrievalCompleted"
SOURCE = "ragstep"


class ReplyTarget(_Model):
    """Exactly one of: an EventBridge bus (name or ARN; ``default`` is the account's), an SQS queue URL, an HTTPS
    callback URL (POSTed the result, signed ``X-Ragstep-Signature``, retried)."""

    eventbridge: str | None = None
    sqs: str | None = None
    callback: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ReplyTarget:
        chosen = [name for name in ("eventbridge", "sqs", "callback") if getattr(self, name)]
        if len(chosen) != 1:
            raise ValueError("reply names exactly one of eventbridge (a bus), sqs (a queue URL), callback (a URL)")
        if self.callback and not self.callback.startswith(("https://", "http://127.0.0.1", "http://localhost")):
            raise ValueError("reply.callback must be an https:// URL")
        return self


class RetrievalEventRequest(_Model):
    request_id: str
    tenant: str = DEFAULT_TENANT
    pipeline: Literal["knowledge_search", "rag"] = "knowledge_search"
    query: str
    knowledge_base_ids: list[str] = Field(default_factory=empty_list)
    overrides: RetrievalOverrides = Field(default_factory=RetrievalOverrides)
    reply: ReplyTarget | None = None

    @field_validator("request_id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        return check_identifier(value)

    @field_validator("tenant")
    @classmethod
    def _valid_tenant(cls, value: str) -> str:
        return check_tenant(value)
