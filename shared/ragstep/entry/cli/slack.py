"""``ragstep slack serve``: the Slack Events API webhook on a local port (behind any tunnel), for development.

The same intake as the Lambda webhook (signature, ``url_verification``, bot and self events dropped, ``event_id``
deduplicated in ``<data dir>/idempotency.sqlite``), answering at ``POST /slack/events``; the hand-off is a pool of
worker threads in this process that answer in the thread with the bot token (RAGSTEP_SLACK_BOT_TOKEN).
"""

from __future__ import annotations

import argparse

# The parser is built when `ragstep slack` is the command; the server (http.server, threads) and the context
# (pydantic) load only when it runs (ragstep.entry.cli.slack_server).


def cmd_slack_serve(args: argparse.Namespace) -> int:
    from ragstep.entry.cli.slack_server import serve

    return serve(args)


def add_slack_arguments(slack: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    from ragstep.entry.cli.serve import port_number

    slack_sub = slack.add_subparsers(dest="slack_command", required=True, metavar="ACTION")
    p = slack_sub.add_parser(
        "serve", help="serve POST /slack/events on 127.0.0.1 (put a tunnel in front)", parents=[common]
    )
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1)")
    p.add_argument("--port", type=port_number, default=3000, help="TCP port, 1-65535 (3000)")
    p.set_defaults(func=cmd_slack_serve)
