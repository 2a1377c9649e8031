"""``ragstep demo``: ingest the bundled bilingual sample (English and Chinese docs, a FAQ), run a few searches (one
that only the meaning can answer: none of its words is in the document it finds), then ask two questions (one
English, one Chinese) with the ``rag_stream`` pipeline: each answer streams as ``ragstep chat`` shows it, followed by
its sources.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from importlib import resources

from ragstep.app.ingest import expand_paths, ingest_file
from ragstep.app.knowledge_bases import create_knowledge_base
from ragstep.app.search import knowledge_search
from ragstep.context import Context
from ragstep.entry.cli.common import context_of
from ragstep.entry.cli.render import render_results
from ragstep.models import KnowledgeBase, KnowledgeBaseType, SearchRequest

DEMO_QUERIES = (
    ("How are keyword and vector results fused?", "demo-docs"),
    ("中文分词如何处理简称？", "demo-docs"),
    ("Lambda 冷启动 词典加载", "demo-docs"),
    ("Can I run ragstep offline on my laptop?", "demo-faq"),
    ("ragstep 能处理中文问题吗", "demo-faq"),
)
#: Shares no word with the passage that answers it ("an idle deployment costs almost nothing"): the keyword retriever
#: finds nothing, the embedding model finds it by meaning.
MEANING_QUERY = ("Is it cheap when nobody is around?", "demo-docs")
#: Asked after the searches, each in a new chat session (``ragstep sessions list`` shows them afterwards).
DEMO_QUESTIONS = (
    ("How are keyword and vector results fused?", "demo-docs"),
    ("中文分词如何处理简称？", "demo-docs"),
)
DEMO_PIPELINE = "rag_stream"


def _ensure_kb(ctx: Context, name: str, kb_type: KnowledgeBaseType) -> KnowledgeBase:
    """The demo's knowledge base ``name``: the one a previous run made, or a new one (the demo is idempotent)."""
    return ctx.catalog.get_kb(name) or create_knowledge_base(ctx, name, kb_type)


def run_demo(ctx: Context) -> int:
    print(f"ragstep demo: data dir {ctx.data_dir.resolve()}")
    root = resources.files("ragstep").joinpath("data", "demo")
    with resources.as_file(root) as folder:
        for kb_name, kb_type, sub in (
            ("demo-docs", KnowledgeBaseType.DOCUMENT, "docs"),
            ("demo-faq", KnowledgeBaseType.FAQ, "faq"),
        ):
            kb = _ensure_kb(ctx, kb_name, kb_type)
            suffixes = (".json",) if kb_type == KnowledgeBaseType.FAQ else (".md",)
            for path in expand_paths([folder / sub], suffixes):
                result = ingest_file(path, kb, ctx)
                note = f" ({result.error})" if result.error else ""
                print(f"  {kb_name}: {path.name}: {result.status}, {result.chunks} chunks{note}")
    demo_kbs = [ctx.catalog.get_kb(name) for name in ("demo-docs", "demo-faq")]
    models = {found.embedding_model for found in demo_kbs if found}
    if models == {"none"}:
        print(
            "  the demo knowledge bases search by keywords only (embedding model none: RAGSTEP_EMBEDDER, or an earlier"
            " demo run, chose it; knowledge bases keep their model): `ragstep kb delete demo-docs` and `ragstep kb"
            " delete demo-faq`, then run the demo again to search by meaning too"
        )
    else:
        print(f"  embedding model: {', '.join(sorted(models))} (in this process; no service)")
    # A keyword-only knowledge base cannot answer the meaning query (it shares no word with its answer).
    by_meaning: tuple[tuple[str, str], ...] = () if models == {"none"} else (MEANING_QUERY,)
    for query, kb_name in (*DEMO_QUERIES, *by_meaning):
        if (query, kb_name) == MEANING_QUERY:
            print("\nby meaning (no word of this question is in the passage that answers it):")
        print()
        state = knowledge_search(
            SearchRequest(query=query, knowledge_base_ids=[kb_name], overrides={"rerank_top_k": 3}), ctx
        )
        print(render_results(state))
    return ask_demo_questions(ctx)


def ask_demo_questions(ctx: Context) -> int:
    """Stream the answers to :data:`DEMO_QUESTIONS` with the configured chat model (the extractive answerer unless
    RAGSTEP_CHAT_PROVIDER says otherwise), each followed by its sources, as ``ragstep chat`` prints them."""
    # The chat command's own streaming and report, so the demo shows exactly what `ragstep chat` would.
    from ragstep.entry.cli.chat import ask, report

    for question, kb_name in DEMO_QUESTIONS:
        args = argparse.Namespace(kb=[kb_name], pipeline=DEMO_PIPELINE, set=None, trace=False)
        print(f"\nchat ({DEMO_PIPELINE}, {kb_name}): {question}")
        state = ask(args, ctx, question, None, sys.stdout)
        if state is None:  # Ctrl-C while it streamed: the part shown is kept in its session
            return 130
        report(args, state, sys.stdout)
    return 0


def console_hint(args: argparse.Namespace) -> str:
    """How to open the web console on the demo's data (README "Web console")."""
    data_dir = getattr(args, "data_dir", None)
    serve = f"ragstep --data-dir {shlex.quote(str(data_dir))} serve" if data_dir else "ragstep serve"
    return f"\nOpen the web console: run `{serve}` and visit http://127.0.0.1:8000/"


def cmd_demo(args: argparse.Namespace) -> int:
    status = run_demo(context_of(args))
    if status == 0:
        print(console_hint(args))
    return status
