"""OpenViking-style retrieval's use cases: keeping a knowledge base's hierarchy and layers in step after an ingest,
and ``find`` / ``search`` over it.

**Where the layers are made, and why here:** an app-level step after indexing (:func:`refresh_hierarchy`), not an
ingest stage. A folder's layers summarise its children, so they can only be written once every document of the run is
indexed, and a stage sees one file; the ingest pipeline keeps its shape (parse -> chunk -> embed -> index). The step
is idempotent: a node is regenerated only when what it was made from changed (a document's content hash, a folder's
children's abstracts), deepest first, so a re-ingest of one file rewrites that document and the folders above it.
The tree is written last: a run that dies half-way leaves the old tree, and the next run redoes what is missing.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ragstep.context import Context
from ragstep.errors import InputError, RagstepError
from ragstep.models import Chunk, ChunkType, KnowledgeBase, TraceEvent, check_query
from ragstep.models.base import check_markup
from ragstep.models.viking import FindResult, Hierarchy, HierarchyNode, MatchedContext, VikingState
from ragstep.ports import ChatMessage, ChatOptions
from ragstep.retrieval.hierarchy import (
    DocumentEntry,
    bottom_up,
    build_tree,
    extractive_directory_layers,
    extractive_document_layers,
    root_uri,
)
from ragstep.retrieval.intent import json_values
from ragstep.stages.viking import hierarchical_search, intent_analysis, layered_context
from ragstep.stages.viking.tree import (
    MEMORY_KB,
    check_user,
    derived_paths,
    hierarchy_key,
    layer_knowledge_id,
    relative_path,
    searchable,
    stored_hierarchy,
)

STEP = "viking_layers"
#: How much of a document the layer writers read (the model's prompt, the extractive outline).
MAX_DOCUMENT_CHARS = 12_000

LAYER_PROMPT = """Summarise the {kind} below for a retrieval index. Answer with one JSON object: {{"abstract": "one \
or two sentences saying what it is about", "overview": "at most {tokens} tokens: its main topics and what a reader \
finds in it"}}."""


@dataclass
class RefreshReport:
    nodes: int = 0
    regenerated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    events: list[TraceEvent] = field(default_factory=list)


# -- keeping the hierarchy in step ---------------------------------------------------------------------------------


def refresh_hierarchy(
    kb: KnowledgeBase, ctx: Context, roots: Iterable[str | Path] = (), placed: Mapping[str, str] | None = None
) -> RefreshReport:
    """Rebuild ``kb``'s tree from its documents and regenerate the layers of what changed, bottom-up.

    ``roots``: the folders (or files) just ingested: a document under one of them is placed by its path relative to
    it (``docs/guide/install.md`` ingested as ``docs/`` is ``guide/install.md``). Documents ingested earlier keep
    the place they had; documents never placed are placed relative to their common folder. ``placed``: paths of
    new documents by knowledge id, for documents with no folder of their own (memories).
    """
    started = time.perf_counter()
    previous = stored_hierarchy(kb, ctx)
    old_nodes = previous.nodes if previous else {}
    old_paths = {n.knowledge_id: n.path for n in old_nodes.values() if n.knowledge_id}
    folders = [p.resolve() if p.is_dir() else p.resolve().parent for p in map(Path, roots)]
    items = [i for i in ctx.catalog.list_knowledge(kb.id) if searchable(i)]
    fallback = derived_paths(items)
    entries = []
    for item in items:
        # A placed document stays where it is (ingesting a sub-folder again must not move it); a new one goes by
        # its path under the folder named, else under its documents' common folder.
        path = (
            old_paths.get(item.id) or (placed or {}).get(item.id) or relative_path(item, folders) or fallback[item.id]
        )
        entries.append(DocumentEntry(path, item.id, item.title or item.filename))
    nodes = build_tree(kb.name, entries, old_nodes)
    hashes = {i.id: i.content_hash for i in items}
    report = RefreshReport(nodes=len(nodes))
    writer = _writer(ctx)
    for uri in bottom_up(nodes):
        node = nodes[uri]
        if node.is_leaf:
            signature = f"{writer}:{hashes.get(node.knowledge_id, '')}"
        else:
            kids = "\n".join(f"{c}\t{nodes[c].abstract}" for c in node.children)
            signature = f"{writer}:{hashlib.sha256(kids.encode()).hexdigest()}"
        if signature == node.signature and node.abstract:
            continue
        abstract, overview, by, event = _layers(node, nodes, ctx)
        if event is not None:
            report.events.append(event)
        nodes[uri] = node.model_copy(
            update={"abstract": abstract, "overview": overview, "signature": signature, "layers_by": by}
        )
        _index_layers(kb, nodes[uri], ctx)
        report.regenerated.append(uri)
    gone = [u for u in old_nodes if u not in nodes]
    if gone:
        ctx.index.delete_knowledge([layer_knowledge_id(kb.id, u) for u in gone])
        report.removed = gone
    tree = Hierarchy(knowledge_base_id=kb.id, root=root_uri(kb.name), nodes=nodes)
    ctx.blobs.put(hierarchy_key(kb.id), tree.model_dump_json().encode(), "application/json")
    report.events.append(
        TraceEvent(
            stage=STEP,
            duration_ms=(time.perf_counter() - started) * 1000,
            counts={"nodes": len(nodes), "regenerated": len(report.regenerated), "removed": len(gone)},
            detail={"writer": writer},
        )
    )
    return report


#: One refresh of a knowledge base's tree at a time in this process: two jobs finishing together would otherwise
#: each write a tree built before the other's document was in the catalog (the later write losing one document).
_REFRESHING: dict[str, threading.Lock] = {}
_REFRESHING_GUARD = threading.Lock()


def refresh_after_change(kb_id: str, ctx: Context) -> str | None:
    """Keep a ``--layers`` knowledge base's tree and L0/L1 in step after a document changed outside ``ragstep
    ingest`` (an HTTP upload's job, an S3 upload's ingestion, a delete, an enable/disable); a no-op for other
    knowledge bases. Returns an error line when the refresh failed (the document change itself stands: the next
    refresh redoes what is missing), else None."""
    kb = ctx.catalog.get_kb(kb_id)
    if kb is None or not kb.layers:
        return None
    with _REFRESHING_GUARD:
        lock = _REFRESHING.setdefault(f"{ctx.tenant_id}/{kb.id}", threading.Lock())
    try:
        with lock:
            refresh_hierarchy(kb, ctx)
    except RagstepError as exc:
        return f"the knowledge base's layers were not refreshed: {exc.message}"
    return None


def _writer(ctx: Context) -> str:
    model = ctx.chat_model
    return model.name if model.generative else "extractive"


def _document_text(node: HierarchyNode, ctx: Context) -> str:
    chunks = ctx.index.knowledge_chunks(node.knowledge_id, 200)
    text = "\n".join(c.content for c in chunks if c.chunk_type == ChunkType.TEXT)
    return text[:MAX_DOCUMENT_CHARS]


def _layers(
    node: HierarchyNode, nodes: dict[str, HierarchyNode], ctx: Context
) -> tuple[str, str, str, TraceEvent | None]:
    """(abstract, overview, who wrote them, a trace row when the model could not and the extractive layers stand in)."""
    s = ctx.settings
    children = [nodes[c] for c in node.children]
    if node.is_leaf:
        text = _document_text(node, ctx)
        extractive = extractive_document_layers(
            node.title, text, abstract_tokens=s.viking_abstract_tokens, overview_tokens=s.viking_overview_tokens
        )
        material = f"Document {node.path}:\n{text}"
    else:
        extractive = extractive_directory_layers(
            node.title, children, abstract_tokens=s.viking_abstract_tokens, overview_tokens=s.viking_overview_tokens
        )
        listing = "\n".join(f"- {c.path or c.title}: {c.abstract}" for c in children)
        material = f"Folder {node.path or node.title}, its contents:\n{listing}"
    model = ctx.chat_model
    if not model.generative:
        return extractive[0], extractive[1], "extractive", None
    prompt = LAYER_PROMPT.format(kind="document" if node.is_leaf else "folder", tokens=s.viking_overview_tokens)
    try:
        answer = model.complete(
            [ChatMessage("system", prompt), ChatMessage("user", material)],
            ChatOptions(temperature=0.0, max_tokens=s.viking_overview_tokens + 200, json_object=True),
        ).content
    except RagstepError as exc:
        return *extractive, "extractive", _fallback(node, f"the chat model failed: {exc.message}")
    for value in json_values(answer):
        if isinstance(value, dict) and str(value.get("abstract", "")).strip():
            overview = str(value.get("overview", "")).strip() or extractive[1]
            return str(value["abstract"]).strip(), overview, model.name, None
    return *extractive, "extractive", _fallback(node, "the chat model's answer held no abstract")


def _fallback(node: HierarchyNode, reason: str) -> TraceEvent:
    return TraceEvent(stage=STEP, action="fallback", reason=f"{node.uri}: {reason}; extractive layers instead")


def _index_layers(kb: KnowledgeBase, node: HierarchyNode, ctx: Context) -> None:
    """L0 and L1 of one node as two chunks (one index transaction), embedded with the knowledge base's model."""
    kid = layer_knowledge_id(kb.id, node.uri)
    meta = {"viking_uri": node.uri, "viking_kind": node.kind, "document_id": node.knowledge_id}
    chunks = [
        Chunk(
            id=f"{kid}-{kind.value}",
            knowledge_id=kid,
            knowledge_base_id=kb.id,
            content=text,
            chunk_index=i,
            chunk_type=kind,
            knowledge_title=node.title,
            knowledge_filename=node.path,
            # The layer's own words only (as OpenViking embeds L0/L1): a file name in the text would outweigh the
            # sections of every document whose name shares a word with the question.
            metadata=meta,
        )
        for i, (kind, text) in enumerate(((ChunkType.ABSTRACT, node.abstract), (ChunkType.OVERVIEW, node.overview)))
        if text
    ]
    embedder = ctx.embedder(kb.embedding_model)
    vectors = None
    if embedder is not None and chunks:
        vectors = embedder.embed([c.embed_text or c.content for c in chunks])
    ctx.index.replace_knowledge(kid, chunks, vectors, kb.embedding_model if vectors is not None else None)


