"""``hierarchical_search``: each typed query of the plan, concurrently, through the knowledge bases' trees.

A node's own score comes from one hybrid search (BM25 + vectors, min-max fused) over a candidate pool of the
knowledge bases: a folder scores by its L0/L1 chunks, a document by the best of its L0/L1 and text chunks. Nodes the
pool missed score 0 of their own and live on their parent's score only. The walk itself is
:func:`ragstep.retrieval.hierarchy.explore`. The query's context type picks its roots (:func:`scope_of`): resources
everything but the ``skills/`` folders, skills those folders, memories the user's folder of the memory knowledge
base; a ``skip`` row says when nothing of that type is stored yet.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from ragstep.errors import RagstepError
from ragstep.models import ChunkType, KnowledgeBase, TraceEvent
from ragstep.models.viking import (
    Hierarchy,
    HierarchyNode,
    MatchedContext,
    RelatedContext,
    TypedQuery,
    TypedQueryOutcome,
    VikingState,
)
from ragstep.ports import RerankCandidate, SearchFilter
from ragstep.retrieval.fusion import fuse_minmax
from ragstep.retrieval.hierarchy import MIN_CHILDREN, ExploreConfig, explore
from ragstep.retrieval.keyword_language import question_keyword_terms
from ragstep.retrieval.text import overlap_coefficient, query_terms, token_set, tokenize
from ragstep.retrieval.token_vector import TokenVectorReranker
from ragstep.stages.viking.tree import hierarchy_of, memory_kb, skills_root, user_root

if TYPE_CHECKING:
    from ragstep.context import Context

STAGE = "hierarchical_search"
_LAYER_TYPES = (ChunkType.ABSTRACT, ChunkType.OVERVIEW)
# Model-free and pure (no I/O): sub-folders are reranked with it whatever RAGSTEP_RERANKER says, as a rerank model
# would cost a call per expanded folder.
_CHILDREN_RERANKER = TokenVectorReranker()
NO_QUERIES = TraceEvent(stage=STAGE, action="skip", reason="the plan has no queries: nothing to retrieve")


def rerank_nodes(query: str, nodes: list[HierarchyNode]) -> list[float]:
    """Each node's relevance to ``query`` among ``nodes`` (siblings: the term weights come from them), read from
    its name and abstract."""
    candidates = [RerankCandidate(content=n.abstract or n.title, title=n.title) for n in nodes]
    return _CHILDREN_RERANKER.rerank_candidates(query, candidates)


@dataclass
class QueryOutcome:
    matches: list[MatchedContext] = field(default_factory=list)
    passages: dict[str, list[str]] = field(default_factory=dict)
    event: TraceEvent | None = None


def node_scores(
    query: str, kbs: list[KnowledgeBase], trees: dict[str, Hierarchy], ctx: Context, limit: int = 10
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Each node's own score for ``query`` and each document's passages (best first), from one pooled search per
    embedding model.

    Among the best ``max(2 x limit, 20)`` chunks (as many as the walk takes of a folder's children), a document
    chunk that repeats one of a better-scored *other* document (contained in it, or a token overlap at or above
    ``RAGSTEP_DUPLICATE_OVERLAP_THRESHOLD``, the flat search's merge's rule) is no evidence for its document:
    CMake's ``OBJC_STANDARD`` and ``OBJCXX_STANDARD`` say the same sentences, and a dozen such copies pushed the
    one document with the asked section out of the top 10 (`ragstep bench viking`)."""
    pool = ctx.settings.viking_candidate_pool
    by_model: dict[str, list[str]] = defaultdict(list)
    for kb in kbs:
        by_model[kb.embedding_model].append(kb.id)
    own: dict[str, float] = {}
    passages: dict[str, list[str]] = defaultdict(list)
    docs = {kid: node for tree in trees.values() for kid, node in tree.by_knowledge().items()}
    terms = question_keyword_terms(query)
    checked = max(2 * limit, MIN_CHILDREN)
    duplicate = ctx.settings.duplicate_overlap_threshold
    for model, kb_ids in sorted(by_model.items()):
        flt = SearchFilter(knowledge_base_ids=tuple(kb_ids))
        keyword = ctx.index.keyword_search(terms, flt, pool, 0.0) if terms else []
        embedder = ctx.embedder(model)
        vector = []
        if embedder is not None:
            vector = ctx.index.vector_search(embedder.embed_query(query), model, flt, pool, 0.0)
        fused = fuse_minmax(vector, keyword)
        chunks = ctx.index.fetch([f.chunk_id for f in fused])
        kept: list[tuple[str, str, frozenset[str]]] = []  # the best document chunks so far: (uri, text, tokens)
        for i, f in enumerate(fused):
            chunk = chunks.get(f.chunk_id)
            if chunk is None:
                continue
            is_layer = chunk.chunk_type in _LAYER_TYPES
            if is_layer:
                uri = str(chunk.metadata.get("viking_uri", ""))
            else:
                node = docs.get(chunk.knowledge_id)
                uri = node.uri if node else ""
            if not uri:
                continue
            if i < checked and not uri.endswith("/"):  # folders' layers are no document's copy
                tokens = token_set(chunk.content)
                if _repeats(uri, chunk.content, tokens, kept, duplicate):
                    continue
                kept.append((uri, chunk.content, tokens))
            if not is_layer:
                passages[uri].append(chunk.content)
            if f.score > own.get(uri, float("-inf")):
                own[uri] = f.score
    return own, dict(passages)


