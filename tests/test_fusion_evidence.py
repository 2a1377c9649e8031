"""Issue 32: each hit read as how unlikely its cosine and its BM25 would be for a chunk unrelated to the query, in
nats, from the corpus's own statistics (the query's cosine mean and spread; idf), the two added; the bench's new
public sets; the bench embeds a query as the API accepts it."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from ragstep.bench.public_sets import build_covid_faq, build_korquad
from ragstep.bench.quality import load_beir, run_quality
from ragstep.models.scale import ScoreScale
from ragstep.ports import Hit
from ragstep.retrieval.background import QueryBackground
from ragstep.retrieval.bm25 import idf
from ragstep.retrieval.fusion import fuse_absolute, fuse_evidence, tail_surprise
from ragstep.stages.search.chunk_rerank import mmr

E5 = ScoreScale(zero=0.77, span=0.2)


def _keyword(best_raw: float, relative: list[tuple[str, float]]) -> list[Hit]:
    return [Hit(cid, rel, rel * best_raw) for cid, rel in relative]


def test_tail_surprise_is_the_normal_tails_minus_log() -> None:
    assert tail_surprise(0.0) == pytest.approx(math.log(2.0))
    assert tail_surprise(3.0) == pytest.approx(-math.log(0.0013498980316301), rel=1e-9)
    # Past 8 the asymptotic form takes over without a step, and far below the mean a cosine is no evidence.
    assert tail_surprise(8.0 - 1e-9) == pytest.approx(tail_surprise(8.0), rel=1e-4)
    assert tail_surprise(40.0) == pytest.approx(800.0 + math.log(40.0 * math.sqrt(2 * math.pi)), rel=1e-6)
    assert 0.0 < tail_surprise(-10.0) < 1e-20
    zs = [-3.0, -1.0, 0.0, 1.5, 4.0, 7.9, 8.0, 12.0]
    assert [tail_surprise(z) for z in zs] == sorted(tail_surprise(z) for z in zs)


def test_fusion_adds_each_hits_surprise_in_nats() -> None:
    background = QueryBackground(mean=0.75, sd=0.02)
    vector = [Hit("a", 0.85), Hit("b", 0.81), Hit("c", 0.77)]  # 5, 3 and 1 standard deviations out
    keyword = _keyword(12.5, [("c", 1.0), ("d", 0.4)])  # BM25 12.5 and 5 points: 5 and 2 nats of idf
    fused = fuse_evidence(vector, keyword, background=background)
    d = {cid: tail_surprise(z) for cid, z in (("a", 5.0), ("b", 3.0), ("c", 1.0))}
    k = {"c": 12.5 / 2.5, "d": 5.0 / 2.5}
    total = d["a"] + k["c"]  # each list's best
    expected = {"a": d["a"] / total, "b": d["b"] / total, "c": (d["c"] + k["c"]) / total, "d": k["d"] / total}
    assert {f.chunk_id: f.score for f in fused} == pytest.approx(expected)
    assert [f.chunk_id for f in fused] == sorted(expected, key=lambda c: -expected[c])
    # No constant of the model plays a part: a declared scale, or none, ranks the same and scores the same.
    for scale in (E5, None):
        again = fuse_evidence(vector, keyword, background=background, vector_scale=scale)
        assert [(f.chunk_id, f.score) for f in again] == [(f.chunk_id, f.score) for f in fused]
    # No background (an index that cannot describe its vectors): the previous fixed-unit rule, on the declared scale.
    assert [f.score for f in fuse_evidence(vector, keyword, vector_scale=E5)] == [
        f.score for f in fuse_absolute(vector, keyword, vector_scale=E5)
    ]


def test_a_keyword_hit_that_shares_a_name_with_a_foreign_language_question_does_not_outvote_the_vectors() -> None:
    # An English question over Russian passages: every cosine is low (mean 0.70, spread 0.02); the answer stands 5
    # standard deviations out (0.80), the vectors do not find "k1", which holds the question's one name once
    # (idf ln(1000 / 2): ~6.2 nats). The previous rule read the name's passage at 0.3 of the keyword weight against
    # the answer's 0.5 share of the way to 1 times 0.7 x 0.5: the name won.
    background = QueryBackground(mean=0.70, sd=0.02)
    vector = [Hit("v1", 0.80), Hit("v2", 0.76), Hit("v3", 0.74)]
    name = idf(2, 1000) * 2.5 * 1 / (1 + 1.5)  # one occurrence at the average length: exactly its idf
    keyword = _keyword(name, [("k1", 1.0)])
    assert fuse_evidence(vector, keyword, background=background)[0].chunk_id == "v1"
    # A query that copies four of a passage's rare words, each a few times, is far less likely by chance: it leads.
    copied = 4 * idf(1, 1000) * 2.5 * 3 / (3 + 1.5)
    assert fuse_evidence(vector, _keyword(copied, [("k1", 1.0)]), background=background)[0].chunk_id == "k1"


def test_an_faq_on_one_topic_reads_its_answers_cosine_against_its_own_crowd() -> None:
    # Every entry of an FAQ on one subject sits at e5-like cosines ~0.84 to a question about it (spread 0.016); the
    # entry that answers it at 0.89 (3 standard deviations out), holding none of its words. An entry that shares two
    # of its common words ("vaccine", "dose": held by a third of the entries) is a coin flip's worth of evidence.
    # Read as a share of the way from 0.84 to 1 (0.31), the answer lost to the shared words; read against the
    # FAQ's own crowd it leads.
    background = QueryBackground(mean=0.84, sd=0.016)
    vector = [Hit("answer", 0.888), Hit("other", 0.86), Hit("shared", 0.845)]
    common = 2 * idf(60, 180)
    keyword = _keyword(common, [("shared", 1.0)])
    assert fuse_evidence(vector, keyword, background=background)[0].chunk_id == "answer"


def test_opensearch_bm25_without_the_k1_factor_reads_in_the_same_nats() -> None:
    # Lucene's BM25 leaves out (k1 + 1): the same hit at a keyword gain of 1 ranks and scores as ours at 2.5.
    background = QueryBackground(mean=0.75, sd=0.02)
    vector = [Hit("a", 0.83), Hit("b", 0.80)]
    ours = fuse_evidence(vector, _keyword(10.0, [("b", 1.0), ("c", 0.5)]), background=background)
    lucene = fuse_evidence(vector, _keyword(4.0, [("b", 1.0), ("c", 0.5)]), background=background, keyword_gain=1.0)
    assert [(f.chunk_id, f.score) for f in lucene] == [(f.chunk_id, pytest.approx(f.score)) for f in ours]


# -- the bench ------------------------------------------------------------------------------------------------------


def _beir(folder: Path, queries: list[tuple[str, str]], docs: list[tuple[str, str]], dim: int = 8) -> None:
    folder.mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for did, text in docs:
            fh.write(json.dumps({"_id": did, "title": "", "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for qid, text in queries:
            fh.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (folder / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{qid}\td{qid[1:]}\t1\n" for qid, _ in queries), encoding="utf-8"
    )
    # Document i's vector is the unit vector e_i; query i's points at document i.
    corpus = np.eye(len(docs), dim, dtype=np.float16)
    np.save(folder / "corpus.emb.npy", corpus)
    np.save(folder / "queries.emb.npy", corpus[: len(queries)])


def test_a_query_written_with_a_trailing_space_is_searched_with_its_vector(tmp_path: Path) -> None:
    # XQuAD writes some questions with a trailing space; the API strips a query before it is embedded, and the
    # bench's precomputed vectors were looked up by the unstripped text: that question ran on keywords only.
    docs = [(f"d{i}", f"zebra{i} plain words here") for i in range(4)]
    queries = [("q0", "nothing shared at all "), ("q1", "also unrelated words?")]
    _beir(tmp_path / "set", queries, docs)
    report = run_quality(tmp_path / "set", runs=("dense", "hybrid"))
    assert report["runs"]["dense"]["ndcg@10"] == 1.0
    assert report["runs"]["hybrid"]["ndcg@10"] == 1.0


def test_the_korquad_set_keeps_each_questions_own_paragraph(tmp_path: Path) -> None:
    src = tmp_path / "korquad" / "dataset"
    src.mkdir(parents=True)
    data = [
        {
            "title": f"문서 {a}",
            "paragraphs": [
                {"context": f"문단 {a}{p} 내용", "qas": [{"id": f"{a}-{p}-0", "question": f"질문 {a}{p}?"}]}
                for p in range(2)
            ],
        }
        for a in range(3)
    ]
    (src / "KorQuAD_v1.0_dev.json").write_text(json.dumps({"data": data}, ensure_ascii=False), encoding="utf-8")
    bench = load_beir(build_korquad(tmp_path / "korquad", tmp_path / "out", embed=False), "none")
    assert len(bench.corpus) == 6 and len(bench.queries) == 6
    assert all(bench.qrels[qid] == {f"k{int(qid[0]):03d}-{int(qid[2]):02d}": 1} for qid, _ in bench.queries)


def test_the_faq_set_drops_unanswered_questions_and_keeps_every_answering_entry(tmp_path: Path) -> None:
    clean = tmp_path / "covid-faq" / "data" / "clean"
    clean.mkdir(parents=True)
    with (clean / "faq_db.csv").open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["ID", "Category", "Question", "Answer", "Answer (Original)"])
        w.writerows([[i, "c", f"Question {i}?", f"Answer {i}.", ""] for i in (2, 7, 8)])
    with (tmp_path / "covid-faq" / "data" / "combine_validation_relabel.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["Question", "Answer"])
        w.writerows([["Which one should I get?", "7,8"], ["Nobody answers this", "-1"], ["Is it safe?", "2"]])
    bench = load_beir(build_covid_faq(tmp_path / "covid-faq", tmp_path / "out", embed=False), "none")
    assert [d[1] for d in bench.corpus] == ["Question 2?", "Question 7?", "Question 8?"]  # the question as title
    assert [t for _, t in bench.queries] == ["Which one should I get?", "Is it safe?"]
    assert bench.qrels == {"q000": {"faq007": 1, "faq008": 1}, "q001": {"faq002": 1}}


def test_mmr_picks_until_its_candidates_come_from_k_documents() -> None:
    # Passages cut into several chunks: `ragstep search --top-k 2` must still have two documents to give after the
    # merge stage folds each document's neighbouring chunks into one result.
    relevance = [0.9, 0.85, 0.8, 0.7, 0.6]
    docs = ["a", "a", "a", "b", "c"]
    sets = [frozenset({f"w{i}"}) for i in range(5)]  # no overlap: MMR keeps the relevance order
    assert mmr(relevance, sets, 2, 0.7) == [0, 1]
    assert mmr(relevance, sets, 2, 0.7, docs) == [0, 1, 2, 3]
    assert mmr(relevance, sets, 5, 0.7, docs) == [0, 1, 2, 3, 4]  # fewer documents than k: every candidate
