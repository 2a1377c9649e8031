"""Embedding adapters: a model in the process (the default), OpenAI-compatible HTTP servers, Amazon Bedrock, and
precomputed vectors for benchmarks.

Every adapter returns float32 arrays whose rows are L2-normalised, so the index can score with a dot product
whichever provider produced the vectors, and validates what the provider sent back (row count, one dimension,
finite numbers) before anything reaches the index: a corrupt vector stored once poisons every later search.

Failures after retries surface as :class:`~ragstep.errors.ProviderError` with a one-line message that names
the provider and what it answered; the state machine and the CLI show that message as is.

``httpx`` and ``boto3`` are imported on first use, not at import time: a Lambda stage that uses one provider
should not pay the cold-start cost of the other's client library.

This package holds the factory (:func:`make_embedder`); each adapter lives in its own module (:mod:`.openai`,
:mod:`.bedrock`, :mod:`.local`, :mod:`.precomputed`), re-exported here. The local model's
package is imported on its first embedding, not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.adapters.embedders.bedrock import BedrockEmbedder
from ragstep.adapters.embedders.local import DEFAULT_LOCAL_MODEL, E5_Q4_MODEL, LOCAL_MODELS, LocalEmbedder
from ragstep.adapters.embedders.openai import OpenAIEmbedder
from ragstep.adapters.embedders.precomputed import PrecomputedEmbedder
from ragstep.errors import InputError

if TYPE_CHECKING:
    from ragstep.ports import Embedder
    from ragstep.settings import Settings

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "SUPPORTED_PROVIDERS",
    "BedrockEmbedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "PrecomputedEmbedder",
    "embedder_model_id",
    "make_embedder",
    "normalize_model_id",
]

#: Providers :func:`make_embedder` can build from a ``"<provider>:<model>"`` id.
SUPPORTED_PROVIDERS = ("openai", "bedrock", "local")


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
    if provider == "local" and model.lower() not in LOCAL_MODELS:
        raise InputError(
            f"unknown local embedding model {model!r} in {model_id!r}; supported: "
            f"{', '.join(f'local:{name}' for name in sorted(LOCAL_MODELS))}"
        )
    return provider, model.lower() if provider == "local" else model


def normalize_model_id(model_id: str) -> str:
    """``model_id`` checked and spelled canonically: ``"none"`` or ``"provider:model"`` (an :class:`InputError`
    naming the supported providers otherwise). Nothing is built and no provider is called."""
    if model_id.strip().lower() == "none":
        return "none"
    return ":".join(_split_model_id(model_id))


def embedder_model_id(settings: Settings) -> str:
    """The vector-space id new knowledge bases get from settings: ``"none"`` or ``"provider:model"``."""
    provider = settings.embedder.strip().lower()
    if provider == "none":
        return "none"
    if provider == "local" and not settings.embedding_model.strip():
        return f"local:{DEFAULT_LOCAL_MODEL}"
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
    if provider == "local":
        engine = settings.local_embedding_engine if model == E5_Q4_MODEL else "onnx"
        return LocalEmbedder(model, engine=engine)
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
