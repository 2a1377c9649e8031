"""Chunking options on an HTTP upload (form fields ``chunk_size``, ``chunk_overlap``, ``parent_child``,
``parent_size``): checked before anything is stored, kept on the job, and used by the ingestion; served by uvicorn on
127.0.0.1 as ``ragstep serve`` serves it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragstep.context import Clients
from ragstep.settings import Settings
from test_http_knowledge import KBS, serving

pytestmark = pytest.mark.usefixtures("plain_environment")
TEXT = ("Espresso is brewed by forcing hot water through finely ground coffee beans under pressure. " * 40).encode()


def finished(http: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        job: dict[str, Any] = http.get(f"/v1/ingestion-jobs/{job_id}").json()
        if job["status"] not in ("queued", "running"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.05)


def upload(http: httpx.Client, name: str, **fields: str) -> httpx.Response:
    body = f"# {name}\n\n".encode() + TEXT  # different bytes per file: the same content twice is a duplicate
    return http.post(f"{KBS}/docs/documents", files={"files": (name, body, "text/markdown")}, data=fields)


@pytest.mark.slow
def test_chunking_options_shape_the_chunks_and_bad_ones_store_nothing(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path / "data"))
    with serving(clients) as http:
        assert http.post(KBS, json={"name": "docs"}).status_code == 201
        default = upload(http, "default.md")
        small = upload(http, "small.md", chunk_size="200", chunk_overlap="20")
        parents = upload(http, "parents.md", parent_child="true", parent_size="1000")
        jobs = {
            name: finished(http, r.json()["jobs"][0]["id"])
            for name, r in [("default", default), ("small", small), ("parents", parents)]
        }
        refused = {
            "overlap >= size": upload(http, "bad1.md", chunk_size="100", chunk_overlap="100"),
            "parent too small": upload(http, "bad2.md", chunk_size="300", parent_child="true", parent_size="200"),
            "not a number": upload(http, "bad3.md", chunk_size="big"),
        }
        documents = http.get(f"{KBS}/docs/documents").json()
    assert {name: j["status"] for name, j in jobs.items()} == dict.fromkeys(jobs, "indexed")
    assert jobs["default"]["options"] == {}
    assert jobs["small"]["options"]["chunk_size"] == 200 and jobs["small"]["options"]["chunk_overlap"] == 20
    assert jobs["parents"]["options"]["parent_child"] is True and jobs["parents"]["options"]["parent_size"] == 1000
    assert jobs["small"]["chunks"] > jobs["default"]["chunks"] >= 1
    assert refused["overlap >= size"].status_code == 400
    assert "chunk_overlap 100 must be smaller than chunk_size 100" in refused["overlap >= size"].json()["message"]
    assert (
        refused["parent too small"].status_code == 400
        and "parent_size" in refused["parent too small"].json()["message"]
    )
    assert refused["not a number"].status_code == 422 and "chunk_size" in refused["not a number"].json()["message"]
    # Nothing of a refused upload was stored: no document, no job, no blob.
    names = sorted(d["file"] for d in documents["items"])
    assert names == ["default.md", "parents.md", "small.md"]
    store = clients.context().blobs
    held = b"".join(store.get(key) for key in store.list(""))
    assert held.count(TEXT) == 3 and b"# bad" not in held  # the three accepted files' bytes, none of the refused
