"""Search indexes behind :class:`ragstep.ports.SearchIndex`, chosen by ``RAGSTEP_INDEX_BACKEND``: ``local`` (embedded,
a folder per tenant), ``opensearch`` (one index, every document tagged with its tenant) or ``s3snapshot`` (snapshots
in S3, cached in a folder per tenant). Importing this package costs only the standard library: the chosen backend's
module loads when :func:`make_index` builds it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

    from ragstep.ports import SearchIndex
    from ragstep.settings import Settings

BACKENDS = ("local", "opensearch", "s3snapshot")


def make_index(settings: Settings, tenant_id: str, tenant_dir: Path) -> SearchIndex:
    """The index of one tenant (``tenant_dir``: its embedded backends' folder)."""
    backend = settings.index_backend
    if backend == "local":
        from ragstep.adapters.index.local import LocalSearchIndex

        return LocalSearchIndex(
            tenant_dir / "index",
            vector_storage=settings.vector_storage,
            rescore_factor=settings.vector_rescore_factor,
            ivf_min_rows=settings.vector_ivf_min_rows,
        )
    if backend == "opensearch":
        from ragstep.adapters.index.opensearch import index_class

        # A domain takes vectors after the chunks (progressive indexing); a Serverless collection cannot.
        return index_class(settings.opensearch_flavour).from_settings(settings, tenant_id=tenant_id)
    if backend == "s3snapshot":
        from ragstep.adapters.index.s3snapshot import S3SnapshotIndex

        return S3SnapshotIndex.from_settings(settings, tenant_id, tenant_dir / "s3index")
    raise InputError(f"index backend {backend!r} is not available in this build; use one of {', '.join(BACKENDS)}")