def _repeats(
    uri: str, text: str, tokens: frozenset[str], kept: list[tuple[str, str, frozenset[str]]], threshold: float
) -> bool:
    """Whether ``text`` (of ``uri``) repeats a kept chunk of another node."""
    return any(
        u != uri and (text in t or t in text or overlap_coefficient(tokens, kt) >= threshold) for u, t, kt in kept
    )


def folder_evidence(query: str, nodes: dict[str, HierarchyNode], own: dict[str, float]) -> set[str]:
    """The folders whose score may lift their documents in the final ranking: the query names the folder (a word
    of its name is a query term) and its own layers matched the query (the search scored it).

    A folder that only one of the two speaks for matched by accident: "Command Arguments" names CMake's
    ``command/`` folder, whose layers the search did not find (the answer is a manual's section), and
    "npm cache add" matched the layers of ``commands/``, which list ``npm cache``, without naming it (the answer
    is ``using-npm/scripts.md``); both lifted ``commands/``'s documents over the answer (`ragstep bench viking`)."""
    terms = set(query_terms(query))
    return {
        uri
        for uri, score in own.items()
        if score > 0
        and uri in nodes
        and not nodes[uri].is_leaf
        and terms.intersection(tokenize(PurePosixPath(nodes[uri].path).name))
    }


def relations(node: HierarchyNode, tree: Hierarchy, own: dict[str, float], limit: int) -> list[RelatedContext]:
    """What sits next to a match: its folder first, then its best-scored siblings (up to ``limit`` in all)."""
    if limit <= 0 or node.parent is None:
        return []
    parent = tree.nodes[node.parent]
    siblings = sorted((u for u in parent.children if u != node.uri), key=lambda u: (-own.get(u, 0.0), u))
    out = [RelatedContext(uri=parent.uri, abstract=parent.abstract)]
    out += [RelatedContext(uri=u, abstract=tree.nodes[u].abstract) for u in siblings[: limit - 1]]
    return out[:limit]


@dataclass(frozen=True)
class Scope:
    """Where one typed query looks: the knowledge bases searched, the roots the walk starts from, and which nodes
    belong to its context type (``ragstep.app.memories`` says where each type lives)."""

    kbs: list[KnowledgeBase]
    roots: list[str]
    prefixes: tuple[str, ...]
    exclude: bool = False

    def holds(self, uri: str) -> bool:
        return uri.startswith(self.prefixes) != self.exclude


def scope_of(
    typed: TypedQuery, kbs: list[KnowledgeBase], trees: dict[str, Hierarchy], user: str, memories: KnowledgeBase | None
) -> Scope | str:
    """The query's scope, or why it has none (nothing of its type is stored yet)."""
    if typed.context_type == "memory":
        root = user_root(user)
        if memories is None or memories.id not in trees or root not in trees[memories.id].nodes:
            return f"no memories of user {user!r} yet (ragstep remember saves them)"
        return Scope([memories], [root], (root,))
    skills = [skills_root(kb) for kb in kbs]
    if typed.context_type == "skill":
        found = [(kb, r) for kb, r in zip(kbs, skills, strict=True) if r in trees[kb.id].nodes]
        if not found:
            return "no skills in these knowledge bases (documents under a top-level skills/ folder)"
        return Scope([kb for kb, _ in found], [r for _, r in found], tuple(r for _, r in found))
    return Scope(kbs, [trees[kb.id].root for kb in kbs], tuple(skills), exclude=True)


