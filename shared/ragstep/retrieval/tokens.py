"""The one token estimator every budget uses (knowledge, messages, ``max_tokens``).

No tokenizer ships with ragstep (a BPE table is megabytes and a model's own tokenizer may not be public), so tokens
are estimated the way the common BPE vocabularies split text:

* every CJK character (Han, kana, Hangul, CJK punctuation and full-width forms) is one token;
* a run of Latin letters is one token per started 4 characters (``cl100k``: common words are one token, long or
  rare ones a few) -- the usual "four characters a token" rule, applied per word so spacing cannot skew it;
* a run of digits is one token per started 3 digits (``cl100k`` splits numbers into groups of three);
* any other non-space character is a token of its own; whitespace joins the token that follows it.

On English prose this lands within about 10 % of ``cl100k_base`` and errs high on code and symbols, which is the
safe side for a budget. A chat message also costs :data:`MESSAGE_OVERHEAD` tokens of role and framing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_CJK = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\uff00-\uffef"
)
_PIECE = re.compile(f"[{_CJK}]|[A-Za-z]+|[0-9]+|[^\\s{_CJK}A-Za-z0-9]")
#: Tokens of role and framing per chat message (OpenAI's chat format: ``<|im_start|>role\n ... <|im_end|>``).
MESSAGE_OVERHEAD = 4


def count_tokens(text: str) -> int:
    """Estimated tokens of ``text`` (see the module docstring)."""
    total = 0
    for match in _PIECE.finditer(text):
        piece = match.group(0)
        first = piece[0]
        if first.isascii() and first.isalpha():
            total += (len(piece) + 3) // 4
        elif first.isascii() and first.isdigit():
            total += (len(piece) + 2) // 3
        else:
            total += 1
    return total


def count_messages(contents: Iterable[str]) -> int:
    """Estimated prompt tokens of chat messages with these contents, framing included."""
    return sum(count_tokens(c) + MESSAGE_OVERHEAD for c in contents)


def truncate_to_tokens(text: str, budget: int) -> str:
    """The longest prefix of ``text`` estimated at no more than ``budget`` tokens (cut between tokens)."""
    if budget <= 0:
        return ""
    total = 0
    for match in _PIECE.finditer(text):
        cost = count_tokens(match.group(0))
        if total + cost > budget:
            return text[: match.start()].rstrip()
        total += cost
    return text
