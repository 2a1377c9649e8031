"""Embeddings from any server speaking OpenAI's ``/embeddings`` API (OpenAI, Ollama, vLLM, SiliconFlow...)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ragstep.adapters._http import JSONEndpoint, one_line
from ragstep.adapters.embedders._vectors import check_texts, unit_rows
from ragstep.errors import InputError, ProviderError

if TYPE_CHECKING:
    import httpx


class OpenAIEmbedder:
    """Any server speaking OpenAI's ``POST {base_url}/embeddings``: OpenAI, Ollama, vLLM, SiliconFlow...

    One ``httpx.Client`` per embedder, created on first use and reused, so batches share pooled connections.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout_s: float = 30.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
    ) -> None:
        if not model.strip():
            raise InputError("OpenAIEmbedder needs a model name")
        if batch_size < 1 or max_retries < 0 or timeout_s <= 0 or (dimensions is not None and dimensions < 1):
            raise InputError("OpenAIEmbedder: batch_size and dimensions must be >= 1, max_retries >= 0, timeout_s > 0")
        self.model = model.strip()
        self.model_id = f"openai:{self.model}"
        self.url = base_url.rstrip("/") + "/embeddings"
        self._dimensions = dimensions
        self._batch_size = batch_size
        # Learned from the first answer when not configured; later answers must match (one vector space).
        self._dim: int | None = dimensions
        self._source = f"embedding provider openai (model {self.model})"  # no URL: the message reaches users
        self._endpoint = JSONEndpoint(
            self.url,
            source=self._source,
            api_key=api_key,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        step = self._batch_size
        return np.vstack([self._embed_batch(items[i : i + step]) for i in range(0, len(items), step)])

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def close(self) -> None:
        self._endpoint.close()

    @property
    def _client(self) -> httpx.Client | None:
        """The pooled HTTP client (None until the first call)."""
        return self._endpoint.client

    # -- internals -------------------------------------------------------------------------------------------

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        payload: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self._dimensions is not None:
            payload["dimensions"] = self._dimensions
        rows = self._rows_in_input_order(self._endpoint.post(payload), len(batch))
        matrix = unit_rows(rows, expected_dim=self._dim, source=self._source)
        self._dim = matrix.shape[1]
        return matrix

    def _rows_in_input_order(self, body: Any, n: int) -> list[Any]:
        """Place each returned row by its ``index``: servers may answer a batch out of order."""
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise ProviderError(f"{self._source} answered without a 'data' list: {one_line(json.dumps(body))}")
        if len(data) != n:
            raise ProviderError(f"{self._source} returned {len(data)} embeddings for {n} inputs")
        indexes = [item.get("index") for item in data]
        if all(i is None for i in indexes):
            # A few "compatible" servers omit the index; then response order is the only information there is.
            return [item.get("embedding") for item in data]
        if not all(type(i) is int for i in indexes) or sorted(indexes) != list(range(n)):
            raise ProviderError(f"{self._source} returned indexes that do not cover inputs 0..{n - 1} exactly once")
        rows: list[Any] = [None] * n
        for item in data:
            rows[item["index"]] = item.get("embedding")
        return rows
