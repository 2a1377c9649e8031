"""The knowledge base name rule every catalog store enforces, so a name valid on a laptop is valid on AWS."""

from __future__ import annotations

import unicodedata

from ragstep.errors import InputError

MAX_KB_NAME_CHARS = 64
_NAME_RULE = (
    f"1-{MAX_KB_NAME_CHARS} characters: letters (any script), digits, '-', '_', '.', and spaces (not at the ends)"
)


def check_kb_name(name: str) -> str:
    """Validate a knowledge base name; returns it unchanged, or raises :class:`InputError` naming the rule.

    Names are typed on command lines and shown in URLs, so they stay to visible word characters. Combining
    marks count as part of a letter: scripts such as Devanagari or Thai cannot be written without them.
    """
    if not isinstance(name, str) or not name:
        raise InputError(f"knowledge base name is empty; use {_NAME_RULE}")
    if len(name) > MAX_KB_NAME_CHARS:
        raise InputError(f"knowledge base name has {len(name)} characters; use {_NAME_RULE}")
    if name[0] == " " or name[-1] == " ":
        raise InputError(f"knowledge base name {name!r} starts or ends with a space; use {_NAME_RULE}")
    for ch in name:
        category = unicodedata.category(ch)
        if not (ch in "-_. " or category[0] in "LM" or category == "Nd"):
            raise InputError(
                f"knowledge base name {name!r} contains {ch!r} (U+{ord(ch):04X}), which is not allowed; "
                f"use {_NAME_RULE}"
            )
    return name
