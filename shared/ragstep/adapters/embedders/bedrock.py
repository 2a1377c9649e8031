"""Embeddings from Amazon Bedrock: Titan Text Embeddings v2 and Cohere Embed v3 (``bedrock-runtime`` InvokeModel).

The client comes from :mod:`ragstep.adapters._aws` (the process's shared Session, standard retries, timeouts).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ragstep.adapters._aws import boto_provider_error, model_client
from ragstep.adapters._http import one_line
from ragstep.adapters.embedders._vectors import check_texts, unit_rows
from ragstep.errors import InputError, ProviderError

if TYPE_CHECKING:
    from botocore.config import Config

# Bedrock model limits, from the Bedrock user guide pages model-parameters-embed-v3.html and
# model-parameters-titan-embed-text.html.
TITAN_DIMENSIONS = (256, 512, 1024)
COHERE_MAX_TEXTS = 96
COHERE_MAX_CHARS = 2048


class BedrockEmbedder:
    """Amazon Titan Text Embeddings v2 and Cohere Embed v3 through ``bedrock-runtime`` ``InvokeModel``.

    Retries, backoff and timeouts are botocore's (``standard`` mode by default: ``adaptive`` adds client-side
    rate limiting that can stall every thread for seconds, which is rarely worth it in a short-lived Lambda).
    ``endpoint_url`` and ``client_config`` exist for VPC endpoints and for tests against a local server.
    """

    def __init__(
        self,
        model: str,
        *,
        region: str | None = None,
        dimensions: int | None = None,
        batch_size: int = COHERE_MAX_TEXTS,
        timeout_s: float = 30.0,
        max_retries: int = 4,
        retry_mode: str = "standard",
        max_workers: int = 8,
        endpoint_url: str | None = None,
        client_config: Config | None = None,
    ) -> None:
        self.model = model.strip()
        # Substring match so cross-region inference profiles ("us.cohere.embed-...") and ARNs work too.
        if "amazon.titan-embed-text-v2" in self.model:
            self._family = "titan"
            dimensions = dimensions or 1024
            if dimensions not in TITAN_DIMENSIONS:
                raise InputError(
                    f"Titan Text Embeddings v2 supports dimensions {', '.join(map(str, TITAN_DIMENSIONS))}, "
                    f"not {dimensions}"
                )
        elif "cohere.embed" in self.model:
            self._family = "cohere"
        else:
            raise InputError(
                f"unsupported Bedrock embedding model {model!r}; supported: amazon.titan-embed-text-v2:0, "
                "cohere.embed-english-v3, cohere.embed-multilingual-v3"
            )
        if batch_size < 1 or max_workers < 1 or max_retries < 0 or timeout_s <= 0:
            raise InputError(
                "BedrockEmbedder: batch_size and max_workers must be >= 1, max_retries >= 0, timeout_s > 0"
            )
        self.model_id = f"bedrock:{self.model}"
        self._dimensions = dimensions
        self._dim: int | None = dimensions
        self._batch_size = min(batch_size, COHERE_MAX_TEXTS)
        self._max_workers = max_workers
        self._boto = model_client(
            "bedrock-runtime",
            region=region,
            endpoint_url=endpoint_url,
            timeout_s=timeout_s,
            max_retries=max_retries,
            retry_mode=retry_mode,
            # One pooled connection per Titan worker, so concurrent calls never queue for a socket.
            max_pool_connections=max(10, max_workers),
            config=client_config,
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = check_texts(texts)
        if not items:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        if self._family == "titan":
            return self._embed_titan(items)
        return self._embed_cohere(items, "search_document")

    def embed_query(self, text: str) -> np.ndarray:
        # Cohere v3 embeds queries and documents differently; Titan v2 has a single mode.
        if self._family == "titan":
            return self._embed_titan([text])[0]
        return self._embed_cohere([text], "search_query")[0]

    def close(self) -> None:
        self._boto.close()

    # -- internals -------------------------------------------------------------------------------------------

    def _bedrock(self) -> Any:
        return self._boto.get()

    def _source(self) -> str:
        # The region, not the endpoint: the message reaches users, and a VPC or custom endpoint is internal.
        return f"Bedrock model {self.model} in {self._bedrock().meta.region_name}"

    def _invoke(self, body: dict[str, Any]) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        client = self._bedrock()
        try:
            response = client.invoke_model(
                modelId=self.model,
                body=json.dumps(body),
                contentType="application/json",
                accept="application/json",
            )
            raw = response["body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise boto_provider_error(self._source(), exc) from exc
        try:
            payload = json.loads(raw)
        except ValueError as exc:
            text = one_line(raw.decode(errors="replace"))
            raise ProviderError(f"{self._source()} answered with a body that is not JSON: {text}") from exc
        if not isinstance(payload, dict):
            raise ProviderError(f"{self._source()} answered with unexpected JSON: {one_line(json.dumps(payload))}")
        return payload

    def _titan_one(self, text: str) -> Any:
        payload = self._invoke({"inputText": text, "dimensions": self._dimensions, "normalize": True})
        return payload.get("embedding")

    def _embed_titan(self, texts: list[str]) -> np.ndarray:
        # Titan takes one text per call, so calls run concurrently; the pool is small to stay under the
        # account's requests-per-minute quota instead of provoking throttling.
        self._bedrock()  # create the client once, before the workers race to it
        if len(texts) == 1:
            rows = [self._titan_one(texts[0])]
        else:
            with ThreadPoolExecutor(min(self._max_workers, len(texts)), thread_name_prefix="titan-embed") as pool:
                futures = [pool.submit(self._titan_one, text) for text in texts]
                try:
                    rows = [future.result() for future in futures]
                except BaseException:
                    # One failure fails the batch: do not spend quota on calls whose results would be dropped.
                    for future in futures:
                        future.cancel()
                    raise
        matrix = unit_rows(rows, expected_dim=self._dimensions, source=self._source())
        self._dim = matrix.shape[1]
        return matrix

    def _embed_cohere(self, texts: list[str], input_type: str) -> np.ndarray:
        rows: list[Any] = []
        for start in range(0, len(texts), self._batch_size):
            # Bedrock rejects texts over 2048 characters outright ("truncate" only applies to tokens). The
            # model reads at most 512 tokens (~2048 characters) anyway, so clipping loses nothing it uses.
            batch = [text[:COHERE_MAX_CHARS] for text in texts[start : start + self._batch_size]]
            payload = self._invoke({"texts": batch, "input_type": input_type, "truncate": "END"})
            embeddings = payload.get("embeddings")
            if isinstance(embeddings, dict):  # the shape when embedding types are requested (and in Embed v4)
                embeddings = embeddings.get("float")
            if not isinstance(embeddings, list) or len(embeddings) != len(batch):
                got = len(embeddings) if isinstance(embeddings, list) else "no"
                raise ProviderError(f"{self._source()} returned {got} embeddings for {len(batch)} texts")
            rows.extend(embeddings)
        matrix = unit_rows(rows, expected_dim=self._dim, source=self._source())
        self._dim = matrix.shape[1]
        return matrix
