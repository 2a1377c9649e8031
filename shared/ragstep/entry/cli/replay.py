"""``ragstep replay``: run a recorded request again and show what changed (:mod:`ragstep.app.replay`).

* ``ragstep replay REQUEST_ID [--from STEP] [--set KEY=VALUE ...] [--json]``: one request, its diff.
* ``ragstep replay --last N [--set ...] [--qrels DIR]``: the newest N records, how many changed and how; with a
  BEIR-layout folder's judgements, the nDCG@10 of the recorded and the replayed results, and which is better.
* ``ragstep replay --set-dir DIR --kb KB --set ...``: a benchmark set's queries searched under the current settings
  and with the overrides, judged by its qrels (nothing recorded is needed).
* ``ragstep replay --list`` / ``--prune``: the records kept / remove the expired ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from ragstep.entry.cli.common import context_of, positive_int, print_json
from ragstep.errors import InputError


def add_replay_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("request_id", nargs="?", help="the request to replay (its request_id in a response)")
    p.add_argument("--from", dest="from_step", metavar="STEP", help="replay from this step (default: the start)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a retrieval or chat setting to change")
    p.add_argument("--last", type=positive_int, metavar="N", help="replay the newest N records and count the changes")
    p.add_argument(
        "--qrels",
        metavar="DIR",
        help="with --last: judge both sides by this BEIR folder's queries.jsonl + qrels.tsv (nDCG@10)",
    )
    p.add_argument(
        "--set-dir",
        metavar="DIR",
        help="search a BEIR folder's judged queries on --kb under the current settings and with --set; judge both",
    )
    p.add_argument("--kb", action="append", metavar="KB", help="with --set-dir: the knowledge base(s) to search")
    p.add_argument("--limit", type=positive_int, metavar="N", help="with --set-dir: only the first N judged queries")
    p.add_argument("--list", action="store_true", help="list the records kept, newest first")
    p.add_argument("--prune", action="store_true", help="remove the records older than RAGSTEP_RECORD_RETENTION_S")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.set_defaults(func=cmd_replay)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def render(d: Any) -> str:
    out = [
        f"replay of {d.request_id} ({d.pipeline}, from {d.from_step})"
        + (f", with {d.overrides}" if d.overrides else "")
    ]
    if not d.changed:
        out.append("no change: same results, same answer, same citations")
    for title, rows in (("gained", d.gained), ("lost", d.lost), ("moved", d.moved)):
        for m in rows:
            rank = f"{m.before or '-'} -> {m.after or '-'}"
            out.append(f"  {title:<6} {rank:<9} {_fmt(m.score_before)} -> {_fmt(m.score_after)}  {m.file} ({m.id})")
    if d.unchanged:
        out.append(f"  {d.unchanged} results unchanged")
    if d.answer_diff:
        out.append("answer:")
        out += [f"  {line}" for line in d.answer_diff]
    if d.citations_before != d.citations_after:
        out.append(f"citations: {d.citations_before} -> {d.citations_after}")
    out.append("stage ms (recorded -> replayed):")
    for stage, (before, after) in d.stage_ms.items():
        out.append(f"  {stage:<24} {_fmt(before)} -> {_fmt(after)}")
    out.append(f"cost (estimated USD): {d.cost_before:.8f} -> {d.cost_after:.8f}")
    return "\n".join(out)


def _print_batch(summary: Any, as_json: bool, what: str, *, recorded: bool) -> int:
    shown = dataclasses.asdict(summary)
    if as_json:
        print_json(shown)
        return 0
    counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in shown.items() if k.startswith(("results", "answers")))
    print(f"{summary.changed} of {summary.replayed} {what} changed: {counts}")
    for request_id, query in zip(summary.changed_requests, summary.changed_queries, strict=True):
        shown_query = query if len(query) <= 72 else query[:71] + "…"
        print(f"  {request_id}  {shown_query}" if recorded else f"  {shown_query}")
    if summary.verdict:
        if summary.judged:
            print(
                f"judged {summary.judged}: nDCG@10 {summary.ndcg_before:.4f} -> {summary.ndcg_after:.4f} "
                f"({summary.better} better, {summary.worse} worse)"
            )
        print(summary.verdict)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from ragstep.app.replay import load_judgements, recent, replay, replay_set, summarise
    from ragstep.entry.cli.chat import split_overrides
    from ragstep.pipeline import recording

    ctx = context_of(args)
    if args.prune:
        print(f"removed {recording.prune(ctx)} expired records")
        return 0
    if args.list:
        kept = recent(ctx, 1000)
        if args.json:
            print_json(kept)
        else:
            for request_id in kept:
                print(request_id)
        if not kept:  # silence would read as "it did not work"
            print(
                "ragstep: replay: no recorded requests; RAGSTEP_RECORD_RATE (0 by default: none) decides which "
                "requests are recorded",
                file=sys.stderr,
            )
        return 0
    retrieval, chat = split_overrides(args.set or [])
    if args.set_dir:
        if not args.kb:
            raise InputError("--set-dir needs --kb: the knowledge base that holds the set's corpus")
        if chat:
            raise InputError("--set-dir compares searches: only retrieval settings can be --set")
        judgements = load_judgements(Path(args.set_dir))
        kb_ids = [ctx.require_kb(ref).id for ref in args.kb]
        diffs = replay_set(ctx, judgements, kb_ids, retrieval=retrieval, limit=args.limit)
        sides = ("the current settings", f"the settings with {' '.join(args.set or [])}")
        return _print_batch(summarise(diffs, judgements, sides), args.json, "queries of the set", recorded=False)
    if args.last:
        ids = recent(ctx, args.last)
        diffs = [replay(ctx, rid, from_step=args.from_step, retrieval=retrieval, chat=chat) for rid in ids]
        judged = load_judgements(Path(args.qrels)) if args.qrels else None
        return _print_batch(summarise(diffs, judged), args.json, "recorded requests", recorded=True)
    if not args.request_id:
        raise InputError("name a request id (ragstep replay --list shows them), or --last N")
    d = replay(ctx, args.request_id, from_step=args.from_step, retrieval=retrieval, chat=chat)
    if args.json:
        print_json(dataclasses.asdict(d) | {"changed": d.changed})
    else:
        print(render(d))
    return 0
