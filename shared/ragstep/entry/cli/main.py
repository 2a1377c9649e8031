"""The ``ragstep`` command line (a contract other tools rely on: flags and ``--json`` shapes are stable).

This module is the parser and :func:`main`; each command lives in its own module of this package and calls the use
cases in :mod:`ragstep.app`. Every user error, a bad option included, prints one line, ``ragstep: error: ...``, and
exits with status 2; nothing prints a traceback unless ``RAGSTEP_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn, TypeGuard

from ragstep import __version__
from ragstep.entry.cli.bench import add_bench_commands
from ragstep.entry.cli.chat import add_chat_commands
from ragstep.entry.cli.common import EXIT_USER_ERROR, context_of, validation_message
from ragstep.entry.cli.events import add_events_commands
from ragstep.entry.cli.ingest import cmd_delete, cmd_ingest
from ragstep.entry.cli.jobs import add_jobs_commands
from ragstep.entry.cli.search import cmd_search
from ragstep.entry.cli.serve import cmd_serve, port_number
from ragstep.entry.cli.slack import add_slack_commands
from ragstep.entry.cli.tenants import add_tenant_commands
from ragstep.entry.cli.viking import add_find_command, add_remember_command
from ragstep.errors import InputError, RagstepError

if TYPE_CHECKING:
    from pydantic import ValidationError

Command = Callable[[argparse.Namespace], int]


def cmd_kb_delete(args: argparse.Namespace) -> int:
    from ragstep.app.knowledge_bases import delete_knowledge_base

    done = delete_knowledge_base(context_of(args), args.name)
    print(f"deleted knowledge base {done.knowledge_base.name} ({done.chunks} chunks)")
    return 0


def lazy(module: str, name: str) -> Command:
    """A command imported when it runs: the use cases behind ``kb`` and ``demo`` pull in the models, the context
    and (for the demo) the parsers, which ``--help``, ``--version`` and a mistyped option should not wait for."""

    def run(args: argparse.Namespace) -> int:
        command: Command = getattr(importlib.import_module(module), name)
        return command(args)

    return run


class Parser(argparse.ArgumentParser):
    """argparse held to the command line's error contract: one ``ragstep: error:`` line and exit status 2 (argparse
    prints the whole usage first, which buries the problem)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"ragstep: error: {' '.join(message.split())} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    # --data-dir is accepted before or after the sub-command.
    common = Parser(add_help=False)
    common.add_argument(
        "--data-dir", default=argparse.SUPPRESS, help="where the embedded index lives (default ./.ragstep)"
    )
    parser = Parser(prog="ragstep", description="Serverless-ready RAG retrieval.", parents=[common])
    parser.add_argument("--version", action="version", version=f"ragstep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    kb = sub.add_parser("kb", help="create, list, show and delete knowledge bases", parents=[common])
    kb_sub = kb.add_subparsers(dest="kb_command", required=True, metavar="ACTION")
    p = kb_sub.add_parser("create", help="create a knowledge base", parents=[common])
    p.add_argument("name")
    p.add_argument("--type", choices=("document", "faq"), default="document")
    p.add_argument(
        "--embedding-model",
        help="local:multilingual-e5-small (in the process), openai:..., bedrock:..., or none (BM25 only); "
        "default: RAGSTEP_EMBEDDER's (local)",
    )
    p.add_argument(
        "--graph", action="store_true", help="build a knowledge graph at ingest (the chat model extracts entities)"
    )
    p.add_argument(
        "--layers",
        action="store_true",
        help="keep the folder tree with an abstract and an overview per folder and document (find, search "
        "--hierarchical); written by the chat model when one is configured, extractive otherwise",
    )
    p.set_defaults(func=lazy("ragstep.entry.cli.kb", "cmd_kb_create"))
    p = kb_sub.add_parser("list", help="list knowledge bases", parents=[common])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lazy("ragstep.entry.cli.kb", "cmd_kb_list"))
    p = kb_sub.add_parser(
        "show", help="list a knowledge base's documents: ids, files, chunks, tags, status", parents=[common]
    )
    p.add_argument("name", help="knowledge base name or id")
    p.add_argument("--json", action="store_true", help="print {knowledge_base, documents} as JSON")
    p.set_defaults(func=lazy("ragstep.entry.cli.kb", "cmd_kb_show"))
    p = kb_sub.add_parser("delete", help="delete a knowledge base and everything indexed in it", parents=[common])
    p.add_argument("name")
    p.set_defaults(func=cmd_kb_delete)

    p = sub.add_parser("ingest", help="ingest files or folders into a knowledge base", parents=[common])
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--kb", required=True, help="knowledge base name or id")
    p.add_argument("--json", action="store_true", help="print per-file results as JSON")
    p.add_argument("--chunk-size", type=int, metavar="N", help="characters per chunk, 64-7500 (default 512)")
    p.add_argument("--chunk-overlap", type=int, metavar="N", help="characters shared by neighbours (default 80)")
    p.add_argument(
        "--parent-child",
        action="store_true",
        help="index small chunks (--chunk-size, default 384; overlap default a fifth of it) but return their parent "
        "section (up to 4096 characters)",
    )
    p.add_argument("--tag", metavar="TAG", help="tag every ingested document and its chunks (search --tag TAG)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser(
        "delete", help="delete one ingested document (knowledge id): its chunks and stored files", parents=[common]
    )
    p.add_argument("knowledge_id")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("search", help="run the knowledge_search pipeline", parents=[common])
    p.add_argument("query")
    p.add_argument("--kb", action="append", help="knowledge base name or id (repeatable)")
    p.add_argument("--knowledge", action="append", help="limit to a knowledge id (repeatable)")
    p.add_argument("--tag", action="append", help="limit to a tag id (repeatable)")
    p.add_argument("--session", help="chat session id")
    p.add_argument("--top-k", type=int, help="number of results (1-200)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a retrieval setting, by field or RAGSTEP_* name (e.g. embedding_top_k=5)",
    )
    p.add_argument("--json", action="store_true", help="print {query, request_id, results, trace} as JSON")
    p.add_argument(
        "--hierarchical",
        action="store_true",
        help="typed queries from the intent analyser, each through the folder tree (see `ragstep find`)",
    )
    p.add_argument("--user", help="with --hierarchical: whose memories memory queries search (default)")
    p.set_defaults(func=cmd_search)
    add_find_command(sub, common)
    add_remember_command(sub, common)

    p = sub.add_parser("demo", help="ingest the bundled bilingual sample and run a few searches", parents=[common])
    p.set_defaults(func=lazy("ragstep.entry.cli.demo", "cmd_demo"))

    p = sub.add_parser("serve", help="serve the HTTP API on 127.0.0.1", parents=[common])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=8000, help="TCP port, 1-65535 (8000)")
    p.set_defaults(func=cmd_serve)

    add_chat_commands(sub, common)
    add_bench_commands(sub, common)
    add_tenant_commands(sub, common)
    add_jobs_commands(sub, common)
    add_slack_commands(sub, common)
    add_events_commands(sub, common)
    return parser


