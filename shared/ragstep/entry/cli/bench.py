"""``ragstep bench quality|profiles|latency|chat|coldstart|cli|ingest|package``: each prints a table, or JSON with
``--json``.

The benchmarks are imported when their command runs: the rest of the command line never pays for them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ragstep.entry.cli.common import positive_int, print_json


def _bench_kind(args: argparse.Namespace) -> str:
    """The report's kind, as ``docs/bench_page.py`` knows it: the benchmark, or its variant with its own report."""
    if getattr(args, "function", None) == "chat":
        return "coldstart-chat"
    if getattr(args, "end_to_end", False):
        return "ingest-e2e"
    return str(args.bench_command)


def _bench_output(args: argparse.Namespace, result: dict[str, Any], render: Any) -> int:
    if args.json:
        from ragstep.bench.common import run_record

        # Where the figures came from travels with them: a report kept under bench-results/ is its own provenance.
        # The command as typed when this process is the command line; called with an argument list, only its name.
        argv = sys.argv[1:] if getattr(args, "whole_process", False) else ["bench", str(args.bench_command)]
        print_json({"run": run_record(_bench_kind(args), argv), **result})
    else:
        print(render(result))
    return 0


def _say(args: argparse.Namespace) -> Any:
    """Progress lines on stderr, for the table output only (``--json`` keeps both streams clean)."""
    return None if args.json else (lambda msg: print(f"ragstep bench: {msg}", file=sys.stderr, flush=True))


def cmd_bench_quality(args: argparse.Namespace) -> int:
    from ragstep.bench.quality import ALL_RUNS, render, run_quality

    runs = _quality_runs(args.runs) if args.runs else ALL_RUNS
    result = run_quality(Path(args.set_dir), runs=runs, vectors=args.vectors, declared_scale=not args.undeclared_scale)
    return _bench_output(args, result, render)


def _quality_runs(text: str) -> tuple[str, ...]:
    from ragstep.bench.quality import ALL_RUNS
    from ragstep.errors import InputError

    runs = tuple(dict.fromkeys(r.strip() for r in text.split(",") if r.strip()))
    unknown = [r for r in runs if r not in ALL_RUNS]
    if unknown or not runs:
        raise InputError(f"--runs: unknown run {unknown[0] if unknown else text!r}; choose from {', '.join(ALL_RUNS)}")
    return runs


def cmd_bench_profiles(args: argparse.Namespace) -> int:
    from ragstep.bench.profiles_bench import PROFILES, render, run_profiles

    profiles = tuple(args.profile or PROFILES)
    result = run_profiles(Path(args.set_dir), profiles=profiles, vectors=args.vectors, queries=args.queries)
    return _bench_output(args, result, render)


def cmd_bench_answer(args: argparse.Namespace) -> int:
    from ragstep.bench.answer import render, run_answer

    result = run_answer(Path(args.set_dir), questions=args.questions, progress=_say(args), curve=args.curve)
    return _bench_output(args, result, render)


def _peer_list(value: str) -> tuple[str, ...]:
    known = ("rank_bm25", "bm25s")
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if names == ("none",):
        return ()
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown peer {', '.join(unknown) or value!r}; use {','.join(known)} or none")
    return names


def cmd_bench_latency(args: argparse.Namespace) -> int:
    from ragstep.bench.latency import render, run_latency

    result = run_latency(
        args.docs,
        args.queries,
        bench_dir=args.bench_dir,
        batch=args.batch,
        rank_bm25_queries=args.rank_bm25_queries,
        seed=args.seed,
        peers=args.peers,
        kind=args.vectors,
        progress=_say(args),
    )
    return _bench_output(args, result, render)


def cmd_bench_chat(args: argparse.Namespace) -> int:
    from ragstep.bench.chat import render, run_chat_bench

    result = run_chat_bench(
        args.docs,
        args.questions,
        tokens=args.tokens,
        streams=args.streams,
        answer_len=args.answer_tokens,
        bench_dir=args.bench_dir,
        batch=args.batch,
        seed=args.seed,
        http=args.http,
        progress=_say(args),
    )
    return _bench_output(args, result, render)


