"""A knowledge base's hierarchy: the stored tree (``viking/<kb id>/hierarchy.json`` in the tenant's blob store),
or, for a knowledge base ingested without layers, the tree derived from its documents' paths (no L0/L1 then)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from ragstep.errors import InputError
from ragstep.models import Knowledge, KnowledgeBase
from ragstep.models.viking import Hierarchy
from ragstep.retrieval.hierarchy import DocumentEntry, build_tree, node_uri, root_uri

if TYPE_CHECKING:
    from ragstep.context import Context

PREFIX = "viking/"
_LAYER_NAMESPACE = uuid.UUID("0b7e7b4e-3c55-4d7f-9b1b-2f4f6c1d8e21")


#: The tenant's knowledge base of memories (``ragstep.app.memories``): ``<user>/<category>/<id>.md``.
MEMORY_KB = "_memories"
#: The top-level folder of a knowledge base whose documents are skills.
SKILLS_FOLDER = "skills"


DEFAULT_USER = "default"
_USER = re.compile(r"^[^\W_][\w.@-]{0,63}$")


def check_user(user: str | None) -> str:
    """A user name is a folder of the memory tree: letters, digits and ``_ . @ -``, 1-64 characters."""
    user = (user or DEFAULT_USER).strip()
    if not _USER.match(user):
        raise InputError(f"user {user!r}: use 1-64 letters, digits, '_', '.', '@' or '-', starting with a letter")
    return user


def user_root(user: str) -> str:
    """The memory root of one user: the folder their memory queries walk."""
    return node_uri(MEMORY_KB, user, directory=True)


def skills_root(kb: KnowledgeBase) -> str:
    return node_uri(kb.name, SKILLS_FOLDER, directory=True)


def memory_kb(ctx: Context) -> KnowledgeBase | None:
    return ctx.catalog.get_kb(MEMORY_KB)


def hierarchy_key(kb_id: str) -> str:
    return f"{PREFIX}{kb_id}/hierarchy.json"


def layer_knowledge_id(kb_id: str, uri: str) -> str:
    """The index's knowledge id of a node's layer chunks (one per node, so replacing them is one transaction)."""
    return uuid.uuid5(_LAYER_NAMESPACE, f"{kb_id}/{uri}").hex


def stored_hierarchy(kb: KnowledgeBase, ctx: Context) -> Hierarchy | None:
    key = hierarchy_key(kb.id)
    if not ctx.blobs.exists(key):
        return None
    return Hierarchy.model_validate_json(ctx.blobs.get(key))


def local_path(item: Knowledge) -> Path | None:
    """The file a document was ingested from, when it came from this machine (``file://`` source)."""
    parsed = urlparse(item.source_uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def relative_path(item: Knowledge, roots: list[Path]) -> str | None:
    """The document's path under the first ingested folder that holds it (POSIX separators); None when none does."""
    path = local_path(item)
    if path is None:
        return None
    for root in roots:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            continue
    return None


def derived_paths(items: list[Knowledge]) -> dict[str, str]:
    """Paths of documents nobody said the folder of: relative to their common folder (else their file name)."""
    located = {i.id: p for i in items if (p := local_path(i)) is not None}
    paths: dict[str, str] = {}
    if located:
        common = Path(*_common_parts([p.parent.parts for p in located.values()]))
        for kid, p in located.items():
            paths[kid] = p.relative_to(common).as_posix() if common.parts else p.name
    for item in items:
        paths.setdefault(item.id, PurePosixPath(item.filename or item.title or item.id).name)
    return paths


def _common_parts(all_parts: list[tuple[str, ...]]) -> tuple[str, ...]:
    first = all_parts[0]
    n = len(first)
    for parts in all_parts[1:]:
        n = min(n, len(parts))
        for i in range(n):
            if parts[i] != first[i]:
                n = i
                break
    return first[:n]


def searchable(item: Knowledge) -> bool:
    return item.status == "completed" and item.enabled


def hierarchy_of(kb: KnowledgeBase, ctx: Context) -> Hierarchy:
    """The stored tree, else one derived from the catalog (documents ingested before layers were on, or never)."""
    stored = stored_hierarchy(kb, ctx)
    if stored is not None:
        return stored
    items = [i for i in ctx.catalog.list_knowledge(kb.id) if searchable(i)]
    paths = derived_paths(items)
    entries = [DocumentEntry(paths[i.id], i.id, i.title or i.filename) for i in items]
    return Hierarchy(knowledge_base_id=kb.id, root=root_uri(kb.name), nodes=build_tree(kb.name, entries, {}))
