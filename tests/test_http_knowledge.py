"""Knowledge bases, document uploads and ingestion jobs over HTTP, against the app served by uvicorn on 127.0.0.1:
create a knowledge base, upload a PDF and a CSV, follow the jobs, search, disable and delete a document; the bad
inputs; another tenant's knowledge base and job; jobs left pending by a stopped server."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragstep.app.ingest import knowledge_id_for
from ragstep.app.jobs import queue_ingestion
from ragstep.context import Clients
from ragstep.entry.http.app import create_app
from ragstep.settings import Settings
from ragstep.stages.ingest.products import SOURCES_PREFIX, source_blob_key

uvicorn = pytest.importorskip("uvicorn", reason="`ragstep serve` needs uvicorn (pip install 'ragstep[serve]')")
pytest.importorskip("reportlab")

KBS = "/v1/knowledge-bases"
CSV = b"city,country,population\nReykjavik,Iceland,139000\nTromso,Norway,77000\nKiruna,Sweden,22000\n"
MAX_FILE = 20_000
MAX_UPLOAD = 64 * 1024


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("RAGSTEP_"):
            monkeypatch.delenv(key)


def make_pdf(path: Path) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate

    styles = getSampleStyleSheet()
    story = [
        Paragraph("Brewing guide", styles["Heading1"]),
        Paragraph("Espresso is brewed by forcing hot water through finely ground coffee beans. " * 3, styles["Normal"]),
    ]
    SimpleDocTemplate(str(path), pagesize=A4).build(story)
    return path.read_bytes()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(clients: Clients) -> Iterator[httpx.Client]:
    """The API on 127.0.0.1 (uvicorn in a thread, lifespan on), and an HTTP client for it."""
    port = _free_port()
    config = uvicorn.Config(create_app(clients), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            yield http
    finally:
        server.should_exit = True
        thread.join(20)


@pytest.fixture
def clients(tmp_path: Path) -> Clients:
    return Clients(Settings(data_dir=tmp_path / "data", max_file_bytes=MAX_FILE, max_upload_bytes=MAX_UPLOAD))


@pytest.fixture
def http(clients: Clients) -> Iterator[httpx.Client]:
    with serving(clients) as http:
        yield http


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "message"}
    message: str = body["message"]
    return message


def wait_jobs(http: httpx.Client, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    done: list[dict[str, Any]] = []
    for job in jobs:
        while True:
            now = ok(http.get(f"/v1/ingestion-jobs/{job['id']}"))
            if now["status"] not in ("queued", "running"):
                done.append(now)
                break
            assert time.monotonic() < deadline, f"job still {now['status']}: {now}"
            time.sleep(0.05)
    return done


def upload(http: httpx.Client, kb: str, *files: tuple[str, bytes], **form: str) -> httpx.Response:
    return http.post(f"{KBS}/{kb}/documents", files=[("files", f) for f in files], data=form)


def found_files(http: httpx.Client, query: str, kb: str = "docs") -> list[str]:
    body = ok(http.post("/v1/knowledge-search", json={"query": query, "knowledge_base_ids": [kb]}))
    return [r["knowledge_filename"] for r in body["results"]]


def test_the_whole_flow(http: httpx.Client, tmp_path: Path) -> None:
    created = ok(http.post(KBS, json={"name": "docs", "description": "field notes"}), 201)
    kb = created["knowledge_base"]
    assert (kb["name"], kb["description"], created["documents"]) == ("docs", "field notes", 0)

    pdf = make_pdf(tmp_path / "guide.pdf")
    accepted = ok(upload(http, "docs", ("guide.pdf", pdf), ("cities.csv", CSV), tag="travel"), 202)
    assert [j["filename"] for j in accepted["jobs"]] == ["guide.pdf", "cities.csv"]
    assert {j["status"] for j in accepted["jobs"]} <= {"queued", "running"}
    jobs = wait_jobs(http, accepted["jobs"])
    assert [(j["status"], j["error"]) for j in jobs] == [("indexed", ""), ("indexed", "")], jobs
    assert all(j["chunks"] > 0 and j["finished_at"] >= j["created_at"] for j in jobs)

    page = ok(http.get(f"{KBS}/docs/documents"))
    rows = {row["file"]: row for row in page["items"]}
    assert set(rows) == {"guide.pdf", "cities.csv"} and page["next_cursor"] is None
    assert {row["status"] for row in rows.values()} == {"indexed"}
    assert all(row["chunks"] > 0 and row["tag"] == "travel" and row["enabled"] for row in rows.values())
    described = ok(http.get(f"{KBS}/{kb['id']}"))
    assert described["documents"] == 2 and described["size"] == len(pdf) + len(CSV)

    assert found_files(http, "espresso coffee beans")[0] == "guide.pdf"
    assert "cities.csv" in found_files(http, "Reykjavik population")

    # The same content again: unchanged under the same name, duplicate under another (as the CLI reports it).
    again = ok(upload(http, "docs", ("guide.pdf", pdf), ("copy.pdf", pdf), tag="travel"), 202)
    outcome = wait_jobs(http, again["jobs"])
    assert [j["status"] for j in outcome] == ["unchanged", "duplicate"]
    assert "guide.pdf" in outcome[1]["error"] and outcome[1]["duplicate_of"] == rows["guide.pdf"]["id"]
    assert [j["note"] for j in outcome] == ["", "duplicate of guide.pdf"]
    # Changed content under the same name: an update, told apart from a first upload (and not an error).
    changed = ok(upload(http, "docs", ("cities.csv", CSV + b"Nuuk,Greenland,19000\n"), tag="travel"), 202)
    (update,) = wait_jobs(http, changed["jobs"])
    first_csv = jobs[1]["chunks"]
    assert (update["status"], update["error"], update["knowledge_id"]) == ("updated", "", jobs[1]["knowledge_id"])
    assert update["note"] == f"replaced the version indexed before ({first_csv} chunks)", update
    assert [(j["status"], j["note"]) for j in jobs] == [("indexed", ""), ("indexed", "")]

    # Disabled: kept, never retrieved; enabled again: found again.
    guide = rows["guide.pdf"]["id"]
    patched = ok(http.patch(f"/v1/documents/{guide}", json={"enabled": False}))
    assert patched["document"]["enabled"] is False and patched["job"] is None
    assert "guide.pdf" not in found_files(http, "espresso coffee beans")
    assert ok(http.get(f"/v1/documents/{guide}"))["chunks"] > 0
    ok(http.patch(f"/v1/documents/{guide}", json={"enabled": True}))
    assert found_files(http, "espresso coffee beans")[0] == "guide.pdf"

    # A new tag re-ingests the stored original.
    retag = ok(http.patch(f"/v1/documents/{guide}", json={"tag": "coffee"}))
    retagged = wait_jobs(http, [retag["job"]])[0]
    assert (retagged["status"], retagged["error"]) == ("updated", "")
    assert retagged["note"].startswith("replaced the version indexed before (")
    assert ok(http.get(f"/v1/documents/{guide}"))["tag"] == "coffee"

    gone = ok(http.delete(f"/v1/documents/{guide}"))
    assert gone["chunks"] > 0
    assert error(http.get(f"/v1/documents/{guide}"), 404) == f"unknown document {guide!r}"
    assert "guide.pdf" not in found_files(http, "espresso coffee beans")
    left = {row["file"]: row["status"] for row in ok(http.get(f"{KBS}/docs/documents"))["items"]}
    assert left == {"cities.csv": "indexed", "copy.pdf": "duplicate"}


def test_a_file_sent_as_the_form_field_file_is_ingested_too(http: httpx.Client) -> None:
    """``curl -F file=@notes.md`` (the singular name curl examples use) uploads as ``-F files=@notes.md`` does;
    a request with no file part says which name to use."""
    ok(http.post(KBS, json={"name": "docs"}), 201)
    notes = ("notes.md", b"# Notes\n\nThe lighthouse keeper logs the fog every hour.\n", "text/markdown")
    memo = ("memo.txt", b"The ferry leaves the harbour at dawn.\n", "text/plain")
    accepted = ok(http.post(f"{KBS}/docs/documents", files=[("file", notes), ("files", memo)]), 202)
    assert [j["filename"] for j in accepted["jobs"]] == ["memo.txt", "notes.md"]  # `files` first, then `file`
    assert [j["status"] for j in wait_jobs(http, accepted["jobs"])] == ["indexed", "indexed"]
    assert found_files(http, "lighthouse fog") == ["notes.md"]
    said = error(http.post(f"{KBS}/docs/documents", data={"tag": "x"}), 422)
    assert said == "files: no file sent; send the file(s) as form parts named `files` (curl -F files=@path)"


def test_knowledge_bases_are_listed_changed_and_deleted(http: httpx.Client, clients: Clients) -> None:
    ids = [ok(http.post(KBS, json={"name": name}), 201)["knowledge_base"]["id"] for name in ("a", "b", "c")]
    first = ok(http.get(KBS, params={"limit": 2}))
    assert [i["knowledge_base"]["id"] for i in first["items"]] == ids[:2] and first["next_cursor"]
    rest = ok(http.get(KBS, params={"limit": 2, "cursor": first["next_cursor"]}))
    assert [i["knowledge_base"]["id"] for i in rest["items"]] == ids[2:] and rest["next_cursor"] is None
    assert "cursor" in error(http.get(KBS, params={"cursor": "nonsense"}), 400)

    renamed = ok(http.patch(f"{KBS}/a", json={"name": "alpha", "description": "first"}))["knowledge_base"]
    assert (renamed["id"], renamed["name"], renamed["description"]) == (ids[0], "alpha", "first")
    assert "already exists" in error(http.patch(f"{KBS}/alpha", json={"name": "b"}), 409)
    assert "already exists" in error(http.post(KBS, json={"name": "b"}), 409)

    ok(upload(http, "b", ("note.txt", b"Saffron is the stigma of a crocus flower.")), 202)
    deleted = ok(http.delete(f"{KBS}/b"))
    assert deleted["id"] == ids[1]
    assert error(http.get(f"{KBS}/b"), 404) == "unknown knowledge base 'b'"
    assert clients.context().blobs.list(f"{SOURCES_PREFIX}{ids[1]}/") == []


def test_bad_uploads_store_nothing(http: httpx.Client, clients: Clients) -> None:
    kb = ok(http.post(KBS, json={"name": "docs"}), 201)["knowledge_base"]
    good = ("fine.txt", b"A perfectly good document about lighthouses.")
    cases: list[tuple[tuple[str, bytes], int, str]] = [
        (("../etc/passwd.txt", b"x"), 400, "has a path in it"),
        (("sub\\dir.txt", b"x"), 400, "has a path in it"),
        (("tool.exe", b"MZ"), 400, "unsupported file type .exe"),
        (("empty.txt", b""), 400, "the file is empty"),
        (("big.txt", b"x" * (MAX_FILE + 1)), 400, "RAGSTEP_MAX_FILE_BYTES"),
    ]
    for bad, status, said in cases:
        assert said in error(upload(http, "docs", good, bad), status), bad[0]
    # httpx escapes control characters in file names; a client that does not is refused.
    boundary = "b0undary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="bell\x07.txt"\r\n'
        f"Content-Type: text/plain\r\n\r\nring\r\n--{boundary}--\r\n"
    ).encode()
    raw = http.post(
        f"{KBS}/docs/documents", content=body, headers={"content-type": f"multipart/form-data; boundary={boundary}"}
    )
    assert "control character U+0007" in error(raw, 400)
    assert "sent twice" in error(upload(http, "docs", good, good), 400)
    assert "tag" in error(upload(http, "docs", good, tag="bad\x01tag"), 400)
    # The whole request over RAGSTEP_MAX_UPLOAD_BYTES, each file within its own limit.
    many = [(f"part{i}.txt", b"y" * (MAX_FILE - 10)) for i in range(4)]
    assert str(MAX_UPLOAD) in error(upload(http, "docs", *many), 413)
    assert error(upload(http, "nope", good), 404) == "unknown knowledge base 'nope'"
    assert error(http.post(f"{KBS}/docs/documents"), 422)

    ctx = clients.context()
    assert ctx.blobs.list(SOURCES_PREFIX) == []
    assert ctx.catalog.list_jobs(kb["id"]) == []
    # A search-sized body limit still holds everywhere else.
    assert error(http.post("/v1/knowledge-search", content=b"{" + b" " * (2 << 20)), 413)


def test_another_tenants_knowledge_base_and_job_are_unknown(http: httpx.Client, clients: Clients) -> None:
    other = clients.context("acme")
    from ragstep.app.knowledge_bases import create_knowledge_base

    theirs = create_knowledge_base(other, "secret-plans")
    key = source_blob_key(theirs.id, knowledge_id_for(theirs, "a.txt"), "0" * 64, "a.txt")
    other.blobs.put(key, b"their text")
    job = queue_ingestion(other, theirs, filename="a.txt", blob_key=key, content_hash="0" * 64, size=10)

    assert error(http.get(f"{KBS}/{theirs.id}"), 404) == f"unknown knowledge base {theirs.id!r}"
    assert error(http.get(f"{KBS}/secret-plans/documents"), 404) == "unknown knowledge base 'secret-plans'"
    assert error(upload(http, theirs.id, ("x.txt", b"mine")), 404) == f"unknown knowledge base {theirs.id!r}"
    assert error(http.get(f"/v1/ingestion-jobs/{job.id}"), 404) == f"unknown ingestion job {job.id!r}"
    assert error(http.get("/v1/ingestion-jobs/never-made"), 404) == "unknown ingestion job 'never-made'"
    assert error(http.delete(f"/v1/documents/{job.knowledge_id}"), 404) == f"unknown document {job.knowledge_id!r}"
    assert ok(http.get(KBS))["items"] == []


def test_jobs_left_pending_run_when_the_server_starts(clients: Clients) -> None:
    """A server stopped with jobs queued (or one running) leaves them in the catalog; the next start runs them."""
    ctx = clients.context()
    from ragstep.app.knowledge_bases import create_knowledge_base

    kb = create_knowledge_base(ctx, "docs")
    pending = []
    for name, text, status in (
        ("queued.txt", b"Otters hold hands while sleeping.", "queued"),
        ("running.txt", b"Octopuses have three hearts.", "running"),
    ):
        import hashlib

        digest = hashlib.sha256(text).hexdigest()
        key = source_blob_key(kb.id, knowledge_id_for(kb, name), digest, name)
        ctx.blobs.put(key, text)
        job = queue_ingestion(ctx, kb, filename=name, blob_key=key, content_hash=digest, size=len(text))
        ctx.catalog.put_job(job.model_copy(update={"status": status}))
        pending.append(job.model_dump(mode="json"))
    # An upload's job on AWS waits for its S3 event, whose state machine runs it: no server takes it.
    theirs = job.model_copy(update={"id": "s3-upload", "status": "queued", "runs_on": "state_machine"})
    ctx.catalog.put_job(theirs)

    with serving(clients) as http:
        assert [j["status"] for j in wait_jobs(http, pending)] == ["indexed", "indexed"]
        assert found_files(http, "octopuses hearts")[0] == "running.txt"
        assert ok(http.get("/v1/ingestion-jobs/s3-upload")) == theirs.model_dump(mode="json")


# -- AWS: presigned uploads --------------------------------------------------------------------------------------

BUCKET = "ragstep-uploads-test"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials and a region (nothing may reach real AWS), and moto in place of S3."""
    moto = pytest.importorskip("moto")
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", "eu-west-1"),
        ("AWS_DEFAULT_REGION", "eu-west-1"),
        ("AWS_CONFIG_FILE", "/dev/null"),
        ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
    ):
        monkeypatch.setenv(name, value)
    with moto.mock_aws():
        import boto3

        boto3.client("s3", region_name="eu-west-1").create_bucket(
            Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
        )
        yield


