"""Pure helpers of the Slack worker: the question out of a mention, the thread's session id, the knowledge bases of a
channel, Markdown to Slack mrkdwn, cited sources as links, and answers split within Slack's message limit."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ragstep.errors import InputError
from ragstep.models import SearchResult

#: Slack truncates a message's text past 40,000 characters and recommends at most 4,000; parts stay under this.
MESSAGE_LIMIT = 3900
_MENTION = re.compile(r"<@[A-Z0-9]+(?:\|[^>]*)?>")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.MULTILINE)


def question_text(text: str) -> str:
    """The question of a message: mentions of users (the bot's included) removed, whitespace collapsed."""
    return " ".join(_MENTION.sub(" ", text).split())


def session_id_for(team: str, channel: str, thread_ts: str) -> str:
    """The chat session of a Slack thread: one per workspace, channel and parent message."""
    return f"slack-{team or 'team'}-{channel}-{thread_ts}"


def knowledge_bases_for(mapping: str, channel: str, team: str) -> list[str]:
    """The knowledge bases ``RAGSTEP_SLACK_KNOWLEDGE_BASES`` gives a channel: its own entry, else its workspace's,
    else ``*``'s, else none (all of the tenant's). The format is ``C0123=kb-a,kb-b;T0456=kb-c;*=docs``."""
    table: dict[str, list[str]] = {}
    for entry in filter(None, (e.strip() for e in mapping.split(";"))):
        key, sep, names = entry.partition("=")
        kbs = [n.strip() for n in names.split(",") if n.strip()]
        if not sep or not key.strip() or not kbs:
            raise InputError(
                f"RAGSTEP_SLACK_KNOWLEDGE_BASES: {entry!r} is not <channel or workspace id or *>=<kb>[,<kb>...]"
            )
        table[key.strip()] = kbs
    return table.get(channel) or table.get(team) or table.get("*") or []


def escape(text: str) -> str:
    """Slack's three control characters, escaped as its docs require."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """An answer's Markdown as Slack mrkdwn: links ``<url|text>``, ``**bold**`` as ``*bold*``, headings bold."""
    text = escape(markdown)
    text = _LINK.sub(lambda m: f"<{m.group(2)}|{m.group(1)}>", text)
    text = _BOLD.sub(r"*\1*", text)
    return _HEADING.sub(r"*\1*", text)


def _link_of(result: SearchResult) -> str:
    for key in ("url", "source_url", "uri", "source"):
        value = result.metadata.get(key)
        if isinstance(value, str) and value.startswith(("https://", "http://")):
            return value
    return ""


def sources_block(references: Iterable[SearchResult]) -> str:
    """The cited sources, numbered as the answer cites them (``[1]`` is the first), one line per document: a mrkdwn
    link when the document has a web address, else its title."""
    lines: list[str] = []
    seen: set[str] = set()
    for n, ref in enumerate(references, start=1):
        if ref.knowledge_id in seen:
            continue
        seen.add(ref.knowledge_id)
        title = escape(ref.knowledge_title or ref.knowledge_filename or ref.knowledge_id).replace("|", "¦")
        url = _link_of(ref)
        lines.append(f"[{n}] <{url}|{title}>" if url else f"[{n}] {title}")
    return "*Sources*\n" + "\n".join(lines) if lines else ""


def split_message(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """``text`` in parts of at most ``limit`` characters, cut at a paragraph, else a line, else a space."""
    parts: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        window = rest[:limit]
        cut = max(window.rfind("\n\n"), 0) or max(window.rfind("\n"), 0) or max(window.rfind(" "), 0) or limit
        parts.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        parts.append(rest)
    return parts or [""]