def cmd_bench_coldstart(args: argparse.Namespace) -> int:
    if args.function == "chat":
        from ragstep.bench import coldstart_chat

        return _bench_output(args, coldstart_chat.run_chat_coldstart(args.runs), coldstart_chat.render)
    from ragstep.bench.coldstart import render, run_coldstart

    return _bench_output(args, run_coldstart(args.runs, xray=False if args.no_xray else None), render)


def cmd_bench_cli(args: argparse.Namespace) -> int:
    from ragstep.bench.cli import render, run_cli_bench

    result = run_cli_bench(
        args.docs,
        args.runs,
        query=args.query,
        seed=args.seed,
        vectors=args.vectors,
        reuse=args.reuse,
        bench_dir=args.bench_dir,
        progress=_say(args),
    )
    return _bench_output(args, result, render)


def cmd_bench_s3snapshot(args: argparse.Namespace) -> int:
    from ragstep.bench.s3snapshot_bench import render, run_s3snapshot

    result = run_s3snapshot(
        args.docs, args.queries, runs=args.runs, bench_dir=args.bench_dir, batch=args.batch, progress=_say(args)
    )
    return _bench_output(args, result, render)


def cmd_bench_vectors(args: argparse.Namespace) -> int:
    from ragstep.bench.vectors import render, run_vectors

    result = run_vectors(
        args.docs,
        args.queries,
        factor=args.rescore_factor,
        hnsw=not args.no_hnsw,
        bench_dir=args.bench_dir,
        seed=args.seed,
        progress=_say(args),
    )
    return _bench_output(args, result, render)


def cmd_bench_ingest(args: argparse.Namespace) -> int:
    from ragstep.bench.ingest_bench import render, run

    if args.end_to_end:
        from ragstep.bench import ingest_e2e

        corpus = Path(args.corpus) if args.corpus else None
        figures = ingest_e2e.run(
            small_files=args.small_files,
            large_mb=args.large_mb,
            corpus=corpus,
            corpus_limit=args.corpus_limit,
            vectors_later=args.vectors_later,
            engine_passages=args.engine_passages,
            progress=_say(args),
        )
        return _bench_output(args, figures, ingest_e2e.render)
    result = run(markdown_mb=args.markdown_mb, corpus=args.corpus, repeat=args.repeat, progress=_say(args))
    return _bench_output(args, result, render)


def cmd_bench_analysis(args: argparse.Namespace) -> int:
    from ragstep.bench.analysis import render, run_analysis_bench

    return _bench_output(args, run_analysis_bench(args.rows, args.repeat, progress=_say(args)), render)


def cmd_bench_viking(args: argparse.Namespace) -> int:
    from ragstep.bench.viking import render, run_viking_bench
    from ragstep.errors import InputError

    sources = {}
    for pair in args.source or []:
        name, sep, path = pair.partition("=")
        if not sep or not name or not Path(path).is_dir():
            raise InputError(f"--source expects NAME=FOLDER (an existing folder), got {pair!r}")
        sources[name] = Path(path)
    result = run_viking_bench(
        sources=sources or None,
        questions=args.questions,
        budget=args.budget,
        embedding_model=args.embedding_model,
        progress=_say(args),
    )
    return _bench_output(args, result, render)


def cmd_bench_mcp(args: argparse.Namespace) -> int:
    from ragstep.bench.mcp_bench import render, run_mcp

    return _bench_output(args, run_mcp(args.rounds), render)


def cmd_bench_ocr(args: argparse.Namespace) -> int:
    from ragstep.bench.ocr_bench import render, run_ocr

    return _bench_output(args, run_ocr(args.repeat), render)


def cmd_bench_state_size(args: argparse.Namespace) -> int:
    from ragstep.bench.state_size import SETS, render, run_state_size

    result = run_state_size(
        sets=tuple(args.set or SETS), questions=args.questions, bench_dir=args.bench_dir, progress=_say(args)
    )
    return _bench_output(args, result, render)


def cmd_bench_package(args: argparse.Namespace) -> int:
    from ragstep.bench.package import render, run_package

    return _bench_output(args, run_package(args.layer_dir, rebuild=args.rebuild), render)


