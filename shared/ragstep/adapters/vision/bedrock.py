"""A vision model on Amazon Bedrock through the Converse API: the picture travels as an ``image`` content block
(``format`` png / jpeg / gif / webp, the bytes themselves) before the text of the prompt."""

from __future__ import annotations

from ragstep.adapters._aws import boto_provider_error, model_client
from ragstep.errors import ProviderError

_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/gif": "gif", "image/webp": "webp"}


class BedrockVisionModel:
    """``bedrock:<model id>`` (a model id, inference profile or ARN of a model that reads images) in ``region``."""

    def __init__(
        self, model: str, *, region: str | None = None, timeout_s: float = 30.0, endpoint_url: str | None = None
    ) -> None:
        self.model = model.strip()
        self.name = f"bedrock:{self.model}"
        self._boto = model_client(
            "bedrock-runtime", region=region, endpoint_url=endpoint_url, timeout_s=timeout_s, max_retries=1
        )

    def describe(self, image: bytes, media_type: str, prompt: str, *, max_tokens: int) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        fmt = _FORMATS.get(media_type)
        if fmt is None:
            raise ProviderError(f"vision model {self.name} does not read {media_type} pictures")
        message = {
            "role": "user",
            "content": [{"image": {"format": fmt, "source": {"bytes": image}}}, {"text": prompt}],
        }
        try:
            response = self._boto.get().converse(
                modelId=self.model,
                messages=[message],
                inferenceConfig={"maxTokens": max_tokens, "temperature": 0.0},
            )
        except (BotoCoreError, ClientError) as exc:
            raise boto_provider_error(f"vision model {self.name}", exc) from exc
        blocks = response.get("output", {}).get("message", {}).get("content", [])
        return "".join(str(b.get("text", "")) for b in blocks).strip()
