"""Vision-capable chat models behind :class:`ragstep.ports.VisionModel`, chosen by ``RAGSTEP_VISION_PROVIDER`` and
configured by ``RAGSTEP_VISION_MODEL`` (empty: no captions). They write the captions of a document's pictures
(WeKnora's VLM step): ``openai`` sends the picture as an ``image_url`` content part (a ``data:`` URI) to any
OpenAI-compatible ``/chat/completions``; ``bedrock`` as an ``image`` block to Bedrock's Converse API."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragstep.ports import VisionModel
    from ragstep.settings import Settings


def make_vision_model(settings: Settings) -> VisionModel | None:
    """The configured vision model, None while ``RAGSTEP_VISION_MODEL`` is empty."""
    model = settings.vision_model.strip()
    if not model:
        return None
    if settings.vision_provider == "bedrock":
        from ragstep.adapters.vision.bedrock import BedrockVisionModel

        return BedrockVisionModel(model, region=settings.aws_region, timeout_s=settings.vision_timeout_s)
    from ragstep.adapters.vision.openai import OpenAIVisionModel

    key = settings.vision_api_key or settings.chat_api_key
    return OpenAIVisionModel(
        settings.vision_base_url or settings.chat_base_url,
        model,
        api_key=key.get_secret_value() if key else None,
        timeout_s=settings.vision_timeout_s,
    )
