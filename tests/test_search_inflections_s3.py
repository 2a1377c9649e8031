"""The S3-snapshot index matches a query word's inflections as the local index does, with its parts' joint BM25
statistics (:mod:`ragstep.retrieval.inflection`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstep.adapters.index._keyword import OTHER_FORMS
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.ports import SearchFilter
from test_s3_snapshot import bucket, container, doc, s3_url  # noqa: F401  (the S3 fixtures: a moto server, a bucket)


def test_the_s3_snapshot_index_scores_a_group_with_its_parts_joint_statistics(
    tmp_path: Path,
    bucket: str,  # noqa: F811  (the fixture imported above)
) -> None:
    """Each knowledge base is its own local index there; the document frequencies of the written word and of its
    other forms are summed over them, so the joint search ranks and scores as one index holding both: one part holds
    "apples" and "apple", the other only "apple", which it discounts as the one index does (the joint statistics say
    "apples" is held)."""
    docs = [
        doc("small", "s1", "apples in a pie", "apple tart"),
        doc("large", "l1", "the apple orchard harvest", *(f"pear plum fig {i}" for i in range(7))),
    ]
    writer, one = container(tmp_path, bucket), LocalSearchIndex(tmp_path / "one")
    for chunks, _ in docs:
        writer.replace_knowledge(chunks[0].knowledge_id, chunks)
        one.replace_knowledge(chunks[0].knowledge_id, chunks)
    reader = container(tmp_path, bucket)
    flt = SearchFilter(knowledge_base_ids=("small", "large"))
    assert reader.bm25_stats(["apples", "fig"], flt).df == {"apples": 1, OTHER_FORMS + "apples": 2, "fig": 7}
    got = [(h.chunk_id, h.raw_score) for h in reader.keyword_search(["apples", "fig"], flt, 10, 0.0)]
    want = [(h.chunk_id, h.raw_score) for h in one.keyword_search(["apples", "fig"], flt, 10, 0.0)]
    assert [c for c, _ in got] == [c for c, _ in want] and {c for c, _ in got[:3]} == {"s1-0", "s1-1", "l1-0"}
    assert [r for _, r in got] == pytest.approx([r for _, r in want], rel=1e-6)
