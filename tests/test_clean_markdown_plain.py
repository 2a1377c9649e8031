"""``clean_markdown``'s two paths: plain prose (only blanks tidied) and text with something Markdown-like in it.

The plain path skips the blank-collapsing substitution on lines without a tab or two spaces in a row, and the
markup check runs as a character class, three substrings and a line-start pattern; these cases pin that each
trigger still sends the text down the Markdown path and that blanks are tidied the same way on both.
"""

from __future__ import annotations

import pytest

from ragstep.stages.search.chunk_rerank import clean_markdown


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("single spaces only, nothing to do", "single spaces only, nothing to do"),
        ("  two  spaces\tand a tab\t\there  ", "two spaces and a tab here"),
        ("first line \n\n \t \n  second   line\r\nthird", "first line\nsecond line\nthird"),
        ("a\u00a0\u00a0b  c", "a\u00a0\u00a0b c"),  # only spaces and tabs collapse, as before
        ("line\u2028next", "line\nnext"),  # str.splitlines() breaks lines
        ("", ""),
        (" \t\n ", ""),
        ("  one line, ends padded \u00a0", "one line, ends padded"),  # the one-line fast path strips like a line
        ("file\x1cseparator\x0bvertical\x0cfeed", "file\nseparator\nvertical\nfeed"),
        ("next\x85line\rcarriage", "next\nline\ncarriage"),
    ],
)
def test_plain_prose_only_has_its_blanks_tidied(text: str, cleaned: str) -> None:
    assert clean_markdown(text) == cleaned


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("# Title  here", "Title here"),  # a Markdown character
        ("**bold**  word", "bold word"),
        ("see http://example.com/x  now", "see now"),  # each URL form on its own
        ("see https://example.com/x now", "see now"),
        ("see www.example.com now", "see now"),
        ("text\n- item  one", "text\nitem one"),  # list markers at a line start
        ("text\n+ plus", "text\nplus"),
        ("  12) step\t two", "step two"),
        ("1. first", "first"),
    ],
)
def test_each_markup_trigger_takes_the_markdown_path(text: str, cleaned: str) -> None:
    assert clean_markdown(text) == cleaned


def test_look_alikes_stay_plain() -> None:
    # A hyphen or number inside a line, "http" without "://" and "www" without a dot are prose.
    assert clean_markdown("well-known 12) items, http and www") == "well-known 12) items, http and www"
