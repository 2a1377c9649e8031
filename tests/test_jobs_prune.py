"""Ingestion job records: pruning old finished jobs in the catalog stores (SQLite, DynamoDB on moto, a key's
allow-list), the serving process's worker on start-up (``RAGSTEP_JOB_RETENTION_DAYS``) and ``ragstep jobs prune``;
DynamoDB's TTL attribute on finished jobs; and the compare-and-set that lets only one writer claim a job (and one
mark a document's vectors done)."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from ragstep.adapters.catalog.sqlite import SqliteCatalogStore
from ragstep.app.jobs import JobRunner, prune_jobs
from ragstep.context import Clients
from ragstep.errors import InputError
from ragstep.models import KnowledgeBase
from ragstep.models.catalog import IngestionJob, JobStatus
from ragstep.ports import CatalogStore
from ragstep.settings import Settings

pytestmark = pytest.mark.usefixtures("plain_environment")
DAY = 86400.0
NOW = 1_800_000_000.0
TABLE = "ragstep-test-catalog"


def job(kb: KnowledgeBase, status: JobStatus, finished_days_ago: float | None, name: str = "") -> IngestionJob:
    finished = None if finished_days_ago is None else NOW - finished_days_ago * DAY
    return IngestionJob(
        id=uuid.uuid4().hex,
        knowledge_base_id=kb.id,
        knowledge_id=uuid.uuid4().hex,
        filename=name or f"{status}.md",
        blob_key="sources/x",
        status=status,
        created_at=NOW - 60 * DAY,
        finished_at=finished,
    )


def kb_in(catalog: CatalogStore, name: str) -> KnowledgeBase:
    return catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name=name, created_at=NOW - 90 * DAY))


@contextlib.contextmanager
def moto_catalog_table(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A moto DynamoDB with the template's catalog table (``pk`` / ``sk``) named ``TABLE``; yields its client."""
    moto = pytest.importorskip("moto")
    import boto3

    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_CONFIG_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)
    with moto.mock_aws():
        client = boto3.client("dynamodb")
        client.create_table(
            TableName=TABLE,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
        )
        yield client


