"""Rerankers: the common ``/rerank`` HTTP API, Amazon Bedrock ``Rerank``, and a local token/vector similarity.

Every reranker answers :meth:`rerank(query, documents) <ragstep.ports.Reranker.rerank>` with one relevance in
[0, 1] per document, in input order. Documents that are empty (or only whitespace) and an empty query score 0
without a call: providers reject empty texts, and there is nothing to rank.

Model rerankers (``HttpReranker``, ``BedrockReranker``) send at most ``max_documents_per_call`` documents per
request, each cut to ``max_chars`` characters (a cross-encoder reads a few hundred to a few thousand tokens; the
cut keeps requests under provider size limits). Scores outside [0, 1] -- raw logits from some servers -- are
min-max scaled over all documents of the call (RAGFlow's rule, :func:`scale_scores`); documents the provider did
not score (it answered fewer results than asked) get 0. Failures after retries are
:class:`~ragstep.errors.ProviderError` with a one-line message naming the provider, as for the embedders.

``TokenVectorReranker`` (``RAGSTEP_RERANKER=none``, the default) needs no model: RAGFlow's hybrid of term overlap
and vector cosine, with term frequency and exact-phrase credit added (:mod:`ragstep.retrieval.token_vector`).

This package holds the factory (:func:`make_reranker`); the adapters live in :mod:`.http` and :mod:`.bedrock`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.adapters.rerankers._batches import DEFAULT_MAX_CHARS, DEFAULT_MAX_DOCUMENTS, scale_scores
from ragstep.adapters.rerankers.bedrock import BEDROCK_MAX_DOCUMENTS, BedrockReranker
from ragstep.adapters.rerankers.http import DEFAULT_URLS, FLAVOURS, HttpReranker
from ragstep.errors import InputError
from ragstep.ports import RerankCandidate
from ragstep.retrieval.token_vector import TOKEN_FORMULAS, TokenVectorReranker

if TYPE_CHECKING:
    from ragstep.ports import Reranker
    from ragstep.settings import Settings

__all__ = [
    "BEDROCK_MAX_DOCUMENTS",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_DOCUMENTS",
    "DEFAULT_URLS",
    "FLAVOURS",
    "SUPPORTED_RERANKERS",
    "TOKEN_FORMULAS",
    "BedrockReranker",
    "HttpReranker",
    "RerankCandidate",
    "TokenVectorReranker",
    "make_reranker",
    "scale_scores",
]

#: Values of ``RAGSTEP_RERANKER``.
SUPPORTED_RERANKERS = ("none", "http", "bedrock")


def make_reranker(settings: Settings) -> Reranker:
    """The reranker ``RAGSTEP_RERANKER`` names: ``none`` (local, the default), ``http`` or ``bedrock``.

    Connection details come from the ``RAGSTEP_RERANK_*`` settings; timeouts, retries and the AWS region are
    shared with the embedders (``RAGSTEP_PROVIDER_TIMEOUT_S``, ``RAGSTEP_PROVIDER_MAX_RETRIES``,
    ``RAGSTEP_AWS_REGION``).
    """
    kind = settings.reranker.strip().lower()
    if kind == "none":
        return TokenVectorReranker()
    if kind == "http":
        key = settings.rerank_api_key.get_secret_value() if settings.rerank_api_key else None
        return HttpReranker(
            settings.rerank_model,
            flavour=settings.rerank_flavour,
            url=settings.rerank_url,
            api_key=key,
            max_documents_per_call=settings.rerank_max_documents_per_call,
            max_chars=settings.rerank_max_chars,
            timeout_s=settings.provider_timeout_s,
            max_retries=settings.provider_max_retries,
        )
    if kind == "bedrock":
        if not settings.rerank_model.strip():
            raise InputError(
                "RAGSTEP_RERANKER=bedrock needs RAGSTEP_RERANK_MODEL (amazon.rerank-v1:0 or cohere.rerank-v3-5:0)"
            )
        return BedrockReranker(
            settings.rerank_model,
            region=settings.aws_region,
            max_documents_per_call=settings.rerank_max_documents_per_call,
            max_chars=settings.rerank_max_chars,
            timeout_s=settings.provider_timeout_s,
            max_retries=settings.provider_max_retries,
        )
    raise InputError(f"unknown reranker {settings.reranker!r} (RAGSTEP_RERANKER); supported: none, http, bedrock")
