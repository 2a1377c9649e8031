"""The Bedrock chat model against a real HTTP server on 127.0.0.1 that answers in the wire format botocore's
bedrock-runtime service model defines: JSON for Converse, ``application/vnd.amazon.eventstream`` for ConverseStream."""

from __future__ import annotations

import binascii
import json
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from ragstep.adapters.chat.bedrock import BedrockChatModel, converse_messages
from ragstep.errors import ProviderError
from ragstep.ports import ChatMessage, ChatModel, ChatOptions
from support.scripted_http import ScriptedHTTPServer, ScriptedResponse

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
MESSAGES = [
    ChatMessage("system", "be brief"),
    ChatMessage("user", "first"),
    ChatMessage("assistant", "answer"),
    ChatMessage("user", "context"),
    ChatMessage("user", "question"),
]


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return bytes([len(raw_name)]) + raw_name + b"\x07" + struct.pack(">H", len(raw_value)) + raw_value


def frame(event_type: str, payload: dict[str, Any], message_type: str = "event") -> bytes:
    """One event-stream message: prelude (lengths + CRC), headers, JSON payload, message CRC."""
    kind = ":event-type" if message_type == "event" else ":exception-type"
    headers = (
        _header(kind, event_type)
        + _header(":content-type", "application/json")
        + _header(":message-type", message_type)
    )
    body = json.dumps(payload).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    message = prelude + struct.pack(">I", binascii.crc32(prelude)) + headers + body
    return message + struct.pack(">I", binascii.crc32(message))


def event_stream(*frames: bytes) -> ScriptedResponse:
    return ScriptedResponse(200, b"".join(frames), headers={"Content-Type": "application/vnd.amazon.eventstream"})


def delta(text: str = "", reasoning: str = "") -> bytes:
    d: dict[str, Any] = {"text": text} if text else {"reasoningContent": {"text": reasoning}}
    return frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": d})


USAGE = {"inputTokens": 12, "outputTokens": 3, "totalTokens": 15}
STOP = frame("messageStop", {"stopReason": "end_turn"})
METADATA = frame("metadata", {"usage": USAGE, "metrics": {"latencyMs": 5}})


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server(aws_env: None) -> Iterator[ScriptedHTTPServer]:
    with ScriptedHTTPServer() as s:
        yield s


def model(server: ScriptedHTTPServer, **kw: Any) -> BedrockChatModel:
    return BedrockChatModel(MODEL, region="us-east-1", endpoint_url=server.url, timeout_s=5.0, **kw)


def test_converse_sends_system_alternating_messages_and_inference_config(server: ScriptedHTTPServer) -> None:
    server.add(
        ScriptedResponse(
            200,
            {
                "output": {
                    "message": {
                        "role": "assistant",
                        "content": [{"reasoningContent": {"reasoningText": {"text": "hm"}}}, {"text": "Hi [1]"}],
                    }
                },
                "stopReason": "end_turn",
                "usage": USAGE,
                "metrics": {"latencyMs": 5},
            },
        )
    )
    m = model(server)
    response = m.complete(MESSAGES, ChatOptions(temperature=0.3, max_tokens=50, top_p=0.9, stop=("END",)))
    assert (response.content, response.reasoning, response.finish_reason) == ("Hi [1]", "hm", "end_turn")
    assert response.usage is not None and response.usage.total_tokens == 15
    sent = server.requests[0]
    assert sent.path == f"/model/{MODEL}/converse"
    assert sent.json == {
        "system": [{"text": "be brief"}],
        "messages": [
            {"role": "user", "content": [{"text": "first"}]},
            {"role": "assistant", "content": [{"text": "answer"}]},
            {"role": "user", "content": [{"text": "context\n\nquestion"}]},
        ],
        "inferenceConfig": {"maxTokens": 50, "temperature": 0.3, "topP": 0.9, "stopSequences": ["END"]},
    }
    assert isinstance(m, ChatModel) and m.name == f"bedrock:{MODEL}" and m.generative


def test_converse_stream_relays_text_reasoning_stop_and_usage(server: ScriptedHTTPServer) -> None:
    start = frame("messageStart", {"role": "assistant"})
    server.add(event_stream(start, delta(reasoning="think"), delta("Hel"), delta("lo"), STOP, METADATA))
    deltas = list(model(server).stream(MESSAGES, ChatOptions(max_tokens=10)))
    assert "".join(d.content for d in deltas) == "Hello"
    assert "".join(d.reasoning for d in deltas) == "think"
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["end_turn"]
    assert [d.usage.total_tokens for d in deltas if d.usage] == [15]
    assert server.requests[0].path == f"/model/{MODEL}/converse-stream"


def test_an_exception_event_mid_stream_is_a_provider_error(server: ScriptedHTTPServer) -> None:
    error = frame("throttlingException", {"message": "Too many tokens"}, message_type="exception")
    server.add(event_stream(delta("partial "), error))
    got: list[str] = []
    with pytest.raises(ProviderError, match="throttlingException") as err:
        for d in model(server, max_retries=0).stream(MESSAGES, ChatOptions()):
            got.append(d.content)
    assert got == ["partial "] and MODEL in err.value.message
    assert len(server.requests) == 1  # never replayed


def test_a_rejected_request_names_the_model_and_the_code(server: ScriptedHTTPServer) -> None:
    server.add(
        ScriptedResponse(
            403, {"message": "no access to this model"}, headers={"x-amzn-ErrorType": "AccessDeniedException"}
        )
    )
    with pytest.raises(ProviderError) as err:
        model(server).complete(MESSAGES, ChatOptions())
    assert "AccessDeniedException" in err.value.message and f"bedrock:{MODEL}" in err.value.message


def test_a_model_id_is_required() -> None:
    with pytest.raises(ProviderError, match="RAGSTEP_CHAT_MODEL"):
        BedrockChatModel("  ")


def test_system_messages_leave_the_turns() -> None:
    system, turns = converse_messages(
        [ChatMessage("system", "a"), ChatMessage("system", "b"), ChatMessage("user", "q")]
    )
    assert system == [{"text": "a"}, {"text": "b"}] and turns == [{"role": "user", "content": [{"text": "q"}]}]
