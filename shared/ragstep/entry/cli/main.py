"""The ``ragstep`` command line (a contract other tools rely on: flags and ``--json`` shapes are stable).

This module is the parser and :func:`main`; each command lives in its own module of this package and calls the use
cases in :mod:`ragstep.app`. :data:`COMMANDS` lists the commands; only the parser of the one that runs is built.
Every user error, a bad option included, prints one line, ``ragstep: error: ...``, and exits with status 2; nothing
prints a traceback unless ``RAGSTEP_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard, cast

from ragstep import __version__
from ragstep.entry.cli.common import (
    EXIT_USER_ERROR,
    add_profile_arguments,
    context_of,
    positive_int,
    validation_message,
)
from ragstep.errors import InputError, RagstepError

if TYPE_CHECKING:
    from pydantic import ValidationError

Command = Callable[[argparse.Namespace], int]
#: Adds a command's arguments (and its actions' sub-parsers) to its parser; the second parser holds the options
#: every parser accepts (``--data-dir``), for the actions' ``parents``.
AddArguments = Callable[[argparse.ArgumentParser, argparse.ArgumentParser], None]


def cmd_kb_delete(args: argparse.Namespace) -> int:
    from ragstep.app.knowledge_bases import delete_knowledge_base

    done = delete_knowledge_base(context_of(args), args.name)
    print(f"deleted knowledge base {done.knowledge_base.name} ({done.chunks} chunks)")
    return 0


def lazy(module: str, name: str) -> Command:
    """A command imported when it runs: the use cases behind the commands pull in the models, the context and (for
    the demo) the parsers, which ``--help``, ``--version`` and a mistyped option should not wait for."""

    def run(args: argparse.Namespace) -> int:
        command: Command = getattr(importlib.import_module(module), name)
        return command(args)

    return run


class Parser(argparse.ArgumentParser):
    """argparse held to the command line's error contract: one ``ragstep: error:`` line and exit status 2 (argparse
    prints the whole usage first, which buries the problem)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"ragstep: error: {' '.join(message.split())} (see `{self.prog} --help`)\n")


