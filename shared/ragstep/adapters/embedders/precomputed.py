"""Stored vectors served as an embedder: the benchmarks embed a corpus once and replay its vectors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ragstep.adapters.embedders._vectors import check_texts, unit_rows
from ragstep.errors import InputError, ProviderError


class PrecomputedEmbedder:
    """Looks texts up in vectors computed elsewhere (benchmarks replay a corpus embedded once, offline).

    An unknown text is an error rather than a zero vector: a benchmark that silently scores 0 would lie.
    """

    def __init__(self, model_id: str, vectors_by_text: Mapping[str, np.ndarray | Sequence[float]]) -> None:
        if not vectors_by_text:
            raise InputError("PrecomputedEmbedder needs at least one vector")
        self.model_id = model_id
        self._row = {text: i for i, text in enumerate(vectors_by_text)}
        self._matrix = unit_rows(
            list(vectors_by_text.values()), expected_dim=None, source="precomputed vectors", error=InputError
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = check_texts(texts)
        missing = [text for text in items if text not in self._row]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ProviderError(f"{self.model_id}: no precomputed vector for text {missing[0][:60]!r}{more}")
        return self._matrix[[self._row[text] for text in items]].reshape(len(items), self._matrix.shape[1])

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]