def search_one(
    typed: TypedQuery,
    kbs: list[KnowledgeBase],
    trees: dict[str, Hierarchy],
    ctx: Context,
    limit: int,
    user: str = "default",
    memories: KnowledgeBase | None = None,
) -> QueryOutcome:
    started = time.perf_counter()
    scope = scope_of(typed, kbs, trees, user, memories)
    if isinstance(scope, str):
        return QueryOutcome(event=TraceEvent(stage=STAGE, action="skip", reason=scope, detail={"query": typed.query}))
    kbs = scope.kbs
    trees = {kb.id: trees[kb.id] for kb in kbs}
    s = ctx.settings
    cfg = ExploreConfig(
        alpha=s.viking_score_propagation_alpha,
        max_convergence_rounds=s.viking_max_convergence_rounds,
        global_topk=s.viking_global_search_topk,
        threshold=s.viking_score_threshold,
        limit=limit,
    )
    nodes = {uri: node for tree in trees.values() for uri, node in tree.nodes.items()}
    tree_of = {uri: tree for tree in trees.values() for uri in tree.nodes}
    own, passages = node_scores(typed.query, kbs, trees, ctx, limit)
    evidence = folder_evidence(typed.query, nodes, own)

    def parent_of(uri: str) -> str | None:
        return nodes[uri].parent if uri in nodes else None

    scored = {u: v for u, v in own.items() if u in nodes and scope.holds(u)}
    reranked: list[str] = []

    def rescore(uris: list[str]) -> list[float]:
        """The rerank model's score of each starting point's abstract (OpenViking's THINKING mode); the search's
        own scores when the model fails (a retrieval degrades rather than fails)."""
        try:
            scores = ctx.reranker.rerank(typed.query, [nodes[u].abstract or nodes[u].title for u in uris])
        except RagstepError as exc:
            reranked.append(f"rerank failed ({exc.message}): the search's scores")
            return [scored[u] for u in uris]
        reranked.append(f"starting points reranked by {ctx.reranker.name}")
        return [float(v) for v in scores]

    walk = explore(
        scope.roots,
        lambda uri: [c for c in nodes[uri].children if scope.holds(c)] if uri in nodes else [],
        lambda uri: uri in nodes and not nodes[uri].is_leaf,
        scored,
        cfg,
        parent_of,
        # Only a rerank model is asked: the model-free reranker scores chunks, not abstracts, on another scale.
        rescore if s.reranker.strip().lower() != "none" else None,
        lambda uris: rerank_nodes(typed.query, [nodes[u] for u in uris]),
        evidence.__contains__,
    )
    matches = []
    for uri in walk.ranking[:limit]:
        node = nodes[uri]
        tree = tree_of[uri]
        matches.append(
            MatchedContext(
                uri=uri,
                context_type=typed.context_type,
                is_leaf=node.is_leaf,
                abstract=node.abstract,
                score=walk.scores[uri],
                title=node.title,
                knowledge_id=node.knowledge_id,
                knowledge_base_id=tree.knowledge_base_id,
                query=typed.query,
                relations=relations(node, tree, own, s.viking_max_relations),
            )
        )
    event = TraceEvent(
        stage=STAGE,
        duration_ms=(time.perf_counter() - started) * 1000,
        counts={"scored": len(own), "visited": len(walk.visited), "rounds": walk.rounds, "matches": len(matches)},
        reason="converged" if walk.converged else "explored every reachable folder",
        detail={
            "query": typed.query,
            "starting_points": [[u, round(v, 4)] for u, v in walk.starting_points],
            **({"rerank": reranked[0]} if reranked else {}),
        },
    )
    return QueryOutcome(matches, {u: passages[u] for u in walk.ranking[:limit] if u in passages}, event)


def _scope_inputs(
    state: VikingState, queries: list[TypedQuery], ctx: Context
) -> tuple[list[KnowledgeBase], dict[str, Hierarchy], KnowledgeBase | None]:
    """The request's knowledge bases, their trees, and the memories' (only when a query of ``queries`` asks)."""
    kbs = [kb for kid in state.knowledge_base_ids if (kb := ctx.catalog.get_kb(kid)) is not None]
    trees = {kb.id: hierarchy_of(kb, ctx) for kb in kbs}
    memories = memory_kb(ctx) if any(q.context_type == "memory" for q in queries) else None
    if memories is not None:
        trees[memories.id] = hierarchy_of(memories, ctx)
    return kbs, trees, memories


def search_query(typed: TypedQuery, state: VikingState, ctx: Context) -> QueryOutcome:
    """One typed query of the plan on its own (an item of the typed queries' Map on Step Functions)."""
    kbs, trees, memories = _scope_inputs(state, [typed], ctx)
    return search_one(typed, kbs, trees, ctx, state.limit, state.user, memories)


def merge(outcomes: Sequence[QueryOutcome | TypedQueryOutcome]) -> tuple[list[MatchedContext], dict[str, list[str]]]:
    """The queries' matches as one ranking: each node once, at the best score any query gave it; a document's
    passages as the first query (in the plan's order) that found it saw them."""
    best: dict[str, MatchedContext] = {}
    passages: dict[str, list[str]] = {}
    for outcome in outcomes:
        for m in outcome.matches:
            if m.uri not in best or m.score > best[m.uri].score:
                best[m.uri] = m
        for uri, texts in outcome.passages.items():
            passages.setdefault(uri, texts)
    return sorted(best.values(), key=lambda m: (-m.score, m.uri)), passages


def run(state: VikingState, ctx: Context) -> VikingState:
    plan = state.plan
    if plan is None or not plan.queries:
        return state.with_trace(NO_QUERIES)
    queries = plan.queries
    kbs, trees, memories = _scope_inputs(state, queries, ctx)
    args = (kbs, trees, ctx, state.limit, state.user, memories)
    if len(queries) == 1:
        outcomes = [search_one(queries[0], *args)]
    else:  # typed queries are independent: run them at once on the shared pool
        futures: list[Future[QueryOutcome]] = [ctx.executor.submit(search_one, q, *args) for q in queries]
        outcomes = [f.result() for f in futures]
    matches, passages = merge(outcomes)
    events = [o.event for o in outcomes if o.event is not None]
    return state.model_copy(update={"matches": matches, "passages": passages, "trace": [*state.trace, *events]})
