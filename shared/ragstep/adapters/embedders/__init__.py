"""Embedding adapters: OpenAI-compatible HTTP servers, Amazon Bedrock, and precomputed vectors for benchmarks.

Every adapter returns float32 arrays whose rows are L2-normalised, so the index can score with a dot product
whichever provider produced the vectors, and validates what the provider sent back (row count, one dimension,
finite numbers) before anything reaches the index: a corrupt vector stored once poisons every later search.

Failures after retries surface as :class:`~ragstep.errors.ProviderError` with a one-line message that names
the provider and what it answered; the state machine and the CLI show that message as is.

``httpx`` and ``boto3`` are imported on first use, not at import time: a Lambda stage that uses one provider
should not pay the cold-start cost of the other's client library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ragstep.adapters._http import JSONEndpoint, LazyBotoClient, boto_provider_error, display_url, one_line
from ragstep.errors import InputError, ProviderError, RagstepError
from ragstep.ports import Embedder

if TYPE_CHECKING:
    import httpx
    from botocore.config import Config

    from ragstep.settings import Settings

#: Providers :func:`make_embedder` can build from a ``"<provider>:<model>"`` id.
SUPPORTED_PROVIDERS = ("openai", "bedrock")

# Bedrock model limits, from the Bedrock user guide pages model-parameters-embed-v3.html and
# model-parameters-titan-embed-text.html.
_TITAN_DIMENSIONS = (256, 512, 1024)
_COHERE_MAX_TEXTS = 96
_COHERE_MAX_CHARS = 2048


# --------------------------------------------------------------------------------------------------- helpers


def _texts(texts: Sequence[str]) -> list[str]:
    # A bare string is a Sequence[str] too; embedding it character by character would be a silent disaster.
    if isinstance(texts, str):
        raise InputError("embed() takes a list of texts; use embed_query() for a single text")
    return list(texts)


def _unit_rows(
    rows: Sequence[Any], *, expected_dim: int | None, source: str, error: type[RagstepError] = ProviderError
) -> np.ndarray:
    """Check vectors from ``source`` and return them as a float32 matrix with L2-normalised rows.

    Zero vectors stay zero (there is no direction to keep); cosine against them is 0, the honest score.
    """
    for i, row in enumerate(rows):
        if not isinstance(row, list | tuple | np.ndarray) or len(row) == 0:
            raise error(f"{source} returned an empty or malformed vector for input {i}")
    lengths = sorted({len(row) for row in rows})
    if len(lengths) > 1:
        raise error(f"{source} returned vectors of different dimensions ({', '.join(map(str, lengths[:5]))})")
    try:
        matrix = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise error(f"{source} returned vectors with non-numeric values") from exc
    if matrix.ndim != 2:
        raise error(f"{source} returned nested arrays instead of flat vectors")
    if expected_dim is not None and matrix.shape[1] != expected_dim:
        raise error(f"{source} returned {matrix.shape[1]}-dimensional vectors, expected {expected_dim}")
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        raise error(
            f"{source} returned non-finite values (NaN or infinity) in the vector for input {int(np.argmin(finite))}"
        )
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit.astype(np.float32)


# --------------------------------------------------------------------------------------------------- OpenAI


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
        self._source = f"embedding provider {display_url(self.url)} (model {self.model})"
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
        items = _texts(texts)
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
        matrix = _unit_rows(rows, expected_dim=self._dim, source=self._source)
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


# --------------------------------------------------------------------------------------------------- Bedrock


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
        batch_size: int = _COHERE_MAX_TEXTS,
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
            if dimensions not in _TITAN_DIMENSIONS:
                raise InputError(
                    f"Titan Text Embeddings v2 supports dimensions {', '.join(map(str, _TITAN_DIMENSIONS))}, "
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
        self._batch_size = min(batch_size, _COHERE_MAX_TEXTS)
        self._max_workers = max_workers
        self._boto = LazyBotoClient(
            "bedrock-runtime",
            region=region,
            endpoint_url=endpoint_url,
            timeout_s=timeout_s,
            max_retries=max_retries,
            retry_mode=retry_mode,
            # One pooled connection per Titan worker, so concurrent calls never queue for a socket.
            max_pool_connections=max(10, max_workers),
            client_config=client_config,
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = _texts(texts)
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
        return f"Bedrock model {self.model} at {self._bedrock().meta.endpoint_url}"

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
        matrix = _unit_rows(rows, expected_dim=self._dimensions, source=self._source())
        self._dim = matrix.shape[1]
        return matrix

    def _embed_cohere(self, texts: list[str], input_type: str) -> np.ndarray:
        rows: list[Any] = []
        for start in range(0, len(texts), self._batch_size):
            # Bedrock rejects texts over 2048 characters outright ("truncate" only applies to tokens). The
            # model reads at most 512 tokens (~2048 characters) anyway, so clipping loses nothing it uses.
            batch = [text[:_COHERE_MAX_CHARS] for text in texts[start : start + self._batch_size]]
            payload = self._invoke({"texts": batch, "input_type": input_type, "truncate": "END"})
            embeddings = payload.get("embeddings")
            if isinstance(embeddings, dict):  # the shape when embedding types are requested (and in Embed v4)
                embeddings = embeddings.get("float")
            if not isinstance(embeddings, list) or len(embeddings) != len(batch):
                got = len(embeddings) if isinstance(embeddings, list) else "no"
                raise ProviderError(f"{self._source()} returned {got} embeddings for {len(batch)} texts")
            rows.extend(embeddings)
        matrix = _unit_rows(rows, expected_dim=self._dim, source=self._source())
        self._dim = matrix.shape[1]
        return matrix


# ----------------------------------------------------------------------------------------------- precomputed


class PrecomputedEmbedder:
    """Looks texts up in vectors computed elsewhere (benchmarks replay a corpus embedded once, offline).

    An unknown text is an error rather than a zero vector: a benchmark that silently scores 0 would lie.
    """

    def __init__(self, model_id: str, vectors_by_text: Mapping[str, np.ndarray | Sequence[float]]) -> None:
        if not vectors_by_text:
            raise InputError("PrecomputedEmbedder needs at least one vector")
        self.model_id = model_id
        self._row = {text: i for i, text in enumerate(vectors_by_text)}
        self._matrix = _unit_rows(
            list(vectors_by_text.values()), expected_dim=None, source="precomputed vectors", error=InputError
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = _texts(texts)
        missing = [text for text in items if text not in self._row]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ProviderError(f"{self.model_id}: no precomputed vector for text {missing[0][:60]!r}{more}")
        return self._matrix[[self._row[text] for text in items]].reshape(len(items), self._matrix.shape[1])

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


# --------------------------------------------------------------------------------------------------- factory


def _split_model_id(model_id: str) -> tuple[str, str]:
    provider, _, model = model_id.strip().partition(":")
    provider, model = provider.strip().lower(), model.strip()
    if provider == "precomputed":
        raise InputError(
            "precomputed embeddings cannot be built from settings; the benchmark constructs "
            "PrecomputedEmbedder from its stored vectors"
        )
    if provider not in SUPPORTED_PROVIDERS:
        raise InputError(
            f"unknown embedding provider {provider!r} in {model_id!r}; supported: none, "
            f"{', '.join(SUPPORTED_PROVIDERS)} (written 'provider:model', "
            "e.g. 'openai:text-embedding-3-small')"
        )
    if not model:
        raise InputError(f"embedding model id {model_id!r} names no model; write it as '{provider}:<model>'")
    return provider, model


def embedder_model_id(settings: Settings) -> str:
    """The vector-space id new knowledge bases get from settings: ``"none"`` or ``"provider:model"``."""
    provider = settings.embedder.strip().lower()
    if provider == "none":
        return "none"
    if not settings.embedding_model.strip():
        raise InputError(f"RAGSTEP_EMBEDDER={provider} needs RAGSTEP_EMBEDDING_MODEL (e.g. text-embedding-3-small)")
    return ":".join(_split_model_id(f"{provider}:{settings.embedding_model}"))


def make_embedder(settings: Settings, model_id: str | None = None) -> Embedder | None:
    """Build the embedder for ``model_id`` (a knowledge base's stored id) or, when None, the configured one.

    Connection details (base URL, key, region, timeouts, retries, dimensions) always come from ``settings``.
    Returns None for ``"none"``: keyword-only retrieval.
    """
    full_id = embedder_model_id(settings) if model_id is None else model_id
    if full_id.strip().lower() == "none":
        return None
    provider, model = _split_model_id(full_id)
    if provider == "openai":
        key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
        return OpenAIEmbedder(
            model,
            base_url=settings.embedding_base_url,
            api_key=key,
            dimensions=settings.embedding_dimensions,
            batch_size=settings.embedding_batch_size,
            timeout_s=settings.provider_timeout_s,
            max_retries=settings.provider_max_retries,
        )
    return BedrockEmbedder(
        model,
        region=settings.aws_region,
        dimensions=settings.embedding_dimensions,
        batch_size=settings.embedding_batch_size,
        timeout_s=settings.provider_timeout_s,
        max_retries=settings.provider_max_retries,
    )
