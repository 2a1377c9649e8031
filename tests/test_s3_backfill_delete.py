"""A document deleted from the S3-snapshot index while its vectors are written stays deleted
(:mod:`ragstep.adapters.index._s3backfill`).

The vector write is the local index's guarded ``UPDATE`` (a row gets a vector only while it exists without one), run
on a copy of the knowledge base's current generation and published by a conditional swap of its pointer; a writer
that loses the swap runs it again on the generation that won. So vectors for a deleted document's chunks find no
row and publish nothing, whichever of the two writes reaches the pointer first.

S3 is moto on 127.0.0.1, served by several threads so that one container's swap can be held at the door while
another container deletes the document; moto itself still answers one request at a time (S3 applies a conditional
PutObject atomically, moto checks then writes).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ragstep.ports import SearchFilter
from test_s3_snapshot import REGION, SPACE, container, doc, found, keys, s3

pytest.importorskip("flask")  # moto[server] (the module above skips without it too)
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

pytestmark = pytest.mark.aws

KB1 = SearchFilter(knowledge_base_ids=("kb1",))


class Door:
    """WSGI in front of moto: requests reach it one at a time; the first pointer swap (a conditional PUT of
    ``current.json``) after :meth:`hold_next_swap` waits at the door until :meth:`release`."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.serial = threading.Lock()
        self.armed = False
        self.held = threading.Event()
        self.released = threading.Event()

    def hold_next_swap(self) -> None:
        self.held.clear()
        self.released.clear()
        self.armed = True

    def release(self) -> None:
        self.released.set()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        swap = environ["REQUEST_METHOD"] == "PUT" and environ.get("PATH_INFO", "").endswith("/current.json")
        if swap and environ.get("HTTP_IF_MATCH") and self.armed:
            self.armed = False
            self.held.set()
            assert self.released.wait(30), "the held swap was never released"
        with self.serial:
            return list(self.app(environ, start_response))


@pytest.fixture(scope="module")
def door() -> Iterator[tuple[Door, str]]:
    gate = Door(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, gate, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield gate, f"http://127.0.0.1:{server.port}"
    server.shutdown()


@pytest.fixture
def bucket(door: tuple[Door, str], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", door[1])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    name = f"ragstep-{uuid.uuid4().hex[:12]}"
    s3().create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
    return name


def while_held(gate: Door, first: Callable[[], Any], meanwhile: Callable[[], Any]) -> tuple[Any, Any]:
    """Run ``first`` until its pointer swap is at the door, ``meanwhile`` to the end, then let the swap through
    (it loses: the pointer moved) and ``first`` to its end. Returns both results."""
    gate.hold_next_swap()
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(first()), daemon=True)
    worker.start()
    assert gate.held.wait(30), "the first write never swapped the pointer"
    try:
        second = meanwhile()
    finally:
        gate.release()
        worker.join(60)
    assert len(outcome) == 1, "the first write failed (see the thread's exception above)"
    return outcome[0], second


def gone(tmp_path: Path, bucket: str, kid: str, chunk_ids: list[str], vector: Any) -> None:
    """A fresh container (another Lambda) finds nothing of the document, by keyword, vector or id."""
    reader = container(tmp_path, bucket)
    assert found(reader, "glacier moraine", "kb1") == []
    assert reader.vector_search(vector, SPACE, KB1, 10, -1.0) == []
    assert reader.fetch(chunk_ids) == {} and reader.knowledge_chunks(kid, 10) == []
    assert reader.stats().chunks == 0


def phase_one(tmp_path: Path, bucket: str) -> tuple[list[Any], Any, list[str]]:
    chunks, vectors = doc("kb1", "k1", "glacier ice", "moraine rock")
    container(tmp_path, bucket).replace_knowledge("k1", chunks, None, None)  # keyword-searchable, no vectors yet
    return chunks, vectors, [c.id for c in chunks]


def test_vectors_for_a_document_deleted_before_they_land_publish_nothing(tmp_path: Path, bucket: str) -> None:
    chunks, vectors, ids = phase_one(tmp_path, bucket)
    backfill, api = container(tmp_path, bucket), container(tmp_path, bucket)
    assert backfill.missing_vectors("k1") == ids  # the batch is read and embedded ...
    assert api.delete_knowledge(["k1"]) == 2  # ... the document is deleted ...
    before = sorted(keys(bucket))
    assert backfill.add_vectors(chunks, vectors, SPACE) == 0  # ... and its vectors land on no row
    assert sorted(keys(bucket)) == before  # no generation published, nothing uploaded left behind
    assert backfill.missing_vectors("k1") == []
    gone(tmp_path, bucket, "k1", ids, vectors[0])


def test_vectors_whose_swap_loses_to_the_deletion_are_dropped(
    tmp_path: Path, bucket: str, door: tuple[Door, str]
) -> None:
    chunks, vectors, ids = phase_one(tmp_path, bucket)
    backfill, api = container(tmp_path, bucket), container(tmp_path, bucket)
    # The backfill built its generation (the document with its vectors) and is swapping the pointer when the
    # deletion publishes first: the swap fails, the write runs again on the deletion's generation and finds no row.
    landed, deleted = while_held(
        door[0], lambda: backfill.add_vectors(chunks, vectors, SPACE), lambda: api.delete_knowledge(["k1"])
    )
    assert (landed, deleted) == (0, 2)
    pointer = api.store.pointer("kb1")
    assert pointer is not None and not isinstance(pointer, str) and pointer.generation == 2
    folders = {k.split("/")[4] for k in keys(bucket) if "/gen-" in k}
    assert len(folders) == 2 and pointer.folder in folders  # the losing upload was deleted
    gone(tmp_path, bucket, "k1", ids, vectors[0])


def test_a_deletion_whose_swap_loses_to_the_vectors_deletes_them_too(
    tmp_path: Path, bucket: str, door: tuple[Door, str]
) -> None:
    chunks, vectors, ids = phase_one(tmp_path, bucket)
    backfill, api = container(tmp_path, bucket), container(tmp_path, bucket)
    deleted, landed = while_held(
        door[0], lambda: api.delete_knowledge(["k1"]), lambda: backfill.add_vectors(chunks, vectors, SPACE)
    )
    assert (landed, deleted) == (2, 2)  # the vectors were published, then the deletion ran again on them
    pointer = api.store.pointer("kb1")
    assert pointer is not None and not isinstance(pointer, str) and pointer.generation == 3
    gone(tmp_path, bucket, "k1", ids, vectors[0])
