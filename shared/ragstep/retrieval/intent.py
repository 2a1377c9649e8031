"""The intent analyser's prompt and the lenient reading of its answer (OpenViking's ``IntentAnalyzer``), pure.

The model gets the session's compressed summary, its last messages and the current query, and answers with 0-5
typed queries. Its answer is read leniently: a JSON object anywhere in the text (code fences, prose around it), a
bare list, field names in any case, one bad entry skipped rather than the whole plan lost. Zero queries is a valid
plan (a greeting needs no retrieval); an answer with no readable JSON at all is not, and the caller falls back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from ragstep.models.viking import CONTEXT_TYPES, QueryPlan, TypedQuery
from ragstep.retrieval.tokens import count_tokens

MAX_QUERIES = 5

SYSTEM_PROMPT = """You plan retrieval for an assistant. Read the conversation and the current message, then decide \
what context to retrieve. Answer with one JSON object: {"reasoning": "...", "queries": [{"query": "...", \
"context_type": "resource" | "memory" | "skill", "intent": "...", "priority": 1-5}]}.
Rules:
- 0 to 5 queries. Greetings, thanks and chit-chat need none: "queries": [].
- resource: documents and knowledge; write a noun phrase ("installation requirements of the CLI").
- memory: what is known about the user; start with "user's" ("user's preferred language").
- skill: how to do something; start with a verb ("configure the proxy settings").
- priority 1 (highest) to 5. Resolve pronouns from the conversation so each query stands alone."""


def intent_messages(query: str, recent: Sequence[tuple[str, str]], summary: str = "") -> list[tuple[str, str]]:
    """(role, content) pairs: the system prompt, then the summary, the last messages and the current query."""
    parts = [f"Session summary:\n{summary.strip() or '(none)'}"]
    if recent:
        parts.append("Recent messages:\n" + "\n".join(f"{role}: {text}" for role, text in recent))
    else:
        parts.append("Recent messages:\n(none)")
    parts.append(f"Current message:\n{query}")
    return [("system", SYSTEM_PROMPT), ("user", "\n\n".join(parts))]


#: The compressed summary's size: a few hundred tokens, as OpenViking's session archive abstracts are.
SUMMARY_TOKENS = 300


def session_summary(turns: Sequence[tuple[str, str]], max_tokens: int = SUMMARY_TOKENS) -> str:
    """The session's compressed summary: what came before the last messages, as (question, answer) turns oldest
    first -> one line per turn, the question and the answer's first sentence.

    Extractive (no model call on every search): the analyser is a model already and reads the lines as the topic
    so far. Over ``max_tokens``, the newest turns are kept (the recent topic matters most) and the first line says
    how many earlier turns were left out."""
    lines: list[str] = []
    used = 0
    for question, answer in reversed(turns):
        first = re.split(r"(?<=[.!?])\s+", " ".join(answer.split()), maxsplit=1)[0]
        line = f"- asked: {' '.join(question.split())}" + (f" -> {first}" if first else "")
        cost = count_tokens(line)
        if used + cost > max_tokens:
            break
        lines.append(line)
        used += cost
    left_out = len(turns) - len(lines)
    head = [f"({left_out} earlier turn{'s' if left_out != 1 else ''} left out)"] if left_out else []
    return "\n".join(head + lines[::-1])


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)


def json_values(text: str) -> list[Any]:
    """Every JSON value the text holds: fenced blocks first, then each '{' or '[' that starts a complete value."""
    found: list[Any] = []
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for i, ch in enumerate(candidate):
            if ch not in "{[":
                continue
            try:
                value, _ = decoder.raw_decode(candidate, i)
            except json.JSONDecodeError:
                continue
            found.append(value)
            break
    return found


def _lower_keys(entry: dict[str, Any]) -> dict[str, Any]:
    return {str(k).strip().lower().replace(" ", "_"): v for k, v in entry.items()}


def _typed(entry: Any) -> TypedQuery | None:
    if isinstance(entry, str):
        entry = {"query": entry}
    if not isinstance(entry, dict):
        return None
    data = _lower_keys(entry)
    kind = str(data.get("context_type") or data.get("type") or "resource").strip().lower()
    kind = {"resources": "resource", "memories": "memory", "skills": "skill"}.get(kind, kind)
    if kind not in CONTEXT_TYPES:
        kind = "resource"  # an unknown type still names something to look up; documents are the safe place
    try:
        priority = int(data.get("priority", 3))
    except (TypeError, ValueError):
        priority = 3
    try:
        return TypedQuery(
            query=str(data.get("query") or "").strip(),
            context_type=kind,
            intent=str(data.get("intent") or ""),
            priority=min(5, max(1, priority)),
        )
    except ValidationError:
        return None  # an empty or oversized query: this entry only


def parse_plan(text: str) -> QueryPlan | None:
    """The plan in a model's answer; None when the answer holds no JSON that reads as a plan."""
    for value in json_values(text):
        if isinstance(value, dict):
            data = _lower_keys(value)
            raw = data.get("queries", data.get("typed_queries"))
            if raw is None and "query" in data:
                raw = [value]
            if not isinstance(raw, list):
                continue
            reasoning = str(data.get("reasoning") or data.get("reason") or "")
        elif isinstance(value, list):
            raw, reasoning = value, ""
        else:
            continue
        queries = [q for q in (_typed(e) for e in raw) if q is not None]
        # Best first (priority 1 highest), the model's order among equals; duplicates once.
        seen: set[tuple[str, str]] = set()
        unique: list[TypedQuery] = []
        for q in queries:
            if (q.context_type, q.query.lower()) not in seen:
                seen.add((q.context_type, q.query.lower()))
                unique.append(q)
        unique.sort(key=lambda q: q.priority)  # stable: the model's order among equal priorities
        return QueryPlan(queries=unique[:MAX_QUERIES], reasoning=reasoning, source="llm")
    return None


def single_query_plan(query: str, reason: str, source: str = "extractive") -> QueryPlan:
    """The plan without a model: the question itself, as one resource query."""
    return QueryPlan(
        queries=[TypedQuery(query=query[:2000], context_type="resource", intent="the question as asked", priority=1)],
        reasoning=reason,
        source=source,
    )
