"""Chat models on Amazon Bedrock through the Converse and ConverseStream APIs (``bedrock-runtime``, boto3).

Converse takes the system prompt apart from the messages, which must alternate user / assistant starting with a
user turn: consecutive messages of one role are joined. Retries of throttling and 5xx are botocore's (before the
response starts); an error event inside a stream is never replayed. Closing the delta iterator closes the event
stream's connection, so Bedrock stops generating for a reader that has gone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ragstep.adapters._aws import boto_provider_error, model_client
from ragstep.adapters._http import one_line
from ragstep.errors import ProviderError
from ragstep.ports import ChatDelta, ChatGrounding, ChatMessage, ChatOptions, ChatResponse, ChatUsage

if TYPE_CHECKING:
    from botocore.config import Config


def _usage(data: Any) -> ChatUsage | None:
    if not isinstance(data, dict):
        return None
    prompt, completion = int(data.get("inputTokens") or 0), int(data.get("outputTokens") or 0)
    return ChatUsage(prompt, completion, int(data.get("totalTokens") or prompt + completion))


def converse_messages(messages: Sequence[ChatMessage]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, alternating messages) in Converse's shapes."""
    system = [{"text": m.content} for m in messages if m.role == "system" and m.content]
    turns: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if turns and turns[-1]["role"] == m.role:
            turns[-1]["content"][0]["text"] += "\n\n" + m.content
        else:
            turns.append({"role": m.role, "content": [{"text": m.content}]})
    return system, turns


class BedrockChatModel:
    """``bedrock:<model id>`` (a model id, inference profile or ARN) in ``region``."""

    generative = True

    def __init__(
        self,
        model: str,
        *,
        region: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        endpoint_url: str | None = None,
        client_config: Config | None = None,
    ) -> None:
        if not model.strip():
            raise ProviderError("no chat model configured for bedrock; set RAGSTEP_CHAT_MODEL to a Bedrock model id")
        self.model = model.strip()
        self.name = f"bedrock:{self.model}"
        self._boto = model_client(
            "bedrock-runtime",
            region=region,
            endpoint_url=endpoint_url,
            timeout_s=timeout_s,
            max_retries=max_retries,
            config=client_config,
        )

    @property
    def source(self) -> str:
        return f"chat model {self.name}"

    def _request(self, messages: Sequence[ChatMessage], options: ChatOptions) -> dict[str, Any]:
        system, turns = converse_messages(messages)
        config: dict[str, Any] = {}
        if options.max_tokens is not None:
            config["maxTokens"] = options.max_tokens
        if options.temperature is not None:
            config["temperature"] = options.temperature
        if options.top_p is not None:
            config["topP"] = options.top_p
        if options.stop:
            config["stopSequences"] = list(options.stop)
        request: dict[str, Any] = {"modelId": self.model, "messages": turns}
        if system:
            request["system"] = system
        if config:
            request["inferenceConfig"] = config
        return request

    def complete(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> ChatResponse:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._boto.get().converse(**self._request(messages, options))
        except (BotoCoreError, ClientError) as exc:
            raise boto_provider_error(self.source, exc) from exc
        blocks = response.get("output", {}).get("message", {}).get("content", [])
        text = "".join(b.get("text", "") for b in blocks)
        reasoning = "".join(b.get("reasoningContent", {}).get("reasoningText", {}).get("text", "") for b in blocks)
        return ChatResponse(
            content=text,
            reasoning=reasoning,
            usage=_usage(response.get("usage")),
            model=self.model,
            finish_reason=response.get("stopReason"),
        )

    def stream(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> Iterator[ChatDelta]:
        from botocore.exceptions import BotoCoreError, ClientError, EventStreamError

        try:
            response = self._boto.get().converse_stream(**self._request(messages, options))
        except (BotoCoreError, ClientError) as exc:
            raise boto_provider_error(self.source, exc) from exc
        events = response["stream"]
        try:
            for event in events:
                if "contentBlockDelta" in event:
                    delta = event["contentBlockDelta"].get("delta", {})
                    text = delta.get("text", "")
                    reasoning = delta.get("reasoningContent", {}).get("text", "")
                    if text or reasoning:
                        yield ChatDelta(content=text, reasoning=reasoning)
                elif "messageStop" in event:
                    yield ChatDelta(finish_reason=event["messageStop"].get("stopReason") or "stop")
                elif "metadata" in event:
                    usage = _usage(event["metadata"].get("usage"))
                    if usage is not None:
                        yield ChatDelta(usage=usage)
        except EventStreamError as exc:  # an exception event inside the stream (throttling, model error)
            raise boto_provider_error(self.source, exc) from exc
        except BotoCoreError as exc:  # the connection broke mid-stream
            raise ProviderError(f"{self.source}: the answer stream broke off ({one_line(str(exc), 120)})") from exc
        finally:
            events.close()  # also on GeneratorExit: the connection goes and Bedrock stops
