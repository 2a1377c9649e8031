"""``python -m ragstep.bench.xquad``: BEIR-layout sets from XQuAD files, monolingual and cross-lingual."""

from __future__ import annotations

import json
from pathlib import Path

from ragstep.bench.quality import load_beir
from ragstep.bench.xquad import build_set


def fake_xquad(folder: Path, lang: str, words: tuple[str, str]) -> None:
    """Two articles of two paragraphs, one question each, the same ids in every language (as XQuAD's)."""
    data = [
        {
            "title": f"Article {a}",
            "paragraphs": [
                {
                    "context": f"{words[0]} {a}{p} {words[1]}",
                    "qas": [
                        {
                            "id": f"q{a}{p}",
                            "question": f"{words[1]} {a}{p}?",
                            # SQuAD lists an answer once per annotator: the same span may come twice.
                            "answers": [{"text": f"{a}{p}", "answer_start": 0}] * 2,
                        }
                    ],
                }
                for p in range(2)
            ],
        }
        for a in range(2)
    ]
    (folder / f"xquad.{lang}.json").write_text(json.dumps({"data": data, "version": "1.0"}), encoding="utf-8")


def test_a_cross_lingual_set_asks_one_language_over_the_others_passages(tmp_path: Path) -> None:
    src = tmp_path / "xquad"
    src.mkdir()
    fake_xquad(src, "en", ("passage", "question"))
    fake_xquad(src, "ru", ("отрывок", "вопрос"))
    folder = build_set(src, "en-ru", tmp_path / "out", questions=3, embed=False)
    assert folder.name == "xquad-en-ru"
    bench = load_beir(folder, "none")
    assert len(bench.corpus) == 4 and all(text.startswith("отрывок") for _, _, text in bench.corpus)
    assert len(bench.queries) == 3 and all(text.startswith("question") for _, text in bench.queries)
    # Each question's own paragraph is its one relevant document, by position: the same in every language.
    assert all(bench.qrels[qid] == {f"p0{qid[1]}-0{qid[2]}": 1} for qid, _ in bench.queries)
    # The sample is the same whichever language asks.
    monolingual = load_beir(build_set(src, "ru", tmp_path / "out", questions=3, embed=False), "none")
    assert {q for q, _ in monolingual.queries} == {q for q, _ in bench.queries}


def test_the_reference_answers_are_the_passage_languages_spans(tmp_path: Path) -> None:
    src = tmp_path / "xquad"
    src.mkdir()
    fake_xquad(src, "en", ("passage", "question"))
    fake_xquad(src, "ru", ("отрывок", "вопрос"))
    folder = build_set(src, "en-ru", tmp_path / "out", questions=3, embed=False)
    rows = [json.loads(line) for line in (folder / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    asked = {q for q, _ in load_beir(folder, "none").queries}
    assert {r["_id"] for r in rows} == asked
    # One span each (annotators' duplicates folded), and it is in the question's own paragraph.
    corpus = {json.loads(line)["_id"]: json.loads(line)["text"] for line in (folder / "corpus.jsonl").open()}
    for r in rows:
        assert r["answers"] == [r["_id"][1:]]
        assert r["answers"][0] in corpus[f"p0{r['_id'][1]}-0{r['_id'][2]}"]
