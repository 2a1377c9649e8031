"""A catalog seen through an API key's knowledge-base allow-list: :class:`AllowedCatalog`.

Every lookup goes through here when a request's key names knowledge bases, so a use case or stage cannot forget the
limit: a knowledge base outside the list, and every document in it, does not exist (the same ``None`` -- and so the
same 404 text -- as an unknown one). Each method of :class:`~ragstep.ports.CatalogStore` is written out here, none
delegated wholesale: a method added to the port fails the type check until it is limited here too. An entry of the
list is a knowledge base id or name; a knowledge base matches when either is listed, checked on every call (no cache
that a deleted and re-created name could outlive).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ragstep.errors import ForbiddenError, NotFoundError
from ragstep.models import Knowledge, KnowledgeBase
from ragstep.models.catalog import IngestionJob
from ragstep.ports import CatalogStore


class AllowedCatalog:
    def __init__(self, inner: CatalogStore, allowed: Sequence[str]) -> None:
        self._inner = inner
        self._allowed = frozenset(allowed)

    def _ok(self, kb: KnowledgeBase | None) -> KnowledgeBase | None:
        return kb if kb is not None and (kb.id in self._allowed or kb.name in self._allowed) else None

    def _kb_ok(self, kb_id: str) -> bool:
        return self._ok(self._inner.get_kb(kb_id)) is not None

    def create_kb(self, kb: KnowledgeBase) -> KnowledgeBase:
        if kb.id not in self._allowed and kb.name not in self._allowed:
            raise ForbiddenError(
                f"this API key is limited to the knowledge bases {', '.join(sorted(self._allowed))}; "
                f"it cannot create {kb.name!r} (use a key without a knowledge-base limit)"
            )
        return self._inner.create_kb(kb)

    def update_kb(self, kb: KnowledgeBase) -> KnowledgeBase:
        if not self._kb_ok(kb.id):
            raise NotFoundError(f"unknown knowledge base {kb.id!r}")
        if kb.name not in self._allowed and kb.id not in self._allowed:
            raise ForbiddenError("this API key's knowledge-base limit names the knowledge base by name; keep its name")
        return self._inner.update_kb(kb)

    def get_kb(self, id_or_name: str) -> KnowledgeBase | None:
        return self._ok(self._inner.get_kb(id_or_name))

    def list_kbs(self) -> list[KnowledgeBase]:
        return [kb for kb in self._inner.list_kbs() if self._ok(kb)]

    def delete_kb(self, kb_id: str) -> None:
        if self._kb_ok(kb_id):
            self._inner.delete_kb(kb_id)

    def put_knowledge(self, item: Knowledge) -> None:
        if not self._kb_ok(item.knowledge_base_id):
            raise NotFoundError(
                f"knowledge base {item.knowledge_base_id!r} not found; create it before adding knowledge"
            )
        self._inner.put_knowledge(item)

    def replace_knowledge(self, expected: Knowledge, item: Knowledge) -> bool:
        return self._kb_ok(item.knowledge_base_id) and self._inner.replace_knowledge(expected, item)

    def get_knowledge(self, knowledge_id: str) -> Knowledge | None:
        item = self._inner.get_knowledge(knowledge_id)
        return item if item is not None and self._kb_ok(item.knowledge_base_id) else None

    def list_knowledge(self, kb_id: str) -> list[Knowledge]:
        return self._inner.list_knowledge(kb_id) if self._kb_ok(kb_id) else []

    def delete_knowledge(self, knowledge_id: str) -> None:
        if self.get_knowledge(knowledge_id) is not None:
            self._inner.delete_knowledge(knowledge_id)

    # Ingestion jobs belong to their knowledge base: visible only with it.

    def put_job(self, job: IngestionJob) -> None:
        if not self._kb_ok(job.knowledge_base_id):
            raise NotFoundError(
                f"knowledge base {job.knowledge_base_id!r} not found; create it before adding knowledge"
            )
        self._inner.put_job(job)

    def replace_job(self, expected: IngestionJob, job: IngestionJob) -> bool:
        return self._kb_ok(job.knowledge_base_id) and self._inner.replace_job(expected, job)

    def get_job(self, job_id: str) -> IngestionJob | None:
        job = self._inner.get_job(job_id)
        return job if job is not None and self._kb_ok(job.knowledge_base_id) else None

    def list_jobs(self, kb_id: str | None = None) -> list[IngestionJob]:
        if kb_id is not None:
            return self._inner.list_jobs(kb_id) if self._kb_ok(kb_id) else []
        allowed = {kb.id for kb in self.list_kbs()}
        return [job for job in self._inner.list_jobs() if job.knowledge_base_id in allowed]

    def delete_jobs(self, kb_id: str, knowledge_id: str, *, keep: Collection[str] = ()) -> int:
        return self._inner.delete_jobs(kb_id, knowledge_id, keep=keep) if self._kb_ok(kb_id) else 0

    def prune_jobs(self, finished_before: float, kb_id: str | None = None) -> int:
        if kb_id is not None:
            return self._inner.prune_jobs(finished_before, kb_id) if self._kb_ok(kb_id) else 0
        return sum(self._inner.prune_jobs(finished_before, kb.id) for kb in self.list_kbs())
