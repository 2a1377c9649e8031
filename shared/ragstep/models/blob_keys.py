"""Where things live in a tenant's blob store: the one spelling of the key layout, on a laptop and in S3.

What ingestion keeps:

* ``sources/<kb id>/<knowledge id>/<sha256><ext>``: the original file as the CLI or the API stored it (on AWS an
  upload's own key plays this role). Content-addressed, so a new version never overwrites the version that is
  indexed; the previous one is removed once the new one is indexed. Recorded as ``Knowledge.source_key``.
* ``ingest/<kb id>/<knowledge id>/<sha256>/<run id>/``: one run's products -- ``parsed.md`` (or ``faq.json``),
  ``tables.json`` (data files), ``chunks.jsonl``, ``vectors.npy``. Keyed by the run (``IngestState.request_id``), so
  two runs of the same file at once never read or remove each other's products. Transient (:data:`SCRATCH_PREFIXES`):
  a run removes its own once the document is indexed or skipped, or when it fails (on AWS a lifecycle rule on
  ``ingest/`` sweeps what a killed run left; deleting the document or its knowledge base removes them).
* ``data/<kb id>/<knowledge id>/<file name>``: data files, written by ``ingest_index`` just before the index swap.
* ``hashes/<kb id>/<sha256>``: content hash -> the knowledge item that indexed it (``stages/ingest/dedupe.py``).
* ``images/<kb id>/<knowledge id>/<sha256><ext>``: the pictures of a document (``stages/ingest/figures.py``),
  content-addressed; removed with the document.
* ``pending/<kb id>/<knowledge id>/<sha256>.jsonl``: the chunks of a document indexed for keywords first, kept until
  every one has its vector (progressive indexing); recorded as ``Knowledge.vectors_pending``. It outlives the
  process that wrote it, so that another one can finish the vectors.

Where uploads start the ingest state machine on AWS (an S3 ``Object Created`` event, ``entry/aws/events.py``), under
the blob store's ``RAGSTEP_BLOB_PREFIX``:

* ``uploads/<knowledge base>/<path>``: a file for a knowledge base of the default tenant;
* ``tenants/<tenant>/uploads/<knowledge base>/<path>``: the same for another tenant, whose blob store keeps all its
  objects under ``tenants/<tenant>/`` (:func:`tenant_prefix`).

Importing this module costs only the standard library (the AWS handlers read it before anything else loads).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragstep.models import IngestState, Knowledge, KnowledgeBase

SOURCES_PREFIX = "sources/"
INGEST_PREFIX = "ingest/"
DATA_PREFIX = "data/"
HASHES_PREFIX = "hashes/"
IMAGES_PREFIX = "images/"
PENDING_PREFIX = "pending/"
#: Where uploads start the ingest state machine: ``<RAGSTEP_BLOB_PREFIX>uploads/<knowledge base>/<path>``.
UPLOADS_PREFIX = "uploads/"
#: Where another tenant's objects go: ``<RAGSTEP_BLOB_PREFIX>tenants/<tenant>/...``.
TENANTS_PREFIX = "tenants/"
#: Prefixes whose objects are one run's working files, never a document's record: the local blob store writes them
#: without the fsync a kept object gets. ``pending/`` too: should a crash leave one missing or empty, the vectors are
#: made from the chunks' indexed content instead (``app/ingest_vectors.py``); two fsyncs a file were a fifth of
#: the keyword phase of a folder of small files.
SCRATCH_PREFIXES = (INGEST_PREFIX, PENDING_PREFIX)

CONTENT_TYPES = {
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".markdown": "text/markdown; charset=utf-8",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".csv": "text/csv",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".json": "application/json",
}


def content_type(filename: str) -> str:
    """The Content-Type a stored original gets, from its extension."""
    return CONTENT_TYPES.get(PurePath(filename).suffix.lower(), "application/octet-stream")


# -- one tenant's blob store ---------------------------------------------------------------------------------------


def root_prefix(configured: str) -> str:
    """``RAGSTEP_BLOB_PREFIX`` as the start of a key: no leading slash, one trailing slash ("" for none)."""
    stripped = configured.strip("/")
    return f"{stripped}/" if stripped else ""


def tenant_prefix(configured: str, tenant_id: str) -> str:
    """Where a tenant's blob store keeps its objects in the bucket: the configured prefix itself for the default
    tenant (the layout single-tenant installations always had), ``<prefix>tenants/<tenant>/`` for any other."""
    from ragstep.models.base import DEFAULT_TENANT

    if tenant_id == DEFAULT_TENANT:
        return configured
    return root_prefix(configured) + f"{TENANTS_PREFIX}{tenant_id}/"


# -- what ingestion writes -----------------------------------------------------------------------------------------


def source_blob_key(kb_id: str, knowledge_id: str, content_hash: str, filename: str) -> str:
    """Where a stored original lives: content-addressed, so a new version never overwrites the current one."""
    return f"{SOURCES_PREFIX}{kb_id}/{knowledge_id}/{content_hash}{PurePath(filename).suffix.lower()}"


def run_products_prefix(state: IngestState) -> str:
    """The folder of one run's products (keyed by the run, not only by the content)."""
    src = state.source
    return f"{INGEST_PREFIX}{src.knowledge_base_id}/{src.knowledge_id}/{src.content_hash}/{state.request_id}/"


