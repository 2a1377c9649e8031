"""Query expansion without an LLM (WeKnora's search stage): cheap variants of the query that widen keyword recall.

Used when the first pass returns fewer than ``embedding_top_k`` results. Each variant is searched by keywords only:
a variant is a re-cut of the same words, so embedding it again would cost a provider call for little new meaning.
"""

from __future__ import annotations

import re

from ragstep.retrieval.text import tokenize

# Quoted phrases: "...", '...', 「...」, 『...』 and curly quotes.
_QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'|「([^」]+)」|『([^』]+)』|“([^”]+)”|‘([^’]+)’")
_QUOTE_CHARS = "\"'“”‘’「」『』"
# Spanish opens a question or an exclamation with its own mark: "¿cómo busco ...?" has the segment "cómo", not "¿cómo".
_DELIMITERS = re.compile(r"[,，;；、。!?！？¿¡\s]+")
# Longest first, so "什么是" wins over "什么" and "请告诉我" over "请".
_ZH_QUESTION_PREFIXES = tuple(
    sorted(
        (
            "什么是", "什么", "如何", "怎么", "怎样", "为什么", "为何", "哪个", "哪些", "谁", "何时", "何地",
            "请问", "请告诉我", "帮我", "我想知道", "我想了解",
        ),
        key=len,
        reverse=True,
    )
)  # fmt: skip
_EN_QUESTION_WORD = re.compile(r"^(?:what|how|why|which|who|when|where)\b[\s,]*", re.IGNORECASE)
MIN_VARIANT_BYTES = 3
MIN_SEGMENT_BYTES = 6  # segments are kept when longer than 5 bytes


def keyword_variant(query: str) -> str:
    """Stopword-stripped tokens longer than one character, space-joined."""
    return " ".join(t for t in dict.fromkeys(tokenize(query)) if len(t) > 1)


def quoted_phrases(query: str) -> list[str]:
    return [next(g for g in m.groups() if g).strip() for m in _QUOTED.finditer(query)]


def segments(query: str) -> list[str]:
    pieces = (p.strip(_QUOTE_CHARS) for p in _DELIMITERS.split(query))
    return [p for p in pieces if len(p.encode("utf-8")) >= MIN_SEGMENT_BYTES]


def strip_question_words(query: str) -> str:
    text = query.strip()
    for prefix in _ZH_QUESTION_PREFIXES:
        if text.startswith(prefix):
            return text[len(prefix) :].strip(" ，,？?")
    return _EN_QUESTION_WORD.sub("", text).strip(" ,?")


def expansion_variants(query: str, limit: int = 5) -> list[str]:
    """Up to ``limit`` distinct variants of at least 3 bytes, none equal to the query itself."""
    seen = {" ".join(query.lower().split())}
    out: list[str] = []
    candidates = [keyword_variant(query), *quoted_phrases(query), *segments(query), strip_question_words(query)]
    for candidate in candidates:
        key = " ".join(candidate.lower().split())
        if len(candidate.encode("utf-8")) < MIN_VARIANT_BYTES or key in seen:
            continue
        seen.add(key)
        out.append(candidate)
        if len(out) >= limit:
            break
    return out
