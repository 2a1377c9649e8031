"""Plain text and Markdown: decoding only (the chunker reads Markdown as it is)."""

from __future__ import annotations

from ragstep.errors import InputError


def decode_text(data: bytes, name: str) -> str:
    """UTF-8 (with or without BOM), else GB18030 (a superset of GBK); anything else is refused, not guessed."""
    for encoding in ("utf-8-sig", "gb18030"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise InputError(f"{name}: cannot decode the text as UTF-8 or GB18030; convert it to UTF-8")
