"""The HTTP side of the OpenSearch index: the client, authentication, retries and bulk requests (deletions:
:mod:`.deletion`).

:class:`OpenSearchConnection` knows requests, not chunks; :class:`~ragstep.adapters.index.opensearch.index.
OpenSearchIndex` builds on it. Retries: HTTP 429, 502, 503, 504 and connection failures, with exponential backoff
and jitter (the client's own retries are off); ``_bulk`` items rejected with 429 are sent again on their own. Under a
request deadline (:mod:`ragstep.deadline`) no request waits longer than the time left, and no retry starts that
could not finish.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from ragstep import deadline
from ragstep.adapters._aws import aws_session
from ragstep.adapters._http import display_url, one_line
from ragstep.adapters.index.opensearch.queries import (
    BULK_MAX_ACTIONS,
    BULK_MAX_BYTES,
    RETRY_STATUSES,
    TENANT_FIELD,
    TENANT_MAPPING,
    Engine,
    build_bulk_body,
    build_knn_field,
    build_mapping,
    dumps,
    space_field,
)
from ragstep.adapters.index.opensearch.responses import (
    BulkItem,
    maps_field,
    parse_bulk_response,
    parse_mapping_response,
)
from ragstep.errors import InputError, StorageError
from ragstep.ingest_notes import note_indexing

log = logging.getLogger("ragstep.adapters.index.opensearch")

Flavour = Literal["es", "aoss"]
Auth = Literal["auto", "sigv4", "basic", "none"]
_AWS_HOST = re.compile(r"\.([a-z]{2}(?:-gov|-iso[a-z]*)?-[a-z]+-\d)\.(?:es|aoss)\.amazonaws\.com$")


class IndexMissing(Exception):
    """HTTP 404 from OpenSearch (index or pipeline not found); callers decide what that means."""


class OpenSearchConnection:
    """Requests to one OpenSearch index (``index``) at ``url``, retried, with failures as one-line
    :class:`StorageError` s. ``client`` is an ``opensearchpy.OpenSearch`` to use instead of creating one."""

    def __init__(
        self,
        url: str,
        *,
        index: str,
        flavour: Flavour,
        auth: Auth,
        username: str | None,
        password: str | None,
        region: str | None,
        verify_certs: bool,
        timeout_s: float,
        max_retries: int,
        backoff_base_s: float,
        backoff_max_s: float,
        visibility_timeout_s: float,
        engine: Engine,
        client: Any,
        sleep: Callable[[float], None],
    ) -> None:
        if not url:
            raise InputError("opensearch_url is empty; set RAGSTEP_OPENSEARCH_URL to the domain or collection URL")
        if flavour not in ("es", "aoss"):
            raise InputError(f"opensearch flavour must be 'es' or 'aoss', not {flavour!r}")
        if not index or index != index.lower() or index.startswith(("_", "-", "+")):
            raise InputError(f"OpenSearch index name {index!r} must be lower case and not start with _, - or +")
        self.url = url.rstrip("/")
        self.index = index
        self.flavour: Flavour = flavour
        self._auth_mode = auth
        self._username = username
        self._password = password
        self._region = region
        self._verify_certs = verify_certs
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._visibility_timeout_s = visibility_timeout_s
        self._sleep = sleep
        self._os = client
        self._lock = threading.Lock()
        self._path = "/" + quote(index, safe="")
        self._engine: Engine = engine
        self._fields: dict[str, int] | None = None  # vector field -> dimension, None until the mapping is read
        # Whether the mapping has the tenant field: an index created before tenants existed gets it added (by
        # ensure_index) before the first write of a document that carries it ("dynamic": "strict" refuses others).
        self._tenant_mapped = False

    # -- the client --------------------------------------------------------------------------------------------

    def _client(self) -> Any:
        with self._lock:
            if self._os is None:
                from opensearchpy import OpenSearch, RequestsHttpConnection

                self._os = OpenSearch(
                    hosts=[self.url],
                    http_auth=self._http_auth(),
                    verify_certs=self._verify_certs,
                    ssl_show_warn=self._verify_certs,
                    connection_class=RequestsHttpConnection,
                    pool_maxsize=20,
                    timeout=self._timeout_s,
                    # Retries (with backoff, which the client's own lack) happen in _request.
                    max_retries=0,
                    retry_on_status=(),
                    retry_on_timeout=False,
                )
            return self._os

    def _http_auth(self) -> Any:
        mode = self._auth_mode
        host = urlsplit(self.url).hostname or ""
        if mode == "auto":
            mode = "basic" if self._username else ("sigv4" if host.endswith(".amazonaws.com") else "none")
        if mode == "none":
            return None
        if mode == "basic":
            if not self._username:
                raise InputError("opensearch_auth is 'basic' but RAGSTEP_OPENSEARCH_USERNAME is not set")
            return (self._username, self._password or "")
        from opensearchpy import RequestsAWSV4SignerAuth

        session = aws_session()  # credentials resolve as for every other AWS client (ragstep.adapters._aws)
        match = _AWS_HOST.search(host)
        region = (
            (match.group(1) if match else None)
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or self._region
            or session.region_name
        )
        if not region:
            raise InputError(f"cannot tell the AWS region of {host}; set AWS_REGION")
        credentials = session.get_credentials()
        if credentials is None:
            raise StorageError("no AWS credentials found to sign OpenSearch requests (SigV4); configure a role")
        return RequestsAWSV4SignerAuth(credentials, region, "aoss" if self.flavour == "aoss" else "es")

    def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        missing_ok: bool = False,
        timeout_s: float | None = None,
    ) -> Any:
        """One call, retried on 429/502/503/504 and connection failures. A 404 raises :class:`IndexMissing` when
        ``missing_ok`` (the caller knows what a missing index means), a :class:`StorageError` otherwise."""
        from opensearchpy.exceptions import ConnectionError as OSConnectionError
        from opensearchpy.exceptions import OpenSearchException, TransportError

        client = self._client()
        attempts = self._max_retries + 1
        last = ""
        for attempt in range(attempts):
            # Never longer than the request's deadline allows (ragstep.deadline; no deadline = the configured one).
            timeout = deadline.attempt_timeout(timeout_s or self._timeout_s)
            if timeout is None:
                raise StorageError(
                    f"OpenSearch {what} at {display_url(self.url)} {deadline.out_of_time(attempt)}"
                    + (f"; last: {last}" if last else "")
                )
            try:
                return client.transport.perform_request(
                    method,
                    path,
                    params=dict(params) if params else None,
                    body=body,
                    headers=headers,
                    timeout=timeout,
                )
            except OSConnectionError as exc:  # includes timeouts
                last = f"{type(exc).__name__}: {one_line(str(exc.info or exc.error), 160)}"
            except TransportError as exc:
                status = exc.status_code if isinstance(exc.status_code, int) else 0
                detail = self._error_detail(exc)
                if status == 404 and missing_ok:
                    raise IndexMissing(detail) from exc
                last = f"HTTP {status} {detail}"
                if status not in RETRY_STATUSES:
                    hint = ""
                    if status in (401, 403):
                        hint = "; check the credentials and the " + (
                            "collection's data access policy" if self.flavour == "aoss" else "access policy"
                        )
                    raise StorageError(f"OpenSearch {what} failed at {display_url(self.url)}: {last}{hint}") from exc
            except OpenSearchException as exc:  # e.g. a proxy's HTML page where JSON was expected
                raise StorageError(
                    f"OpenSearch {what} failed at {display_url(self.url)}: {type(exc).__name__}: {one_line(str(exc))}"
                ) from exc
            if attempt + 1 < attempts:
                delay = self._delay_s(attempt)
                if not deadline.may_retry(delay):  # the retry could not finish before the caller's time is up
                    where = f"OpenSearch {what} at {display_url(self.url)}"
                    raise StorageError(f"{where} {deadline.out_of_time(attempt + 1)}; last: {last}")
                self._sleep(delay)
        raise StorageError(
            f"OpenSearch {what} failed at {display_url(self.url)} after {attempts} attempt"
            f"{'s' if attempts != 1 else ''}: {last}"
        )

    @staticmethod
    def _error_detail(exc: Any) -> str:
        info = exc.info if isinstance(exc.info, Mapping) else {}
        error = info.get("error", exc.error)
        if isinstance(error, Mapping):
            reason = error.get("reason") or ""
            causes = error.get("root_cause") or []
            if not reason and causes:
                reason = causes[0].get("reason", "")
            return one_line(f"{error.get('type', 'error')}: {reason}")
        return one_line(str(error))

    def _delay_s(self, attempt: int) -> float:
        ceiling = min(self._backoff_max_s, self._backoff_base_s * 2**attempt)
        return ceiling * random.uniform(0.5, 1.0)

    # -- low-level operations ----------------------------------------------------------------------------------

    def _search(self, body: Mapping[str, Any], *, what: str = "search", params: Mapping[str, str] | None = None) -> Any:
        try:
            return self._request("POST", f"{self._path}/_search", what=what, body=body, params=params, missing_ok=True)
        except IndexMissing:
            return {"hits": {"hits": []}}  # no index yet: nothing indexed, nothing found

    def _count(self, query: Mapping[str, Any]) -> int:
        try:
            resp = self._request(
                "POST", f"{self._path}/_count", what="count", body={"query": dict(query)}, missing_ok=True
            )
        except IndexMissing:
            return 0
        return int(resp.get("count", 0))

    def _bulk(
        self,
        actions: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
        *,
        what: str,
        params: Mapping[str, str] | None = None,
        noted: bool = False,
    ) -> list[BulkItem]:
        """Send ``actions`` in size-bounded requests; items rejected with 429 are sent again on their own.

        Returns one item per action, in order; the caller decides which failures matter. ``noted``: each request
        done is told to whoever shows ingest progress (a large file's chunks take many: minutes of silence).
        """
        results: list[BulkItem | None] = [None] * len(actions)
        for batch in self._batches(actions):
            pending = list(batch)
            for attempt in range(self._max_retries + 1):
                body = build_bulk_body(actions[i] for i in pending)
                resp = self._request(
                    "POST",
                    f"{self._path}/_bulk",
                    what=what,
                    params=params,
                    body=body,
                    headers={"Content-Type": "application/x-ndjson"},
                )
                items = parse_bulk_response(resp)
                if len(items) != len(pending):
                    raise StorageError(
                        f"OpenSearch {what}: the bulk response has {len(items)} items for {len(pending)} actions"
                    )
                retry = []
                for pos, item in zip(pending, items, strict=True):
                    results[pos] = item
                    if item.status == 429:
                        retry.append(pos)
                delay = self._delay_s(attempt)
                # Rejected items stay failed when the deadline leaves no time for another round (caller reports).
                if not retry or attempt == self._max_retries or not deadline.may_retry(delay):
                    break
                pending = retry
                self._sleep(delay)
            if noted:  # batches are runs of consecutive actions
                note_indexing(batch[-1] + 1, len(actions))
        return [r for r in results if r is not None]

    @staticmethod
    def _batches(actions: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]]) -> list[list[int]]:
        batches: list[list[int]] = []
        current: list[int] = []
        size = 0
        for i, (meta, source) in enumerate(actions):
            n = len(dumps(meta)) + (len(dumps(source).encode("utf-8")) if source is not None else 0) + 2
            if current and (len(current) >= BULK_MAX_ACTIONS or size + n > BULK_MAX_BYTES):
                batches.append(current)
                current, size = [], 0
            current.append(i)
            size += n
        if current:
            batches.append(current)
        return batches

    def _write_params(self) -> dict[str, str]:
        # wait_for: the bulk returns once its documents are searchable, so the old version can go next (not AOSS).
        return {"refresh": "wait_for"} if self.flavour == "es" else {}

    def _await_visible(self, query: Mapping[str, Any], expected: int, *, what: str) -> None:
        """AOSS: wait until ``expected`` documents match ``query`` (writes become searchable after a refresh that
        the collection schedules itself), so deleting the previous version never leaves readers with nothing."""
        if self.flavour == "es" or expected <= 0:
            return
        deadline = time.monotonic() + self._visibility_timeout_s
        delay = 0.5
        while True:
            seen = self._count(query)
            if seen >= expected:
                return
            if time.monotonic() >= deadline:
                log.warning(
                    "%s: %d of %d new documents searchable after %.0fs; going on",
                    what,
                    seen,
                    expected,
                    self._visibility_timeout_s,
                )
                return
            self._sleep(delay)
            delay = min(delay * 2, 5.0)

    @staticmethod
    def _describe_failures(failed: Sequence[tuple[str, BulkItem]], limit: int = 5) -> str:
        parts = [f"{key}: HTTP {i.status} {i.error_type}: {one_line(i.error_reason, 160)}" for key, i in failed[:limit]]
        more = f" (and {len(failed) - limit} more)" if len(failed) > limit else ""
        return f"{len(failed)} chunk{'s' if len(failed) != 1 else ''} ({'; '.join(parts)}){more}"

    # -- index and mapping -------------------------------------------------------------------------------------

    def ensure_index(self, dimension_by_space: Mapping[str, int] | None = None) -> None:
        """Create the index if it is missing, and add a vector field for every space it does not map yet.

        Idempotent; a space already mapped with another dimension is an :class:`InputError`.
        """
        wanted = dict(dimension_by_space or {})
        fields = self._load_fields(create_with=wanted)
        missing = {}
        for space, dim in wanted.items():
            name = space_field(space)
            if name not in fields:
                missing[space] = dim
            elif fields[name] != dim:
                raise self._dimension_error(space, fields[name], dim)
        if missing or not self._tenant_mapped:
            properties = {space_field(s): build_knn_field(d, self._engine) for s, d in missing.items()}
            if not self._tenant_mapped:  # an index from before tenants: documents now carry the tenant field
                properties[TENANT_FIELD] = TENANT_MAPPING
            try:
                self._request("PUT", f"{self._path}/_mapping", what="mapping update", body={"properties": properties})
            except StorageError:
                self._fields = None  # another process may have mapped the field meanwhile: read it again
                fields = self._load_fields()
                for space, dim in missing.items():
                    if fields.get(space_field(space)) not in (None, dim):
                        raise self._dimension_error(space, fields[space_field(space)], dim) from None
                raise
            with self._lock:
                self._fields = {**(self._fields or {}), **{space_field(s): d for s, d in missing.items()}}
                self._tenant_mapped = True

    def _load_fields(self, *, create_with: Mapping[str, int] | None = None) -> dict[str, int]:
        """The mapped vector fields (cached); with ``create_with``, a missing index is created with those spaces."""
        if self._fields is not None:
            return self._fields
        try:
            response = self._request("GET", f"{self._path}/_mapping", what="mapping read", missing_ok=True)
        except IndexMissing:
            if create_with is None:
                return {}
            if self._create_index(create_with):
                response = {self.index: build_mapping(create_with, engine=self._engine)}
            else:  # another process created it first, perhaps with other spaces: read what it made
                response = self._request("GET", f"{self._path}/_mapping", what="mapping read")
        fields = parse_mapping_response(response)
        with self._lock:
            self._fields = fields
            self._tenant_mapped = maps_field(response, TENANT_FIELD)
        return fields

    def _create_index(self, dimension_by_space: Mapping[str, int]) -> bool:
        """Create the index; False when another process created it meanwhile."""
        body = build_mapping(dimension_by_space, engine=self._engine, custom_similarity=self.flavour == "es")
        try:
            self._request("PUT", self._path, what="index creation", body=body)
        except StorageError as exc:
            if "resource_already_exists_exception" in exc.message:
                return False
            # Only a managed domain or a cluster may switch engines: a Serverless collection refuses lucene.
            if self._engine == "faiss" and "HTTP 400" in exc.message and self.flavour == "es":
                raise StorageError(
                    f"{exc.message}; the faiss engine supports cosinesimil from OpenSearch 2.19: on an older "
                    "cluster set RAGSTEP_OPENSEARCH_KNN_ENGINE=lucene"
                ) from exc
            raise
        return True

    def delete_index(self) -> None:
        """Drop the whole index (used by the live tests); a missing index is fine."""
        with contextlib.suppress(IndexMissing):
            self._request("DELETE", self._path, what="index deletion", missing_ok=True)
        with self._lock:
            self._fields = None

    def _dimension_error(self, space: str, have: int, got: int) -> InputError:
        return InputError(
            f"embedding space {space!r} holds {have}-dimensional vectors, got {got}; "
            "re-embed the knowledge base or use another embedding model id"
        )

    def _dimension(self, name: str) -> int | None:
        """The dimension of a vector field, None when unmapped (the mapping is read again once before saying so:
        another process may have added the space since we cached it)."""
        fields = self._load_fields()
        if name not in fields:
            with self._lock:
                self._fields = None
            fields = self._load_fields()
        return fields.get(name)