def check_utf8_args(args: argparse.Namespace) -> None:
    """Refuse arguments that were not valid UTF-8 (Python decodes them with surrogateescape): they cannot be stored.

    The query is left to :func:`ragstep.models.check_query`, which says the same for the CLI and the HTTP API.
    """
    for dest, value in vars(args).items():
        if dest == "query":
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and any(0xD800 <= ord(ch) <= 0xDFFF for ch in item):
                raise InputError(f"{dest.replace('_', '-')}: {item!r} is not valid UTF-8; re-encode it as UTF-8")


def is_validation_error(exc: BaseException) -> TypeGuard[ValidationError]:
    """``exc`` is pydantic's ValidationError, asked without importing pydantic (~40 ms): ``--help`` and the commands
    that never load a model must not pay for it, and an error of pydantic's means pydantic is loaded."""
    pydantic_core = sys.modules.get("pydantic_core")
    return pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # No argv: the command line of this process (the console script, python -m ragstep), which ends with the command.
    args.whole_process = argv is None
    try:
        check_utf8_args(args)
        return int(args.func(args) or 0)
    except RagstepError as exc:
        print(f"ragstep: error: {exc.message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`ragstep search ... | head`): not an error of ours. Point stdout at /dev/null so the
        # interpreter's final flush does not raise again on the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:
        if is_validation_error(exc):
            print(f"ragstep: error: {validation_message(exc)}", file=sys.stderr)
            return EXIT_USER_ERROR
        if os.environ.get("RAGSTEP_DEBUG"):
            raise
        print(
            f"ragstep: internal error: {type(exc).__name__}: {exc} (set RAGSTEP_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
