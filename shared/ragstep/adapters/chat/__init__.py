"""Chat model adapters behind :class:`ragstep.ports.ChatModel`, chosen by ``RAGSTEP_CHAT_PROVIDER``.

``extractive`` (the embedded default) quotes the retrieved passages without a model; ``openai`` speaks to any
OpenAI-compatible ``/chat/completions``; ``bedrock`` to Bedrock's Converse API. Each adapter module is imported only
when it is chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError

if TYPE_CHECKING:
    from ragstep.ports import ChatModel
    from ragstep.settings import Settings

PROVIDERS = ("extractive", "openai", "bedrock")


def make_chat_model(settings: Settings) -> ChatModel:
    provider = settings.chat_provider
    if provider == "extractive":
        from ragstep.adapters.chat.extractive import ExtractiveChatModel

        return ExtractiveChatModel(settings.chat_extractive_max_chars)
    if provider == "openai":
        from ragstep.adapters.chat.openai import OpenAIChatModel

        key = settings.chat_api_key.get_secret_value() if settings.chat_api_key else None
        return OpenAIChatModel(
            settings.chat_base_url,
            settings.chat_model,
            api_key=key,
            timeout_s=settings.chat_timeout_s,
            max_retries=settings.chat_max_retries,
            max_wait_s=settings.chat_max_wait_s,
        )
    if provider == "bedrock":
        from ragstep.adapters.chat.bedrock import BedrockChatModel

        return BedrockChatModel(
            settings.chat_model,
            region=settings.aws_region,
            timeout_s=settings.chat_timeout_s,
            max_retries=settings.chat_max_retries,
        )
    raise InputError(f"chat provider {provider!r} is not available in this build; use one of {', '.join(PROVIDERS)}")
