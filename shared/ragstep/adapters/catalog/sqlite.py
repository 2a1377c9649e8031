"""Knowledge bases and knowledge items in a SQLite file: the embedded :class:`ragstep.ports.CatalogStore`.

Each row keeps the whole model as JSON (``doc``) next to the few columns that are looked up or sorted on, so a
new model field needs no migration.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from ragstep.adapters.history.sqlite import SqliteDatabase
from ragstep.errors import ConflictError, InputError, NotFoundError
from ragstep.models import Knowledge, KnowledgeBase

MAX_KB_NAME_CHARS = 64
_NAME_RULE = (
    f"1-{MAX_KB_NAME_CHARS} characters: letters (any script), digits, '-', '_', '.', and spaces (not at the ends)"
)


def check_kb_name(name: str) -> str:
    """Validate a knowledge base name; returns it unchanged, or raises :class:`InputError` naming the rule.

    Names are typed on command lines and shown in URLs, so they stay to visible word characters. Combining
    marks count as part of a letter: scripts such as Devanagari or Thai cannot be written without them.
    """
    if not isinstance(name, str) or not name:
        raise InputError(f"knowledge base name is empty; use {_NAME_RULE}")
    if len(name) > MAX_KB_NAME_CHARS:
        raise InputError(f"knowledge base name has {len(name)} characters; use {_NAME_RULE}")
    if name[0] == " " or name[-1] == " ":
        raise InputError(f"knowledge base name {name!r} starts or ends with a space; use {_NAME_RULE}")
    for ch in name:
        category = unicodedata.category(ch)
        if not (ch in "-_. " or category[0] in "LM" or category == "Nd"):
            raise InputError(
                f"knowledge base name {name!r} contains {ch!r} (U+{ord(ch):04X}), which is not allowed; "
                f"use {_NAME_RULE}"
            )
    return name


_SCHEMA = """
CREATE TABLE IF NOT EXISTS knowledge_bases (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS knowledge (
    id TEXT PRIMARY KEY,
    knowledge_base_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS knowledge_by_kb ON knowledge (knowledge_base_id, created_at, id);
"""


class SqliteCatalogStore:
    """Knowledge bases and their knowledge items in ``path``."""

    def __init__(self, path: Path) -> None:
        self._db = SqliteDatabase(path, _SCHEMA)

    @property
    def path(self) -> Path:
        return self._db.path

    # -- knowledge bases -------------------------------------------------------------------------------------

    def create_kb(self, kb: KnowledgeBase) -> KnowledgeBase:
        """Store a new knowledge base. :class:`ConflictError` if its id or (case-sensitive) name is taken."""
        check_kb_name(kb.name)
        if not kb.id:
            raise InputError("knowledge base id is empty")
        with self._db.write() as conn:
            # Checked inside the write transaction: two processes creating one name cannot both succeed.
            clash = conn.execute(
                "SELECT id, name FROM knowledge_bases WHERE id = ? OR name = ? LIMIT 1", (kb.id, kb.name)
            ).fetchone()
            if clash is not None:
                field, value = ("id", kb.id) if clash[0] == kb.id else ("name", kb.name)
                raise ConflictError(f"a knowledge base with {field} {value!r} already exists; choose another {field}")
            conn.execute(
                "INSERT INTO knowledge_bases (id, name, created_at, doc) VALUES (?, ?, ?, ?)",
                (kb.id, kb.name, kb.created_at, kb.model_dump_json()),
            )
        return kb

    def get_kb(self, id_or_name: str) -> KnowledgeBase | None:
        """By id first, then by name (an id wins over another knowledge base's name equal to it)."""
        with self._db.read() as conn:
            row = conn.execute("SELECT doc FROM knowledge_bases WHERE id = ?", (id_or_name,)).fetchone()
            if row is None:
                row = conn.execute("SELECT doc FROM knowledge_bases WHERE name = ?", (id_or_name,)).fetchone()
        return KnowledgeBase.model_validate_json(row[0]) if row else None

    def list_kbs(self) -> list[KnowledgeBase]:
        """All knowledge bases, oldest first (ties by id)."""
        with self._db.read() as conn:
            rows = conn.execute("SELECT doc FROM knowledge_bases ORDER BY created_at, id").fetchall()
        return [KnowledgeBase.model_validate_json(doc) for (doc,) in rows]

    def delete_kb(self, kb_id: str) -> None:
        """Delete the knowledge base and all its knowledge items together; a missing id is a no-op."""
        with self._db.write() as conn:
            conn.execute("DELETE FROM knowledge WHERE knowledge_base_id = ?", (kb_id,))
            conn.execute("DELETE FROM knowledge_bases WHERE id = ?", (kb_id,))

    # -- knowledge items -------------------------------------------------------------------------------------

    def put_knowledge(self, item: Knowledge) -> None:
        """Insert or replace. :class:`NotFoundError` if its knowledge base does not exist.

        The existence check shares the write transaction, so an item cannot slip in after its knowledge base
        was deleted and linger where no listing finds it.
        """
        if not item.id:
            raise InputError("knowledge id is empty")
        with self._db.write() as conn:
            if conn.execute("SELECT 1 FROM knowledge_bases WHERE id = ?", (item.knowledge_base_id,)).fetchone() is None:
                raise NotFoundError(
                    f"knowledge base {item.knowledge_base_id!r} not found; create it before adding knowledge"
                )
            conn.execute(
                "INSERT OR REPLACE INTO knowledge (id, knowledge_base_id, created_at, doc) VALUES (?, ?, ?, ?)",
                (item.id, item.knowledge_base_id, item.created_at, item.model_dump_json()),
            )

    def get_knowledge(self, knowledge_id: str) -> Knowledge | None:
        with self._db.read() as conn:
            row = conn.execute("SELECT doc FROM knowledge WHERE id = ?", (knowledge_id,)).fetchone()
        return Knowledge.model_validate_json(row[0]) if row else None

    def list_knowledge(self, kb_id: str) -> list[Knowledge]:
        """The knowledge base's items ordered by ``created_at``, then id."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT doc FROM knowledge WHERE knowledge_base_id = ? ORDER BY created_at, id", (kb_id,)
            ).fetchall()
        return [Knowledge.model_validate_json(doc) for (doc,) in rows]

    def delete_knowledge(self, knowledge_id: str) -> None:
        """A missing id is a no-op."""
        with self._db.write() as conn:
            conn.execute("DELETE FROM knowledge WHERE id = ?", (knowledge_id,))

    def close(self) -> None:
        self._db.close()
