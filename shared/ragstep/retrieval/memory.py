"""Memories saved from a chat session (OpenViking's ``remember`` step), pure: the extraction prompt and the lenient
reading of the model's answer, the rule that stands in without a model, and the deduplication.

A memory is one short statement about the user (``preferences``: what they like, use, want; ``decisions``: what
was decided; ``facts``: what is true of them or their setup), written in the third person so a memory query
("user's preferred language") finds it. Without a chat model the rule below extracts only what the user said of
themselves in so many words -- a sentence of theirs starting a preference or a decision ("I prefer ...", "we
decided ...", "let's use ...", "always ...") -- and nothing else: a guess would be worse than no memory.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ragstep.retrieval.intent import json_values
from ragstep.retrieval.text import query_terms

CATEGORIES = ("preferences", "decisions", "facts")
MAX_MEMORIES = 10
MAX_MEMORY_CHARS = 300
#: Two memories whose words overlap this much (Jaccard of their terms) say the same thing.
DUPLICATE_OVERLAP = 0.7

EXTRACT_PROMPT = """You keep long-term memories about a user from a conversation with an assistant. Extract what \
is worth remembering in later conversations: the user's preferences (what they like, use, want), decisions taken \
(what was chosen or agreed) and facts about the user or their setup. Only what the user said or confirmed; nothing \
about the documents, nothing temporary. Answer with one JSON object: {"memories": [{"category": "preferences" | \
"decisions" | "facts", "text": "one sentence in the third person, starting with 'The user'"}]}; at most \
10 memories, "memories": [] when there is nothing to keep."""


@dataclass(frozen=True, slots=True)
class Memory:
    category: str
    text: str


def conversation_text(turns: Sequence[tuple[str, str]], max_chars: int = 12_000) -> str:
    """The turns as the model reads them, newest kept when over ``max_chars``."""
    lines: list[str] = []
    used = 0
    for question, answer in reversed(turns):
        block = f"user: {question.strip()}\nassistant: {answer.strip()}"
        if lines and used + len(block) > max_chars:
            break
        lines.append(block[:max_chars])
        used += len(block)
    return "\n\n".join(reversed(lines))


def _category(raw: object) -> str:
    name = str(raw or "").strip().lower()
    for category in CATEGORIES:
        if name in (category, category.rstrip("s"), category[:-1]):
            return category
    return "facts"


def parse_memories(text: str) -> list[Memory] | None:
    """The memories in a model's answer (an object with ``memories``, or a bare list; entries as objects or strings);
    None when the answer holds no JSON that reads as such."""
    for value in json_values(text):
        raw = value.get("memories") if isinstance(value, dict) else value
        if not isinstance(raw, list):
            continue
        out: list[Memory] = []
        for entry in raw:
            if isinstance(entry, str):
                entry = {"text": entry}
            if not isinstance(entry, dict):
                continue
            said = " ".join(str(entry.get("text") or entry.get("memory") or "").split())
            if said:
                out.append(Memory(_category(entry.get("category")), said[:MAX_MEMORY_CHARS]))
        return out[:MAX_MEMORIES]
    return None


_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_PREFERENCE = re.compile(
    r"^(?:i|we)(?:'d| would)? (?:really )?(?:prefer|like|love|want|need|use|usually|always|never|hate|dislike)\b"
    r"|^my (?:favou?rite|preferred)\b|^(?:please )?(?:always|never)\b",
    re.I,
)
_DECISION = re.compile(
    r"^(?:i|we) (?:have |'ve )?(?:decided|chose|chosen|agreed|settled on|will go with|are going with)\b"
    r"|^let'?s (?:use|go with|keep|switch|stick)\b",
    re.I,
)


def rule_memories(user_messages: Iterable[str]) -> list[Memory]:
    """Without a model: the user's own sentences that state a preference or a decision, as said (quoted)."""
    out: list[Memory] = []
    for message in user_messages:
        for sentence in _SENTENCE.split(message):
            said = " ".join(sentence.split()).strip()
            if not said:
                continue
            kind = "decisions" if _DECISION.match(said) else "preferences" if _PREFERENCE.match(said) else None
            if kind:
                out.append(Memory(kind, f"The user said: {said}"[:MAX_MEMORY_CHARS]))
    return out[:MAX_MEMORIES]


def _terms(text: str) -> set[str]:
    return set(query_terms(text.removeprefix("The user said:")))


def overlap(a: str, b: str) -> float:
    ta, tb = _terms(a), _terms(b)
    if not ta or not tb:
        return 1.0 if a.strip().lower() == b.strip().lower() else 0.0
    return len(ta & tb) / len(ta | tb)


def deduplicate(
    new: Sequence[Memory], existing: Sequence[str], threshold: float = DUPLICATE_OVERLAP
) -> tuple[list[Memory], list[Memory]]:
    """(kept, duplicates): a new memory that says what an existing one (or an earlier new one) says is dropped."""
    kept: list[Memory] = []
    dropped: list[Memory] = []
    for memory in new:
        known = [*existing, *(k.text for k in kept)]
        if any(overlap(memory.text, other) >= threshold for other in known):
            dropped.append(memory)
        else:
            kept.append(memory)
    return kept, dropped


def memory_document(memory: Memory, user: str) -> str:
    """The memory as the document indexed: its heading names the category, so its abstract reads "User's
    preference (alice): ...", the way memory queries are phrased; the user's name keeps two users' identical
    memories two documents (a knowledge base indexes one content once)."""
    return f"# User's {memory.category.rstrip('s')} ({user})\n\n{memory.text}\n"
