"""The Slack worker: answer one mention or direct message in its thread.

The thread is the chat session (one per workspace, channel and parent message), so a follow-up in the thread is
answered with the earlier rounds. A placeholder is posted in the thread at once and edited as the answer streams, at
most once per ``RAGSTEP_SLACK_UPDATE_INTERVAL_S`` (Slack's chat.update tier allows about one a second per channel);
the final edit carries the whole answer in mrkdwn with the cited sources as links, and an answer longer than one
message continues in further replies. Whatever fails ends as a short message in the thread, never as silence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ragstep.app.answers import answer_references
from ragstep.app.channels.slack_format import (
    MESSAGE_LIMIT,
    knowledge_bases_for,
    question_text,
    session_id_for,
    sources_block,
    split_message,
    to_mrkdwn,
)
from ragstep.app.chat import stream_chat
from ragstep.app.sessions import OPENING_MODEL
from ragstep.context import Context
from ragstep.errors import RagstepError
from ragstep.models import ChatRequest, PipelineState, SearchResult, Turn
from ragstep.ports import MessageChannel

log = logging.getLogger(__name__)

PLACEHOLDER = ":hourglass_flowing_sand: Looking through the knowledge base…"
FAILED = ":warning: Sorry, I could not answer that (internal error). Please try again in a moment."
STREAMING_MARK = " …"


def ensure_session(ctx: Context, session_id: str) -> None:
    """The thread's session exists (an opening record, as :func:`ragstep.app.sessions.open_session` writes)."""
    if not ctx.history.recent(session_id, limit=1):
        ctx.history.append(
            Turn(session_id=session_id, created_at=time.time(), query="", answer="", model=OPENING_MODEL)
        )


def final_text(state: PipelineState) -> str:
    references: list[SearchResult] = answer_references(state)
    answer = to_mrkdwn(state.chat.answer.strip()) or "_(no answer)_"
    sources = sources_block(references) if state.chat.references or state.chat.answer else ""
    return f"{answer}\n\n{sources}" if sources else answer


def answer_slack_event(
    envelope: Mapping[str, Any],
    ctx: Context,
    slack: MessageChannel,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Answer the event of an ``event_callback`` envelope in its thread; returns the outcome (``answered`` or
    ``failed: ...``) for the caller's log. Never raises for a failed answer: the thread says what happened."""
    event = envelope["event"]
    channel = str(event["channel"])
    thread_ts = str(event.get("thread_ts") or event["ts"])
    placeholder = slack.post(channel, PLACEHOLDER, thread_ts=thread_ts)
    try:
        state = _stream_answer(envelope, ctx, slack, channel, placeholder, clock)
    except RagstepError as exc:
        log.info("slack event %s: %s", envelope.get("event_id"), exc.message)
        slack.update(channel, placeholder, f":warning: {exc.message}")
        return f"failed: {exc.message}"
    except Exception:
        log.exception("slack event %s: answer failed", envelope.get("event_id"))
        slack.update(channel, placeholder, FAILED)
        return "failed: internal error"
    parts = split_message(final_text(state), MESSAGE_LIMIT)
    slack.update(channel, placeholder, parts[0])
    for part in parts[1:]:
        slack.post(channel, part, thread_ts=thread_ts)
    return "answered"


def _stream_answer(
    envelope: Mapping[str, Any],
    ctx: Context,
    slack: MessageChannel,
    channel: str,
    placeholder: str,
    clock: Callable[[], float],
) -> PipelineState:
    event = envelope["event"]
    settings = ctx.settings
    team = str(envelope.get("team_id") or event.get("team") or "")
    session_id = session_id_for(team, channel, str(event.get("thread_ts") or event["ts"]))
    ensure_session(ctx, session_id)
    request = ChatRequest(
        query=question_text(str(event.get("text") or "")),
        knowledge_base_ids=knowledge_bases_for(settings.slack_knowledge_bases, channel, team),
        session_id=session_id,
        pipeline=settings.slack_pipeline,
    )
    stream = stream_chat(request, ctx)
    shown: list[str] = []
    last_update = clock()
    while True:
        try:
            item = next(stream)
        except StopIteration as stop:
            final: PipelineState = stop.value
            return final
        if item.event != "answer":
            continue
        shown.append(str(item.data.get("delta", "")))
        if clock() - last_update >= settings.slack_update_interval_s:
            partial = to_mrkdwn("".join(shown).strip())
            if partial:
                slack.update(channel, placeholder, partial[: MESSAGE_LIMIT - len(STREAMING_MARK)] + STREAMING_MARK)
            last_update = clock()
