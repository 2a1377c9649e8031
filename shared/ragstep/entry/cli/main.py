"""The ``ragstep`` command line (a contract other tools rely on: flags and ``--json`` shapes are stable).

Every user error prints one line, ``ragstep: error: ...``, and exits with status 2; nothing prints a traceback
unless ``RAGSTEP_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragstep import __version__
from ragstep.entry.cli.common import EXIT_USER_ERROR, context_of, print_json, validation_message
from ragstep.entry.cli.ingest import cmd_delete, cmd_ingest
from ragstep.errors import InputError, RagstepError

# -- kb ------------------------------------------------------------------------------------------------------------


def cmd_kb_create(args: argparse.Namespace) -> int:
    from ragstep.models import KnowledgeBase, KnowledgeBaseType

    ctx = context_of(args)
    model = args.embedding_model or ctx.default_embedding_model()
    kb = KnowledgeBase(
        id=uuid.uuid4().hex,
        name=args.name,
        type=KnowledgeBaseType(args.type),
        embedding_model=model,
        created_at=time.time(),
    )
    ctx.catalog.create_kb(kb)
    print(f"created knowledge base {kb.name} ({kb.type}, embedding: {kb.embedding_model}, id {kb.id})")
    return 0


def cmd_kb_list(args: argparse.Namespace) -> int:
    from ragstep.entry.cli.console import table

    ctx = context_of(args)
    kbs = ctx.catalog.list_kbs()
    if args.json:
        print_json([{**kb.model_dump(mode="json"), "documents": len(ctx.catalog.list_knowledge(kb.id))} for kb in kbs])
        return 0
    if not kbs:
        print("no knowledge bases yet; create one with `ragstep kb create NAME`")
        return 0
    rows = [(kb.name, kb.type, kb.embedding_model, len(ctx.catalog.list_knowledge(kb.id)), kb.id) for kb in kbs]
    print(table(("name", "type", "embedding", "documents", "id"), rows))
    return 0


def cmd_kb_delete(args: argparse.Namespace) -> int:
    ctx = context_of(args)
    kb = ctx.require_kb(args.name)
    removed = ctx.index.delete_knowledge_base(kb.id)
    ctx.catalog.delete_kb(kb.id)
    print(f"deleted knowledge base {kb.name} ({removed} chunks)")
    return 0


# -- ingest / delete ----------------------------------------------------------------------------------------------


# -- search --------------------------------------------------------------------------------------------------------


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``--set key=value`` pairs into a RetrievalOverrides dict (values parsed as JSON when they are JSON)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--set expects KEY=VALUE, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def cmd_search(args: argparse.Namespace) -> int:
    from ragstep.app.search import knowledge_search, search_response
    from ragstep.models import SearchRequest

    overrides = parse_overrides(args.set or [])
    if args.top_k is not None:
        # --top-k is the number of results the user wants: the final cut, and at least that many candidates.
        overrides["rerank_top_k"] = args.top_k
        overrides.setdefault("embedding_top_k", max(args.top_k, 30))
    request = SearchRequest(
        query=args.query,
        knowledge_base_ids=args.kb or [],
        knowledge_ids=args.knowledge or [],
        tag_ids=args.tag or [],
        session_id=args.session,
        overrides=overrides,
    )
    ctx = context_of(args)
    state = knowledge_search(request, ctx)
    if args.json:
        print_json(search_response(state))
    else:
        print(render_results(state))
    return 0


def render_results(state: Any, width: int = 100) -> str:
    from ragstep.entry.cli.console import clip, table

    lines = [f"query: {state.request.query}"]
    if not state.final_results:
        lines.append("no results")
    rows = [
        (
            i + 1,
            f"{r.score:.4f}",
            r.match_type,
            clip(r.knowledge_filename or r.knowledge_id, 24),
            clip(r.content, 60),
        )
        for i, r in enumerate(state.final_results)
    ]
    if rows:
        lines.append(table(("#", "score", "match", "source", "content"), rows))
    lines.append("")
    lines.append(render_trace(state))
    return "\n".join(lines)


def render_trace(state: Any) -> str:
    from ragstep.entry.cli.console import clip, table

    rows = [
        (
            t.stage,
            t.action,
            f"{t.duration_ms:.1f}",
            " ".join(f"{k}={v}" for k, v in t.counts.items()),
            clip(t.reason or "", 48),
        )
        for t in state.trace
    ]
    return table(("stage", "action", "ms", "counts", "note"), rows)


# -- demo / serve --------------------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    from ragstep.entry.cli.demo import run_demo

    return run_demo(context_of(args))


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn
    except ImportError:
        raise InputError("`ragstep serve` needs uvicorn: pip install 'ragstep[serve]'") from None
    from ragstep.entry.http.app import create_app

    ctx = context_of(args)
    ctx.catalog  # noqa: B018 - open the data dir now so a bad --data-dir fails before the server starts
    uvicorn.run(create_app(ctx), host=args.host, port=args.port, log_level="info")
    return 0


# -- bench ---------------------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _bench_output(args: argparse.Namespace, result: dict[str, Any], render: Any) -> int:
    if args.json:
        print_json(result)
    else:
        print(render(result))
    return 0


def _say(args: argparse.Namespace) -> Any:
    """Progress lines on stderr, for the table output only (``--json`` keeps both streams clean)."""
    return None if args.json else (lambda msg: print(f"ragstep bench: {msg}", file=sys.stderr, flush=True))


def cmd_bench_quality(args: argparse.Namespace) -> int:
    from ragstep.bench.quality import render, run_quality

    return _bench_output(args, run_quality(Path(args.set_dir)), render)


def cmd_bench_latency(args: argparse.Namespace) -> int:
    from ragstep.bench.latency import render, run_latency

    result = run_latency(
        args.docs,
        args.queries,
        bench_dir=args.bench_dir,
        batch=args.batch,
        rank_bm25_queries=args.rank_bm25_queries,
        seed=args.seed,
        progress=_say(args),
    )
    return _bench_output(args, result, render)


def cmd_bench_coldstart(args: argparse.Namespace) -> int:
    from ragstep.bench.coldstart import render, run_coldstart

    return _bench_output(args, run_coldstart(args.runs, xray=False if args.no_xray else None), render)


def cmd_bench_ingest(args: argparse.Namespace) -> int:
    from ragstep.bench.ingest_bench import render, run

    result = run(markdown_mb=args.markdown_mb, corpus=args.corpus, repeat=args.repeat, progress=_say(args))
    return _bench_output(args, result, render)


def cmd_bench_package(args: argparse.Namespace) -> int:
    from ragstep.bench.package import render, run_package

    return _bench_output(args, run_package(args.layer_dir, rebuild=args.rebuild), render)


def add_bench_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    """``ragstep bench quality|latency|coldstart|package|ingest`` (each prints a table, or JSON with ``--json``)."""
    bench = sub.add_parser(
        "bench", help="benchmarks: quality, latency, cold start, package size, ingestion", parents=[common]
    )
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")

    p = bench_sub.add_parser("quality", help="nDCG@10 / Recall on a BEIR-layout set", parents=[common])
    p.add_argument("--set", required=True, dest="set_dir", metavar="DIR", help="corpus.jsonl, queries.jsonl, qrels.tsv")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_quality)

    p = bench_sub.add_parser("latency", help="indexing and query latency at scale, against peers", parents=[common])
    p.add_argument("--docs", type=_positive_int, default=100_000, metavar="N", help="chunks to index (100000)")
    p.add_argument("--queries", type=_positive_int, default=200, metavar="Q", help="timed queries (200)")
    p.add_argument("--bench-dir", metavar="DIR", help="benchmark sets folder (default ../shared/bench)")
    p.add_argument("--batch", type=_positive_int, default=1000, metavar="N", help="chunks per replace_knowledge")
    p.add_argument(
        "--rank-bm25-queries", type=_positive_int, default=30, metavar="N", help="queries for the slow rank_bm25 peer"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random vectors and shuffles")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_latency)

    p = bench_sub.add_parser("coldstart", help="fresh-process cold start of the search function", parents=[common])
    p.add_argument("--runs", type=_positive_int, default=5, metavar="N", help="fresh processes per query (5)")
    p.add_argument(
        "--no-xray",
        action="store_true",
        help="skip the run with X-Ray tracing active (made by default when aws-xray-sdk is installed)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_coldstart)

    p = bench_sub.add_parser("ingest", help="chunking MB/s and ingestion chunks/s, no embedding", parents=[common])
    p.add_argument(
        "--markdown-mb", type=float, default=5.0, metavar="MB", help="generated Markdown to measure (5; 0 skips it)"
    )
    p.add_argument("--corpus", metavar="PATH", help="also a BEIR corpus.jsonl (or its folder), e.g. msmarco-5k")
    p.add_argument("--repeat", type=_positive_int, default=3, metavar="N", help="runs per figure, medians shown (3)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_ingest)

    p = bench_sub.add_parser("package", help="unzipped size of the Lambda layers", parents=[common])
    p.add_argument("--layer-dir", metavar="DIR", help="where the layers are built (default layers/build)")
    p.add_argument("--rebuild", action="store_true", help="build the layers again (needs PyPI, about a minute)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_package)


# -- parser --------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    # --data-dir is accepted before or after the sub-command.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--data-dir", default=argparse.SUPPRESS, help="where the embedded index lives (default ./.ragstep)"
    )
    parser = argparse.ArgumentParser(prog="ragstep", description="Serverless-ready RAG retrieval.", parents=[common])
    parser.add_argument("--version", action="version", version=f"ragstep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    kb = sub.add_parser("kb", help="create, list and delete knowledge bases", parents=[common])
    kb_sub = kb.add_subparsers(dest="kb_command", required=True, metavar="ACTION")
    p = kb_sub.add_parser("create", help="create a knowledge base", parents=[common])
    p.add_argument("name")
    p.add_argument("--type", choices=("document", "faq"), default="document")
    p.add_argument("--embedding-model", help="provider:model, or none (default: from RAGSTEP_EMBEDDER)")
    p.set_defaults(func=cmd_kb_create)
    p = kb_sub.add_parser("list", help="list knowledge bases", parents=[common])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_kb_list)
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
    p.add_argument("--top-k", type=int, help="number of results (sets rerank_top_k)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a retrieval setting")
    p.add_argument("--json", action="store_true", help="print {query, results, trace} as JSON")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("demo", help="ingest the bundled bilingual sample and run a few searches", parents=[common])
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("serve", help="serve the HTTP API on 127.0.0.1", parents=[common])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=cmd_serve)

    add_bench_commands(sub, common)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_utf8_args(args)
        return int(args.func(args) or 0)
    except RagstepError as exc:
        print(f"ragstep: error: {exc.message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except ValidationError as exc:
        print(f"ragstep: error: {validation_message(exc)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("RAGSTEP_DEBUG"):
            raise
        print(
            f"ragstep: internal error: {type(exc).__name__}: {exc} (set RAGSTEP_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
