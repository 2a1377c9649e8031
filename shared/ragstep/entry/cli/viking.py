"""``ragstep find``, ``ragstep search --hierarchical`` and ``ragstep remember``: thin shells over
:mod:`ragstep.app.viking` and :mod:`ragstep.app.memories`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ragstep.entry.cli.common import context_of, print_json, require_data

if TYPE_CHECKING:
    from ragstep.app.memories import RememberReport
    from ragstep.models.viking import FindResult


def add_find_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="what to find (up to 4,000 characters)")
    p.add_argument("--kb", action="append", required=True, help="knowledge base name or id (repeatable)")
    add_shared_options(p)
    p.set_defaults(func=cmd_find)


def add_remember_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("--session", required=True, help="chat session id")
    p.add_argument("--user", help="whose memories they are (default)")
    p.add_argument("--json", action="store_true", help="print {session_id, user, source, saved, duplicates} as JSON")
    p.set_defaults(func=cmd_remember)


def cmd_remember(args: argparse.Namespace) -> int:
    from ragstep.app.memories import remember

    report = remember(context_of(args), args.session, user=args.user)
    if args.json:
        print_json(report_json(report))
        return 0
    print(f"{len(report.saved)} memories saved for {report.user}, {len(report.duplicates)} already known")
    for m in report.saved:
        print(f"  [{m.category}] {m.text}")
    for event in report.trace:
        if event.action == "fallback" and event.reason:
            print(f"  ({event.reason})")
    return 0


def report_json(report: RememberReport) -> dict[str, Any]:
    return {
        "session_id": report.session_id,
        "user": report.user,
        "source": report.source,
        "saved": [{"category": m.category, "text": m.text} for m in report.saved],
        "duplicates": [{"category": m.category, "text": m.text} for m in report.duplicates],
        "trace": [e.model_dump(mode="json", exclude_none=True) for e in report.trace],
    }


def add_shared_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=10, metavar="N", help="matches per query, 1-200 (10)")
    p.add_argument(
        "--budget", type=int, metavar="TOKENS", help="also lay the matches out as layered context within TOKENS"
    )
    p.add_argument("--json", action="store_true", help="print {query, memories, resources, skills, ...} as JSON")


def cmd_find(args: argparse.Namespace) -> int:
    from ragstep.app.viking import find

    require_data(args)
    result = find(args.query, args.kb, context_of(args), limit=args.limit, budget=args.budget)
    show(result, as_json=args.json)
    return 0


def cmd_hierarchical_search(args: argparse.Namespace) -> int:
    """``search --hierarchical``: the intent analyser's typed queries, each through the tree."""
    from ragstep.app.viking import search
    from ragstep.errors import InputError

    if not args.kb:
        raise InputError("search --hierarchical needs --kb NAME")
    limit = args.top_k if args.top_k is not None else 10
    result = search(args.query, args.kb, context_of(args), limit=limit, session_id=args.session, user=args.user)
    show(result, as_json=args.json)
    return 0


def show(result: FindResult, *, as_json: bool) -> None:
    if as_json:
        print_json(result.model_dump(mode="json", exclude_none=True))
        return
    print(render(result))


def render(result: FindResult) -> str:
    from ragstep.entry.cli.console import clip, clip_middle, table

    lines: list[str] = []
    plan = result.query_plan
    if plan is not None:
        if not plan.queries:
            lines.append(f"no retrieval needed ({plan.reasoning or 'the analyser planned no query'})")
        for q in plan.queries:
            lines.append(f"[{q.context_type}, priority {q.priority}] {q.query}")
    groups = (("memories", result.memories), ("resources", result.resources), ("skills", result.skills))
    for name, matches in groups:
        if not matches:
            continue
        rows = [
            (f"{m.score:.3f}", clip_middle(m.uri, 48), "doc" if m.is_leaf else "dir", clip(m.abstract, 60))
            for m in matches
        ]
        lines.append(f"{name}:")
        lines.append(table(("score", "uri", "kind", "abstract"), rows))
    if not result.total and (plan is None or plan.queries):
        lines.append("no matches")
    if result.layered is not None:
        used = f"layered context: {result.layered.used} of {result.layered.budget} tokens"
        lines.append(used + "".join(f"\n  {i.layer} {i.uri} ({i.tokens} tokens)" for i in result.layered.items))
    return "\n".join(lines)