@pytest.fixture(params=["sqlite", "dynamodb"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if request.param == "sqlite":
        yield SqliteCatalogStore(tmp_path / "catalog.sqlite")
        return
    from ragstep.adapters.catalog.dynamodb import DynamoCatalogStore

    with moto_catalog_table(monkeypatch):
        yield DynamoCatalogStore(TABLE)


def test_only_finished_jobs_past_the_retention_go(catalog: CatalogStore) -> None:
    kb, other = kb_in(catalog, "handbook"), kb_in(catalog, "other")
    keep = [
        job(kb, "queued", None),
        job(kb, "running", None),
        job(kb, "indexed", 1),  # finished recently
        job(other, "failed", 1),
    ]
    old = [job(kb, "indexed", 40), job(kb, "failed", 31), job(kb, "duplicate", 90), job(other, "unchanged", 45)]
    for j in [*keep, *old]:
        catalog.put_job(j)
    assert catalog.prune_jobs(NOW - 30 * DAY, kb.id) == 3  # one knowledge base
    assert catalog.prune_jobs(NOW - 30 * DAY) == 1  # then every one
    assert sorted(j.id for j in catalog.list_jobs()) == sorted(j.id for j in keep)
    assert catalog.get_job(old[0].id) is None and catalog.get_job(keep[0].id) is not None
    assert catalog.prune_jobs(NOW - 30 * DAY) == 0


def test_only_the_writer_holding_the_current_version_replaces_a_job(catalog: CatalogStore) -> None:
    kb = kb_in(catalog, "handbook")
    queued = job(kb, "queued", None)
    catalog.put_job(queued)
    first = queued.model_copy(update={"status": "running", "execution_arn": "arn:one"})
    second = queued.model_copy(update={"status": "running", "execution_arn": "arn:two"})
    # Both executions read the queued job; the first claim wins, the second finds it changed.
    assert catalog.replace_job(queued, first) is True
    assert catalog.replace_job(queued, second) is False
    assert catalog.get_job(queued.id) == first
    assert [j.execution_arn for j in catalog.list_jobs(kb.id)] == ["arn:one"]
    # A job that is gone (its knowledge base deleted) is never brought back by a replace.
    catalog.delete_kb(kb.id)
    assert catalog.replace_job(first, first.model_copy(update={"status": "indexed"})) is False
    assert catalog.get_job(queued.id) is None


def test_a_document_deleted_while_its_vectors_finish_is_not_written_back(catalog: CatalogStore) -> None:
    """The vector backfill reads the record, the user deletes the document, the backfill marks it done: the mark is
    a compare-and-set, so the deleted document does not come back (seen once under load over HTTP)."""
    from ragstep.models import Knowledge

    kb = kb_in(catalog, "handbook")
    read = Knowledge(id=uuid.uuid4().hex, knowledge_base_id=kb.id, filename="guide.pdf", vectors_pending="blob")
    catalog.put_knowledge(read)
    done = read.model_copy(update={"vectors_pending": ""})
    changed = read.model_copy(update={"tag_id": "coffee"})
    catalog.put_knowledge(changed)  # another writer got there first
    assert catalog.replace_knowledge(read, done) is False
    assert catalog.get_knowledge(read.id) == changed
    assert catalog.replace_knowledge(changed, changed.model_copy(update={"vectors_pending": ""})) is True
    assert catalog.get_knowledge(read.id).vectors_pending == ""  # type: ignore[union-attr]
    catalog.delete_knowledge(read.id)
    assert catalog.replace_knowledge(changed, done) is False
    assert catalog.get_knowledge(read.id) is None and catalog.list_knowledge(kb.id) == []


def test_a_documents_jobs_go_but_those_of_a_status_it_keeps(catalog: CatalogStore) -> None:
    """Deleting a document keeps its cancelled jobs (their poller reads why) and removes the others."""
    kb = kb_in(catalog, "handbook")
    done = job(kb, "indexed", 1)
    cancelled = job(kb, "cancelled", 0).model_copy(update={"knowledge_id": done.knowledge_id})
    other = job(kb, "indexed", 1)
    for one in (done, cancelled, other):
        catalog.put_job(one)
    assert catalog.delete_jobs(kb.id, done.knowledge_id, keep=("cancelled",)) == 1
    assert {j.id for j in catalog.list_jobs(kb.id)} == {cancelled.id, other.id}
    assert catalog.get_job(cancelled.id) == cancelled and catalog.get_job(done.id) is None
    assert catalog.delete_jobs(kb.id, done.knowledge_id) == 1
    assert [j.id for j in catalog.list_jobs(kb.id)] == [other.id]


def test_a_job_cannot_be_replaced_by_another_job(catalog: CatalogStore) -> None:
    kb = kb_in(catalog, "handbook")
    one, two = job(kb, "queued", None), job(kb, "queued", None)
    catalog.put_job(one)
    with pytest.raises(InputError, match="ids differ"):
        catalog.replace_job(one, two)


def test_dynamodb_marks_finished_jobs_for_its_ttl_and_leaves_pending_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    from ragstep.adapters.catalog.dynamodb import DynamoCatalogStore

    with moto_catalog_table(monkeypatch) as client:
        catalog = DynamoCatalogStore(TABLE, job_retention_s=30 * DAY)
        kb = kb_in(catalog, "handbook")
        running, done = job(kb, "running", None), job(kb, "indexed", 2)
        for j in (running, done):
            catalog.put_job(j)
        items = client.scan(TableName=TABLE)["Items"]
        expiry = sorted(
            (item["id"]["S"], item.get("expires_at", {}).get("N"))
            for item in items
            if item["sk"]["S"].startswith("J#") or item["sk"]["S"] == "JOB"
        )
        # Both of a job's items (in its knowledge base, and its lookup by id) expire together; a pending one never.
        expires = str(int(NOW - 2 * DAY + 30 * DAY))
        assert expiry == sorted([(running.id, None)] * 2 + [(done.id, expires)] * 2)


def test_a_key_limited_to_one_knowledge_base_prunes_only_there(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path / "data"))
    full = clients.context()
    mine, theirs = kb_in(full.catalog, "mine"), kb_in(full.catalog, "theirs")
    full.catalog.put_job(job(mine, "indexed", 40))
    full.catalog.put_job(job(theirs, "indexed", 40))
    limited = clients.context(allowed_kbs=("mine",))
    assert prune_jobs(limited, 30 * DAY, now=NOW) == 1
    assert [j.knowledge_base_id for j in full.catalog.list_jobs()] == [theirs.id]
    with pytest.raises(InputError, match="0 or more"):
        prune_jobs(full, -1)


def test_the_worker_prunes_each_tenant_when_it_starts(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path / "data", job_retention_days=7))
    now = time.time()
    for tenant in ("default", "acme"):
        ctx = clients.context(tenant)
        kb = kb_in(ctx.catalog, "docs")
        ctx.catalog.put_job(job(kb, "indexed", None).model_copy(update={"finished_at": now - 8 * DAY}))
        ctx.catalog.put_job(job(kb, "indexed", None).model_copy(update={"finished_at": now - 6 * DAY}))
    runner = JobRunner(clients)
    try:
        assert runner.resume() == 0  # nothing pending to run again
    finally:
        runner.shutdown()
    for tenant in ("default", "acme"):
        left = clients.context(tenant).catalog.list_jobs()
        assert [round((now - (j.finished_at or 0)) / DAY) for j in left] == [6], tenant
    assert runner.prune("acme") == 0  # not again within the hour


