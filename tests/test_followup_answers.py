"""Elliptical follow-ups with the model-free default answerer, through the chat use case and a real session.

A follow-up is searched with the subject it leaves out, answered by what it asks (the subject only helps read it),
and not with the sentence the previous turn already quoted; demonstratives that point back ("that release") are
told from relative "that" ("files that changed") by grammar alone (:mod:`ragstep.retrieval.demonstratives`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.context import Context
from ragstep.retrieval.followup import follow_up_reason
from support.conversation import conversation, ingested

RELEASE_NOTES = """# Orchard 2.4 release notes

Orchard is a small job scheduler for build farms. Version 2.4 was released on 3 March 2026 by the platform team \
(lead: Ines Varga).

## What changed

- The default queue timeout went from 30 minutes to **45 minutes**.
- Workers now report their free disk space every 20 seconds; a worker under 2 GB free is drained.
- The `orchard retry` command takes `--max-attempts N` (default 3).

## Upgrading

Stop the scheduler, run `orchard migrate --to 2.4`, then start it again. The migration takes about 4 minutes per \
million jobs.
Rolling back to 2.3 is not supported once the migration ran; take a database backup first.

## Known issues

Jobs whose name contains a colon cannot be cancelled from the web UI; use `orchard cancel --id` instead.
"""
# Another tool's page on the same kinds of things (timeouts, cancelling, upgrades), so the subject has to count.
OTHER = """# Kiln user guide

Kiln builds container images. A build that runs longer than its timeout is stopped; the timeout is set per project.
To cancel a build, press the stop button on its page or run `kiln stop BUILD`. Upgrading Kiln keeps every project's
settings. Kiln was written by the tooling group in 2019.
"""

BZIP2 = """# bzip2

bzip2 compresses files using the Burrows-Wheeler block sorting text compression algorithm and Huffman coding. \
Decompression needs about 3700 kbytes of memory for the default block size, or 2300 kbytes with the -s option. bzip2 \
was written by Julian Seward.
"""
LAKE = "# 青海湖\n\n青海湖位于青海省东北部，是中国最大的内陆咸水湖。湖面面积约4583平方公里，平均水深约21米。\n"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Context]:
    yield from ingested(
        tmp_path_factory.mktemp("followups"),
        {"release-notes.md": RELEASE_NOTES, "kiln.md": OTHER, "bzip2.md": BZIP2, "青海湖.md": LAKE},
    )


def test_a_demonstrative_points_back_to_the_previous_question(ctx: Context) -> None:
    out = conversation(ctx, "how long does the orchard migration take?", "who led that release?")
    assert "orchard" in str(out["rewritten_query"]), out["rewritten_query"]
    assert any("follow-up" in note for note in out["notes"]), out["notes"]
    # Not the previous answer again (read on its own words the by-line is chosen, but below the threshold: declined).
    assert "4 minutes per million jobs" not in str(out["answer"]), out["answer"]


def test_a_follow_up_with_its_own_topic_is_answered_by_its_own_words(ctx: Context) -> None:
    out = conversation(ctx, "What is the default queue timeout?", "and how do I cancel a job with a colon in its name?")
    assert "orchard cancel --id" in str(out["answer"]), out["answer"]
    assert "45 minutes" not in str(out["answer"])


def test_a_follow_up_is_not_answered_with_the_previous_answer_again(ctx: Context) -> None:
    first = conversation(ctx, "How do I upgrade Orchard to 2.4?")
    assert "orchard migrate --to 2.4" in str(first["answer"]), first["answer"]
    out = conversation(ctx, "How do I upgrade Orchard to 2.4?", "and can I undo it later?")
    assert out["rewritten_query"] is not None
    assert "orchard migrate --to 2.4" not in str(out["answer"]), out["answer"]


def test_a_follow_up_the_sources_do_not_answer_is_declined(ctx: Context) -> None:
    out = conversation(ctx, "What is the default queue timeout?", "and how much does it cost per month?")
    assert out["answer"] == NO_ANSWER["en"], out["answer"]


def test_a_follow_up_is_not_answered_from_another_document(ctx: Context) -> None:
    # The previous answer quoted bzip2's page, which dates no release: Orchard's release date is another document's.
    out = conversation(ctx, "How does bzip2 compress files?", "and when was it released?")
    assert out["rewritten_query"] is not None
    assert out["answer"] == NO_ANSWER["en"], out["answer"]


@pytest.mark.parametrize(
    ("questions", "expected"),
    [
        (("How does bzip2 compress files?", "who wrote it?"), "Julian Seward"),  # quoted beside the last answer
        (("How does bzip2 compress files?", "and how much memory does it need to decompress?"), "3700 kbytes"),
        (("青海湖在哪里？", "它的面积有多大？"), "4583平方公里"),
    ],
)
def test_a_follow_up_that_leans_on_its_subject_is_answered(
    ctx: Context, questions: tuple[str, str], expected: str
) -> None:
    out = conversation(ctx, *questions)
    assert out["rewritten_query"] is not None and expected in str(out["answer"]), out["answer"]


def test_a_new_session_is_not_a_follow_up(ctx: Context) -> None:
    # Sanity: the same question asked alone is searched as asked (no subject added).
    out = conversation(ctx, "Who led the Orchard 2.4 release?")
    assert out["rewritten_query"] is None and "Ines Varga" in str(out["answer"])


PREVIOUS = "How do I compress a file with gzip?"


@pytest.mark.parametrize(
    "question",
    [
        "who led that release?",  # a determiner after a verb
        "can that number be negative?",  # after an auxiliary
        "in that case, what happens?",  # after a preposition
        "does the same option work for bzip2?",
        "Wer hat das geleitet?",  # German "das" with no noun after it
        "Qui a écrit ce programme ?",  # French "ce" before a noun
        "那次发布是谁负责的？",  # 那 + a measure word
        "该版本是谁发布的？",  # 该 before a noun: "that, the said"
    ],
)
def test_a_demonstrative_that_points_back_is_a_follow_up(question: str) -> None:
    assert follow_up_reason(question, PREVIOUS) == "refers_back"


@pytest.mark.parametrize(
    ("previous", "question"),
    [
        ("What does comm print in its third column?", "can I change the separator of that column?"),
        ("How can cmp skip the first bytes of each file?", "and how do I limit how many bytes it compares?"),
    ],
)
def test_a_word_shared_with_the_previous_question_does_not_stop_a_follow_up(previous: str, question: str) -> None:
    # The shared word ("column", "bytes") is not the subject (comm, cmp): the pronoun still points back.
    assert follow_up_reason(question, previous) == "refers_back"


@pytest.mark.parametrize(
    "question",
    [
        "How do I find the files that changed?",  # relative "that" after a noun
        "What does the option that sets the timeout do?",
        "How do I check that the archive is complete?",  # the conjunction: a clause follows
        "How do I verify that backups are complete?",
        "Is the output the same as before?",  # comparison, not a reference
        "Was macht das Programm?",  # German article before its noun
        "Gibt es eine Option, die das Original behält?",
        "Qu'est-ce que bzip2 ?",  # "est-ce que"
        "该怎么升级？",  # 该 before a question word: the modal "should"
    ],
)
def test_a_relative_that_or_an_article_stands_alone(question: str) -> None:
    assert follow_up_reason(question, PREVIOUS) is None
