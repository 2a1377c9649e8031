"""A vision model behind an OpenAI-compatible ``/chat/completions`` (OpenAI, vLLM, Ollama, DashScope, ...): the
picture travels as an ``image_url`` content part holding a ``data:`` URI, beside the text part of the prompt."""

from __future__ import annotations

import base64

from ragstep.adapters._http import JSONEndpoint
from ragstep.errors import ProviderError


class OpenAIVisionModel:
    """``openai:<model>`` at ``base_url`` (``.../v1``); ``api_key`` may be None for local servers."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 30.0) -> None:
        self.model = model
        self.name = f"openai:{model}"
        # One retry: a caption is optional, and a file's captions share one time budget.
        self._endpoint = JSONEndpoint(
            base_url.rstrip("/") + "/chat/completions",
            source=f"vision model {self.name}",
            api_key=api_key,
            timeout_s=timeout_s,
            max_retries=1,
        )

    def describe(self, image: bytes, media_type: str, prompt: str, *, max_tokens: int) -> str:
        uri = f"data:{media_type};base64,{base64.b64encode(image).decode('ascii')}"
        payload = {
            "model": self.model,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": prompt},
                        {"type": "image_url", "image_url": {"url": uri}},
                    ],
                }
            ],
            "max_tokens": max_tokens,
            "temperature": 0.0,
        }
        data = self._endpoint.post(payload)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices or not isinstance(choices[0], dict):
            raise ProviderError(f"vision model {self.name} answered without choices")
        content = (choices[0].get("message") or {}).get("content")
        if isinstance(content, list):  # some servers answer in content parts too
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return str(content or "").strip()

    def close(self) -> None:
        self._endpoint.close()
