"""Issue 32, fifth pass: a knowledge base of a few dozen chunks is read against its own chunks (fusion by surprise,
the similarity threshold's zero) instead of falling back to the declared scale."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ragstep.app.search import new_state
from ragstep.context import Context
from ragstep.models import KnowledgeBase, SearchRequest
from ragstep.ports import SearchFilter
from ragstep.retrieval.background import MIN_FUSION_ROWS, BackgroundIndex, moments, query_scale
from ragstep.stages.search import chunk_search
from test_background import E5, asked_over, crowded


def test_two_chunks_are_a_background_for_fusion_one_is_not() -> None:
    query, vectors = crowded([0.7, 0.8, 0.75])
    assert MIN_FUSION_ROWS == 2
    assert moments(vectors[:1]) is None  # one row has no spread
    two = moments(vectors[:2])
    assert two is not None and two.variance(query) == pytest.approx(np.var([0.7, 0.8], ddof=1), rel=1e-5)
    # The similarity threshold and the rerank stage keep the declared scale below 100 chunks: a dozen chunks' mean
    # is the query's candidates themselves, not unrelated text.
    assert query_scale(E5, two, query) == E5 and query_scale(None, two, query) is None


def test_a_small_knowledge_base_is_read_against_its_own_chunks(
    ctx: Context, make_kb: Callable[..., KnowledgeBase]
) -> None:
    # 24 passages at e5-like cosines ~0.71 (a question in another language than the knowledge base), the one it asks
    # about at 0.83 holding none of its words, and one that copies its three words and is about something else
    # (0.66). Below 100 chunks fusion read the declared scale (zero 0.77, span 0.2): the answer's 0.3 of the way to
    # 1, weighed by 0.7 x 0.3^1.5, lost to the copied words. Read against its own 26 chunks the answer stands six
    # standard deviations out (~20 nats) against ~9 nats of BM25, and leads.
    cosines = [0.70 + 0.004 * (i % 6) for i in range(24)] + [0.83, 0.66]
    query, vectors = crowded(cosines)
    texts = [f"filler passage number {i}" for i in range(24)] + [
        "la réponse se trouve ici",
        "the sphinx riddle answer key of a crossword",
    ]
    kb = make_kb("small", embedding_model="precomputed:small")
    question = "what is the answer to the sphinx riddle"
    asked_over(ctx, kb, "s", texts, vectors, question, query)
    index = ctx.index
    assert isinstance(index, BackgroundIndex)
    assert index.vector_background(kb.embedding_model, SearchFilter(knowledge_base_ids=(kb.id,))) is not None
    state = chunk_search.run(new_state(SearchRequest(query=question, knowledge_base_ids=[kb.id]), ctx), ctx)
    assert [r.id for r in state.search_results[:2]] == ["s-24", "s-25"]
