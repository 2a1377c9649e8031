"""``ragstep bench answer``: its metrics on a tiny set with hand-checked figures, its helpers and its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from ragstep.bench.answer import closest_sentence, contains_answer, load_answers, normalise, run_answer
from ragstep.errors import InputError

CORPUS = [
    {"_id": "lambda", "title": "Lambda", "text": "Cold starts happen when a new execution environment starts."},
    {"_id": "bm25", "title": "BM25", "text": "BM25 ranks documents by term frequency and inverse document frequency."},
    {"_id": "tea", "title": "Tea", "text": "Green tea is steeped at about 80 degrees for two minutes."},
    {"_id": "beijing", "title": "北京", "text": "北京是中华人民共和国的首都，也是全国的政治和文化中心。"},
]
QUERIES = [
    {"_id": "q1", "text": "When do cold starts happen?"},
    {"_id": "q2", "text": "How does BM25 rank documents?"},
    {"_id": "q3", "text": "At what temperature is green tea steeped?"},
    {"_id": "q4", "text": "北京是哪个国家的首都？"},
]
QRELS = {"q1": "lambda", "q2": "bm25", "q3": "tea", "q4": "beijing"}
ANSWERS = {
    "q1": ["a new execution environment starts"],
    "q2": ["term frequency"],
    "q3": ["80 degrees"],
    "q4": ["中华人民共和国"],
}


def write_set(folder: Path, answers: dict[str, list[str]] | None = ANSWERS) -> Path:
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES), encoding="utf-8")
    rows = "".join(f"{q}\t{d}\t1\n" for q, d in QRELS.items())
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    if answers is not None:
        lines = "".join(json.dumps({"_id": q, "answers": a}, ensure_ascii=False) + "\n" for q, a in answers.items())
        (folder / "answers.jsonl").write_text(lines, encoding="utf-8")
    return folder


def test_normalised_containment() -> None:
    assert normalise(" Ａ, b！c ") == "abc"
    assert contains_answer("It is steeped at about 80 degrees.", ["80 Degrees"])
    assert not contains_answer("It is hot.", ["80 degrees", ""])


def test_the_closest_sentence_holds_the_most_question_terms() -> None:
    doc = "Tea is old. Green tea is steeped at about 80 degrees. It is green."
    assert (
        closest_sentence("At what temperature is green tea steeped?", doc)
        == "Green tea is steeped at about 80 degrees."
    )


def test_answers_file_errors_say_what_to_fix(tmp_path: Path) -> None:
    assert load_answers(tmp_path) is None
    (tmp_path / "answers.jsonl").write_text('{"id": "q1"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="answers"):
        load_answers(tmp_path)


def test_the_metrics_on_a_tiny_set(tmp_path: Path) -> None:
    report = run_answer(write_set(tmp_path / "tiny"), abstention_sample=4)
    assert report["set"] == "tiny" and report["questions"] == 4 and report["chat_model"] == "extractive"
    # The extractive answerer quotes the sentence that holds each answer, from the relevant document, and cites it.
    assert report["answer_recall"] == 1.0
    assert report["citation_precision"] == 1.0 and report["citation_recall"] == 1.0
    assert report["attribution"] == 1.0 and report["relevant_passage_given"] == 1.0
    # Without its document, no other passage shares enough with a question: every question abstains.
    assert report["abstention"] == 1.0 and report["abstention_questions"] == 4
    assert report["ms_per_question"] > 0
    assert report["citation_parameters"]["threshold"] == 0.63 and report["citation_parameters"]["max_citations"] == 4


def test_a_set_without_answers_reports_no_answer_recall(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_set(tmp_path / "plain", answers=None)
    code, out, err = run_cli(capsys, "bench", "answer", "--set", str(folder), "--json")
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    assert report["answer_recall"] is None and report["attribution"] == 1.0
    code, out, _ = run_cli(capsys, "bench", "answer", "--set", str(folder), "--curve")
    assert code == 0 and "citation precision" in out and "attribution" in out
    assert "trade-off curve" in out and "declined unanswerable" in out


def test_a_missing_set_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "bench", "answer", "--set", str(tmp_path / "missing"))
    assert code != 0 and "not a folder" in err and "Traceback" not in err


def test_unanswerable_questions_are_asked_and_their_declines_counted(tmp_path: Path) -> None:
    folder = write_set(tmp_path / "with-unanswerable")
    extra = [{"_id": "u1", "text": "How do I renew my passport?"}, {"_id": "u2", "text": "上海迪士尼几点开门？"}]
    with (folder / "queries.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in extra))
    (folder / "unanswerable.txt").write_text("u1\nu2\n", encoding="utf-8")
    report = run_answer(folder, abstention_sample=0, curve=True)
    assert report["unanswerable_questions"] == 2 and report["declined_unanswerable"] == 1.0
    # The answerable ones: answered from what retrieval gave, none declined although its source was there.
    assert report["questions"] == 4 and report["answer_recall_retrieved"] == 1.0
    assert report["declined_retrieved"] == 0.0
    # The curve, from the same groundings: at the threshold in use it says what the pipeline's answers said.
    points = {p["threshold"]: p for p in report["curve"]}
    in_use = points[report["curve_threshold_in_use"]]
    assert in_use["answered_correctly"] == report["answer_recall"]
    assert in_use["declined_unanswerable"] == report["declined_unanswerable"]
    answered = [p["answered"] for p in report["curve"]]
    assert answered == sorted(answered, reverse=True)  # a higher threshold never answers more
    assert report["curve_suggested"] is not None and report["curve_suggested"] <= report["curve_threshold_in_use"]


def test_questions_limits_the_answerable_questions_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_set(tmp_path / "limited")
    code, out, err = run_cli(capsys, "bench", "answer", "--set", str(folder), "--questions", "2", "--json")
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    assert report["questions"] == 2 and report["answer_recall"] == 1.0


def test_an_unanswerable_id_that_is_no_question_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_set(tmp_path / "bad-ids")
    (folder / "unanswerable.txt").write_text("q9\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "bench", "answer", "--set", str(folder))
    assert code != 0 and "unanswerable.txt: ids not in queries.jsonl: q9" in err and "Traceback" not in err


SETS = Path(__file__).resolve().parents[1] / "bench-sets"


@pytest.mark.parametrize(
    "name",
    ["answer-en", "answer-en-heldout", "answer-en-docs", "answer-en-stdlib", "answer-en-sysdocs", "answer-zh-attr"],
)
def test_the_answer_sets_hold_together(name: str) -> None:
    """Every reference answer is a span of a relevant document of its question (as the bench scores: an answer is
    correct when it holds one of them); unanswerable questions have no qrels."""
    folder = SETS / name
    lines = {
        name: (folder / name).read_text(encoding="utf-8").splitlines() for name in ("corpus.jsonl", "queries.jsonl")
    }
    docs = {d["_id"]: normalise(d["title"] + " " + d["text"]) for d in map(json.loads, lines["corpus.jsonl"])}
    queries = {q["_id"] for q in map(json.loads, lines["queries.jsonl"])}
    qrels = [line.split("\t") for line in (folder / "qrels.tsv").read_text().splitlines()[1:]]
    answers = load_answers(folder)
    unanswerable = set((folder / "unanswerable.txt").read_text().split())
    assert answers is not None and set(answers) == {q for q, _, _ in qrels} == queries - unanswerable
    relevant: dict[str, list[str]] = {}
    for qid, doc, _ in qrels:
        relevant.setdefault(qid, []).append(docs[doc])
    for qid, texts in relevant.items():
        assert all(any(normalise(a) in text for text in texts) for a in answers[qid]), qid
    assert len(answers) >= 18 and len(unanswerable) >= 6
