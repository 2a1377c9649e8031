"""The span the model-free answerer quotes around a chosen sentence (:mod:`ragstep.retrieval.answer_window`): a
sentence that leans back on the one before is quoted with it, one that leads in with the one after; never across a
paragraph, never the whole paragraph."""

from __future__ import annotations

import numpy as np
import pytest

from ragstep.adapters.chat.extractive import render_quotes
from ragstep.adapters.embedders.local import LocalEmbedder
from ragstep.retrieval import answer_span
from ragstep.retrieval.answer_span import Quote
from ragstep.retrieval.answer_window import joined, leads_in, leans_back, window
from ragstep.retrieval.sentences import sentences_in_units
from support.extractive import answer

CHMOD = (
    "chmod never changes the permissions of symbolic links; the chmod system call cannot change their permissions. "
    "However, for each symbolic link listed on the command line, chmod changes the permissions of the pointed-to "
    "file.\n\nIn contrast, chmod ignores symbolic links encountered during recursive directory traversals."
)
FLOCK = (
    "OPTIONS\n-E, --conflict-exit-code number\nThe exit status used when the -n option is in use and the lock "
    "exists. The default value is 1.\n\n-n, --nonblock\nFail rather than wait if the lock cannot be acquired."
)
SQLITE = "close(self, /) Close the database connection. Any pending transaction is not committed implicitly."


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("However, for each symbolic link listed, chmod changes the pointed-to file.", True),
        ("Otherwise, all such characters are escaped.", True),
        ("It is stored in the blue ledger.", True),
        ("但是这条线路更慢。", True),
        ("The keeper logs every ship in a blue ledger.", False),
        ("Items are dropped from the other end.", False),
        ("Thereafter the file is closed.", False),  # a word that only starts like a connective
    ],
)
def test_what_leans_back(sentence: str, expected: bool) -> None:
    assert leans_back(sentence) is expected


def test_what_leads_in() -> None:
    assert leads_in("The exit status is one of:", first=False)
    assert leads_in("-E, --conflict-exit-code number The exit status used when the lock exists.", first=True)
    assert leads_in("close(self, /) Close the database connection.", first=True)
    assert not leads_in("close(self, /) Close the database connection.", first=False)  # not the entry's head
    assert not leads_in("The lighthouse keeper lights the lamp at dusk.", first=True)
    # A clause the splitter cut at a semicolon: the rest of its sentence follows.
    assert leads_in("Lambda creates a new environment and creates its clients once;", first=False)
    assert leads_in("全程最快约4小时18分钟；", first=False)


def test_a_clause_cut_at_a_semicolon_is_quoted_to_the_end_of_its_sentence() -> None:
    units = sentences_in_units(CHMOD)
    assert units[0][2].endswith("symbolic links;")
    assert window(units, 0) == (0, 1)


def test_chinese_sentences_are_quoted_together_without_a_space() -> None:
    units = sentences_in_units("采摘时间以清明节前为最佳，品质最好；谷雨前采制的称为雨前茶。冲泡宜用80℃的水。")
    start, end = window(units, 0)
    assert (start, end) == (0, 1)
    assert (
        joined([u[2] for u in units[start : end + 1]]) == "采摘时间以清明节前为最佳，品质最好；谷雨前采制的称为雨前茶。"
    )
    assert joined(["It ends here;", "the rest follows."]) == "It ends here; the rest follows."


def test_a_sentence_that_leans_back_is_quoted_with_the_one_before_in_its_paragraph() -> None:
    units = sentences_in_units(CHMOD)
    however = next(i for i, (_, _, s) in enumerate(units) if s.startswith("However"))
    assert window(units, however) == (however - 1, however)
    # "In contrast, ..." opens a new paragraph: nothing before it in its unit to quote.
    assert window(units, len(units) - 1) == (len(units) - 1, len(units) - 1)


def test_a_definition_head_is_quoted_with_the_detail_after_it() -> None:
    units = sentences_in_units(FLOCK)
    assert units[1][2] == "The default value is 1."
    assert window(units, 0) == (0, 1)
    assert window(units, 1) == (0, 1)  # a detail of an option's entry is read with the option it is of
    assert window(units, 2) == (2, 2)  # the last sentence of its entry: nothing follows in its unit
    assert window(sentences_in_units(SQLITE), 0) == (0, 1)


def test_the_quote_reads_on_its_own() -> None:
    """Chosen by words alone (no model), the sentence that leans back comes with the one it leans on, cited once."""
    quotes = answer_span.choose("Does chmod change the permissions of each symbolic link listed?", [CHMOD])
    assert quotes and quotes[0].text.startswith("the chmod system call") and "However, for each" in quotes[0].text
    assert quotes[0].passage == 1 and quotes[0].position == 1


def test_a_quoted_window_is_not_quoted_twice() -> None:
    f = answer_span.features("What exit status does flock use?", [FLOCK])
    assert f is not None
    fit = np.array([1.0, 0.99, 0.1], dtype=np.float32)[: len(f.candidates)]
    quotes = answer_span._quotes(f, fit, 0, [FLOCK], None)
    texts = [q.text for q in quotes]
    assert texts[0].endswith("The default value is 1.")
    assert not any(t == "The default value is 1." for t in texts[1:])


