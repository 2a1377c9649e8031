"""``ragstep kb create|list|show``: thin shells over :mod:`ragstep.app.knowledge_bases`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ragstep.entry.cli.common import context_of, print_json
from ragstep.entry.cli.console import clip, table

if TYPE_CHECKING:  # `kb list` reads the catalog alone: the use cases (and the ingest stages they use) load on demand
    from ragstep.app.knowledge_bases import KnowledgeBaseContents
    from ragstep.models import KnowledgeBase


def describe(kb: KnowledgeBase) -> str:
    graph = ", graph" if kb.graph else ""
    layers = ", layers" if kb.layers else ""
    return f"{kb.name} ({kb.type}, embedding: {kb.embedding_model}{graph}{layers}, id {kb.id})"


def cmd_kb_create(args: argparse.Namespace) -> int:
    from ragstep.app.knowledge_bases import create_knowledge_base

    ctx = context_of(args)
    graph = getattr(args, "graph", False)
    layers = getattr(args, "layers", False)
    kb = create_knowledge_base(ctx, args.name, args.type, args.embedding_model, graph=graph, layers=layers)
    print(f"created knowledge base {describe(kb)}")
    if graph and not ctx.chat_model.generative:
        print("note: the graph needs a chat model (RAGSTEP_CHAT_PROVIDER); the extractive answerer skips it")
    return 0


def cmd_kb_list(args: argparse.Namespace) -> int:
    ctx = context_of(args)
    kbs = ctx.catalog.list_kbs()
    counts = {kb.id: len(ctx.catalog.list_knowledge(kb.id)) for kb in kbs}
    if args.json:
        print_json([{**kb.model_dump(mode="json"), "documents": counts[kb.id]} for kb in kbs])
        return 0
    if not kbs:
        print("no knowledge bases yet; create one with `ragstep kb create NAME`")
        return 0
    rows = [(kb.name, kb.type, kb.embedding_model, counts[kb.id], kb.id) for kb in kbs]
    print(table(("name", "type", "embedding", "documents", "id"), rows))
    return 0


def cmd_kb_show(args: argparse.Namespace) -> int:
    from ragstep.app.knowledge_bases import show_knowledge_base

    contents = show_knowledge_base(context_of(args), args.name)
    if args.json:
        print_json(contents.model_dump(mode="json"))
    else:
        print(render_contents(contents))
    return 0


def render_contents(contents: KnowledgeBaseContents) -> str:
    kb = contents.knowledge_base
    lines = [f"knowledge base {describe(kb)}"]
    if not contents.documents:
        lines.append(f"no documents yet; add some with `ragstep ingest PATH --kb {kb.name}`")
        return "\n".join(lines)
    rows = [
        (
            item.id,
            clip(item.filename or item.title or item.source_uri, 32),
            item.chunk_count,
            item.tag_id or "-",
            item.status,
            clip(item.error, 40),
        )
        for item in contents.documents
    ]
    lines.append(table(("id", "file", "chunks", "tag", "status", "error"), rows))
    lines.append(f"{len(contents.documents)} documents, {contents.chunks} chunks")
    return "\n".join(lines)
