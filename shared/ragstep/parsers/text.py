"""Plain text and Markdown: decoding only (the chunker reads Markdown as it is)."""

from __future__ import annotations

import codecs

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