def s3_event(key: str, size: int) -> dict[str, Any]:
    """The EventBridge ``Object Created`` event S3 sends for an upload."""
    return {
        "id": "5f1e0c1a-0000-4000-8000-000000000001",
        "source": "aws.s3",
        "detail-type": "Object Created",
        "detail": {"bucket": {"name": BUCKET}, "object": {"key": key, "size": size}},
    }


def test_presigned_upload_then_the_s3_event_ingests_it(aws: None, tmp_path: Path) -> None:
    from urllib.parse import parse_qs, urlsplit

    import requests

    from ragstep.app.s3_jobs import finish_job, start_for_execution
    from ragstep.entry.aws.events import ingest_state_from_s3_event
    from ragstep.pipeline import run_pipeline

    settings = Settings(data_dir=tmp_path / "data", blob_backend="s3", blob_bucket=BUCKET, max_file_bytes=MAX_FILE)
    clients = Clients(settings)
    text = b"Lighthouse keepers trimmed the wicks of the lamps every evening."
    with serving(clients) as http:
        kb = ok(http.post(KBS, json={"name": "docs"}), 201)["knowledge_base"]
        signed = ok(http.post(f"{KBS}/docs/uploads", json={"filename": "keepers.txt", "size": len(text)}))
        assert signed["key"] == f"uploads/{kb['id']}/keepers.txt" and signed["method"] == "PUT"
        query = parse_qs(urlsplit(signed["url"]).query)
        # The signature covers the length, the type and the encryption: S3 refuses any other body or header.
        assert query["X-Amz-SignedHeaders"] == ["content-length;content-type;host;x-amz-server-side-encryption"]
        assert query["X-Amz-Expires"] == [str(settings.upload_url_expiry_s)] == [str(signed["expires_in"])]
        assert signed["headers"] == {
            "Content-Type": "text/plain; charset=utf-8",
            "Content-Length": str(len(text)),
            "x-amz-server-side-encryption": "AES256",
        }
        job_url = f"/v1/ingestion-jobs/{signed['job_id']}"
        assert ok(http.get(job_url))["status"] == "queued"  # until the upload's event starts its ingestion
        put = requests.put(signed["url"], data=text, headers=signed["headers"], timeout=10)
        assert put.status_code == 200, put.text

        # The S3 event starts the ingest state machine; its stages run in-process here, taking the job as the
        # first and last stage functions do (tests/test_s3_jobs.py runs those).
        state = ingest_state_from_s3_event(s3_event(signed["key"], len(text)), clients)
        assert state.source.knowledge_id == signed["document_id"]
        state = start_for_execution(clients.context(), state, "")
        assert state.job_id == signed["job_id"] and ok(http.get(job_url))["status"] == "running"
        finish_job(clients.context(), run_pipeline("ingest", state, clients.context()))
        document = ok(http.get(f"/v1/documents/{signed['document_id']}"))
        assert (document["file"], document["status"], document["job_id"]) == ("keepers.txt", "indexed", state.job_id)
        job = ok(http.get(job_url))
        assert (job["status"], job["chunks"], job["size"]) == ("indexed", document["chunks"], len(text))
        assert found_files(http, "lighthouse keepers lamps") == ["keepers.txt"]

        for body, said in (
            ({"filename": "a/b.txt", "size": 3}, "has a path in it"),
            ({"filename": "tool.exe", "size": 3}, "unsupported file type .exe"),
            ({"filename": "big.txt", "size": MAX_FILE + 1}, "limit per file"),
        ):
            assert said in error(http.post(f"{KBS}/docs/uploads", json=body), 400)
        assert error(http.post(f"{KBS}/docs/uploads", json={"filename": "empty.txt", "size": 0}), 422)
        assert error(http.post(f"{KBS}/nope/uploads", json={"filename": "a.txt", "size": 3}), 404)


