"""Blob stores behind :class:`ragstep.ports.BlobStore`, chosen by ``RAGSTEP_BLOB_BACKEND``: ``local`` (a folder per
tenant) or ``s3`` (one bucket, each tenant under its own prefix: :func:`ragstep.models.blob_keys.tenant_prefix`).
Importing this package costs only the standard library."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from ragstep.ports import BlobStore
    from ragstep.settings import Settings

BACKENDS = ("local", "s3")


def make_blobs(settings: Settings, tenant_id: str, tenant_dir: Path) -> BlobStore:
    """The blob store of one tenant (``tenant_dir``: its embedded backends' folder)."""
    from ragstep.models.blob_keys import SCRATCH_PREFIXES, tenant_prefix

    backend = settings.blob_backend
    if backend == "local":
        from ragstep.adapters.blobs.local import LocalBlobStore

        return LocalBlobStore(tenant_dir / "blobs", scratch_prefixes=SCRATCH_PREFIXES)
    if backend == "s3":
        from ragstep.adapters.blobs.s3 import S3BlobStore

        prefix = tenant_prefix(settings.blob_prefix, tenant_id)
        return S3BlobStore(settings.blob_bucket, prefix, kms_key_id=settings.s3_kms_key_id)
    raise InputError(f"blob backend {backend!r} is not available in this build; use one of {', '.join(BACKENDS)}")
