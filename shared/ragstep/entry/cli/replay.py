"""``ragstep replay``: run a recorded request again and show what changed (:mod:`ragstep.app.replay`).

* ``ragstep replay REQUEST_ID [--from STEP] [--set KEY=VALUE ...] [--json]``: one request, its diff.
* ``ragstep replay --last N [--set ...]``: the newest N records, how many changed and how.
* ``ragstep replay --list`` / ``--prune``: the records kept / remove the expired ones.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ragstep.entry.cli.common import context_of, positive_int, print_json
from ragstep.errors import InputError


def add_replay_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("request_id", nargs="?", help="the request to replay (its request_id in a response)")
    p.add_argument("--from", dest="from_step", metavar="STEP", help="replay from this step (default: the start)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a retrieval or chat setting to change")
    p.add_argument("--last", type=positive_int, metavar="N", help="replay the newest N records and count the changes")
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


def cmd_replay(args: argparse.Namespace) -> int:
    from ragstep.app.replay import recent, replay
    from ragstep.entry.cli.chat import split_overrides
    from ragstep.pipeline import recording

    ctx = context_of(args)
    if args.prune:
        print(f"removed {recording.prune(ctx)} expired records")
        return 0
    if args.list:
        for request_id in recent(ctx, 1000):
            print(request_id)
        return 0
    retrieval, chat = split_overrides(args.set or [])
    if args.last:
        ids = recent(ctx, args.last)
        diffs = [replay(ctx, rid, from_step=args.from_step, retrieval=retrieval, chat=chat) for rid in ids]
        changed = [d for d in diffs if d.changed]
        summary = {
            "replayed": len(diffs),
            "changed": len(changed),
            "results_gained": sum(len(d.gained) for d in diffs),
            "results_lost": sum(len(d.lost) for d in diffs),
            "results_moved": sum(len(d.moved) for d in diffs),
            "answers_changed": sum(1 for d in diffs if d.answer_diff),
            "changed_requests": [d.request_id for d in changed],
        }
        if args.json:
            print_json(summary)
        else:
            print(
                f"{summary['changed']} of {summary['replayed']} recorded requests changed: "
                + ", ".join(
                    f"{k.replace('_', ' ')} {v}" for k, v in summary.items() if k.startswith(("results", "answers"))
                )
            )
            for d in changed:
                print(f"  {d.request_id}")
        return 0
    if not args.request_id:
        raise InputError("name a request id (ragstep replay --list shows them), or --last N")
    d = replay(ctx, args.request_id, from_step=args.from_step, retrieval=retrieval, chat=chat)
    if args.json:
        print_json(dataclasses.asdict(d) | {"changed": d.changed})
    else:
        print(render(d))
    return 0