def test_presigned_uploads_need_s3(http: httpx.Client) -> None:
    ok(http.post(KBS, json={"name": "docs"}), 201)
    said = error(http.post(f"{KBS}/docs/uploads", json={"filename": "a.txt", "size": 3}), 400)
    assert "need the S3 blob store" in said


# -- the catalogs' jobs and renames (both backends) ---------------------------------------------------------------


@pytest.fixture(params=["sqlite", "dynamodb"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        from ragstep.adapters.catalog.sqlite import SqliteCatalogStore

        yield SqliteCatalogStore(tmp_path / "catalog.sqlite")
        return
    request.getfixturevalue("aws")
    import boto3

    from ragstep.adapters.catalog.dynamodb import DynamoCatalogStore

    boto3.client("dynamodb", region_name="eu-west-1").create_table(
        TableName="catalog",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
    )
    yield DynamoCatalogStore("catalog", tenant_id="acme")


def test_catalog_jobs_and_renames(catalog: Any) -> None:
    from ragstep.errors import ConflictError, NotFoundError
    from ragstep.models import KnowledgeBase
    from ragstep.models.catalog import IngestionJob

    for i, name in enumerate(("one", "two")):
        catalog.create_kb(KnowledgeBase(id=f"kb{i}", name=name, created_at=float(i)))
    jobs = [
        IngestionJob(
            id=f"j{i}", knowledge_base_id=kb, knowledge_id=kid, filename="a.txt", blob_key="k", created_at=float(i)
        )
        for i, (kb, kid) in enumerate((("kb0", "d1"), ("kb0", "d2"), ("kb1", "d3"), ("kb0", "d1")))
    ]
    for job in jobs:
        catalog.put_job(job)
    catalog.put_job(jobs[0].model_copy(update={"status": "indexed", "chunks": 3}))
    assert catalog.get_job("j0").status == "indexed" and catalog.get_job("nope") is None
    assert [j.id for j in catalog.list_jobs("kb0")] == ["j0", "j1", "j3"]
    assert [j.id for j in catalog.list_jobs()] == ["j0", "j1", "j2", "j3"]
    with pytest.raises(NotFoundError):
        catalog.put_job(jobs[0].model_copy(update={"id": "j9", "knowledge_base_id": "gone"}))
    assert catalog.delete_jobs("kb0", "d1") == 2
    assert [j.id for j in catalog.list_jobs("kb0")] == ["j1"] and catalog.get_job("j0") is None

    renamed = catalog.update_kb(catalog.get_kb("one").model_copy(update={"name": "uno", "description": "first"}))
    assert catalog.get_kb("uno") == renamed and catalog.get_kb("one") is None
    assert [kb.name for kb in catalog.list_kbs()] == ["uno", "two"]
    with pytest.raises(ConflictError):
        catalog.update_kb(renamed.model_copy(update={"name": "two"}))
    with pytest.raises(NotFoundError):
        catalog.update_kb(KnowledgeBase(id="gone", name="gone"))

    catalog.delete_kb("kb0")
    assert catalog.list_jobs("kb0") == [] and catalog.get_job("j1") is None
    assert [j.id for j in catalog.list_jobs()] == ["j2"]


def test_on_lambda_uploads_go_through_s3(http: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    ok(http.post(KBS, json={"name": "docs"}), 201)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "ragstep-api")
    said = error(upload(http, "docs", ("a.txt", b"Lambda freezes between invocations.")), 400)
    assert "/uploads" in said


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_blob_stores_take_a_file_from_its_position(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import io

    from ragstep.ports import BlobStore

    if backend == "s3":
        request.getfixturevalue("aws")
    settings = Settings(data_dir=tmp_path / "data", blob_backend=backend, blob_bucket=BUCKET)
    blobs: BlobStore = Clients(settings).context().blobs
    source = io.BytesIO(b"header|" + b"z" * (9 << 20))  # over boto3's 8 MiB multipart threshold
    source.seek(7)
    blobs.put_file("sources/kb/doc/big.txt", source, "text/plain")
    assert blobs.get("sources/kb/doc/big.txt") == b"z" * (9 << 20)
