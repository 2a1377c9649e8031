"""Deleting the documents a query matches, on a domain (one ``_delete_by_query``, repeated while documents change
under it) or on a Serverless collection (a ``search_after`` scan, then ``delete`` actions by ``_id``).

A delete by query takes a snapshot of the index when it starts and deletes each document it finds there under the
version it saw: a document written in between (a vector landing from the ingest's second phase, an enable or
disable) is a version conflict. With ``conflicts=proceed`` the request counts it in ``version_conflicts`` and goes
on, so that document, vector and all, outlives the deletion: a deleted knowledge item would be found again. The
query is therefore run again while any conflict is reported; the guarded vector update never re-creates a deleted
document (an ``update`` without ``upsert`` answers 404 for it: :mod:`.backfill`), so the rounds end.

Documentation followed: https://docs.opensearch.org/latest/api-reference/document-apis/delete-by-query/ (snapshot
and internal versioning, ``conflicts``, ``version_conflicts`` and ``failures`` in the response).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragstep.adapters._http import one_line
from ragstep.adapters.index.opensearch.connection import IndexMissing, OpenSearchConnection
from ragstep.adapters.index.opensearch.queries import (
    SCAN_PAGE,
    build_delete_by_query,
    build_scan_query,
    delete_action,
)
from ragstep.adapters.index.opensearch.responses import parse_search_response
from ragstep.errors import StorageError

#: Delete-by-query requests one deletion may take while documents keep changing under it (a write lands once per
#: chunk at most, so a second round normally finds nothing left over).
DELETE_ROUNDS = 5


class OpenSearchDeletion(OpenSearchConnection):
    """The deletions :class:`~ragstep.adapters.index.opensearch.index.OpenSearchIndex` builds on (module docstring)."""

    def _delete_matching(self, query: Mapping[str, Any], *, what: str) -> int:
        """Delete every document matching ``query``; returns how many went."""
        if self.flavour != "es":
            return self._delete_scanned(query, what=what)
        deleted = 0
        for _ in range(DELETE_ROUNDS):
            try:
                resp = self._request(
                    "POST",
                    f"{self._path}/_delete_by_query",
                    what=what,
                    params={"refresh": "true", "conflicts": "proceed"},
                    body=build_delete_by_query(query),
                    missing_ok=True,
                    # Runs to completion in one request (a knowledge base can hold many chunks).
                    timeout_s=max(self._timeout_s, 300.0),
                )
            except IndexMissing:
                return deleted
            failures = resp.get("failures") or []
            if failures:
                first = failures[0]
                cause = first.get("cause") or {}
                raise StorageError(
                    f"OpenSearch {what}: {len(failures)} deletions failed, e.g. document {first.get('id', '?')}: "
                    f"{cause.get('type', 'error')}: {one_line(cause.get('reason', ''))}"
                )
            deleted += int(resp.get("deleted", 0))
            if not resp.get("version_conflicts"):
                return deleted
        raise StorageError(
            f"OpenSearch {what}: documents kept changing during {DELETE_ROUNDS} deletions in a row; run it again"
        )

    def _delete_scanned(self, query: Mapping[str, Any], *, what: str) -> int:
        """Serverless (no ``_delete_by_query``): the matching ``_id`` s, deleted by id (a delete by id is not
        conditional, so nothing written meanwhile survives it)."""
        doc_ids = self._scan_ids(query)
        if not doc_ids:
            return 0
        items = self._bulk([delete_action(d) for d in doc_ids], what=what)
        failed = [(d, i) for d, i in zip(doc_ids, items, strict=True) if not i.ok and i.status != 404]
        if failed:
            raise StorageError(f"OpenSearch {what}: could not delete {self._describe_failures(failed)}")
        return sum(1 for i in items if i.ok and i.result == "deleted")

    def _scan_ids(self, query: Mapping[str, Any]) -> list[str]:
        """Every ``_id`` matching ``query`` (search_after pages)."""
        ids: list[str] = []
        after: list[Any] | None = None
        while True:
            hits = parse_search_response(
                self._search(build_scan_query(query, SCAN_PAGE, after), what="scan for deletion")
            )
            ids.extend(h.doc_id for h in hits)
            if len(hits) < SCAN_PAGE or hits[-1].sort is None:
                return ids
            after = hits[-1].sort
