"""``ragstep kb create|list|show|upgrade-tokens``: thin shells over :mod:`ragstep.app.knowledge_bases` (and the
index's :class:`~ragstep.index_capabilities.TokenUpgrade`)."""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

from ragstep.entry.cli.common import context_of, print_json, require_data
from ragstep.entry.cli.console import clip, table
from ragstep.entry.cli.plain import plain_catalog

if TYPE_CHECKING:  # `kb list` reads the catalog alone: the use cases (and the ingest stages they use) load on demand
    from ragstep.app.knowledge_bases import KnowledgeBaseContents
    from ragstep.models import Knowledge, KnowledgeBase

#: ``KnowledgeBase``'s fields in order (tests/test_cli_quick_list.py holds them to the model): a stored row with
#: exactly these keys is what ``model_dump(mode="json")`` of its model gives, so ``kb list`` prints it as it is.
KB_FIELDS = ("id", "name", "type", "embedding_model", "created_at", "description", "graph", "layers")


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
    require_data(args)
    kbs = plain_listing(args)
    if kbs is None:
        ctx = context_of(args)
        models = ctx.catalog.list_kbs()
        counts = {kb.id: len(ctx.catalog.list_knowledge(kb.id)) for kb in models}
        kbs = [{**kb.model_dump(mode="json"), "documents": counts[kb.id]} for kb in models]
    if args.json:
        print_json(kbs)
        return 0
    if not kbs:
        print("no knowledge bases yet; create one with `ragstep kb create NAME`")
        return 0
    rows = [(kb["name"], kb["type"], kb["embedding_model"], kb["documents"], kb["id"]) for kb in kbs]
    print(table(("name", "type", "embedding", "documents", "id"), rows))
    return 0


def plain_listing(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The knowledge bases as ``kb list --json`` prints them, read without pydantic (importing it and building the
    settings' and the catalog's models were most of the command's time: ``ragstep bench cli``).

    Only where that gives exactly what :class:`~ragstep.settings.Settings` and the catalog's models would: the
    embedded (SQLite) catalog, no ``RAGSTEP_*`` variable that building the settings could reject or act on (a
    secret reference is resolved, a number checked ...), every row holding exactly the model's fields. None
    otherwise: the caller takes the ordinary path, with its validation and its errors."""
    catalog = plain_catalog(getattr(args, "data_dir", None), os.environ)
    if catalog is None:
        return None
    docs = [json.loads(doc) for doc in catalog.kb_documents()]
    if any(
        not isinstance(doc, dict) or tuple(doc) != KB_FIELDS or type(doc["created_at"]) is not float for doc in docs
    ):
        return None  # written by an older or newer model, or by hand: the model fills in, drops or converts fields
    counts = catalog.knowledge_counts()
    return [{**doc, "documents": counts.get(doc["id"], 0)} for doc in docs]


def cmd_kb_show(args: argparse.Namespace) -> int:
    from ragstep.app.knowledge_bases import show_knowledge_base

    require_data(args)
    contents = show_knowledge_base(context_of(args), args.name)
    if args.json:
        shown = contents.model_dump(mode="json")
        for document in shown["documents"]:  # as ingest's rows: the note is the failure's message when there is one
            document["note"] = _note(document["error"], document["note"])
        print_json(shown)
    else:
        print(render_contents(contents))
    return 0


def _where(item: Knowledge) -> str:
    """A document's file name, or its address when it came from the web (a page's name alone says little)."""
    if item.source_uri.startswith(("http://", "https://")):
        return clip(item.source_uri, 60)
    return clip(item.filename or item.title or item.source_uri, 32)


def _note(error: str, note: str) -> str:
    """A document's note as ``ragstep ingest`` words it: its failure's message, else how its file was read."""
    return error or note


def render_contents(contents: KnowledgeBaseContents) -> str:
    kb = contents.knowledge_base
    lines = [f"knowledge base {describe(kb)}"]
    if not contents.documents:
        lines.append(f"no documents yet; add some with `ragstep ingest PATH --kb {kb.name}`")
        return "\n".join(lines)
    rows = [
        (
            item.id,
            _where(item),
            item.chunk_count,
            item.tag_id or "-",
            "vectors pending" if item.vectors_pending else item.status,  # keyword-searchable, embedding to come
            clip(_note(item.error, item.note), 40),
        )
        for item in contents.documents
    ]
    # "note", as ``ragstep ingest`` calls it (``--json`` keeps ``error`` and adds ``note``).
    lines.append(table(("id", "file", "chunks", "tag", "status", "note"), rows))
    lines.append(f"{len(contents.documents)} documents, {contents.chunks} chunks")
    return "\n".join(lines)


def cmd_kb_upgrade_tokens(args: argparse.Namespace) -> int:
    """``ragstep kb upgrade-tokens KB``: fold the keyword tokens of the documents indexed before accent folding, in
    place on an OpenSearch domain (:mod:`ragstep.adapters.index.opensearch.tokens`), as a new generation on the
    S3-snapshot index (whose containers otherwise each fold them as they load it). The local index does it itself
    when it opens, so there it only says so."""
    from ragstep.errors import InputError
    from ragstep.index_capabilities import token_upgrade
    from ragstep.retrieval.text import TOKENIZER_VERSION

    require_data(args)
    ctx = context_of(args)
    kb = ctx.require_kb(args.name)
    upgrade = token_upgrade(ctx.index)
    if upgrade is None:
        if ctx.settings.index_backend == "opensearch":  # a Serverless collection: no update in place
            raise InputError(
                "OpenSearch Serverless cannot update a document in place: ingest the knowledge base's documents "
                "again to give them folded keyword tokens"
            )
        read, upgraded = None, 0
    else:
        read, upgraded = upgrade.upgrade_tokens(kb.id)
    if args.json:
        print_json({"knowledge_base": kb.name, "tokenizer": TOKENIZER_VERSION, "chunks": read, "upgraded": upgraded})
    elif upgrade is None:
        print(f"nothing to do: the {ctx.settings.index_backend} index folds stored tokens itself when it opens")
    else:
        print(f"{upgraded} of {read} chunks of {kb.name} given the keyword tokens of tokenizer {TOKENIZER_VERSION}")
    return 0
