"""``ragstep events run FILE``: process one retrieval request file through the same code as the Lambda consumer and
print the result event (JSON). The file holds a request, or a ``ragstep.RetrievalRequested`` EventBridge event; its
reply target, if any, gets the result too (without one, printing is all). A request id already processed (in the
last 24 h) is not run again: its recorded result is printed with ``"replayed": true`` and a note on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ragstep.errors import InputError


def cmd_events_run(args: argparse.Namespace) -> int:
    from ragstep.app.channels.retrieval_events import RetrievalEvents
    from ragstep.entry.cli.common import context_of, print_json

    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text; save the request as UTF-8 JSON") from None
    try:
        message = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{path} is not JSON: {exc}") from None
    result, replayed = RetrievalEvents(context_of(args).clients).process(message)
    if replayed:
        # A request id is answered once: a second file with the same id gets the first one's result, which must not
        # pass for a new run (a request fixed after a failure would otherwise "fail" again without running).
        detail = result["detail"]
        print(
            f"ragstep: note: request_id {detail['request_id']!r} was processed before: this is the recorded result "
            f"({detail['status']}), nothing ran or was delivered; use a new request_id to run the request again",
            file=sys.stderr,
        )
        result = {**result, "replayed": True}
    print_json(result)
    return 0 if result["detail"]["status"] == "succeeded" else 1


def add_events_arguments(events: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    events_sub = events.add_subparsers(dest="events_command", required=True, metavar="ACTION")
    p = events_sub.add_parser(
        "run",
        help="process a retrieval request (or RetrievalRequested event) file; print the result event",
        parents=[common],
    )
    p.add_argument("file", metavar="FILE", help="the request, a JSON file")
    p.set_defaults(func=cmd_events_run)