# -- find and search -----------------------------------------------------------------------------------------------


def find(
    query: str,
    kb_refs: list[str],
    ctx: Context,
    *,
    limit: int = 10,
    budget: int | None = None,
    analyse: bool = False,
    session_id: str | None = None,
    user: str | None = None,
) -> FindResult:
    """``find`` (one query as given, no model) or, with ``analyse``, ``search`` (typed queries from the intent
    analyser, the session read when given). ``budget``: also lay the matches out as layered context."""
    if not kb_refs:
        raise InputError("name at least one knowledge base (--kb NAME)")
    try:
        query = check_markup(check_query(query))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not 1 <= limit <= 200:
        raise InputError(f"limit must be between 1 and 200, got {limit}")
    if budget is not None and not 100 <= budget <= 200_000:
        raise InputError(f"budget must be between 100 and 200000 tokens, got {budget}")
    kbs = [ctx.require_kb(ref) for ref in kb_refs]
    if any(kb.name == MEMORY_KB for kb in kbs):
        raise InputError(
            f"{MEMORY_KB} holds the users' memories: search them with memory queries "
            "(ragstep search --hierarchical --user NAME), not as a knowledge base"
        )
    kb_ids = list(dict.fromkeys(kb.id for kb in kbs))
    state = VikingState(
        tenant_id=ctx.tenant_id,
        query=query,
        knowledge_base_ids=kb_ids,
        session_id=session_id,
        user=check_user(user),
        analyse=analyse,
        limit=limit,
        budget=budget,
    )
    for stage in (intent_analysis, hierarchical_search, layered_context):
        state = stage.run(state, ctx)
    return result_of(state)


def search(
    query: str,
    kb_refs: list[str],
    ctx: Context,
    *,
    limit: int = 10,
    budget: int | None = None,
    session_id: str | None = None,
    user: str | None = None,
) -> FindResult:
    """``search``: :func:`find` after the intent analysis (0-5 typed queries; 0 = nothing retrieved); memory queries
    search ``user``'s memories."""
    return find(query, kb_refs, ctx, limit=limit, budget=budget, analyse=True, session_id=session_id, user=user)


def result_of(state: VikingState) -> FindResult:
    groups: dict[str, list[MatchedContext]] = {"memory": [], "resource": [], "skill": []}
    for m in state.matches:
        groups[m.context_type].append(m)
    return FindResult(
        query=state.query,
        memories=groups["memory"],
        resources=groups["resource"],
        skills=groups["skill"],
        query_plan=state.plan if state.analyse else None,
        layered=state.layered,
        trace=state.trace,
    )
