"""``ragstep chat`` (one question, or an interactive session) and ``ragstep sessions list|show|delete``.

The answer is printed as it streams, then its notes (a stage the question needed that did not run, a follow-up
searched with the previous question's words), a numbered Sources table (the ``[n]`` the answer cites; "cited" also
marks the sources an answer without markers was matched to) and, with ``--trace``, the stage table. Ctrl-C while an
answer streams stops it (the model's stream is closed) and keeps the part shown, marked interrupted, in the session.

While a language model has not started answering, a terminal's stderr shows "waiting for the model... Ns" (cleared
when the answer starts); an error after part of the answer is printed starts on its own line. What a provider
answered on an error goes to the log, not the terminal (``RAGSTEP_DEBUG=1`` shows it).
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

from ragstep.entry.cli.common import (
    add_profile_arguments,
    context_of,
    keep_logs_off_the_terminal,
    print_json,
    profile_fields,
    require_data,
)

PIPELINE_CHOICES = ("rag_stream", "rag", "chat_stream", "chat_history_stream", "chat", "viking_stream", "viking")
EXTRACTIVE_NOTE = "answered by the extractive answerer: sentences quoted from the sources, no language model"
INTERACTIVE_HELP = "/new starts a new session, /sources shows the last answer's sources, /exit quits"
WAITING = "waiting for the model..."
#: Seconds of silence before the progress line appears (a model that answers at once shows none).
PROGRESS_AFTER_S = 1.0


class Progress:
    """``waiting for the model... Ns`` on ``err``, rewritten in place every second from ``after_s`` on, until
    :meth:`stop` (which clears the line). For a terminal: a pipe or a file gets nothing."""

    def __init__(self, err: TextIO, after_s: float = PROGRESS_AFTER_S) -> None:
        self._err = err
        self._after_s = after_s
        self._stopped = threading.Event()
        self._shown = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ragstep-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        waited = self._after_s
        while not self._stopped.wait(self._after_s if not self._shown else 1.0):
            with self._lock:
                if self._stopped.is_set():
                    return
                self._err.write(f"\r{WAITING} {waited:.0f}s")
                self._err.flush()
                self._shown = True
            waited += 1.0

    def stop(self) -> None:
        with self._lock:
            if self._stopped.is_set():
                return
            self._stopped.set()
            if self._shown:
                self._err.write("\r\x1b[K")  # the line cleared: the answer takes its place
                self._err.flush()


def progress_for(ctx: Any, err: TextIO) -> Progress | None:
    """A progress line when a language model answers and ``err`` is a terminal (None otherwise)."""
    isatty = getattr(err, "isatty", None)
    if not (callable(isatty) and isatty()):
        return None
    return Progress(err) if ctx.chat_model.generative else None


def render_sources(references: list[Any]) -> str:
    from ragstep.entry.cli.console import table
    from ragstep.entry.cli.render import source_label

    if not references:
        return "Sources: none"
    rows = [
        (
            n,
            source_label(r.knowledge_filename, r.knowledge_title, r.knowledge_id, 32),
            r.chunk_index,
            f"{r.score:.4f}",
            "yes" if getattr(r, "cited", False) else "-",
        )
        for n, r in enumerate(references, start=1)
    ]
    # "#" is the n of the answer's [n] markers; "cited" says whether the answer cites that source.
    out = "Sources:\n" + table(("#", "file", "chunk", "score", "cited"), rows)
    # A data analysis is a query, not a passage of the file: the SQL is what can be checked.
    queries = [
        f"[{n}] SQL: {' '.join(str(r.metadata.get('sql', '')).split())}"
        for n, r in enumerate(references, start=1)
        if str(getattr(r, "match_type", "")) == "data_analysis" and r.metadata.get("sql")
    ]
    return "\n".join([out, *queries])


def split_overrides(pairs: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set KEY=VALUE`` pairs into (retrieval overrides, chat overrides). A chat setting is named by its field
    (``temperature``) or its environment name (``RAGSTEP_CHAT_TEMPERATURE``); anything else is a retrieval setting."""
    from ragstep.entry.cli.search import parse_overrides
    from ragstep.models import ChatSettings

    retrieval: dict[str, Any] = {}
    chat: dict[str, Any] = {}
    for key, value in parse_overrides(pairs).items():
        name = key.removeprefix("chat_")
        if name in ChatSettings.model_fields:
            chat[name] = value
        else:
            retrieval[key] = value
    return retrieval, chat


