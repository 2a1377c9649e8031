"""``ragstep demo``: ingest the bundled bilingual sample (English and Chinese docs, a FAQ) and run a few searches."""

from __future__ import annotations

import argparse
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
    if ctx.default_embedding_model() == "none":
        print("  no embedding model configured (RAGSTEP_EMBEDDER): searches run BM25 only; the trace says so")
    for query, kb_name in DEMO_QUERIES:
        print()
        state = knowledge_search(
            SearchRequest(query=query, knowledge_base_ids=[kb_name], overrides={"rerank_top_k": 3}), ctx
        )
        print(render_results(state))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(context_of(args))
