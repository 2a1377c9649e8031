"""``ragstep mcp``: the MCP server over stdio, for desktop clients (Claude Desktop, Cursor, VS Code).

The client starts it as a child process and talks JSON-RPC on its stdin and stdout, so nothing else may ever be
written to stdout (logs go to stderr). It works on the same data dir as every other command, as the default tenant,
with every scope unless ``--scope`` narrows them (e.g. ``--scope search`` for an agent that must not ingest).
Ingestion runs inside the ``ingest`` call: there is no worker process beside it.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ragstep.scopes import SCOPES


def scope_list(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated scopes, each one ragstep knows."""
    scopes = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [s for s in scopes if s not in SCOPES]
    if not scopes or unknown:
        raise argparse.ArgumentTypeError(f"unknown scope {unknown[0] if unknown else text!r}; use {', '.join(SCOPES)}")
    return scopes


def add_mcp_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scope", type=scope_list, default=SCOPES, help="the tools offered, by scope (default: all: search,chat,...)"
    )
    p.set_defaults(func=cmd_mcp)


def _check_data(args: argparse.Namespace) -> None:
    """A data dir with no ragstep data is most often a mistyped path in the client's configuration, which the agent
    would only ever see as "no knowledge base": read-only tools stop at once as the read-only commands do (exit 2,
    the folder not created); with the ``ingest`` tool the server starts, and says so on stderr (the client's log)."""
    from ragstep.entry.cli.common import require_data
    from ragstep.errors import NotFoundError

    if "ingest" not in args.scope:
        require_data(args)
        return
    try:
        require_data(args)
    except NotFoundError as exc:
        print(f"ragstep mcp: {exc.message}; serving it empty: the ingest tool adds documents", file=sys.stderr)


def cmd_mcp(args: argparse.Namespace) -> int:
    import anyio

    from ragstep.entry.cli.common import context_of
    from ragstep.entry.mcp.server import build_server
    from ragstep.entry.mcp.stdio import serve_stdio
    from ragstep.entry.mcp.tools import Caller

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="ragstep mcp: %(levelname)s %(message)s")
    _check_data(args)
    caller = Caller(context_of(args), tuple(args.scope), inline_jobs=True, local_files=True)
    server = build_server(lambda _ctx: caller)

    try:
        anyio.run(serve_stdio, server)
    except KeyboardInterrupt:
        return 130
    return 0
