"""The scratch files of ingest runs on this machine: whose they are, and removing those a killed run left behind.

Every run removes its own products (``ingest/<kb>/<knowledge>/<sha256>/<request id>/``, see
:mod:`ragstep.models.blob_keys`) when a document is indexed, fails or is interrupted. A process killed outright
(SIGKILL, a power cut) cannot: its ``parsed.md``, ``chunks.jsonl`` and ``vectors.npy`` would stay for good, since
every later run writes under request ids of its own.

So a local ingest holds an :class:`IngestLease` while it runs: a file under the data dir (``ingest-runs/<id>.lock``)
locked with ``flock``, and the request id of every document it ingests starts with the lease's id. The kernel drops
the lock when the process ends, however it ends. On start, a run removes the products of every lease whose file is
still there but no longer locked (:func:`sweep_stale_products`). Products whose lease file is not on this machine
(another machine's run on a shared bucket, an upload served by ``ragstep serve``, a Lambda) are never touched: on
AWS a lifecycle rule on ``ingest/`` sweeps them.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from types import TracebackType
from typing import IO

from ragstep.context import Context
from ragstep.models.blob_keys import INGEST_PREFIX
from ragstep.stages.ingest.products import delete_blobs

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, so no lease; runs still remove their own products
    fcntl = None  # type: ignore[assignment]

#: The folder of lease files, under the tenant's data dir.
LEASES_DIR = "ingest-runs"


class IngestLease:
    """This process's claim on the ingest products it writes; a context manager (taken on enter, freed on exit)."""

    def __init__(self, ctx: Context) -> None:
        self.id = uuid.uuid4().hex[:16]
        self._folder = ctx.data_dir / LEASES_DIR
        self._handle: IO[bytes] | None = None

    def request_id(self) -> str:
        """A fresh request id for one document's run, marked as this lease's."""
        return f"{self.id}-{uuid.uuid4().hex}"

    def __enter__(self) -> IngestLease:
        if fcntl is None:
            return self
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            handle = (self._folder / f"{self.id}.lock").open("wb")
        except OSError:
            return self  # a data dir that takes no lease file still ingests; its leftovers are not swept
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._handle = handle
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._handle is None:
            return
        # Unlinked while still locked: a sweep starting now finds either a locked file or none.
        with contextlib.suppress(OSError):
            (self._folder / f"{self.id}.lock").unlink()
        self._handle.close()
        self._handle = None


def _lease_of(key: str) -> tuple[str, str] | None:
    """(lease id, run prefix) of a products key ``ingest/<kb>/<knowledge>/<sha256>/<request id>/<name>``."""
    parts = key.split("/")
    if len(parts) < 6 or "-" not in parts[4]:
        return None
    return parts[4].split("-", 1)[0], "/".join(parts[:5]) + "/"


def _is_stale(lease_file: Path) -> bool:
    """The lease file is here and nobody holds its lock: its process has ended."""
    if fcntl is None:
        return False
    try:
        fd = os.open(lease_file, os.O_RDONLY)
    except OSError:
        return False  # not a lease of this machine (or already swept): not ours to judge
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: that run is alive
    finally:
        os.close(fd)  # closing drops the lock taken just now
    return True


def sweep_stale_products(ctx: Context, own: IngestLease | None = None) -> list[str]:
    """Remove the products of ingest runs on this machine whose process has ended; returns the keys removed."""
    folder = ctx.data_dir / LEASES_DIR
    if fcntl is None or not folder.is_dir():
        return []
    verdicts: dict[str, bool] = {}
    prefixes: set[str] = set()
    for key in ctx.blobs.list(INGEST_PREFIX):
        found = _lease_of(key)
        if found is None or (own is not None and found[0] == own.id):
            continue
        lease, prefix = found
        if lease not in verdicts:
            verdicts[lease] = _is_stale(folder / f"{lease}.lock")
        if verdicts[lease]:
            prefixes.add(prefix)
    gone = delete_blobs(ctx.blobs, sorted(prefixes))
    for lease_file in folder.glob("*.lock"):
        if (own is None or lease_file.stem != own.id) and _is_stale(lease_file):
            with contextlib.suppress(OSError):
                lease_file.unlink()
    return gone
