"""The derived evaluation sets: generated from the shared benchmark sets, deterministic, readable as BEIR sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragstep.bench.derived import ENTITY_QUERIES, build, main
from ragstep.bench.quality import load_beir


def test_cmrc_entities_is_deterministic_and_answerable(bench_dir: Path, tmp_path: Path) -> None:
    first = build(tmp_path / "a", bench_dir)
    second = build(tmp_path / "b", bench_dir)
    for a, b in zip(first, second, strict=True):
        for name in ("corpus.jsonl", "queries.jsonl", "qrels.tsv"):
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
    entities = load_beir(first[0])
    assert len(entities.queries) == ENTITY_QUERIES and entities.corpus_emb is None
    assert all(title == "" for _, title, _ in entities.corpus)  # titles removed: found in the text or not at all
    text = {doc_id: body for doc_id, _, body in entities.corpus}
    for qid, query in entities.queries:
        (doc_id,) = entities.qrels[qid]  # exactly one relevant paragraph
        assert query in text[doc_id]
    source = {json.loads(line)["_id"] for line in (bench_dir / "cmrc2018-zh" / "corpus.jsonl").open(encoding="utf-8")}
    assert set(text) == source


def test_command_prints_the_folders(bench_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), "--bench-dir", str(bench_dir)]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "cmrc2018-entities")]