def arguments_of(module: str, name: str) -> AddArguments:
    """The function of another module of this package that adds a command's arguments, imported only when that
    command is the one on the command line (the modules of the others stay unread)."""

    def add(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
        add_arguments: AddArguments = getattr(importlib.import_module(module), name)
        add_arguments(parser, common)

    return add


def add_kb_arguments(kb: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    kb_sub = kb.add_subparsers(dest="kb_command", required=True, metavar="ACTION")
    p = kb_sub.add_parser("create", help="create a knowledge base", parents=[common])
    p.add_argument("name", help="its name: 1-64 characters, letters (any script), digits, '-', '_', '.', spaces")
    p.add_argument(
        "--type", choices=("document", "faq"), default="document", help="document (files) or faq (question-answers)"
    )
    p.add_argument(
        "--embedding-model",
        help="local:multilingual-e5-small-int8-v2 (in the process; local:multilingual-e5-small-int8 and "
        "local:multilingual-e5-small, the ones before), "
        "openai:..., bedrock:..., or none (BM25 only); default: RAGSTEP_EMBEDDER's (local)",
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
    p.add_argument("--json", action="store_true", help="print the knowledge bases as JSON")
    p.set_defaults(func=lazy("ragstep.entry.cli.kb", "cmd_kb_list"))
    p = kb_sub.add_parser(
        "show", help="list a knowledge base's documents: ids, files, chunks, tags, status", parents=[common]
    )
    p.add_argument("name", help="knowledge base name or id")
    p.add_argument("--json", action="store_true", help="print {knowledge_base, documents} as JSON")
    p.set_defaults(func=lazy("ragstep.entry.cli.kb", "cmd_kb_show"))
    p = kb_sub.add_parser(
        "embed",
        help="add the vectors still missing (chunks searchable by keyword only): resumes an interrupted ingest",
        parents=[common],
    )
    p.add_argument("name", help="knowledge base name or id")
    p.add_argument("--json", action="store_true", help="print {documents, chunks, failed} as JSON")
    p.set_defaults(func=lazy("ragstep.entry.cli.ingest", "cmd_kb_embed"))
    p = kb_sub.add_parser(
        "upgrade-tokens",
        help="fold the keyword tokens of documents indexed before accent folding: in place on an OpenSearch domain, "
        "as a new generation on the S3-snapshot index (the local index does it itself when it opens)",
        parents=[common],
    )
    p.add_argument("name", help="knowledge base name or id")
    p.add_argument("--json", action="store_true", help="print {knowledge_base, tokenizer, chunks, upgraded} as JSON")
    p.set_defaults(func=lazy("ragstep.entry.cli.kb", "cmd_kb_upgrade_tokens"))
    p = kb_sub.add_parser("delete", help="delete a knowledge base and everything indexed in it", parents=[common])
    p.add_argument("name", help="knowledge base name or id")
    p.set_defaults(func=cmd_kb_delete)


def add_ingest_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="files, folders or web page URLs (http/https)")
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
    p.add_argument(
        "--vectors-later",
        action="store_true",
        help="stop once every file is searchable by keyword; add the vectors later with `ragstep kb embed KB`",
    )
    p.add_argument(
        "--max-pages", type=positive_int, default=50, metavar="N", help="web pages a sitemap URL may add in all (50)"
    )
    p.set_defaults(func=lazy("ragstep.entry.cli.ingest", "cmd_ingest"))


def add_delete_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("knowledge_id", help="the document's id (`ragstep kb show KB` lists them)")
    p.set_defaults(func=lazy("ragstep.entry.cli.ingest", "cmd_delete"))


def add_search_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="what to search for (up to 4,000 characters)")
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
    add_profile_arguments(p)
    p.add_argument("--json", action="store_true", help="print {query, request_id, results, trace} as JSON")
    p.add_argument(
        "--hierarchical",
        action="store_true",
        help="typed queries from the intent analyser, each through the folder tree (see `ragstep find`)",
    )
    p.add_argument("--user", help="with --hierarchical: whose memories memory queries search (default)")
    p.set_defaults(func=lazy("ragstep.entry.cli.search", "cmd_search"))


def add_demo_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    p.set_defaults(func=lazy("ragstep.entry.cli.demo", "cmd_demo"))


def add_serve_arguments(p: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    from ragstep.entry.cli.serve import port_number

    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1; another needs API keys)")
    p.add_argument("--port", type=port_number, default=8000, help="TCP port, 1-65535 (8000)")
    p.set_defaults(func=lazy("ragstep.entry.cli.serve", "cmd_serve"))


#: Every command, in the order ``ragstep --help`` lists them: its help line and what adds its arguments.
COMMANDS: dict[str, tuple[str, AddArguments]] = {
    "kb": ("create, list, show and delete knowledge bases", add_kb_arguments),
    "ingest": ("ingest files or folders into a knowledge base", add_ingest_arguments),
    "delete": ("delete one ingested document (knowledge id): its chunks and stored files", add_delete_arguments),
    "search": ("run the knowledge_search pipeline", add_search_arguments),
    "find": (
        "hierarchical retrieval of one query, no model: folders and documents scored through the folder tree",
        arguments_of("ragstep.entry.cli.viking", "add_find_arguments"),
    ),
    "remember": (
        "save a chat session's memories (the user's preferences, decisions) for memory queries to find",
        arguments_of("ragstep.entry.cli.viking", "add_remember_arguments"),
    ),
    "demo": ("ingest the bundled bilingual sample and run a few searches", add_demo_arguments),
    "serve": ("serve the HTTP API on 127.0.0.1", add_serve_arguments),
    "chat": (
        "answer a question from knowledge bases (interactive without one)",
        arguments_of("ragstep.entry.cli.chat", "add_chat_arguments"),
    ),
    "sessions": (
        "list, show and delete chat sessions",
        arguments_of("ragstep.entry.cli.chat", "add_sessions_arguments"),
    ),
    "bench": (
        "benchmarks: quality, latency, chat, cold start, CLI, package size, ingestion",
        arguments_of("ragstep.entry.cli.bench", "add_bench_arguments"),
    ),
    "tenants": ("create and list tenants", arguments_of("ragstep.entry.cli.tenants", "add_tenants_arguments")),
    "keys": ("create, list and revoke API keys", arguments_of("ragstep.entry.cli.tenants", "add_keys_arguments")),
    "usage": (
        "a tenant's API usage by day, month, key or model",
        arguments_of("ragstep.entry.cli.tenants", "add_usage_arguments"),
    ),
    "jobs": (
        "ingestion jobs of HTTP uploads: prune the old finished ones",
        arguments_of("ragstep.entry.cli.jobs", "add_jobs_arguments"),
    ),
    "slack": (
        "the Slack app: serve its Events API webhook locally",
        arguments_of("ragstep.entry.cli.slack", "add_slack_arguments"),
    ),
    "replay": (
        "run a recorded request again (from any step, with other settings) and show what changed",
        arguments_of("ragstep.entry.cli.replay", "add_replay_arguments"),
    ),
    "mcp": (
        "serve the MCP tools (search, answer, ...) over stdio, for desktop agents",
        arguments_of("ragstep.entry.cli.mcp", "add_mcp_arguments"),
    ),
    "events": (
        "event-driven retrieval: run a request file locally",
        arguments_of("ragstep.entry.cli.events", "add_events_arguments"),
    ),
}


class Commands(argparse._SubParsersAction):
    """The sub-commands: each listed (name and help line) at once, its parser built when argparse picks it.

    Building the parsers of all the commands and actions, and importing their modules, slowed every start-up,
    ``ragstep search`` included, of which the command's own parser is a small part. argparse itself still chooses the
    command (no second reading of the command line), so where ``--data-dir`` or an unknown option stands changes
    nothing. This extends argparse's own action through its internals (``_SubParsersAction``, its pseudo-actions of
    the help listing, ``_name_parser_map``), unchanged from 3.11 to 3.13; tests/test_cli_parser.py compares every
    help text, parse and error with the parser built whole.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.declared: dict[str, tuple[AddArguments, argparse.ArgumentParser]] = {}
        # What argparse checks a command name against and lists in its "invalid choice" error: every name, while
        # the map of parsers holds only those built.
        self.choices = self.declared

    def declare(self, name: str, help_text: str, add_arguments: AddArguments, common: argparse.ArgumentParser) -> None:
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), help_text))
        self.declared[name] = (add_arguments, common)

    def build(self, name: str) -> argparse.ArgumentParser:
        add_arguments, common = self.declared[name]
        # No help= here: the help line is the one declare() listed (add_parser would list the command again).
        parser: argparse.ArgumentParser = self.add_parser(name, parents=[common])
        add_arguments(parser, common)
        return parser

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        name = values[0]
        if name in self.declared and name not in self._name_parser_map:
            self.build(name)
        super().__call__(parser, namespace, values, option_string)


def build_parser(*, lazily: bool = False) -> argparse.ArgumentParser:
    """The command line's parser: every command's parser built now, or (``lazily``) only the one argparse picks
    when it parses; both print and parse the same (tests/test_cli_parser.py)."""
    # --data-dir is accepted before or after the sub-command.
    common = Parser(add_help=False)
    common.add_argument(
        "--data-dir", default=argparse.SUPPRESS, help="where the embedded index lives (default ./.ragstep)"
    )
    parser = Parser(prog="ragstep", description="Serverless-ready RAG retrieval.", parents=[common])
    parser.add_argument("--version", action="version", version=f"ragstep {__version__}")
    commands = cast(Commands, parser.add_subparsers(action=Commands, dest="command", required=True, metavar="COMMAND"))
    for name, (help_text, add_arguments) in COMMANDS.items():
        commands.declare(name, help_text, add_arguments, common)
        if not lazily:
            commands.build(name)
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
    """``exc`` is pydantic's ValidationError, asked without importing pydantic (a slow import): ``--help`` and the
    commands that never load a model must not pay for it, and an error of pydantic's means pydantic is loaded."""
    pydantic_core = sys.modules.get("pydantic_core")
    return pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(lazily=True)
    args = parser.parse_args(argv)
    # No argv: the command line of this process (the console script, python -m ragstep), which ends with the command.
    args.whole_process = argv is None
    try:
        check_utf8_args(args)
        code = int(args.func(args) or 0)
        # Out now, not in the interpreter's teardown (joining pool threads, freeing the modules): a pipe is
        # block-buffered, and whoever reads it (a script, `ragstep bench cli`) has the whole output at this point.
        sys.stdout.flush()
        return code
    except RagstepError as exc:
        message = exc.message
        if message.startswith("unknown knowledge base ") and "kb list" not in message:
            # The API names no other knowledge base (a caller may be anyone); here the user owns the data dir.
            message += "; `ragstep kb list` shows those there are"
        print(f"ragstep: error: {message}", file=sys.stderr)
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