def request_of(args: argparse.Namespace, query: str, session_id: str | None) -> Any:
    from ragstep.models import ChatRequest

    retrieval, chat = split_overrides(getattr(args, "set", None) or [])
    if getattr(args, "web", False):
        retrieval["web_search"] = True
    return ChatRequest(
        query=query,
        knowledge_base_ids=args.kb,
        session_id=session_id,
        pipeline=args.pipeline,
        overrides=retrieval,
        chat=chat,
        **profile_fields(args),
    )


def ask(
    args: argparse.Namespace, ctx: Any, query: str, session_id: str | None, out: TextIO, err: TextIO | None = None
) -> Any:
    """Stream one answer to ``out`` (progress on ``err``, stderr by default, when it is a terminal); returns the
    final state (None if the reader interrupted it). An error after part of the answer was written leaves ``out``
    at the start of a line, so the error's own line is not glued to the answer."""
    from ragstep.app.chat import stream_chat
    from ragstep.errors import RagstepError

    progress = progress_for(ctx, err if err is not None else sys.stderr)
    events = stream_chat(request_of(args, query, session_id), ctx)
    streamed = False
    try:
        while True:
            try:
                event = next(events)
            except StopIteration as stop:
                state = stop.value
                break
            if event.event in ("answer", "reasoning") and progress is not None:
                progress.stop()
            if event.event == "answer":
                out.write(event.data["delta"])
                out.flush()
                streamed = True
    except KeyboardInterrupt:
        events.close()  # stops the model and saves what was shown, marked interrupted
        out.write("\n[interrupted]\n")
        return None
    except RagstepError:
        if streamed:
            out.write("\n")
            out.flush()
        raise
    finally:
        if progress is not None:
            progress.stop()
    if not streamed:  # a pipeline that does not stream (rag, chat): the whole answer at once
        out.write(state.chat.answer)
    # A streamed answer is final as shown: citations found after it flag the Sources rows (no second copy).
    out.write("\n")
    return state


def answer_notes(state: Any) -> str:
    """The lines after the answer: who answered (the extractive answerer) and the notes of the answer."""
    from ragstep.app.answers import answer_notes as notes

    lines = [f"({EXTRACTIVE_NOTE})"] if state.chat.model == "extractive" else []
    lines += [f"(note: {note})" for note in notes(state)]
    return "".join(line + "\n" for line in lines)


def report(args: argparse.Namespace, state: Any, out: TextIO) -> None:
    from ragstep.app.answers import answer_references

    out.write(answer_notes(state))
    if state.chat.model != "extractive" and state.chat.fallback:
        out.write(f"(fallback answer: {state.chat.fallback}; the sources did not answer the question)\n")
    out.write("\n" + render_sources(answer_references(state)) + "\n")
    if args.trace:
        from ragstep.entry.cli.render import render_trace

        out.write("\n" + render_trace(state) + "\n")


def cmd_chat(args: argparse.Namespace) -> int:
    # A provider's error details are logged for a server's operator; in a terminal the error's line says it all.
    keep_logs_off_the_terminal("ragstep.providers")
    require_data(args)  # it answers from knowledge bases (--kb is required): a data dir without any is a typo
    ctx = context_of(args)
    if args.question is None:
        for kb in args.kb:  # a wrong name fails now, not at every question of the session
            ctx.require_kb(kb)
        return interactive(args, ctx, input_fn=input, out=sys.stdout)
    if args.json:
        from ragstep.app.chat import chat_response, run_chat

        print_json(chat_response(run_chat(request_of(args, args.question, args.session), ctx), ctx))
        return 0
    state = ask(args, ctx, args.question, args.session, sys.stdout)
    if state is None:
        return 130
    report(args, state, sys.stdout)
    print(f"session: {state.request.session_id}")
    return 0