def test_the_cli_prunes_every_tenant_or_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "data"
    clients = Clients(Settings(data_dir=data_dir))
    now = time.time()
    for tenant in ("default", "acme"):
        ctx = clients.context(tenant)
        kb = kb_in(ctx.catalog, "docs")
        for days in (2, 10, 40):
            ctx.catalog.put_job(job(kb, "failed", None).model_copy(update={"finished_at": now - days * DAY}))
    dd = ("--data-dir", str(data_dir))
    code, out, _ = run_cli(capsys, "jobs", "prune", "--older-than", "30", "--tenant", "acme", "--json", *dd)
    assert code == 0 and json.loads(out) == {"older_than_days": 30.0, "removed": {"acme": 1}}
    code, out, _ = run_cli(capsys, "jobs", "prune", "--older-than", "5", *dd)
    assert code == 0 and out.strip() == "removed 3 ingestion jobs finished more than 5 days ago"
    with pytest.raises(SystemExit) as refused:
        run_cli(capsys, "jobs", "prune", "--older-than", "-1", *dd)
    assert refused.value.code == 2 and "give 0 or more" in capsys.readouterr().err
    assert [len(clients.context(t).catalog.list_jobs()) for t in ("default", "acme")] == [1, 1]


def test_executions_starting_at_once_each_get_their_own_job(tmp_path: Path) -> None:
    """Eight executions of one document's uploads start at the same moment (SQLite, real threads): each claims a
    job of its own, the queued ones go to one execution each, and no job is taken twice."""
    from concurrent.futures import ThreadPoolExecutor

    from ragstep.app.s3_jobs import start_for_execution
    from ragstep.models import IngestSource, IngestState

    ctx = Clients(Settings(data_dir=tmp_path / "data")).context()
    kb = kb_in(ctx.catalog, "handbook")
    queued = [job(kb, "queued", None, name="guide.md").model_copy(update={"knowledge_id": "doc-1"}) for _ in range(3)]
    queued = [j.model_copy(update={"runs_on": "state_machine"}) for j in queued]
    for j in queued:
        ctx.catalog.put_job(j)
    source = IngestSource(
        knowledge_base_id=kb.id, knowledge_id="doc-1", blob_key="uploads/guide.md", filename="guide.md"
    )
    arns = [f"arn:aws:states:eu-west-1:123456789012:execution:ingest:{n}" for n in range(8)]
    with ThreadPoolExecutor(8) as pool:
        states = list(pool.map(lambda arn: start_for_execution(ctx, IngestState(source=source), arn), arns))
    job_ids = [state.job_id for state in states]
    assert len(set(job_ids)) == len(arns)  # nobody shares a job
    assert {j.id for j in queued} <= set(job_ids)  # every queued upload was taken, by one execution each
    jobs = {j.id: j for j in ctx.catalog.list_jobs(kb.id)}
    assert sorted(jobs[i].execution_arn for i in job_ids) == sorted(arns)
    assert {j.status for j in jobs.values()} == {"running"}
