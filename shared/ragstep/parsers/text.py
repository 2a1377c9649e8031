"""Plain text and Markdown: decoding, and words a formatter hyphenated at a line's end joined again (the chunker
reads Markdown as it is)."""

from __future__ import annotations

import codecs
import re

from ragstep.errors import InputError

# Windows tools ("Unicode" in Notepad, PowerShell's Out-File, Excel's "Unicode text") write UTF-16 with a byte order
# mark; the mark is what makes it safe to read: UTF-16 without one is not told apart from other bytes, so it is refused.
_UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def decode_text(data: bytes, name: str) -> str:
    """UTF-16 with its byte order mark, else UTF-8 (with or without BOM), else GB18030 (a superset of GBK); anything
    else is refused, not guessed."""
    if data.startswith(_UTF16_MARKS):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            raise InputError(
                f"{name}: starts with a UTF-16 byte order mark but is not UTF-16; convert it to UTF-8"
            ) from None
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise InputError(
        f"{name}: cannot decode the text as UTF-8, UTF-16 (with its byte order mark) or GB18030; convert it to UTF-8"
    )


# A letter, U+2010 HYPHEN or U+00AD SOFT HYPHEN ending the line (trailing blanks allowed), the next line's indentation.
_HYPHEN_BREAK = re.compile(r"(?<=[^\W\d_])[\u2010\u00ad][ \t]*\r?\n[ \t]*(?=[^\W\d_])")


def join_hyphenated(text: str) -> str:
    """Words a formatter hyphenated at a line's end made one again: ``"com\u2010\n       press"`` -> ``"compress"``.

    groff (a manual page rendered by ``man -P cat``) and typesetters break a word with U+2010 HYPHEN (or a soft
    hyphen, U+00AD); indexed as written, the halves are two words and a search for the word misses that line. The
    break is joined when the next line goes on in lower case, the rule the answerer's sentence reader follows
    (:func:`ragstep.retrieval.sentences`): a capital after it is a compound that happened to end a line ("MS\u2010" /
    "DOS") and keeps its hyphen and line break. A plain ``-`` at a line's end is left as it is: it is as often a real
    hyphen ("well-" / "known", "x86-" / "64") as a break, and nothing in the text tells them apart."""
    if "\u2010" not in text and "\u00ad" not in text:
        return text
    return _HYPHEN_BREAK.sub(_joined, text)


def _joined(match: re.Match[str]) -> str:
    after = match.string[match.end() : match.end() + 1]
    return "" if after.islower() else match.group(0)
