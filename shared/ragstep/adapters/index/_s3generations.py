"""Where the S3-snapshot index keeps a knowledge base: immutable generations and one pointer object, in S3.

Layout under ``<prefix>tenants/<tenant>/index/<kb id>/``:

* ``gen-<n>-<token>/<files>``: the embedded index's folder of one generation, file for file (opaque here: whatever
  :class:`~ragstep.adapters.index.local.LocalSearchIndex` keeps in its folder). The token makes every upload's
  folder its own, so a writer that lost a race (or was paused past its time) can never overwrite files another
  writer published.
* ``current.json``: the pointer -- the published generation's folder, its files and sizes, its chunk count, and
  the folders it replaced with the time each was replaced (so they are deleted only after a grace period).

The pointer is replaced only with a conditional PutObject: ``If-Match: <etag read>`` (``If-None-Match: *`` for a
knowledge base's first generation). S3 applies it atomically, so of two writers that read the same pointer exactly
one wins; the other gets 412 and starts again from the new pointer. Readers poll the pointer with
``If-None-Match: <etag held>``: an unchanged pointer costs one request and no body.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragstep.adapters._aws import LazyAwsClient, error_code
from ragstep.adapters._http import one_line
from ragstep.errors import StorageError

POINTER = "current.json"
POINTER_FORMAT = 1
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_LOST_RACE = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_NOT_MODIFIED = frozenset({"304", "NotModified"})
_DENIED = frozenset({"AccessDenied", "403"})
# Files a writer never ships: SQLite's WAL and shared-memory files (checkpointed into the database before upload) and
# the local index's half-built snapshot folders.
_SKIP_SUFFIXES = ("-wal", "-shm", "-journal")
_TRANSFER_THREADS = 8
#: An unpublished folder this old is a crashed writer's: no Lambda runs that long, so no writer is still uploading it.
ORPHAN_AGE_S = 3600.0
# Files below this size travel in one request; larger ones in parts of this size, 4 at a time (several files travel
# at once too). Large parts: fewer requests, and moto (tests, `ragstep bench s3snapshot`) reads a whole object for
# every ranged GET, which made 16 MiB parts of a 300 MB file cost it gigabytes of copying.
_MULTIPART_BYTES = 64 * 1024 * 1024


class GenerationGone(StorageError):
    """A file of the generation being loaded was deleted meanwhile (pruned or replaced): read the pointer again."""


@dataclass(frozen=True)
class Pointer:
    """The published generation of one knowledge base (``folder`` empty: none yet)."""

    etag: str
    generation: int
    folder: str
    files: dict[str, int]
    chunks: int
    size: int
    retired: dict[str, float] = field(default_factory=dict)

    def body(self) -> bytes:
        doc = {
            "format": POINTER_FORMAT,
            "generation": self.generation,
            "folder": self.folder,
            "files": self.files,
            "chunks": self.chunks,
            "bytes": self.size,
            "retired": self.retired,
            "written_at": time.time(),
        }
        return json.dumps(doc, sort_keys=True).encode("utf-8")

    @classmethod
    def parse(cls, etag: str, data: bytes, where: str) -> Pointer:
        try:
            doc = json.loads(data)
            return cls(
                etag=etag,
                generation=int(doc["generation"]),
                folder=str(doc["folder"]),
                files={str(k): int(v) for k, v in doc["files"].items()},
                chunks=int(doc["chunks"]),
                size=int(doc["bytes"]),
                retired={str(k): float(v) for k, v in doc.get("retired", {}).items()},
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageError(
                f"the index pointer {where} is damaged ({type(exc).__name__}: {exc}); delete it and ingest the "
                "knowledge base's documents again"
            ) from exc


class GenerationStore:
    """The S3 objects of one tenant's knowledge bases (``root``: ``<prefix>tenants/<tenant>/index/``)."""

    def __init__(self, client: LazyAwsClient, bucket: str, root: str, *, kms_key_id: str | None = None) -> None:
        if not bucket:
            raise StorageError(
                "no S3 bucket configured for the index; set RAGSTEP_INDEX_S3_BUCKET or RAGSTEP_BLOB_BUCKET"
            )
        self.bucket = bucket
        self.root = root
        self._client = client
        self._encryption: dict[str, str] = (
            {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key_id}
            if kms_key_id
            else {"ServerSideEncryption": "AES256"}
        )

    @property
    def client(self) -> Any:
        with self._guard("connect to", ""):
            return self._client.get()

    def _key(self, kb_id: str, name: str = "") -> str:
        return f"{self.root}{kb_id}/{name}"

    @contextmanager
    def _guard(self, action: str, key: str) -> Iterator[None]:
        """botocore failures as one-line StorageErrors that name the object and say what to check."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except ClientError as exc:
            code = error_code(exc)
            message = one_line(exc.response.get("Error", {}).get("Message") or code)
            hint = "check the function's IAM policy on the index prefix" if code in _DENIED else ""
            raise StorageError(
                f"cannot {action} s3://{self.bucket}/{key}: {code}: {message}" + (f"; {hint}" if hint else "")
            ) from exc
        except BotoCoreError as exc:
            raise StorageError(
                f"cannot {action} s3://{self.bucket}/{key}: {one_line(str(exc))}; check AWS credentials, region and "
                "network access to S3"
            ) from exc

    # -- the pointer ---------------------------------------------------------------------------------------------

    def pointer(self, kb_id: str, held_etag: str | None = None) -> Pointer | str | None:
        """The knowledge base's pointer; None when it has none; ``held_etag`` itself when that is still current."""
        from botocore.exceptions import ClientError

        key = self._key(kb_id, POINTER)
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if held_etag:
            params["IfNoneMatch"] = held_etag
        with self._guard("read", key):
            try:
                response = self.client.get_object(**params)
                with response["Body"] as body:
                    data = body.read()
            except ClientError as exc:
                code = error_code(exc)
                if code in _NOT_MODIFIED and held_etag:
                    return held_etag
                if code in _MISSING:
                    return None
                # Without s3:ListBucket on the key itself S3 answers a missing key with 403, not 404; the functions'
                # policies grant ListBucket on the index prefix, so a listing tells "no pointer" from "denied".
                if code in _DENIED and not self._listed(key):
                    return None
                raise
        return Pointer.parse(response["ETag"], data, f"s3://{self.bucket}/{key}")

    def _listed(self, key: str) -> bool:
        with self._guard("list", key):
            response = self.client.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
        return any(obj["Key"] == key for obj in response.get("Contents", ()))

    def swap(self, kb_id: str, expected: Pointer | None, new: Pointer) -> Pointer | None:
        """Publish ``new`` if the pointer is still ``expected`` (None: there is none yet); None when another writer
        got there first."""
        from botocore.exceptions import ClientError

        key = self._key(kb_id, POINTER)
        condition = {"IfMatch": expected.etag} if expected is not None else {"IfNoneMatch": "*"}
        with self._guard("write", key):
            try:
                response = self.client.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=new.body(),
                    ContentType="application/json",
                    **condition,
                    **self._encryption,
                )
            except ClientError as exc:
                if error_code(exc) in _LOST_RACE or (expected is not None and error_code(exc) in _MISSING):
                    return None
                raise
        return Pointer(response["ETag"], new.generation, new.folder, new.files, new.chunks, new.size, new.retired)

    # -- generations ---------------------------------------------------------------------------------------------

    def upload(self, kb_id: str, folder: str, source: Path) -> dict[str, int]:
        """Copy every file of ``source`` to ``<kb>/<folder>/``; returns the files (relative paths) and sizes."""
        files = shipped_files(source)

        def put(name: str) -> None:
            key = self._key(kb_id, f"{folder}/{name}")
            with self._guard("write", key):
                if files[name] < _MULTIPART_BYTES:  # one request (the transfer manager would add its own set-up)
                    with open(source / name, "rb") as body:
                        self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **self._encryption)
                else:  # multipart, parts in parallel
                    self.client.upload_file(
                        str(source / name), self.bucket, key, ExtraArgs=dict(self._encryption), Config=_transfer()
                    )

        self._each(put, files)
        return files

    def download(self, kb_id: str, pointer: Pointer, dest: Path) -> None:
        """Copy the pointer's generation into ``dest``; :class:`GenerationGone` if a file has been deleted since."""
        from botocore.exceptions import ClientError

        def get(name: str) -> None:
            key = self._key(kb_id, f"{pointer.folder}/{name}")
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with self._guard("read", key):
                try:
                    if pointer.files[name] < _MULTIPART_BYTES:  # one GET (download_file would HEAD first)
                        response = self.client.get_object(Bucket=self.bucket, Key=key)
                        with response["Body"] as body, open(target, "wb") as out:
                            shutil.copyfileobj(body, out, 1024 * 1024)
                    else:  # ranged GETs in parallel
                        self.client.download_file(self.bucket, key, str(target), Config=_transfer())
                except ClientError as exc:
                    if error_code(exc) in _MISSING:
                        raise GenerationGone(f"s3://{self.bucket}/{key} is gone; the generation was replaced") from exc
                    raise
            if target.stat().st_size != pointer.files[name]:
                raise GenerationGone(f"s3://{self.bucket}/{key} does not have the size its pointer lists")

        self._each(get, pointer.files)

    def _each(self, fn: Any, names: dict[str, int]) -> None:
        # Largest first: the big files' transfers (multipart, in parallel ranges) start before the small ones.
        order = sorted(names, key=lambda n: -names[n])
        if len(order) <= 1:
            for name in order:
                fn(name)
            return
        with ThreadPoolExecutor(min(_TRANSFER_THREADS, len(order)), thread_name_prefix="ragstep-s3index") as pool:
            for future in [pool.submit(fn, name) for name in order]:
                future.result()

    def knowledge_bases(self) -> list[str]:
        """The ids of the knowledge bases that have objects here."""
        found: list[str] = []
        with self._guard("list", self.root):
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.root, Delimiter="/"
            ):
                found.extend(p["Prefix"][len(self.root) :].rstrip("/") for p in page.get("CommonPrefixes", ()))
        return sorted(found)

    def _objects(self, kb_id: str) -> list[dict[str, Any]]:
        prefix = self._key(kb_id)
        out: list[dict[str, Any]] = []
        with self._guard("list", prefix):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                out.extend(page.get("Contents", ()))
        return out

    def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes up to 1000 keys
            part = keys[start : start + 1000]
            with self._guard("delete", part[0]):
                response = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in part], "Quiet": True}
                )
            errors = response.get("Errors") or []
            if errors:
                first = errors[0]
                raise StorageError(
                    f"cannot delete s3://{self.bucket}/{first.get('Key')}: {first.get('Code')}: {first.get('Message')}"
                )

    def delete_folder(self, kb_id: str, folder: str) -> None:
        """Remove an unpublished generation (a writer that lost the race)."""
        prefix = f"{folder}/"
        self._delete([o["Key"] for o in self._objects(kb_id) if o["Key"][len(self._key(kb_id)) :].startswith(prefix)])

    def prune(self, kb_id: str, current: Pointer, grace_s: float, now: float | None = None) -> list[str]:
        """Delete the generations readers can no longer need: those replaced more than ``grace_s`` ago, and folders
        never published (a writer that crashed) untouched for :data:`ORPHAN_AGE_S`. Returns the folders deleted."""
        now = time.time() if now is None else now
        base = self._key(kb_id)
        newest: dict[str, float] = {}
        keys: dict[str, list[str]] = {}
        for obj in self._objects(kb_id):
            folder, sep, _ = obj["Key"][len(base) :].partition("/")
            if not sep or folder == current.folder:
                continue  # the pointer itself, or the published generation
            keys.setdefault(folder, []).append(obj["Key"])
            newest[folder] = max(newest.get(folder, 0.0), obj["LastModified"].timestamp())
        doomed = [
            folder
            for folder in keys
            if (current.retired[folder] + grace_s if folder in current.retired else newest[folder] + ORPHAN_AGE_S)
            <= now
        ]
        self._delete([k for folder in doomed for k in keys[folder]])
        return sorted(doomed)

    def delete_kb(self, kb_id: str) -> None:
        """Every object of the knowledge base, the pointer first (readers then see an empty knowledge base)."""
        objects = self._objects(kb_id)
        pointer = self._key(kb_id, POINTER)
        keys = [o["Key"] for o in objects]
        if pointer in keys:
            self._delete([pointer])
            keys.remove(pointer)
        self._delete(keys)


def _transfer() -> Any:
    """Large files in 64 MiB parts, 4 at a time per file (several files travel at once: see ``_each``)."""
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(multipart_threshold=_MULTIPART_BYTES, multipart_chunksize=_MULTIPART_BYTES, max_concurrency=4)


def shipped_files(source: Path) -> dict[str, int]:
    """The files (relative paths, sizes) a writer ships from the index folder ``source``: all but SQLite's WAL and
    shared-memory files (checkpointed before) and hidden entries (the local index's half-built snapshots)."""
    out: dict[str, int] = {}
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if path.is_file() and not path.name.endswith(_SKIP_SUFFIXES) and not any(p.startswith(".") for p in rel.parts):
            out[rel.as_posix()] = path.stat().st_size
    return out


__all__ = ["POINTER", "GenerationGone", "GenerationStore", "Pointer", "shipped_files"]
