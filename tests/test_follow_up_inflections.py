"""A model-free follow-up asks in another inflection than the document states ("When did it open?" / "opened in 2021",
"Can I carry them over?" / "may be carried over", "Can I freeze it?" / "can be frozen"), often about a sentence the
previous answer quoted beside its answer. It is answered, through the chat use case and a real session, and a
follow-up whose new ask no sentence holds still does not get the previous answer again.

:mod:`ragstep.retrieval.english_stem` (one form for a word's inflections), :mod:`ragstep.retrieval.follow_up_answer`
(the rule on the previous answer), :mod:`ragstep.retrieval.followup` (an adverb of time that points back).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.context import Context
from ragstep.retrieval.answer_terms import stems
from ragstep.retrieval.english_stem import english_stem
from ragstep.retrieval.followup import follow_up_reason, resolve
from support.conversation import conversation, ingested

HANDBOOK = """# Acme Robotics Employee Handbook

## Vacation policy

Full-time employees receive 25 days of paid vacation per calendar year. Part-time employees receive vacation pro \
rata to their contracted hours.
Up to 5 unused vacation days may be carried over into the next year; carried-over days expire on March 31.
Vacation requests must be submitted in the HR portal at least two weeks in advance.

## Sick leave

If you are sick, notify your manager before 10:00 on the first day of absence.

## Offices

Our headquarters is at Torstrasse 112, 10119 Berlin, Germany. The Lisbon office is at Rua Augusta 45, Lisboa.
The Austin office opened in 2021 and is located at 500 Congress Avenue, Austin, TX 78701.
Office hours are 08:00 to 19:00 on weekdays; the buildings are closed on weekends.
"""
RECIPE = """# Grandma's Apple Crumble

Serves 6. Preparation takes 20 minutes and baking takes 40 minutes.

## Method

Preheat the oven to 180 °C (fan 160 °C). Toss the apples with 30 g of the sugar and the cinnamon.
Rub the butter into the flour until it looks like breadcrumbs, then stir in the oats and the rest of the sugar.
Scatter the crumble over the apples and bake for 40 minutes until golden. Serve warm with vanilla custard.
The crumble can be frozen unbaked for up to three months.
"""


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Context]:
    yield from ingested(tmp_path_factory.mktemp("inflections"), {"handbook.md": HANDBOOK, "recipe.md": RECIPE})


@pytest.mark.parametrize(
    ("questions", "expected"),
    [
        # The previous answer was this very sentence: it holds the new ask ("open") in another inflection.
        (("Where is the Austin office?", "When did it open?"), "opened in 2021"),
        # The sentence states the ask in another inflection ("carried", "frozen") than the follow-up's own words.
        (("How many vacation days do full-time employees get?", "Can I carry them over?"), "carried over"),
        (("What temperature should the oven be for the crumble?", "Can I freeze it?"), "frozen unbaked"),
    ],
)
def test_a_follow_up_is_answered_by_a_sentence_that_states_its_ask_inflected(
    ctx: Context, questions: tuple[str, str], expected: str
) -> None:
    out = conversation(ctx, *questions)
    assert out["rewritten_query"] is not None, out
    assert expected in str(out["answer"]), out["answer"]


def test_a_new_ask_no_sentence_holds_is_not_answered_with_the_previous_answer(ctx: Context) -> None:
    first = conversation(ctx, "Where is the Austin office?")
    assert "500 Congress Avenue" in str(first["answer"]), first["answer"]
    out = conversation(ctx, "Where is the Austin office?", "Who manages it?")
    assert out["rewritten_query"] is not None
    assert "500 Congress Avenue" not in str(out["answer"]), out["answer"]
    assert out["answer"] == NO_ANSWER["en"], out["answer"]


@pytest.mark.parametrize(
    "words",
    [
        ("open", "opened", "opening", "opens"),
        ("carry", "carried", "carries"),
        ("entry", "entries"),
        ("freeze", "froze", "frozen"),
        ("write", "wrote", "written"),
        ("take", "took", "taken"),
    ],
)
def test_the_inflections_of_a_word_are_one_term(words: tuple[str, ...]) -> None:
    assert len({english_stem(w) for w in words}) == 1, {w: english_stem(w) for w in words}
    assert len(stems(words)) == 1


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("left", "leave"),  # a form that is as often another word is not read as the verb
        ("bound", "bind"),
        ("saw", "see"),
        ("ties", "ty"),  # too short for "-ies" to be a "-y" word's
    ],
)
def test_words_that_only_look_inflected_stay_apart(one: str, other: str) -> None:
    assert english_stem(one) != english_stem(other)


def test_an_adverb_of_time_that_points_back_makes_a_follow_up() -> None:
    assert follow_up_reason("Can I go back afterwards?", "How do I upgrade?") == "refers_back"
    found = resolve("Can I go back afterwards?", ["How do I upgrade?"])
    assert found is not None and found.added == ("upgrade",)
    assert follow_up_reason("Was passiert danach?", "Wie aktualisiere ich Orbit?") == "refers_back"
    # The event named: the question stands alone.
    assert follow_up_reason("Can I go back after the upgrade?", "How do I upgrade?") is None