def test_a_neighbour_that_does_not_fit_leaves_the_sentence_alone() -> None:
    """Within ``max_chars`` the window is quoted; over it, the chosen sentence alone (never cut off mid-answer by a
    neighbour taking its room), and a second quote still fits."""
    lead = "x" * 300 + "."
    window_quote = Quote(1, 0, f"{lead} However, the answer is 42.", 1.0, "However, the answer is 42.")
    other = Quote(2, 0, "Another passage says 42 too.", 0.9)
    assert "".join(render_quotes([window_quote, other], 600, "en")).startswith(lead)
    short = "".join(render_quotes([window_quote, other], 100, "en"))
    assert short == "However, the answer is 42. [1] Another passage says 42 too. [2]"


def test_a_sentence_the_next_one_leans_back_on_is_quoted_with_it() -> None:
    # base-passwd's README: the uid the question asks for is in the sentence that goes on with "It".
    text = (
        "operator Operator. In Debian, the use of a utility such as sudo to gain privilege is preferred over such "
        "highly-privileged accounts. It had uid 37. Nothing else here."
    )
    units = sentences_in_units(text)
    chosen = next(i for i, (_, _, s) in enumerate(units) if s.startswith("In Debian"))
    start, end = window(units, chosen)
    quoted = joined([units[j][2] for j in range(start, end + 1)])
    assert quoted.endswith("It had uid 37.")
    assert "Nothing else" not in quoted  # one sentence each way at most
    # A next sentence that starts anew is not pulled in.
    plain = sentences_in_units("The keeper lights the lamp at dusk. The ledger is blue.")
    assert window(plain, 0) == (0, 0)


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


PIPX_RST = """*************************
 ``sudo pipx`` not found
*************************

If you installed pipx with ``pip install --user``, its binary lives in your user directory. Root's ``PATH`` does not
include that directory, so ``sudo pipx`` fails with "command not found". Use the full path:

.. code-block:: console

    $ sudo ~/.local/bin/pipx ensurepath --global

*************************
 Debian and Ubuntu issues
*************************

On Debian, Ubuntu, and derivatives, make sure these packages are installed; Debian systems do not add them by default:

.. code-block:: console

    $ sudo apt install python3-venv python3-pip
"""
PIPX_MD = """## `sudo pipx` not found

If you installed pipx with ``pip install --user``, its binary lives in your user directory. Root's ``PATH`` does not
include that directory, so ``sudo pipx`` fails with "command not found". Use the full path:

```console
$ sudo ~/.local/bin/pipx ensurepath --global
```

## Debian and Ubuntu issues

On Debian, Ubuntu, and derivatives, make sure these packages are installed; Debian systems do not add them by default:

```console
$ sudo apt install python3-venv python3-pip
```
"""


def test_restructuredtext_markup_is_no_sentence_and_a_title_over_its_rule_is_a_heading() -> None:
    units = sentences_in_units(PIPX_RST)
    texts = [text for _, _, text in units]
    assert not any(t.startswith(("..", "code-block", "***")) for t in texts), texts
    assert units[-1][0] == "Debian and Ubuntu issues" and units[-1][2] == "$ sudo apt install python3-venv python3-pip"


def test_a_code_block_a_sentence_announces_is_quoted_after_it() -> None:
    # The fenced command after "... Debian systems do not add them by default:" is a unit, and the quote of the
    # clause before the colon sentence runs on to it.
    units = sentences_in_units(PIPX_MD)
    at = next(k for k, (_, _, text) in enumerate(units) if text.startswith("On Debian"))
    start, end = window(units, at)
    assert joined([units[k][2] for k in range(start, end + 1)]).endswith("$ sudo apt install python3-venv python3-pip")
    # A code block nothing announces stays out: the quote is the document's prose.
    assert "print(1)" not in [text for _, _, text in sentences_in_units("Some prose.\n\n```\nprint(1)\n```\n")]


@pytest.mark.parametrize("document", [PIPX_RST, PIPX_MD], ids=["rst", "markdown"])
def test_the_command_a_sentence_announces_answers(encoder: LocalEmbedder, document: str) -> None:
    content, _ = answer(encoder, "sudo pipx says command not found, what do I run instead?", [document])
    assert "sudo ~/.local/bin/pipx ensurepath --global" in content and "[1]" in content, content


def test_a_second_quote_comes_from_a_passage_ranked_at_least_as_high(encoder: LocalEmbedder) -> None:
    # Two passages each state an opening time; the second is quoted (and cited) only when the retriever ranked its
    # passage at least as high as the first's: a passage ranked below is likelier not the one asked about.
    passages = ["The museum opens at 9 am on weekdays.", "The museum opens at 10 am on Sundays."]
    ranked_below = answer_span.choose("When does the museum open?", passages, scores=[0.9, 0.6], encoder=encoder)
    assert [q.passage for q in ranked_below] == [1], ranked_below
    level = answer_span.choose("When does the museum open?", passages, scores=[0.9, 0.9], encoder=encoder)
    assert [q.passage for q in level] == [1, 2], level
