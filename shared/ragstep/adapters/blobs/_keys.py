"""Blob key rules shared by every blob store: S3's, applied everywhere, so a key that works on a laptop works on AWS
and the other way round."""

from __future__ import annotations

import re

from ragstep.errors import InputError

MAX_KEY_BYTES = 1024  # S3's limit, so a key that works here works on AWS too
# In-progress writes are named like this; list() hides them and keys may not use the prefix.
TMP_PREFIX = ".tmp-ragstep-"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_segments(what: str, value: str, segments: list[str]) -> None:
    for segment in segments:
        if segment == "":
            raise InputError(f"{what} {value!r} has an empty segment ('//' or a trailing '/'); remove it")
        if segment in (".", ".."):
            raise InputError(f"{what} {value!r} contains a {segment!r} segment; use a plain relative path")
        if segment.startswith(TMP_PREFIX):
            raise InputError(f"{what} {value!r} uses the reserved prefix {TMP_PREFIX!r}; rename it")


def check_text(what: str, value: str) -> None:
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {type(value).__name__}")
    if value.startswith("/"):
        raise InputError(f"{what} {value!r} is absolute; use a relative path such as 'docs/a.pdf'")
    if "\\" in value:
        raise InputError(f"{what} {value!r} contains a backslash; separate folders with '/'")
    control = _CONTROL.search(value)
    if control:
        ch = control.group()
        name = "NUL" if ch == "\0" else f"U+{ord(ch):04X}"
        raise InputError(f"{what} {value!r} contains the control character {name}; remove it")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InputError(f"{what} {value!r} is not valid UTF-8 (lone surrogate); re-encode it") from None
    if size > MAX_KEY_BYTES:
        raise InputError(f"{what} is {size} bytes of UTF-8; the limit is {MAX_KEY_BYTES}")


def check_blob_key(key: str) -> str:
    """Validate a blob key; returns it unchanged. Raises :class:`InputError` saying what is wrong."""
    check_text("blob key", key)
    if not key:
        raise InputError("blob key is empty; pass a relative path such as 'docs/a.pdf'")
    check_segments("blob key", key, key.split("/"))
    return key
