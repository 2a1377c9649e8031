"""Amazon Bedrock's ``Rerank`` API (``bedrock-agent-runtime``): Amazon Rerank and Cohere Rerank 3.5.

The client comes from :mod:`ragstep.adapters._aws` (the process's shared Session, standard retries, timeouts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragstep.adapters._aws import boto_provider_error, model_client
from ragstep.adapters.rerankers._batches import DEFAULT_MAX_CHARS, check_limits, index_scores, rerank_in_batches
from ragstep.errors import InputError, ProviderError

if TYPE_CHECKING:
    from botocore.config import Config

#: Bedrock's ``Rerank`` takes at most 1000 sources per call.
BEDROCK_MAX_DOCUMENTS = 1000
# Bedrock Rerank's length limit for the query and for each text document (RerankTextDocument.text).
_BEDROCK_MAX_TEXT_CHARS = 32000


class BedrockReranker:
    """Amazon Rerank (``amazon.rerank-v1:0``) and Cohere Rerank 3.5 (``cohere.rerank-v3-5:0``) through the
    ``bedrock-agent-runtime`` ``Rerank`` API (``POST /rerank``).

    ``model`` is a model id, turned into the foundation-model ARN of the client's region and partition
    (``arn:aws:bedrock:<region>::foundation-model/<model>``), or a full ARN used as is. Documents go as ``INLINE``
    ``TEXT`` sources, at most 1000 per call (the API's limit) and 32000 characters each; ``numberOfResults`` asks
    for every document of the call, and ``nextToken`` pages are followed. Retries, backoff and timeouts are
    botocore's; the client is created on first use and reused. Not every region offers both models (Amazon
    Rerank is in us-west-2, ca-central-1, eu-central-1 and ap-northeast-1 at the time of writing).
    """

    def __init__(
        self,
        model: str = "amazon.rerank-v1:0",
        *,
        region: str | None = None,
        max_documents_per_call: int | None = None,
        max_chars: int = DEFAULT_MAX_CHARS,
        timeout_s: float = 30.0,
        max_retries: int = 4,
        retry_mode: str = "standard",
        endpoint_url: str | None = None,
        client_config: Config | None = None,
    ) -> None:
        self.model = model.strip()
        if not self.model:
            raise InputError("BedrockReranker needs a model id, e.g. amazon.rerank-v1:0 or cohere.rerank-v3-5:0")
        self._batch = min(max_documents_per_call or BEDROCK_MAX_DOCUMENTS, BEDROCK_MAX_DOCUMENTS)
        self._max_chars = min(max_chars, _BEDROCK_MAX_TEXT_CHARS)
        check_limits("BedrockReranker", self._batch, max_chars, timeout_s, max_retries)
        self.name = f"bedrock:{self.model}"
        self._boto = model_client(
            "bedrock-agent-runtime",
            region=region,
            endpoint_url=endpoint_url,
            timeout_s=timeout_s,
            max_retries=max_retries,
            retry_mode=retry_mode,
            config=client_config,
        )

    @property
    def model_arn(self) -> str:
        if self.model.startswith("arn:"):
            return self.model
        meta = self._boto.get().meta
        return f"arn:{meta.partition}:bedrock:{meta.region_name}::foundation-model/{self.model}"

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        query = query[:_BEDROCK_MAX_TEXT_CHARS]
        return rerank_in_batches(query, documents, self._batch, self._max_chars, self._rerank_batch)

    def close(self) -> None:
        self._boto.close()

    # -- internals -------------------------------------------------------------------------------------------

    def _source(self) -> str:
        # The region, not the endpoint: the message reaches users, and a VPC or custom endpoint is internal.
        return f"Bedrock rerank model {self.model} in {self._boto.get().meta.region_name}"

    def _rerank_batch(self, query: str, batch: list[str]) -> list[tuple[int, float]]:
        from botocore.exceptions import BotoCoreError, ClientError

        client = self._boto.get()
        request: dict[str, Any] = {
            "queries": [{"type": "TEXT", "textQuery": {"text": query}}],
            "sources": [
                {"type": "INLINE", "inlineDocumentSource": {"type": "TEXT", "textDocument": {"text": text}}}
                for text in batch
            ],
            "rerankingConfiguration": {
                "type": "BEDROCK_RERANKING_MODEL",
                "bedrockRerankingConfiguration": {
                    "numberOfResults": len(batch),
                    "modelConfiguration": {"modelArn": self.model_arn},
                },
            },
        }
        results: list[Any] = []
        # Every page holds at least one result, so len(batch) + 1 pages bound a server that never stops paging.
        for _page in range(len(batch) + 1):
            try:
                response = client.rerank(**request)
            except (ClientError, BotoCoreError) as exc:
                raise boto_provider_error(self._source(), exc) from exc
            page = response.get("results")
            if not isinstance(page, list):
                raise ProviderError(f"{self._source()} answered without a 'results' list")
            results.extend(page)
            token = response.get("nextToken")
            if not token or not page:
                break
            request["nextToken"] = token
        return index_scores(results, len(batch), self._source(), ("relevanceScore",))