def interactive(args: argparse.Namespace, ctx: Any, *, input_fn: Callable[[str], str], out: TextIO) -> int:
    """Ask question after question in one session until ``/exit`` or end of input."""
    from ragstep.app.answers import answer_references
    from ragstep.errors import RagstepError

    session_id: str | None = args.session
    last: Any = None
    out.write(f"ragstep chat ({args.pipeline}); {INTERACTIVE_HELP}\n")
    while True:
        try:
            line = input_fn("> ").strip()
        except (EOFError, KeyboardInterrupt):
            out.write("\n")
            return 0
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line == "/new":
            session_id, last = None, None
            out.write("new session\n")
            continue
        if line == "/sources":
            shown = render_sources(answer_references(last)) if last else "no answer yet"
            out.write(shown + "\n")
            continue
        if line.startswith("/"):
            out.write(f"unknown command {line.split()[0]}; {INTERACTIVE_HELP}\n")
            continue
        try:
            state = ask(args, ctx, line, session_id, out)
        except RagstepError as exc:  # one bad question does not end the session
            out.write(f"ragstep: error: {exc.message}\n")
            continue
        if state is not None:
            last = state
            session_id = state.request.session_id
            out.write(answer_notes(state))


def cmd_sessions_list(args: argparse.Namespace) -> int:
    from datetime import datetime

    from ragstep.app.sessions import list_sessions
    from ragstep.entry.cli.console import clip, table

    require_data(args, "history")
    sessions = list_sessions(context_of(args))
    if args.json:
        print_json([s.model_dump(mode="json") for s in sessions])
        return 0
    if not sessions:
        print('no chat sessions yet; start one with `ragstep chat "QUESTION" --kb NAME`')
        return 0

    def when(ts: float) -> str:
        return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")

    rows = [(s.session_id, s.turns, when(s.updated_at), clip(s.first_query, 48)) for s in sessions]
    print(table(("session", "turns", "last active", "first question"), rows))
    return 0


def cmd_sessions_show(args: argparse.Namespace) -> int:
    from ragstep.app.sessions import session_turns

    require_data(args, "history")
    turns = session_turns(context_of(args), args.session_id)
    if args.json:
        print_json([t.model_dump(mode="json") for t in turns])
        return 0
    for n, turn in enumerate(turns, start=1):
        flags = " [interrupted]" if turn.interrupted else ""
        model = f" ({turn.model})" if turn.model else ""
        print(f"[{n}] Q: {turn.query}")
        if turn.rewritten_query:
            print(f"    rewritten: {turn.rewritten_query}")
        print(f"    A{model}{flags}: {turn.answer}")
        print()
    return 0


def cmd_sessions_delete(args: argparse.Namespace) -> int:
    from ragstep.app.chat import delete_session

    deleted = delete_session(context_of(args), args.session_id)
    print(f"deleted session {args.session_id} ({deleted} turns)")
    return 0


def add_chat_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("question", nargs="?", help="the question (omit for an interactive session)")
    p.add_argument("--kb", action="append", required=True, help="knowledge base name or id (repeatable)")
    p.add_argument("--session", help="continue this chat session (see `ragstep sessions list`)")
    p.add_argument("--pipeline", choices=PIPELINE_CHOICES, default="rag_stream", help="chat pipeline (rag_stream)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a retrieval or chat setting for this question, by field or RAGSTEP_* name "
        "(e.g. rerank_top_k=5, temperature=0.1, enable_rewrite=false)",
    )
    p.add_argument(
        "--web",
        action="store_true",
        help="search the web beside the knowledge bases (RAGSTEP_WEB_SEARCH_PROVIDER; web_search_max_results=N)",
    )
    add_profile_arguments(p)
    p.add_argument("--json", action="store_true", help="print the answer, references and trace as JSON")
    p.add_argument("--trace", action="store_true", help="print the stage table after the answer")
    p.set_defaults(func=cmd_chat)


def add_sessions_arguments(sessions: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    s_sub = sessions.add_subparsers(dest="sessions_command", required=True, metavar="ACTION")
    p = s_sub.add_parser("list", help="chat sessions, most recently active first", parents=[common])
    p.add_argument("--json", action="store_true", help="print the sessions as JSON")
    p.set_defaults(func=cmd_sessions_list)
    p = s_sub.add_parser("show", help="the turns of one session", parents=[common])
    p.add_argument("session_id", help="the session (`ragstep sessions list`)")
    p.add_argument("--json", action="store_true", help="print the session's turns as JSON")
    p.set_defaults(func=cmd_sessions_show)
    p = s_sub.add_parser("delete", help="delete a session and its turns", parents=[common])
    p.add_argument("session_id", help="the session (`ragstep sessions list`)")
    p.set_defaults(func=cmd_sessions_delete)
