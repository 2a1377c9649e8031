"""``remember``: the memories of a chat session, saved per tenant and user, and the roots each context type searches.

**Where memories live.** One knowledge base per tenant, :data:`MEMORY_KB` (made on the first ``remember``, layers
on), holds every user's memories as small documents at ``<user>/<category>/<id>.md``: the user's folder is the
memory root a memory query walks (``ragstep://_memories/<user>/``), so one user's memories never reach another's
search. Resource and skill queries never look in it, and naming it as a knowledge base to search is refused.

**Skills** are a folder convention: in a ``--layers`` knowledge base, the documents under its top-level ``skills/``
folder (``ragstep ingest how-to/ --kb handbook`` with ``how-to/skills/deploy.md``) are skills: skill queries walk
only that folder, resource queries everything else.

**The step.** The session's turns go to the chat model (:data:`ragstep.retrieval.memory.EXTRACT_PROMPT`); without
one, or when it fails or answers something unreadable, the rule of :func:`ragstep.retrieval.memory.rule_memories`
stands in (the trace row says so). New memories are compared with the user's existing ones and each other
(:func:`ragstep.retrieval.memory.deduplicate`); what is new is indexed and the tree refreshed (its layers with it).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass, field

from ragstep.app.session_access import may_see
from ragstep.context import Context
from ragstep.errors import InputError, NotFoundError, RagstepError
from ragstep.models import KnowledgeBase, TraceEvent, Turn, check_identifier
from ragstep.models.blob_keys import source_blob_key
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.retrieval.memory import (
    EXTRACT_PROMPT,
    Memory,
    conversation_text,
    deduplicate,
    memory_document,
    parse_memories,
    rule_memories,
)
from ragstep.stages.viking.tree import MEMORY_KB, check_user, memory_kb, stored_hierarchy, user_root

STEP = "remember"
#: How many of a session's turns are read.
MAX_TURNS = 200
_NAMESPACE = uuid.UUID("5f0d3a51-9a2e-4c1e-8e57-6c3f0f1b7a90")


def memory_kb_for_writing(ctx: Context) -> KnowledgeBase:
    """The tenant's memory knowledge base, made (layers on) on the first memory."""
    from ragstep.app.knowledge_bases import create_knowledge_base

    kb = memory_kb(ctx)
    if kb is None:
        kb = create_knowledge_base(
            ctx, MEMORY_KB, description="memories saved from chat sessions (ragstep remember), per user", layers=True
        )
    return kb


@dataclass
class RememberReport:
    session_id: str
    user: str
    source: str = "rule"
    saved: list[Memory] = field(default_factory=list)
    duplicates: list[Memory] = field(default_factory=list)
    trace: list[TraceEvent] = field(default_factory=list)


def _extract(turns: list[Turn], ctx: Context, report: RememberReport) -> list[Memory]:
    pairs = [(t.query, t.answer) for t in turns]
    model = ctx.chat_model
    reason = "no chat model: the user's own statements of preference or decision"
    if model.generative:
        try:
            answer = model.complete(
                [ChatMessage("system", EXTRACT_PROMPT), ChatMessage("user", conversation_text(pairs))],
                ChatOptions(temperature=0.0, max_tokens=800, json_object=True),
            ).content
        except RagstepError as exc:
            reason = f"the chat model failed ({exc.message}): the rule instead"
        else:
            parsed = parse_memories(answer)
            if parsed is not None:
                report.source = model.name
                return parsed
            reason = "the chat model's answer held no memories to read: the rule instead"
    report.trace.append(TraceEvent(stage=STEP, action="fallback", reason=reason))
    return rule_memories(t.query for t in turns)


def _existing(kb: KnowledgeBase, user: str, ctx: Context) -> list[str]:
    """The texts of the user's memories (their documents' chunks), for the deduplication."""
    tree = stored_hierarchy(kb, ctx)
    if tree is None:
        return []
    prefix = user_root(user)
    texts = []
    for node in tree.nodes.values():
        if node.is_leaf and node.uri.startswith(prefix):
            chunks = ctx.index.knowledge_chunks(node.knowledge_id, 5)
            body = "\n".join(c.content for c in chunks if c.chunk_type.value == "text")
            texts.append(body.split("\n\n", 1)[-1].strip() or node.abstract)
    return texts


def _session_turns(ctx: Context, session_id: str) -> list[Turn]:
    # Read here, not through ragstep.app.sessions: the chat use case calls remember, and sessions import it.
    try:
        check_identifier(session_id)
    except ValueError as exc:
        raise InputError(f"session id: {exc}") from None
    turns = ctx.history.recent(session_id, limit=MAX_TURNS)
    if not turns or not may_see(ctx, turns):  # a knowledge-base-limited key sees only its sessions
        raise NotFoundError(f"unknown session {session_id!r}")
    return turns


def remember(
    ctx: Context, session_id: str, *, user: str | None = None, turns: list[Turn] | None = None
) -> RememberReport:
    """Extract the session's memories (or those of ``turns``, e.g. the turn just answered) for ``user``, drop what
    the user's memories already say, index the rest under ``<user>/<category>/`` and refresh the memory tree."""
    from ragstep.app.ingest import ingest_blob
    from ragstep.app.viking import refresh_hierarchy

    started = time.perf_counter()
    user = check_user(user)
    if turns is None:
        turns = _session_turns(ctx, session_id)
    turns = [t for t in turns if t.query.strip()]
    report = RememberReport(session_id=session_id, user=user)
    found = _extract(turns, ctx, report) if turns else []
    if not found:
        report.trace.append(TraceEvent(stage=STEP, counts={"found": 0}, reason="nothing to remember"))
        return report
    kb = memory_kb_for_writing(ctx)
    kept, report.duplicates = deduplicate(found, _existing(kb, user, ctx))
    placed: dict[str, str] = {}
    for memory in kept:
        text = memory_document(memory, user).encode()
        digest = hashlib.sha256(text).hexdigest()
        kid = uuid.uuid5(_NAMESPACE, f"{kb.id}/{user}/{digest}").hex
        filename = f"{memory.category.rstrip('s')}-{kid[:12]}.md"
        key = source_blob_key(kb.id, kid, digest, filename)
        ctx.blobs.put(key, text, "text/markdown")
        result = ingest_blob(
            kb, ctx, knowledge_id=kid, blob_key=key, filename=filename, content_hash=digest, size=len(text)
        )
        if result.status in ("indexed", "updated", "unchanged"):
            placed[kid] = f"{user}/{memory.category}/{filename}"
            report.saved.append(memory)
        else:
            reason = f"{memory.text[:60]!r} not saved: {result.status} {result.error}".strip()
            report.trace.append(TraceEvent(stage=STEP, action="degrade", reason=reason))
    if placed:
        refresh = refresh_hierarchy(kb, ctx, placed=placed)
        report.trace += refresh.events
    report.trace.append(
        TraceEvent(
            stage=STEP,
            duration_ms=(time.perf_counter() - started) * 1000,
            counts={"found": len(found), "saved": len(report.saved), "duplicates": len(report.duplicates)},
            detail={"user": user, "source": report.source},
        )
    )
    return report