def product_key(state: IngestState, name: str) -> str:
    return run_products_prefix(state) + name


def pending_prefix(kb_id: str, knowledge_id: str) -> str:
    return f"{PENDING_PREFIX}{kb_id}/{knowledge_id}/"


def pending_chunks_key(kb_id: str, knowledge_id: str, content_hash: str) -> str:
    """Where a document indexed for keywords first keeps its chunks (``embed_text`` included) until their vectors
    are added."""
    return f"{pending_prefix(kb_id, knowledge_id)}{content_hash}.jsonl"


def data_blob_key(kb: KnowledgeBase, knowledge: Knowledge) -> str:
    """Where ingestion keeps a data file's raw bytes for the data-analysis stage."""
    return f"{DATA_PREFIX}{kb.id}/{knowledge.id}/{knowledge.filename}"


def image_blob_key(kb_id: str, knowledge_id: str, name: str) -> str:
    """Where a document's picture ``<sha256><ext>`` is kept."""
    return f"{IMAGES_PREFIX}{kb_id}/{knowledge_id}/{name}"


def kept_prefixes(knowledge_base_id: str, knowledge_id: str) -> tuple[str, ...]:
    """The blobs of one knowledge item that outlive a run: its stored originals and its data file."""
    return (f"{SOURCES_PREFIX}{knowledge_base_id}/{knowledge_id}/", f"{DATA_PREFIX}{knowledge_base_id}/{knowledge_id}/")


def owned_prefixes(knowledge_base_id: str, knowledge_id: str) -> tuple[str, ...]:
    """Every blob prefix ingestion writes for one knowledge item (every run's products included)."""
    return (
        *kept_prefixes(knowledge_base_id, knowledge_id),
        f"{INGEST_PREFIX}{knowledge_base_id}/{knowledge_id}/",
        pending_prefix(knowledge_base_id, knowledge_id),
        f"{IMAGES_PREFIX}{knowledge_base_id}/{knowledge_id}/",
    )


def knowledge_base_prefixes(knowledge_base_id: str) -> tuple[str, ...]:
    """Every blob prefix ingestion writes for one knowledge base (items that never completed included)."""
    prefixes = (SOURCES_PREFIX, INGEST_PREFIX, DATA_PREFIX, HASHES_PREFIX, PENDING_PREFIX, IMAGES_PREFIX)
    return tuple(f"{prefix}{knowledge_base_id}/" for prefix in prefixes)


def is_owned_key(key: str) -> bool:
    """A key under ingestion's own prefixes (an upload elsewhere is the user's: only ``delete`` removes it)."""
    return key.startswith((SOURCES_PREFIX, INGEST_PREFIX, DATA_PREFIX))


# -- uploads to S3 -------------------------------------------------------------------------------------------------


def upload_key(kb_ref: str, path: str) -> str:
    """An upload's key in its tenant's blob store (``kb_ref``: the knowledge base's id or name)."""
    return f"{UPLOADS_PREFIX}{kb_ref}/{path}"


def upload_uri(bucket: str, configured: str, tenant_id: str, kb_id: str, path: str) -> str:
    """The canonical ``s3://`` address of an upload, by knowledge base id (not the name it used): a document's
    knowledge id comes from it, so both spellings of one path are the same document."""
    return f"s3://{bucket}/{root_prefix(tenant_prefix(configured, tenant_id))}{upload_key(kb_id, path)}"


def upload_layout(prefix: str) -> str:
    """Where uploads to ingest go, said to a user who put one elsewhere."""
    return (
        f"{prefix}{UPLOADS_PREFIX}<knowledge base id or name>/<file> "
        f"(another tenant's: {prefix}{TENANTS_PREFIX}<tenant>/{UPLOADS_PREFIX}...)"
    )


def split_upload_key(key: str, prefix: str, where: str) -> tuple[str, str, str]:
    """``(tenant, knowledge base reference, path)`` of the upload ``key`` (an object key that starts with the blob
    ``prefix``); :class:`InputError` saying where uploads go when it is not a file under one of the two layouts."""
    from ragstep.errors import InputError
    from ragstep.models.base import DEFAULT_TENANT, check_tenant

    if not key.startswith(prefix):
        raise InputError(f"{where}: uploads to ingest go under {upload_layout(prefix)}")
    tenant, rest = DEFAULT_TENANT, key.removeprefix(prefix)
    if rest.startswith(TENANTS_PREFIX):
        tenant, _, rest = rest.removeprefix(TENANTS_PREFIX).partition("/")
        try:
            check_tenant(tenant)
        except ValueError as exc:
            raise InputError(f"{where}: {exc}") from None
        if tenant == DEFAULT_TENANT:
            # The default tenant's blob store is the prefix itself: an upload here would never be found.
            raise InputError(f"{where}: the default tenant's uploads go under {UPLOADS_PREFIX}, not {TENANTS_PREFIX}")
    if not rest.startswith(UPLOADS_PREFIX):
        raise InputError(f"{where}: uploads to ingest go under {upload_layout(prefix)}")
    kb_ref, _, path = rest.removeprefix(UPLOADS_PREFIX).partition("/")
    if not kb_ref or not path or path.endswith("/"):
        raise InputError(f"{where}: not a file under {upload_layout(prefix)}")
    return tenant, kb_ref, path
