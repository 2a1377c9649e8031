"""Hierarchical retrieval's pure parts: the tree of a knowledge base, extractive layers, the priority-queue
exploration with score propagation (OpenViking's ``HierarchicalRetriever``) and the layered-context budget.

No I/O here: the stages hand in each node's own score (what the index found for it) and get back rankings.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ragstep.models.viking import URI_SCHEME, HierarchyNode, Layer, LayeredContext, LayeredItem
from ragstep.retrieval.tokens import count_tokens

# -- the tree ------------------------------------------------------------------------------------------------------


def root_uri(kb_name: str) -> str:
    return f"{URI_SCHEME}{kb_name}/"


def node_uri(kb_name: str, path: str, *, directory: bool = False) -> str:
    """``ragstep://<kb>/<path>``; folders end with ``/`` so a folder and a file of one name never collide."""
    path = path.strip("/")
    if not path:
        return root_uri(kb_name)
    return f"{URI_SCHEME}{kb_name}/{path}{'/' if directory else ''}"


@dataclass(frozen=True, slots=True)
class DocumentEntry:
    """A document of the knowledge base and where it sits (relative path, POSIX separators)."""

    path: str
    knowledge_id: str
    title: str


def build_tree(
    kb_name: str, documents: Sequence[DocumentEntry], previous: Mapping[str, HierarchyNode]
) -> dict[str, HierarchyNode]:
    """Every folder and document node of ``documents``, parents and children derived from the paths.

    Nodes that existed before keep their layers and signature (the refresh decides what to regenerate); children are
    listed folders first, then by name, so the tree reads like a file listing.
    """
    root = root_uri(kb_name)
    nodes: dict[str, HierarchyNode] = {}

    def keep(uri: str, fresh: HierarchyNode) -> HierarchyNode:
        old = previous.get(uri)
        if old is None or old.kind != fresh.kind:
            return fresh
        return fresh.model_copy(
            update={
                "abstract": old.abstract,
                "overview": old.overview,
                "signature": old.signature,
                "layers_by": old.layers_by,
            }
        )

    nodes[root] = keep(root, HierarchyNode(uri=root, parent=None, kind="directory", path="", title=kb_name))
    for doc in sorted(documents, key=lambda d: d.path):
        parts = PurePosixPath(doc.path).parts
        parent = root
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            uri = node_uri(kb_name, folder, directory=True)
            if uri not in nodes:
                fresh = HierarchyNode(uri=uri, parent=parent, kind="directory", path=folder, title=parts[depth - 1])
                nodes[uri] = keep(uri, fresh)
                nodes[parent].children.append(uri)
            parent = uri
        uri = node_uri(kb_name, doc.path)
        if uri in nodes:  # two documents at one path: the first (by knowledge id order of the caller) stays
            continue
        fresh = HierarchyNode(
            uri=uri, parent=parent, kind="document", path=doc.path, title=doc.title, knowledge_id=doc.knowledge_id
        )
        nodes[uri] = keep(uri, fresh)
        nodes[parent].children.append(uri)
    for node in nodes.values():
        node.children.sort(key=lambda u: (nodes[u].kind != "directory", u))
    return nodes


def bottom_up(nodes: Mapping[str, HierarchyNode]) -> list[str]:
    """Node URIs deepest first, so a folder's layers are generated after its children's."""
    return sorted(nodes, key=lambda u: (-nodes[u].path.count("/") - (1 if nodes[u].path else 0), u))


# -- extractive layers ---------------------------------------------------------------------------------------------

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")
# Emphasis and code marks, images, links (kept: their text); "_" stays, it is part of names (TOOL_HOME).
_MARKUP = re.compile(r"[`*]+|^>+|!\[[^\]]*\]\([^)]*\)|\[([^\]]*)\]\([^)]*\)")


def _plain(line: str) -> str:
    return _MARKUP.sub(lambda m: m.group(1) or " ", line).strip()


def first_heading(text: str) -> str:
    found = _HEADING.search(text)
    return _plain(found.group(1)) if found else ""


def leading_sentences(text: str, max_tokens: int) -> str:
    """The text's first prose sentences (headings, code fences and list markers left out), up to ``max_tokens``."""
    prose: list[str] = []
    in_code = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code or not line or _HEADING.match(raw) or set(line) <= set("-=*_|: "):
            continue
        prose.append(_plain(line.lstrip("-*+0123456789. ")))
    out: list[str] = []
    used = 0
    for sentence in _SENTENCE.split(" ".join(p for p in prose if p)):
        cost = count_tokens(sentence)
        if out and used + cost > max_tokens:
            break
        out.append(sentence if cost <= max_tokens else _clip(sentence, max_tokens))
        used += cost
        if used >= max_tokens:
            break
    return " ".join(out).strip()