def add_bench_arguments(bench: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """``ragstep bench quality|latency|chat|coldstart|cli|package|ingest`` (each prints a table, or JSON with
    ``--json``)."""
    bench_sub = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")

    p = bench_sub.add_parser("quality", help="nDCG@10 / Recall on a BEIR-layout set", parents=[common])
    p.add_argument("--set", required=True, dest="set_dir", metavar="DIR", help="corpus.jsonl, queries.jsonl, qrels.tsv")
    p.add_argument(
        "--vectors",
        default="emb",
        metavar="NAME",
        help="precomputed vectors: corpus.NAME.npy / queries.NAME.npy (emb = all-MiniLM-L6-v2, the default; "
        "e5 = multilingual-e5-small; none = keyword search only)",
    )
    p.add_argument(
        "--undeclared-scale",
        action="store_true",
        help="serve the vectors without their model's declared score scale, as a provider's model (openai:, "
        "bedrock:) is searched",
    )
    p.add_argument(
        "--runs", metavar="A,B", help="only these runs, comma-separated (all: bm25,dense,hybrid,...,default)"
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_quality)

    p = bench_sub.add_parser(
        "profiles", help="p50/p95 latency, nDCG@10 and Recall@10 of each profile on a BEIR set", parents=[common]
    )
    p.add_argument("--set", required=True, dest="set_dir", metavar="DIR", help="corpus.jsonl, queries.jsonl, qrels.tsv")
    p.add_argument(
        "--vectors", default="emb", metavar="NAME", help="precomputed vectors, as bench quality (emb; none = keyword)"
    )
    p.add_argument(
        "--profile", action="append", metavar="NAME", help="a profile to run (repeatable; quick, standard, deep)"
    )
    p.add_argument("--queries", type=positive_int, metavar="N", help="only the first N judged queries (all)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_profiles)

    p = bench_sub.add_parser(
        "answer",
        help="answered correctly, declined (source retrieved / unanswerable), citation precision, time per answer",
        parents=[common],
    )
    p.add_argument(
        "--set",
        required=True,
        dest="set_dir",
        metavar="DIR",
        help="a BEIR-layout set, optionally with answers.jsonl and unanswerable.txt (query ids the corpus does not "
        "answer, one a line)",
    )
    p.add_argument(
        "--questions", type=positive_int, metavar="N", help="only the first N answerable questions (all unanswerable)"
    )
    p.add_argument("--curve", action="store_true", help="also the answerer's trade-off curve over its threshold")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_answer)

    p = bench_sub.add_parser("latency", help="indexing and query latency at scale, against peers", parents=[common])
    p.add_argument("--docs", type=positive_int, default=100_000, metavar="N", help="chunks to index (100000)")
    p.add_argument("--queries", type=positive_int, default=200, metavar="Q", help="timed queries (200)")
    p.add_argument("--bench-dir", metavar="DIR", help="benchmark sets folder (default ../shared/bench)")
    p.add_argument("--batch", type=positive_int, default=1000, metavar="N", help="chunks per replace_knowledge")
    p.add_argument(
        "--rank-bm25-queries", type=positive_int, default=30, metavar="N", help="queries for the slow rank_bm25 peer"
    )
    p.add_argument(
        "--peers",
        type=_peer_list,
        default=("rank_bm25", "bm25s"),
        metavar="LIST",
        help="peers to compare with, comma-separated: rank_bm25,bm25s (the default) or none (at a million chunks "
        "they need the whole corpus in memory)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random vectors and shuffles")
    p.add_argument(
        "--vectors",
        choices=("random", "minilm", "e5"),
        default="random",
        help="chunk and query vectors: seeded random (the default) or msmarco-5k's MiniLM or e5 embeddings, tiled",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_latency)

    p = bench_sub.add_parser(
        "chat", help="time to the LLM request and token relay rate, against an instant chat model", parents=[common]
    )
    p.add_argument("--docs", type=positive_int, default=100_000, metavar="N", help="chunks to index (100000)")
    p.add_argument("--questions", type=positive_int, default=100, metavar="Q", help="timed rag_stream questions (100)")
    p.add_argument("--tokens", type=positive_int, default=20_000, metavar="N", help="tokens per relayed answer (20000)")
    p.add_argument("--streams", type=positive_int, default=5, metavar="N", help="relayed answers, median shown (5)")
    p.add_argument("--answer-tokens", type=positive_int, default=16, metavar="N", help="tokens per timed answer (16)")
    p.add_argument(
        "--http",
        action="store_true",
        help="also time the first token over POST /v1/chat/completions (uvicorn on 127.0.0.1) and through LangChain's "
        "BM25 + vector EnsembleRetriever chain (needs the serve and bench extras)",
    )
    p.add_argument("--bench-dir", metavar="DIR", help="benchmark sets folder (default ../shared/bench)")
    p.add_argument("--batch", type=positive_int, default=1000, metavar="N", help="chunks per replace_knowledge")
    p.add_argument("--seed", type=int, default=0, help="seed of the random vectors and shuffles")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_chat)

    p = bench_sub.add_parser(
        "coldstart", help="fresh-process cold start of the search or the streaming chat function", parents=[common]
    )
    p.add_argument("--runs", type=positive_int, default=5, metavar="N", help="fresh processes per query (5)")
    p.add_argument(
        "--function",
        choices=("search", "chat"),
        default="search",
        help="search: the chunk_search function (default); chat: the streaming chat function to its first token",
    )
    p.add_argument(
        "--no-xray",
        action="store_true",
        help="skip the run with X-Ray tracing active (made by default when aws-xray-sdk is installed)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_coldstart)

    from ragstep.bench import cli as cli_bench  # its constants; its module loads nothing heavy

    p = bench_sub.add_parser(
        "cli", help="fresh ragstep processes (search, --help, kb list) against numpy and pydantic", parents=[common]
    )
    p.add_argument(
        "--docs", type=positive_int, default=100_000, metavar="N", help="chunks in the knowledge base (100000)"
    )
    p.add_argument("--runs", type=positive_int, default=15, metavar="N", help="interleaved rounds (15)")
    p.add_argument("--query", default=cli_bench.QUERY, help=f"what every timed search asks ({cli_bench.QUERY!r})")
    p.add_argument("--seed", type=int, default=0, help="seed of the corpus' shuffles and random vectors")
    p.add_argument(
        "--vectors",
        choices=cli_bench.VECTORS,
        default="e5",
        help="the chunks' vectors: msmarco-5k's e5 embeddings tiled with noise (the default) or seeded random ones",
    )
    p.add_argument(
        "--reuse",
        metavar="DIR",
        help="build the knowledge base in DIR once and read it from there on later runs (default: a temporary folder)",
    )
    p.add_argument("--bench-dir", metavar="DIR", help="benchmark sets folder (default ../shared/bench)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_cli)

    p = bench_sub.add_parser(
        "s3snapshot", help="S3-snapshot index: cold load from S3 (moto) and warm search vs local", parents=[common]
    )
    p.add_argument("--docs", type=positive_int, default=100_000, metavar="N", help="chunks to index (100000)")
    p.add_argument("--queries", type=positive_int, default=200, metavar="Q", help="timed warm queries (200)")
    p.add_argument("--runs", type=positive_int, default=3, metavar="N", help="fresh processes for the cold load (3)")
    p.add_argument("--bench-dir", metavar="DIR", help="benchmark sets folder (default ../shared/bench)")
    p.add_argument("--batch", type=positive_int, default=1000, metavar="N", help="chunks per replace_knowledge")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_s3snapshot)

    p = bench_sub.add_parser(
        "vectors", help="int8 + rescoring and float32 kNN against numpy and faiss (flat, HNSW)", parents=[common]
    )
    p.add_argument("--docs", type=positive_int, default=100_000, metavar="N", help="vectors to index (100000)")
    p.add_argument("--queries", type=positive_int, default=200, metavar="Q", help="timed queries (200)")
    p.add_argument(
        "--rescore-factor", type=positive_int, default=4, metavar="F", help="int8 candidates rescored: F x k (4)"
    )
    p.add_argument("--no-hnsw", action="store_true", help="skip the faiss HNSW peer (its build takes the longest)")
    p.add_argument("--bench-dir", metavar="DIR", help="benchmark sets folder (default ../shared/bench)")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise added to the tiled vectors")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_vectors)

    p = bench_sub.add_parser("ingest", help="chunking MB/s and ingestion chunks/s, no embedding", parents=[common])
    p.add_argument(
        "--markdown-mb", type=float, default=5.0, metavar="MB", help="generated Markdown to measure (5; 0 skips it)"
    )
    p.add_argument("--corpus", metavar="PATH", help="also a BEIR corpus.jsonl (or its folder), e.g. msmarco-5k")
    p.add_argument("--repeat", type=positive_int, default=3, metavar="N", help="runs per figure, medians shown (3)")
    p.add_argument(
        "--end-to-end",
        action="store_true",
        help="`ragstep ingest` in a child process, keyword-only and with the default model: seconds, peak RSS",
    )
    p.add_argument("--small-files", type=int, default=1000, metavar="N", help="end to end: small Markdown files")
    p.add_argument("--large-mb", type=float, default=20.0, metavar="MB", help="end to end: one text file (0 skips)")
    p.add_argument("--corpus-limit", type=positive_int, metavar="N", help="end to end: first N documents of --corpus")
    p.add_argument("--engine-passages", type=int, default=32, metavar="N", help="end to end: old vs new engine (0: no)")
    p.add_argument(
        "--vectors-later",
        action="store_true",
        help="end to end: time the keyword phase only with the model (`ingest --vectors-later`), not the vectors",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_ingest)

    p = bench_sub.add_parser(
        "analysis", help="latency the data_analysis stage adds for a large CSV (load + query)", parents=[common]
    )
    p.add_argument("--rows", type=positive_int, default=100_000, metavar="N", help="rows of the CSV (100000)")
    p.add_argument("--repeat", type=positive_int, default=5, metavar="N", help="runs, medians shown (5)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_analysis)

    p = bench_sub.add_parser(
        "viking", help="hierarchical find against flat hybrid search on a documentation tree", parents=[common]
    )
    p.add_argument("--questions", type=positive_int, default=150, metavar="N", help="questions asked (150)")
    p.add_argument("--budget", type=positive_int, default=2000, metavar="TOKENS", help="layered context (2000)")
    p.add_argument("--embedding-model", default="none", help="the knowledge base's model (none: BM25 only)")
    p.add_argument(
        "--source",
        action="append",
        metavar="NAME=FOLDER",
        help="a documentation tree to use, under NAME/ (repeatable; default npm's and CMake's installed docs)",
    )
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_viking)

    p = bench_sub.add_parser("mcp", help="what a search tool call over MCP adds to the HTTP route", parents=[common])
    p.add_argument("--rounds", type=positive_int, default=30, metavar="N", help="paired calls (30)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_mcp)

    p = bench_sub.add_parser("ocr", help="OCR pages/s and character accuracy, English and Chinese", parents=[common])
    p.add_argument("--repeat", type=positive_int, default=1, metavar="N", help="runs, the fastest shown (1)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_ocr)

    p = bench_sub.add_parser(
        "state-size",
        help="the pipeline state's bytes after each step, expanded and in the wire form, against the claim check",
        parents=[common],
    )
    p.add_argument(
        "--set",
        action="append",
        choices=("demo", "msmarco-1k", "cmrc2018-1k"),
        help="a knowledge base to measure on (repeatable; default all three)",
    )
    p.add_argument("--questions", type=positive_int, default=30, metavar="N", help="questions per corpus set (30)")
    p.add_argument("--bench-dir", metavar="DIR", help="benchmark sets folder (default ../shared/bench)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_state_size)

    p = bench_sub.add_parser("package", help="unzipped size of the Lambda layers", parents=[common])
    p.add_argument("--layer-dir", metavar="DIR", help="where the layers are built (default layers/build)")
    p.add_argument("--rebuild", action="store_true", help="build the layers again (needs PyPI, about a minute)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=cmd_bench_package)
