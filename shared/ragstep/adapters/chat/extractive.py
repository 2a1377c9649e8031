"""The embedded default chat model: no language model, an answer quoted from the retrieved passages.

It picks the sentences of the grounding passages that share the most query terms with the question (the same
tokenisation as keyword retrieval: jieba for Chinese, words otherwise, stopwords dropped), keeps them in context
order with the ``[n]`` citation of their passage, and stops at ``max_chars``. When no sentence shares a term with the
question it says so plainly instead of quoting something unrelated. Its name, ``extractive``, travels in every
response and trace, so a quoted answer is never mistaken for a generated one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ragstep.models import Language, language_of
from ragstep.ports import ChatDelta, ChatGrounding, ChatMessage, ChatOptions, ChatResponse, ChatUsage
from ragstep.retrieval.text import query_terms, token_set

NAME = "extractive"
# A sentence ends at CJK or Latin terminal punctuation (kept) or at a line break. A "." inside a word or number
# (2.5, a URL) and the "!" of a Markdown image link do not end one.
_SENTENCE = re.compile(r"(?:[^。！？!?；;.\n]|\.(?!\s|$)|!(?=\[))+(?:[。！？!?；;]+|\.+(?=\s|$))?")
_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
# A sentence must share at least this share of the question's terms to be quoted.
MIN_COVERAGE = 0.2

NO_ANSWER: dict[Language, str] = {
    "en": "The retrieved passages do not answer this question.",
    "zh": "检索到的资料中没有能回答这个问题的内容。",
}
NO_CONTEXT: dict[Language, str] = {
    "en": "There are no retrieved passages to answer from.",
    "zh": "没有检索到可用于回答的资料。",
}


@dataclass(frozen=True, slots=True)
class _Sentence:
    passage: int  # 1-based: the [n] of its passage
    position: int  # order within the passage
    text: str
    score: float


def _units(text: str) -> list[str]:
    """Paragraphs and list items of Markdown-ish text, with hard-wrapped lines joined back together; headings,
    table rows and code fences are dropped (a title is not an answer)."""
    units: list[str] = []
    current: list[str] = []

    def close() -> None:
        if current:
            units.append(_join(current))
            current.clear()

    in_code = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            close()
            in_code = not in_code
            continue
        if in_code or not line or line.startswith(("#", "|")):
            close()
            continue
        if _ITEM.match(line):  # a list item starts a unit of its own
            close()
            line = _ITEM.sub("", line)
        current.append(line)
    close()
    return units


def _join(lines: list[str]) -> str:
    out = lines[0]
    for line in lines[1:]:
        # Chinese wraps without a space (either side of the break in CJK); other scripts had one there.
        out += line if _HAN.match(out[-1:]) or _HAN.match(line[:1]) else " " + line
    return out


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (Markdown image links and bare URLs stay inside their sentence)."""
    out: list[str] = []
    for unit in _units(text):
        for match in _SENTENCE.finditer(unit):
            sentence = match.group(0).strip(" \t>")
            if sentence:
                out.append(sentence)
    return out


def _scored(question: str, passages: Sequence[str]) -> list[_Sentence]:
    terms = frozenset(query_terms(question))
    if not terms:
        return []
    found: list[_Sentence] = []
    for n, passage in enumerate(passages, start=1):
        for i, sentence in enumerate(split_sentences(passage)):
            shared = len(terms & token_set(sentence))
            coverage = shared / len(terms)
            if shared and coverage >= MIN_COVERAGE:
                found.append(_Sentence(n, i, sentence, coverage))
    return found


def extract_answer(question: str, passages: Sequence[str], max_chars: int) -> list[str]:
    """The answer's pieces (each a quoted sentence and its citation), or one sentence saying there is none."""
    language = language_of(question)
    if not any(p.strip() for p in passages):
        return [NO_CONTEXT[language]]
    candidates = _scored(question, passages)
    if not candidates:
        return [NO_ANSWER[language]]
    # Best first (ties: earlier in the context), as many as fit; then back into context order to read naturally.
    chosen: list[_Sentence] = []
    used = 0
    seen: set[str] = set()
    for s in sorted(candidates, key=lambda s: (-s.score, s.passage, s.position)):
        if s.text in seen:
            continue
        cost = len(s.text) + len(f" [{s.passage}]") + 1
        if chosen and used + cost > max_chars:
            continue
        chosen.append(s)
        seen.add(s.text)
        used += cost
    chosen.sort(key=lambda s: (s.passage, s.position))
    joiner = "" if language == "zh" else " "
    pieces = []
    for i, s in enumerate(chosen):
        text = s.text if len(s.text) <= max_chars else s.text[: max_chars - 1] + "…"
        pieces.append(f"{joiner if i else ''}{text} [{s.passage}]")
    return pieces


class ExtractiveChatModel:
    """Quotes the grounding passages; ``max_chars`` caps an answer's length."""

    name = NAME
    generative = False

    def __init__(self, max_chars: int = 600) -> None:
        self.max_chars = max_chars

    def _pieces(self, messages: Sequence[ChatMessage], grounding: ChatGrounding | None) -> list[str]:
        if grounding is None:  # called without its material: answer from nothing rather than parse a prompt
            question = next((m.content for m in reversed(messages) if m.role == "user"), "")
            grounding = ChatGrounding(question=question)
        return extract_answer(grounding.question, grounding.passages, grounding.max_chars or self.max_chars)

    def complete(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> ChatResponse:
        text = "".join(self._pieces(messages, grounding))
        return ChatResponse(content=text, usage=ChatUsage(), model=NAME, finish_reason="stop")

    def stream(
        self, messages: Sequence[ChatMessage], options: ChatOptions, grounding: ChatGrounding | None = None
    ) -> Iterator[ChatDelta]:
        for piece in self._pieces(messages, grounding):
            yield ChatDelta(content=piece)
        yield ChatDelta(usage=ChatUsage(), finish_reason="stop")