def _clip(text: str, max_tokens: int) -> str:
    words = text.split()
    while words and count_tokens(" ".join(words)) > max_tokens:
        words = words[: max(1, len(words) * 3 // 4)] if len(words) > 1 else []
    return " ".join(words) + " ..."


_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.S)
_FRONT_FIELD = re.compile(r"^(title|description)\s*:\s*(.+?)\s*$", re.M | re.I)


def front_matter(text: str) -> tuple[dict[str, str], str]:
    """A Markdown file's YAML front matter's ``title`` and ``description`` (quotes dropped), and the text after it.

    Front matter is metadata, not prose: read as text it would open every abstract with ``title: ... section: 7``,
    and its ``description`` is the author's own one-line summary, the best abstract there is."""
    found = _FRONT_MATTER.match(text)
    if not found:
        return {}, text
    fields = {k.lower(): v.strip("'\"") for k, v in _FRONT_FIELD.findall(found.group(1))}
    return fields, text[found.end() :]


def extractive_document_layers(title: str, text: str, *, abstract_tokens: int, overview_tokens: int) -> tuple[str, str]:
    """L0 = the front matter's title (else the first heading, else ``title``) + the front matter's description and
    the leading sentence(s); L1 = the heading outline + the description and leading sentences."""
    meta, text = front_matter(text)
    heading = meta.get("title", "") or first_heading(text) or title
    description = meta.get("description", "")
    if description and not description.endswith((".", "!", "?")):
        description += "."
    if description:
        text = f"{description}\n\n{text}"
    lead = leading_sentences(text, max(abstract_tokens - count_tokens(heading) - 1, 0))
    abstract = f"{heading}: {lead}" if lead else heading
    headings = [_plain(h) for h in _HEADING.findall(text)]
    outline = "; ".join(dict.fromkeys(h for h in headings if h))
    overview = heading
    if outline:
        overview += f". Sections: {outline}"
    overview = _fit(overview, overview_tokens // 2)
    body = leading_sentences(text, max(overview_tokens - count_tokens(overview), 0))
    return _fit(abstract, abstract_tokens), _fit(f"{overview}. {body}" if body else overview, overview_tokens)


def extractive_directory_layers(
    title: str, children: Sequence[HierarchyNode], *, abstract_tokens: int, overview_tokens: int
) -> tuple[str, str]:
    """L0 = the folder's name and its children's titles; L1 = each child's title and abstract."""
    names = [c.title or PurePosixPath(c.path).name for c in children]
    abstract = _fit(f"{title}: {', '.join(names)}" if names else title, abstract_tokens)
    lines = [f"{title} holds {len(children)} item{'s' if len(children) != 1 else ''}."]
    lines += [f"- {c.title or PurePosixPath(c.path).name}: {c.abstract}" for c in children]
    return abstract, _fit("\n".join(lines), overview_tokens)


def _fit(text: str, max_tokens: int) -> str:
    return text if count_tokens(text) <= max_tokens else _clip(text, max_tokens)


# -- exploration ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExploreConfig:
    """OpenViking's constants, each a setting (``RAGSTEP_VIKING_*``)."""

    #: A child's score = alpha x its own score + (1 - alpha) x its parent's.
    alpha: float = 0.5
    #: Stop once the top ``limit`` has not changed for this many rounds.
    max_convergence_rounds: int = 3
    #: How many nodes the global search contributes as starting points, at least ``limit`` (OpenViking's
    #: ``max(limit, GLOBAL_SEARCH_TOPK)``); 0 turns the global search off.
    global_topk: int = 3
    #: Children at or below this (propagated) score are not collected, nor explored.
    threshold: float = 0.0
    limit: int = 10


@dataclass
class Exploration:
    """Every node collected with its propagated score, best first, and how the walk went."""

    scores: dict[str, float]
    ranking: list[str]
    starting_points: list[tuple[str, float]]
    rounds: int = 0
    converged: bool = False
    visited: list[str] = field(default_factory=list)


#: The fewest children taken from one folder (OpenViking's ``max(limit * 2, 20)``).
MIN_CHILDREN = 20


def propagate(own: float, parent: float, alpha: float) -> float:
    """OpenViking's rule: a node reached from a scored parent blends both; from an unscored root, its own score."""
    return alpha * own + (1 - alpha) * parent if parent else own


def explore(
    roots: Sequence[str],
    children: Callable[[str], Sequence[str]],
    is_directory: Callable[[str], bool],
    own: Mapping[str, float],
    cfg: ExploreConfig,
    parent_of: Callable[[str], str | None] = lambda _uri: None,
    rescore: Callable[[list[str]], list[float]] | None = None,
    rerank_children: Callable[[list[str]], list[float]] | None = None,
    folder_counts: Callable[[str], bool] = lambda _uri: True,
) -> Exploration:
    """Priority-queue exploration from ``roots`` plus what the global search found: the ``max(limit, global_topk)``
    best-scored nodes. A folder among them starts the walk at its score (its own, or what ``rescore`` says of it:
    the rerank model's score of its abstract when one is configured); a document among them is collected at that
    score and its folder starts the walk at the folder's own score (so a strong match deep in the tree is reached,
    and its siblings compete on their own merit, even when nothing above it scored).

    The best unvisited directory is expanded first; its children the search found (own score > 0; the best
    ``max(2 x limit, 20)``) get scores :func:`propagate`d from it; those above the threshold are collected (a node
    reached twice keeps its best score) and directories among them queued. With ``rerank_children`` (OpenViking
    reranks a folder's children), each sub-folder of the expanded folder scores the mean of its search score and
    its rerank score among its siblings, so a folder the query names is explored even when its layers missed.
    After every expansion the top ``limit`` is compared with the previous one: unchanged ``max_convergence_rounds``
    times in a row (with ``limit`` nodes collected) ends the walk early.

    The final ranking (:func:`rank_leaves`): every document collected -- the global search's hits as well as the
    walk's -- at ``alpha x its own score + (1 - alpha) x its folder's score``, so what flat search finds is kept
    while a folder that matches the query lifts its documents over look-alikes elsewhere. ``folder_counts`` says
    which folders' scores are evidence there (the others count 0 for every document in them).
    """
    # The global search: the best-scored nodes anywhere.
    best = sorted(((u, s) for u, s in own.items() if s > cfg.threshold), key=lambda item: (-item[1], item[0]))
    # OpenViking's global search asks for max(limit, GLOBAL_SEARCH_TOPK) hits: with 3 alone, a query whose three
    # best hits share one folder starts nowhere else, and that folder's propagated score then buries a better
    # document elsewhere (the per-question misses of `ragstep bench viking`).
    hits = best[: max(cfg.limit, cfg.global_topk)] if cfg.global_topk > 0 else []  # 0: no global search
    scores = [score for _uri, score in hits]
    if rescore is not None and hits:
        scores = rescore([uri for uri, _score in hits])
    starting: dict[str, float] = dict.fromkeys(roots, 0.0)
    collected: dict[str, float] = {}
    leaf_own = dict(own)  # a document's own score in the final ranking: the rerank model's, when it was asked
    for (uri, _own), score in zip(hits, scores, strict=True):
        if is_directory(uri):
            if uri not in roots:
                starting[uri] = max(starting.get(uri, 0.0), score)
            continue
        # A document the global search found is a result (OpenViking's initial candidates; the walk's convergence
        # reads it at its own score, the final ranking blends it with its folder's like every document), and
        # its folder enters the walk at the folder's own score -- not the document's: one strong document must not
        # lift every sibling above a better match elsewhere (the per-question misses of `ragstep bench viking`).
        leaf_own[uri] = score
        if score > cfg.threshold:
            collected[uri] = max(collected.get(uri, 0.0), score)
        folder = parent_of(uri)
        if folder is not None and folder not in roots:
            starting[folder] = max(starting.get(folder, 0.0), own.get(folder, 0.0))
    expanded: dict[str, float] = {}  # folder -> the score it was expanded at
    reached_from: dict[str, str] = {}  # node -> the folder whose expansion gave it its score
    heap = [(-score, uri) for uri, score in starting.items()]
    heapq.heapify(heap)
    visited: list[str] = []
    seen: set[str] = set()
    previous: list[str] = []
    stable = 0
    rounds = 0
    converged = False
    while heap:
        neg, current = heapq.heappop(heap)
        if current in seen:
            continue
        seen.add(current)
        visited.append(current)
        parent_score = -neg
        # OpenViking searches each folder's children and takes the best max(2 x limit, 20) of those the search
        # found: a child the search did not find at all is not lifted by its parent alone.
        expanded[current] = parent_score
        kids = list(children(current))
        mine = {c: own.get(c, 0.0) for c in kids}
        folders = [c for c in kids if is_directory(c)]
        if rerank_children is not None and folders:
            # Only sub-folders: a folder's abstract is its children's names, which say where to look; a document's
            # abstract leaves out the sections a question asks about (documents gained nothing on `bench viking`).
            for c, r in zip(folders, rerank_children(folders), strict=True):
                mine[c] = (mine[c] + r) / 2
        found = sorted((c for c in kids if mine[c] > 0), key=lambda c: (-mine[c], c))
        for child in found[: max(2 * cfg.limit, MIN_CHILDREN)]:
            score = propagate(mine[child], parent_score, cfg.alpha)
            if score <= cfg.threshold:
                continue
            if score > collected.get(child, float("-inf")):
                collected[child] = score
                reached_from[child] = current
            if is_directory(child) and child not in seen:
                heapq.heappush(heap, (-score, child))
        rounds += 1
        top = _ranking(collected)[: cfg.limit]
        if top == previous and len(top) >= cfg.limit:
            stable += 1
            if stable >= cfg.max_convergence_rounds:
                converged = True
                break
        else:
            stable = 0
            previous = top
    folder_scores = {**starting, **collected, **expanded}
    final = rank_leaves(
        collected,
        leaf_own,
        is_directory,
        lambda u: reached_from.get(u) or parent_of(u),
        folder_scores,
        cfg,
        folder_counts,
    )
    return Exploration(final, _ranking(final), list(starting.items()), rounds, converged, visited)


def rank_leaves(
    collected: Mapping[str, float],
    own: Mapping[str, float],
    is_directory: Callable[[str], bool],
    parent_of: Callable[[str], str | None],
    folder_scores: Mapping[str, float],
    cfg: ExploreConfig,
    folder_counts: Callable[[str], bool] = lambda _uri: True,
) -> dict[str, float]:
    """Each collected document at ``alpha x own + (1 - alpha) x its folder's score`` (the score the folder was
    expanded, queued or started at; 0 if the walk never reached it); folders keep their walk score.

    One rule for every document: a global-search hit kept at its raw score would outrank every document the
    folder context promoted (their blend is below the raw score whenever the folder scores lower), so the walk
    could add documents but never reorder them (`ragstep bench viking`, ambiguous headings: 0.747 -> 0.847).

    A folder ``folder_counts`` rejects scores 0 here: its score lifted its documents by words that matched by
    accident (the caller decides what makes a folder evidence; :mod:`ragstep.stages.viking.hierarchical_search`)."""
    out: dict[str, float] = {}
    for uri, score in collected.items():
        if not is_directory(uri):
            parent = parent_of(uri)
            folder = folder_scores.get(parent, 0.0) if parent is not None and folder_counts(parent) else 0.0
            score = cfg.alpha * own.get(uri, 0.0) + (1 - cfg.alpha) * folder
        if score > cfg.threshold:
            out[uri] = score
    return out


def _ranking(scores: Mapping[str, float]) -> list[str]:
    return sorted(scores, key=lambda u: (-scores[u], u))


# -- layered context -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LayerCandidate:
    """A match with its three layers (``passages``: its best L2 passages, best first; none for a folder)."""

    uri: str
    score: float
    abstract: str
    overview: str
    passages: tuple[str, ...] = ()


def select_layers(candidates: Sequence[LayerCandidate], budget: int, *, l1_top: int, l2_top: int) -> LayeredContext:
    """L0 for every match (best first, while the budget lasts), then L2 for the ``l2_top`` best documents (their
    best passages, as many as fit), then L1 for the next ``l1_top``; an upgrade that would overrun the budget is not
    made (the match keeps its lower layer). Items come back in score order."""
    ordered = sorted(candidates, key=lambda c: (-c.score, c.uri))
    chosen: dict[str, tuple[Layer, str, int]] = {}
    used = 0
    for c in ordered:
        cost = count_tokens(c.abstract)
        if used + cost > budget:
            break
        chosen[c.uri] = ("L0", c.abstract, cost)
        used += cost
    upgraded = 0
    for c in ordered:
        if upgraded >= l2_top or c.uri not in chosen or not c.passages:
            continue
        room = budget - used + chosen[c.uri][2]
        kept: list[str] = []
        spent = 0
        for passage in c.passages:
            cost = count_tokens(passage) + (1 if kept else 0)
            if spent + cost > room:
                break
            kept.append(passage)
            spent += cost
        if kept:
            used += spent - chosen[c.uri][2]
            chosen[c.uri] = ("L2", "\n".join(kept), spent)
            upgraded += 1
    upgraded = 0
    for c in ordered:
        if upgraded >= l1_top or c.uri not in chosen or chosen[c.uri][0] != "L0" or not c.overview:
            continue
        cost = count_tokens(c.overview)
        if used - chosen[c.uri][2] + cost > budget:
            continue
        used += cost - chosen[c.uri][2]
        chosen[c.uri] = ("L1", c.overview, cost)
        upgraded += 1
    items = [
        LayeredItem(uri=c.uri, layer=chosen[c.uri][0], text=chosen[c.uri][1], tokens=chosen[c.uri][2], score=c.score)
        for c in ordered
        if c.uri in chosen
    ]
    return LayeredContext(budget=budget, used=used, items=items)
