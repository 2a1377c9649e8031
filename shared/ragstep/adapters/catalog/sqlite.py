"""Knowledge bases and knowledge items in a SQLite file: the embedded :class:`ragstep.ports.CatalogStore`.

Each row keeps the whole model as JSON (``doc``) next to the few columns that are looked up or sorted on, so a
new model field needs no migration.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from ragstep.adapters._sqlite import SqliteDatabase
from ragstep.adapters.catalog._names import check_kb_name
from ragstep.errors import ConflictError, InputError, NotFoundError

if TYPE_CHECKING:
    from ragstep.models.catalog import IngestionJob, Knowledge, KnowledgeBase

# The models are imported where rows become models: `ragstep kb list` reads the rows as plain data (kb_documents,
# knowledge_counts) and builds no pydantic model at all (its start-up: ``ragstep bench cli``).

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
CREATE TABLE IF NOT EXISTS ingestion_jobs (
    id TEXT PRIMARY KEY,
    knowledge_base_id TEXT NOT NULL,
    knowledge_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_kb ON ingestion_jobs (knowledge_base_id, created_at, id);
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
        from ragstep.models.catalog import KnowledgeBase

        return KnowledgeBase.model_validate_json(row[0]) if row else None

    def list_kbs(self) -> list[KnowledgeBase]:
        """All knowledge bases, oldest first (ties by id)."""
        with self._db.read() as conn:
            rows = conn.execute("SELECT doc FROM knowledge_bases ORDER BY created_at, id").fetchall()
        from ragstep.models.catalog import KnowledgeBase

        return [KnowledgeBase.model_validate_json(doc) for (doc,) in rows]

    def kb_documents(self) -> list[str]:
        """The stored JSON of every knowledge base, in :meth:`list_kbs`' order, not validated (a listing that
        prints them needs no model)."""
        with self._db.read() as conn:
            rows = conn.execute("SELECT doc FROM knowledge_bases ORDER BY created_at, id").fetchall()
        return [doc for (doc,) in rows]

    def knowledge_counts(self) -> dict[str, int]:
        """Knowledge items per knowledge base id (``len(list_knowledge(kb_id))`` of each, in one query)."""
        with self._db.read() as conn:
            rows = conn.execute("SELECT knowledge_base_id, COUNT(*) FROM knowledge GROUP BY knowledge_base_id")
            return {kb_id: count for kb_id, count in rows.fetchall()}

    def delete_kb(self, kb_id: str) -> None:
        """Delete the knowledge base and all its knowledge items together; a missing id is a no-op."""
        with self._db.write() as conn:
            conn.execute("DELETE FROM ingestion_jobs WHERE knowledge_base_id = ?", (kb_id,))
            conn.execute("DELETE FROM knowledge WHERE knowledge_base_id = ?", (kb_id,))
            conn.execute("DELETE FROM knowledge_bases WHERE id = ?", (kb_id,))

    def update_kb(self, kb: KnowledgeBase) -> KnowledgeBase:
        """Replace the stored knowledge base of ``kb.id``; a new name is checked as ``create_kb`` checks it."""
        check_kb_name(kb.name)
        with self._db.write() as conn:
            if conn.execute("SELECT 1 FROM knowledge_bases WHERE id = ?", (kb.id,)).fetchone() is None:
                raise NotFoundError(f"unknown knowledge base {kb.id!r}")
            clash = conn.execute(
                "SELECT 1 FROM knowledge_bases WHERE name = ? AND id != ?", (kb.name, kb.id)
            ).fetchone()
            if clash is not None:
                raise ConflictError(f"a knowledge base with name {kb.name!r} already exists; choose another name")
            conn.execute(
                "UPDATE knowledge_bases SET name = ?, doc = ? WHERE id = ?", (kb.name, kb.model_dump_json(), kb.id)
            )
        return kb

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

    def replace_knowledge(self, expected: Knowledge, item: Knowledge) -> bool:
        """One UPDATE guarded by the stored document: a record deleted or changed since ``expected`` was read stays
        as it is."""
        if expected.id != item.id or expected.knowledge_base_id != item.knowledge_base_id:
            raise InputError("replace_knowledge replaces a record with a new version of itself: the ids differ")
        with self._db.write() as conn:
            changed = conn.execute(
                "UPDATE knowledge SET created_at = ?, doc = ? WHERE id = ? AND doc = ?",
                (item.created_at, item.model_dump_json(), item.id, expected.model_dump_json()),
            ).rowcount
        return changed == 1

    def get_knowledge(self, knowledge_id: str) -> Knowledge | None:
        with self._db.read() as conn:
            row = conn.execute("SELECT doc FROM knowledge WHERE id = ?", (knowledge_id,)).fetchone()
        from ragstep.models.catalog import Knowledge

        return Knowledge.model_validate_json(row[0]) if row else None

    def list_knowledge(self, kb_id: str) -> list[Knowledge]:
        """The knowledge base's items ordered by ``created_at``, then id."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT doc FROM knowledge WHERE knowledge_base_id = ? ORDER BY created_at, id", (kb_id,)
            ).fetchall()
        from ragstep.models.catalog import Knowledge

        return [Knowledge.model_validate_json(doc) for (doc,) in rows]

    def delete_knowledge(self, knowledge_id: str) -> None:
        """A missing id is a no-op."""
        with self._db.write() as conn:
            conn.execute("DELETE FROM knowledge WHERE id = ?", (knowledge_id,))

    # -- ingestion jobs --------------------------------------------------------------------------------------

    def put_job(self, job: IngestionJob) -> None:
        """Insert or replace. :class:`NotFoundError` if its knowledge base does not exist (same transaction)."""
        if not job.id:
            raise InputError("job id is empty")
        with self._db.write() as conn:
            if conn.execute("SELECT 1 FROM knowledge_bases WHERE id = ?", (job.knowledge_base_id,)).fetchone() is None:
                raise NotFoundError(f"unknown knowledge base {job.knowledge_base_id!r}")
            conn.execute(
                "INSERT OR REPLACE INTO ingestion_jobs (id, knowledge_base_id, knowledge_id, created_at, doc) "
                "VALUES (?, ?, ?, ?, ?)",
                (job.id, job.knowledge_base_id, job.knowledge_id, job.created_at, job.model_dump_json()),
            )

    def replace_job(self, expected: IngestionJob, job: IngestionJob) -> bool:
        """One UPDATE guarded by the stored document, so two writers that read the same job cannot both replace it."""
        if expected.id != job.id:
            raise InputError("replace_job replaces a job with a new version of itself: the ids differ")
        with self._db.write() as conn:
            changed = conn.execute(
                "UPDATE ingestion_jobs SET knowledge_id = ?, created_at = ?, doc = ? WHERE id = ? AND doc = ?",
                (job.knowledge_id, job.created_at, job.model_dump_json(), job.id, expected.model_dump_json()),
            ).rowcount
        return changed == 1

    def get_job(self, job_id: str) -> IngestionJob | None:
        with self._db.read() as conn:
            row = conn.execute("SELECT doc FROM ingestion_jobs WHERE id = ?", (job_id,)).fetchone()
        from ragstep.models.catalog import IngestionJob

        return IngestionJob.model_validate_json(row[0]) if row else None

    def list_jobs(self, kb_id: str | None = None) -> list[IngestionJob]:
        """Oldest first (ties by id); one knowledge base's, or all of them."""
        with self._db.read() as conn:
            if kb_id is None:
                rows = conn.execute("SELECT doc FROM ingestion_jobs ORDER BY created_at, id").fetchall()
            else:
                rows = conn.execute(
                    "SELECT doc FROM ingestion_jobs WHERE knowledge_base_id = ? ORDER BY created_at, id", (kb_id,)
                ).fetchall()
        from ragstep.models.catalog import IngestionJob

        return [IngestionJob.model_validate_json(doc) for (doc,) in rows]

    def delete_jobs(self, kb_id: str, knowledge_id: str, *, keep: Collection[str] = ()) -> int:
        from ragstep.models.catalog import IngestionJob

        with self._db.write() as conn:
            rows = conn.execute(
                "SELECT id, doc FROM ingestion_jobs WHERE knowledge_base_id = ? AND knowledge_id = ?",
                (kb_id, knowledge_id),
            ).fetchall()
            # The status lives in the job's JSON; a document has few jobs.
            gone = [(job_id,) for job_id, doc in rows if IngestionJob.model_validate_json(doc).status not in keep]
            conn.executemany("DELETE FROM ingestion_jobs WHERE id = ?", gone)
            return len(gone)

    def prune_jobs(self, finished_before: float, kb_id: str | None = None) -> int:
        from ragstep.models.catalog import IngestionJob

        # The status and finish time live in the job's JSON; the few jobs a knowledge base keeps are read in one go.
        with self._db.write() as conn:
            rows = conn.execute(
                "SELECT id, doc FROM ingestion_jobs WHERE ? IS NULL OR knowledge_base_id = ?", (kb_id, kb_id)
            ).fetchall()
            gone = [
                job_id
                for job_id, doc in rows
                if _finished_before(IngestionJob.model_validate_json(doc), finished_before)
            ]
            conn.executemany("DELETE FROM ingestion_jobs WHERE id = ?", [(job_id,) for job_id in gone])
        return len(gone)

    def close(self) -> None:
        self._db.close()


def _finished_before(job: IngestionJob, instant: float) -> bool:
    from ragstep.models.catalog import PENDING_JOB_STATUSES

    return job.status not in PENDING_JOB_STATUSES and job.finished_at is not None and job.finished_at < instant
