"""Issue 32: each list read as its hits' share of the best score its retriever could give the query (a cosine from
the query's background to 1, BM25 up to the query's ceiling), from the corpus's own statistics; the bench's new
public sets; the bench embeds a query as the API accepts it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from ragstep.bench.public_sets import build_covid_faq, build_korquad
from ragstep.bench.quality import load_beir, run_quality
from ragstep.models.scale import ScoreScale
from ragstep.ports import Hit
from ragstep.retrieval.bm25 import Bm25Stats, idf, query_ceiling
from ragstep.retrieval.fusion import fuse_absolute, fuse_evidence
from ragstep.stages.search.chunk_rerank import mmr

E5 = ScoreScale(zero=0.77, span=0.2)


def test_the_ceiling_counts_every_query_term_and_a_term_no_chunk_holds_at_its_most() -> None:
    stats = Bm25Stats(docs=1000, tokens=50_000, df={"tesla": 2, "culture": 300})
    ceiling = query_ceiling(stats, ["tesla", "reputation", "popular", "culture", "tesla"])
    # Distinct terms, each at idf x (k1 + 1); "reputation" and "popular" (no chunk holds them) at df 0.
    assert ceiling == pytest.approx(2.5 * (idf(2, 1000) + 2 * idf(0, 1000) + idf(300, 1000)))
    assert query_ceiling(Bm25Stats(), ["x"]) == 0.0


def _keyword(best_raw: float, relative: list[tuple[str, float]]) -> list[Hit]:
    return [Hit(cid, rel, rel * best_raw) for cid, rel in relative]


def test_a_keyword_hit_that_shares_names_with_a_foreign_language_question_does_not_outvote_the_vectors() -> None:
    # An English question of eight words over Russian passages: BM25 matches only a name and a year (each in one or
    # two of 1,000 chunks, three times in the best chunk: 21 points, two rare-word matches' worth on the previous
    # fixed unit of 44 points); its six other words no chunk holds. The vectors rank the answer "v1" first, a third
    # of the way from the query's background (0.70) to 1, and do not find the keyword hit "k1" at all.
    stats = Bm25Stats(docs=1000, tokens=50_000, df={"tesla": 2, "1891": 1})
    terms = ["tesla", "1891", "reputation", "popular", "culture", "inventor", "famous", "later"]
    saturated = 3 * 2.5 / (3 + 1.5)  # tf 3 at the average length: (k1 + 1) tf / (tf + k1)
    best_raw = (idf(2, 1000) + idf(1, 1000)) * saturated
    background = ScoreScale(zero=0.70, span=0.2)  # the query's own: its mean cosine over the corpus
    vector = [Hit("v1", 0.80), Hit("v2", 0.79), Hit("v3", 0.75)]
    keyword = _keyword(best_raw, [("k1", 1.0)])
    ceiling = query_ceiling(stats, terms)
    assert best_raw / ceiling < 0.2
    fused = [f.chunk_id for f in fuse_evidence(vector, keyword, vector_scale=background, keyword_ceiling=ceiling)]
    assert fused[0] == "v1"
    # The fixed unit read the same 21 points as strong evidence: the name's passage first.
    assert fuse_absolute(vector, keyword, vector_scale=background)[0].chunk_id == "k1"
    # A query all of whose words the best keyword hit holds many times weighs fully: that hit comes first.
    full = fuse_evidence(vector, keyword, vector_scale=background, keyword_ceiling=best_raw)
    assert full[0].chunk_id == "k1"


def test_fusion_reads_shares_of_the_background_to_one_and_of_the_ceiling() -> None:
    background = ScoreScale(zero=0.75, span=0.2)
    vector = [Hit("a", 0.95), Hit("b", 0.90), Hit("c", 0.80)]  # shares 0.8, 0.6, 0.2 of the way to 1
    keyword = _keyword(12.0, [("c", 1.0), ("d", 0.5)])  # 12 of a 30-point ceiling: shares 0.4, 0.2
    fused = fuse_evidence(vector, keyword, vector_scale=background, keyword_ceiling=30.0)
    wv, wk = 0.7 * 0.8, 0.3 * 0.4  # each weight times its list's best share
    total = wv + wk
    expected = {"a": wv * 0.8 / total, "b": wv * 0.6 / total, "c": (wv * 0.2 + wk) / total, "d": wk * 0.5 / total}
    assert {f.chunk_id: f.score for f in fused} == pytest.approx(expected)
    assert [f.chunk_id for f in fused] == sorted(expected, key=lambda c: -expected[c])
    # The declared span plays no part: only the zero (the query's background) does.
    other_span = fuse_evidence(vector, keyword, vector_scale=ScoreScale(0.75, 0.05), keyword_ceiling=30.0)
    assert [(f.chunk_id, f.score) for f in other_span] == [(f.chunk_id, f.score) for f in fused]
    # No ceiling (an index that keeps its BM25 statistics to itself): the fixed-unit rule.
    assert [f.score for f in fuse_evidence(vector, keyword, vector_scale=background)] == [
        f.score for f in fuse_absolute(vector, keyword, vector_scale=background)
    ]


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
