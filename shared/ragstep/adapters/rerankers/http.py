"""The ``/rerank`` HTTP API that Cohere made common (Cohere, Jina, SiliconFlow, vLLM, Xinference, TEI)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ragstep.adapters._http import JSONEndpoint, one_line
from ragstep.adapters.rerankers._batches import (
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_DOCUMENTS,
    check_limits,
    index_scores,
    rerank_in_batches,
)
from ragstep.errors import InputError, ProviderError

#: ``flavour`` -> the URL used when none is configured. Cohere's v2 API; Jina and SiliconFlow's clouds; vLLM
#: (``vllm serve --task score``; it also answers ``/rerank`` and ``/v2/rerank``), Xinference and Hugging Face
#: text-embeddings-inference (TEI) at their default local ports.
DEFAULT_URLS: Mapping[str, str] = {
    "cohere": "https://api.cohere.com/v2/rerank",
    "jina": "https://api.jina.ai/v1/rerank",
    "siliconflow": "https://api.siliconflow.cn/v1/rerank",
    "vllm": "http://localhost:8000/v1/rerank",
    "xinference": "http://localhost:9997/v1/rerank",
    "tei": "http://localhost:8080/rerank",
}
FLAVOURS = tuple(DEFAULT_URLS)
# TEI refuses more than its ``--max-client-batch-size`` (32 unless the server was started with more).
_TEI_MAX_DOCUMENTS = 32
# Flavours whose API accepts ``return_documents``; asking for scores only keeps answers small.
_RETURN_DOCUMENTS_FLAVOURS = frozenset({"jina", "siliconflow", "xinference"})


class HttpReranker:
    """The ``/rerank`` API that Cohere made common, in the dialect of one ``flavour``.

    * ``cohere``, ``jina``, ``siliconflow``, ``vllm``, ``xinference``: ``POST {model, query, documents, top_n}``
      (plus ``return_documents: false`` for Jina, SiliconFlow and Xinference), answered by
      ``{"results": [{"index", "relevance_score"}, ...]}`` in relevance order; results are placed by ``index``.
    * ``tei`` (Hugging Face text-embeddings-inference): ``POST {query, texts, raw_scores: false,
      return_text: false, truncate: true}``, answered by a bare ``[{"index", "score"}, ...]``. TEI serves one
      model, so ``model`` may be empty (it only names the reranker).

    ``url`` is the full endpoint URL; when empty, the flavour's entry in :data:`DEFAULT_URLS`. ``api_key`` is sent
    as ``Authorization: Bearer``. Retries, backoff and timeouts are those of the OpenAI embedder (429, 5xx,
    timeouts and connection errors are retried; other 4xx fail at once).
    """

    def __init__(
        self,
        model: str = "",
        *,
        flavour: str = "cohere",
        url: str | None = None,
        api_key: str | None = None,
        max_documents_per_call: int | None = None,
        max_chars: int = DEFAULT_MAX_CHARS,
        timeout_s: float = 30.0,
        max_retries: int = 4,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 20.0,
    ) -> None:
        self.flavour = flavour.strip().lower()
        if self.flavour not in DEFAULT_URLS:
            raise InputError(f"unknown rerank API flavour {flavour!r}; supported: {', '.join(FLAVOURS)}")
        self.model = model.strip()
        if not self.model and self.flavour != "tei":
            raise InputError(f"the {self.flavour} rerank API needs a model name (RAGSTEP_RERANK_MODEL)")
        default_batch = _TEI_MAX_DOCUMENTS if self.flavour == "tei" else DEFAULT_MAX_DOCUMENTS
        self._batch = max_documents_per_call or default_batch
        self._max_chars = max_chars
        check_limits("HttpReranker", self._batch, max_chars, timeout_s, max_retries)
        self.url = (url or "").strip() or DEFAULT_URLS[self.flavour]
        self.name = f"{self.flavour}:{self.model}" if self.model else self.flavour
        model_part = f" (model {self.model})" if self.model else ""
        self._endpoint = JSONEndpoint(
            self.url,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_base_s=backoff_base_s,
            backoff_max_s=backoff_max_s,
            api_key=api_key,
            source=f"rerank provider {self.flavour}{model_part}",  # no URL: the message reaches users
        )

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        return rerank_in_batches(query[: self._max_chars], documents, self._batch, self._max_chars, self._score)

    def close(self) -> None:
        self._endpoint.close()

    # -- internals -------------------------------------------------------------------------------------------

    def _score(self, query: str, batch: list[str]) -> list[tuple[int, float]]:
        return self._results(self._endpoint.post(self._payload(query, batch)), len(batch))

    def _payload(self, query: str, batch: list[str]) -> dict[str, Any]:
        if self.flavour == "tei":
            # TEI serves the one model it was started with; ``model`` only names it.
            return {"query": query, "texts": batch, "raw_scores": False, "return_text": False, "truncate": True}
        payload: dict[str, Any] = {"model": self.model, "query": query, "documents": batch, "top_n": len(batch)}
        if self.flavour in _RETURN_DOCUMENTS_FLAVOURS:
            payload["return_documents"] = False
        return payload

    def _results(self, body: Any, n: int) -> list[tuple[int, float]]:
        # Accept either answer shape whatever the flavour: a TEI-compatible server behind a "cohere" URL (or the
        # reverse) then still works, and a wrong shape still fails with the body in the message.
        items = body if isinstance(body, list) else body.get("results") if isinstance(body, dict) else None
        if not isinstance(items, list):
            shape = "a list of {index, score}" if self.flavour == "tei" else "a 'results' list"
            raise ProviderError(f"{self._endpoint.source} answered without {shape}: {one_line(json.dumps(body))}")
        return index_scores(items, n, self._endpoint.source, ("relevance_score", "score"))
