"""The extractive answerer's rules: rarity-weighted coverage, the two abstention floors, and quoting only the
passages and sentences close to the best one."""

from __future__ import annotations

import math

import pytest

from ragstep.adapters.chat import extractive
from ragstep.adapters.chat.extractive import NO_ANSWER, extract_answer

LAMBDA = (
    "AWS Lambda runs code without servers. Cold starts happen when a new execution environment starts.",
    "Provisioned concurrency keeps environments warm. It removes cold starts for steady traffic.",
    "BM25 ranks documents by term frequency.",
)
BEIJING = ("北京是中华人民共和国的首都。北京也是全国的文化中心。", "上海是经济中心。")


def test_a_term_no_passage_holds_weighs_most() -> None:
    weights = extractive._weights(frozenset({"cold", "azure"}), [frozenset({"cold"}), frozenset({"cold", "warm"})])
    assert weights["azure"] == pytest.approx(math.log(1 + 3 / 0.5))
    assert weights["cold"] == pytest.approx(math.log(1 + 3 / 2.5))
    assert weights["azure"] > weights["cold"]


def test_missing_rare_terms_make_it_abstain_though_most_terms_are_shared() -> None:
    assert extract_answer("When do cold starts happen?", LAMBDA, 600) == [
        "Cold starts happen when a new execution environment starts. [1]"
    ]
    # Three of five terms (60 %) are quoted, but "azure" and "functions" are in no passage: they weigh the most,
    # the best sentence covers 0.42 of the weight, under the 0.45 floor.
    assert extract_answer("When do cold starts happen on Azure Functions?", LAMBDA, 600) == [NO_ANSWER["en"]]


def test_terms_scattered_over_a_passage_are_no_answer() -> None:
    # The first passage holds over half of the question's weight, but no sentence of it reaches the floor.
    question = "Which servers run code when cold starts happen in Azure?"
    assert extract_answer(question, LAMBDA, 600) == [NO_ANSWER["en"]]


def test_the_best_passage_must_cover_half_of_the_question() -> None:
    # Best sentence (and its passage) cover 0.49 of the weight: over the sentence floor, under the passage floor.
    assert extractive.MIN_SENTENCE_COVERAGE < 0.49 < extractive.MIN_PASSAGE_COVERAGE
    assert extract_answer("广州的文化中心在哪里？", BEIJING, 600) == [NO_ANSWER["zh"]]
    assert extract_answer("东京是哪个国家的首都？", BEIJING, 600) == [NO_ANSWER["zh"]]


def test_a_passage_well_below_the_best_is_not_quoted_nor_cited() -> None:
    # Passage 2 shares "cold starts" (0.6 of the best sentence's score): under 0.9 x best, left out.
    answer = "".join(extract_answer("When do cold starts happen?", LAMBDA, 600))
    assert "[2]" not in answer and "Provisioned" not in answer
    answer = "".join(extract_answer("What removes cold starts for steady traffic?", LAMBDA, 600))
    assert answer == "It removes cold starts for steady traffic. [2]"


def test_within_the_chosen_passages_only_sentences_near_the_best_are_quoted() -> None:
    passages = (
        "Cold starts happen when Lambda creates an environment. Lambda bills by the millisecond. "
        "Cold starts are longer for large packages.",
    )
    answer = "".join(extract_answer("When do Lambda cold starts happen?", passages, 600))
    assert "bills" not in answer  # shares only "lambda": under half the best sentence's score
    assert answer.startswith("Cold starts happen when Lambda creates an environment. [1]")
    assert "Cold starts are longer for large packages. [1]" in answer


def test_chinese_answers_quote_the_matching_sentences_in_order() -> None:
    assert extract_answer("北京是哪个国家的首都？", BEIJING, 600) == [
        "北京是中华人民共和国的首都。 [1]",
        "北京也是全国的文化中心。 [1]",
    ]


def test_a_question_of_stopwords_only_has_no_answer() -> None:
    assert extract_answer("What is it?", LAMBDA, 600) == [NO_ANSWER["en"]]
