"""A document deleted on an OpenSearch domain while its vectors land stays deleted
(:mod:`ragstep.adapters.index.opensearch.deletion`).

The vector write itself cannot bring a deleted chunk back: it is a scripted ``update`` without ``upsert``, which the
update API answers with 404 for a missing document. The danger is the deletion: ``_delete_by_query`` deletes what
its snapshot holds under the version it saw there, and a document the backfill updated in between is a version
conflict that ``conflicts=proceed`` skips, so the chunk outlived the deletion with its new vector.

The cluster is :class:`test_opensearch_backfill.Cluster` (real HTTP on 127.0.0.1) plus what the delete-by-query
documentation says of versions: each document carries an internal version bumped by every write, the request takes
its snapshot first, then deletes each document only while its version is the one seen, and reports the others in
``version_conflicts``. The backfill's update is sent over HTTP by the adapter itself, while the delete waits between
its snapshot and its deletes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ragstep.adapters.index.opensearch import OpenSearchBackfillIndex
from ragstep.adapters.index.opensearch.deletion import DELETE_ROUNDS
from ragstep.errors import StorageError
from support.scripted_http import RecordedRequest, ScriptedHTTPServer, ScriptedResponse
from test_opensearch_backfill import DEFAULT_SCOPE, DOC, FIELD, SPACE, Cluster, chunk, ok, unit

VECTORS = unit([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0])


class VersionedCluster(Cluster):
    """:class:`Cluster` with internal versions and a delete by query that deletes from a snapshot."""

    def __init__(self) -> None:
        super().__init__()
        self.versions: dict[str, int] = {}
        self.deletions: list[RecordedRequest] = []
        #: Run once by the next delete by query between its snapshot and its deletes (another writer's turn).
        self.between: Callable[[], None] | None = None

    def __call__(self, req: RecordedRequest) -> ScriptedResponse:
        if req.path == "/t/_delete_by_query":
            self.deletions.append(req)
        return super().__call__(req)

    def index_phase_one(self, chunks: list[Any], tenant: str = "default") -> None:
        super().index_phase_one(chunks, tenant)
        for c in chunks:
            self.versions[c.id] = self.versions.get(c.id, 0) + 1

    def _bulk(self, req: RecordedRequest) -> ScriptedResponse:
        lines = [json.loads(line) for line in req.body.decode().splitlines()]
        for meta in lines[::2]:
            if "index" in meta:  # an index op is a new version of the document
                self.versions[meta["index"]["_id"]] = self.versions.get(meta["index"]["_id"], 0) + 1
        return super()._bulk(req)

    def _update(self, doc_id: str, body: dict[str, Any]) -> dict[str, Any]:
        out = super()._update(doc_id, body)
        if out.get("result") == "updated":
            self.versions[doc_id] += 1
        return out

    @staticmethod
    def _matches(doc: dict[str, Any], query: dict[str, Any]) -> bool:
        for clause in query["bool"]["filter"]:
            if "bool" in clause:  # the default tenant's scope: every document here is the default tenant's
                continue
            kind = "terms" if "terms" in clause else "term"
            ((field, wanted),) = clause[kind].items()
            if doc.get(field) not in (wanted if kind == "terms" else [wanted]):
                return False
        return not any(doc.get(f) == v for c in query["bool"].get("must_not", []) for f, v in c["term"].items())

    def _delete_by_query(self, query: dict[str, Any]) -> ScriptedResponse:
        snapshot = [(i, self.versions[i]) for i, d in self.docs.items() if self._matches(d, query)]
        if self.between is not None:
            between, self.between = self.between, None
            between()
        deleted = 0
        for doc_id, seen in snapshot:
            if doc_id in self.docs and self.versions[doc_id] == seen:  # internal versioning: deleted as seen only
                del self.docs[doc_id]
                deleted += 1
        return ok(
            {
                "took": 2,
                "timed_out": False,
                "total": len(snapshot),
                "deleted": deleted,
                "batches": 1,
                "version_conflicts": len(snapshot) - deleted,
                "noops": 0,
                "retries": {"bulk": 0, "search": 0},
                "throttled_millis": 0,
                "requests_per_second": -1.0,
                "throttled_until_millis": 0,
                "failures": [],
            }
        )


@pytest.fixture
def cluster() -> Iterator[tuple[VersionedCluster, ScriptedHTTPServer]]:
    state = VersionedCluster()
    with ScriptedHTTPServer(fallback=state) as srv:
        yield state, srv


def domain(url: str) -> OpenSearchBackfillIndex:
    return OpenSearchBackfillIndex(
        url, index="t", auth="none", backoff_base_s=0.0, max_retries=1, sleep=lambda _s: None, timeout_s=10.0
    )


def while_deleting(state: VersionedCluster, delete: Callable[[], Any], write: Callable[[], Any]) -> tuple[Any, Any]:
    """Run ``delete``; once its delete by query has taken its snapshot, run ``write`` (over HTTP, from this thread)
    before the deletes go ahead. Returns both results."""
    snapshot_taken, written = threading.Event(), threading.Event()

    def between() -> None:
        snapshot_taken.set()
        assert written.wait(10), "the concurrent write never came"

    state.between = between
    outcome: list[Any] = []
    worker = threading.Thread(target=lambda: outcome.append(delete()), daemon=True)
    worker.start()
    assert snapshot_taken.wait(10), "the deletion sent no delete by query"
    try:
        wrote = write()
    finally:
        written.set()
        worker.join(10)
    assert len(outcome) == 1, "the deletion failed (see the thread's exception above)"
    return outcome[0], wrote


@pytest.mark.parametrize(
    ("delete", "query"),
    [
        (lambda idx: idx.delete_knowledge(["k1"]), {"terms": {"knowledge_id": ["k1"]}}),
        (lambda idx: idx.delete_knowledge_base("kb1"), {"term": {"knowledge_base_id": "kb1"}}),
    ],
    ids=["document", "knowledge_base"],
)
def test_a_document_deleted_while_its_vectors_land_does_not_come_back(
    cluster: tuple[VersionedCluster, ScriptedHTTPServer], delete: Callable[[Any], int], query: dict[str, Any]
) -> None:
    state, srv = cluster
    state.index_phase_one(DOC)
    idx = domain(srv.url)
    deleted, landed = while_deleting(state, lambda: delete(idx), lambda: idx.add_vectors(DOC[:2], VECTORS[:2], SPACE))
    assert landed == 2  # the batch reached c1 and c2 after the snapshot: their delete was a version conflict
    assert state.docs == {} and deleted == 3  # ... and the delete ran again for them
    assert len(state.deletions) == 2
    for req in state.deletions:  # the documented request, both times
        assert req.query == {"refresh": ["true"], "conflicts": ["proceed"]}
        assert req.json == {"query": {"bool": {"filter": [DEFAULT_SCOPE, query]}}}
    # The last batch, landing after the deletion: an update without upsert re-creates nothing (404, not an error).
    state.updates.clear()
    assert idx.add_vectors(DOC[2:], VECTORS[2:], SPACE) == 0
    assert state.docs == {} and idx.missing_vectors("k1") == []
    ((meta, body),) = state.updates
    assert set(meta) == {"_id", "retry_on_conflict"} and set(body) == {"script"}  # no upsert, doc_as_upsert ...


def test_an_old_chunk_given_its_vector_while_a_reingest_drops_it_is_dropped(
    cluster: tuple[VersionedCluster, ScriptedHTTPServer],
) -> None:
    state, srv = cluster
    state.index_phase_one(DOC)
    idx = domain(srv.url)
    shorter = [chunk("c1", "Vector search, second edition.")]  # c2 and c3 are gone from the new content
    _, landed = while_deleting(
        state, lambda: idx.replace_knowledge("k1", shorter), lambda: idx.add_vectors(DOC[1:], VECTORS[1:], SPACE)
    )
    assert landed == 2  # the old content's batch reached c2 and c3 between the snapshot and the deletes
    assert sorted(state.docs) == ["c1"] and state.docs["c1"]["content"] == "Vector search, second edition."
    assert FIELD not in state.docs["c1"] and idx.missing_vectors("k1") == ["c1"]
    assert len(state.deletions) == 2


def test_a_deletion_that_keeps_conflicting_fails_with_a_clear_error() -> None:
    conflicting = {"took": 1, "timed_out": False, "total": 1, "deleted": 0, "version_conflicts": 1, "failures": []}
    with ScriptedHTTPServer(fallback=ok(conflicting)) as srv:
        with pytest.raises(StorageError, match=r"deletion of knowledge items: .*kept changing.*run it again"):
            domain(srv.url).delete_knowledge(["k1"])
        assert len(srv.requests) == DELETE_ROUNDS
        assert {r.path for r in srv.requests} == {"/t/_delete_by_query"}
