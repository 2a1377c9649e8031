"""The ingestion jobs of :class:`ragstep.adapters.catalog.dynamodb.DynamoCatalogStore` (items ``KB#<kb_id>`` /
``J#<job_id>`` and ``JOB#<job_id>`` / ``JOB``: the layout in that module's docstring). A mixin of the store, kept
apart to keep each module short; it uses the store's table, keys and tenant checks.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ragstep.adapters._dynamodb import TENANT_ATTRIBUTE, key_size_error, tenant_key
from ragstep.errors import InputError, NotFoundError
from ragstep.models.catalog import PENDING_JOB_STATUSES, IngestionJob

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from ragstep.adapters._dynamodb import DynamoTable
    from ragstep.errors import StorageError
    from ragstep.models import KnowledgeBase

KB_SK = "KB"
EXISTS = "attribute_exists(pk)"


def item_key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


class DynamoJobItems:
    """Ingestion jobs: two items each (in the knowledge base's partition, and a lookup by id), written together."""

    table: DynamoTable
    tenant_id: str
    #: A finished job's items carry ``expires_at`` this long after it finished (the table's TTL); None: kept.
    job_retention_s: float | None
    _tenant_attributes: dict[str, Any]
    _max_kb_id_bytes: int

    if TYPE_CHECKING:  # the store's, which every method here relies on

        def _kb_pk(self, kb_id: str) -> str: ...
        def _check_item_keys(self, what: str, item_id: str, kb_id: str, missing: str) -> None: ...
        def _get(self, pk: str, sk: str) -> dict[str, Any] | None: ...
        def _mine(self, items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]: ...
        def _give_up(self, action: str) -> StorageError: ...
        def list_kbs(self) -> list[KnowledgeBase]: ...

    def _job_lookup_pk(self, job_id: str) -> str:
        return tenant_key(self.tenant_id, f"JOB#{job_id}")

    def put_job(self, job: IngestionJob) -> None:
        """Insert or replace the job and its lookup, with a ConditionCheck on its knowledge base (as put_knowledge)."""
        reasons = self.table.transact(self._job_writes(job, {}), "put ingestion job")
        if reasons is not None:
            if reasons[0] == "ConditionalCheckFailed":
                raise NotFoundError(f"unknown knowledge base {job.knowledge_base_id!r}")
            raise self._give_up("put ingestion job")

    def replace_job(self, expected: IngestionJob, job: IngestionJob) -> bool:
        """Both items are put only while each still holds ``expected``'s document: one transaction, so two writers
        that read the same job cannot both replace it."""
        if expected.id != job.id:
            raise InputError("replace_job replaces a job with a new version of itself: the ids differ")
        condition = {
            "ConditionExpression": "doc = :expected",
            "ExpressionAttributeValues": {":expected": {"S": expected.model_dump_json()}},
        }
        reasons = self.table.transact(self._job_writes(job, condition), "replace ingestion job")
        if reasons is None:
            return True
        if "ConditionalCheckFailed" in reasons:
            return False  # changed or removed by another writer, or its knowledge base is gone
        raise self._give_up("replace ingestion job")

    def _job_writes(self, job: IngestionJob, condition: dict[str, Any]) -> list[dict[str, Any]]:
        """The transaction that stores ``job``: its knowledge base must exist; ``condition`` guards both puts."""
        kb_id = job.knowledge_base_id
        self._check_item_keys("job id", job.id, kb_id, f"unknown knowledge base {kb_id!r}")
        attributes = {
            "id": {"S": job.id},
            "kb_id": {"S": kb_id},
            "knowledge_id": {"S": job.knowledge_id},
            "doc": {"S": job.model_dump_json()},
            **self._tenant_attributes,
        }
        if self.job_retention_s is not None and job.status not in PENDING_JOB_STATUSES:
            finished = job.finished_at if job.finished_at is not None else time.time()
            attributes["expires_at"] = {"N": str(int(finished + self.job_retention_s))}
        return [
            {"ConditionCheck": {"Key": item_key(self._kb_pk(kb_id), KB_SK), "ConditionExpression": EXISTS}},
            {"Put": {"Item": {**item_key(self._kb_pk(kb_id), f"J#{job.id}"), **attributes}, **condition}},
            {"Put": {"Item": {**item_key(self._job_lookup_pk(job.id), "JOB"), **attributes}, **condition}},
        ]

    def get_job(self, job_id: str) -> IngestionJob | None:
        item = self._get(self._job_lookup_pk(job_id), "JOB")
        return IngestionJob.model_validate_json(item["doc"]["S"]) if item else None

    def list_jobs(self, kb_id: str | None = None) -> list[IngestionJob]:
        """Oldest first (ties by id): one Query per knowledge base."""
        kb_ids = [kb.id for kb in self.list_kbs()] if kb_id is None else [kb_id]
        jobs: list[IngestionJob] = []
        for one in kb_ids:
            if key_size_error("knowledge base id", one, self._max_kb_id_bytes):
                continue
            items = self.table.query(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :j)",
                ExpressionAttributeValues={":pk": {"S": self._kb_pk(one)}, ":j": {"S": "J#"}},
                ProjectionExpression=f"doc, {TENANT_ATTRIBUTE}",
            )
            jobs.extend(IngestionJob.model_validate_json(item["doc"]["S"]) for item in self._mine(items))
        jobs.sort(key=lambda j: (j.created_at, j.id))
        return jobs

    def delete_jobs(self, kb_id: str, knowledge_id: str, *, keep: Collection[str] = ()) -> int:
        jobs = [job for job in self.list_jobs(kb_id) if job.knowledge_id == knowledge_id and job.status not in keep]
        self._delete_job_items(jobs)
        return len(jobs)

    def prune_jobs(self, finished_before: float, kb_id: str | None = None) -> int:
        jobs = [
            job
            for job in self.list_jobs(kb_id)
            if job.status not in PENDING_JOB_STATUSES
            and job.finished_at is not None
            and job.finished_at < finished_before
        ]
        self._delete_job_items(jobs)
        return len(jobs)

    def _delete_job_items(self, jobs: list[IngestionJob]) -> None:
        keys = [item_key(self._kb_pk(job.knowledge_base_id), f"J#{job.id}") for job in jobs]
        keys += [item_key(self._job_lookup_pk(job.id), "JOB") for job in jobs]
        if keys:
            self.table.batch_delete(keys)
