"""The blob store layout of ingestion, and the (de)serialisation of what the ingest stages hand to each other.

Keys are the same on a laptop and in S3:

* ``sources/<kb id>/<knowledge id>/<sha256><ext>``: the original file as the CLI stored it (on AWS the upload's own
  key plays this role). Content-addressed, so a new version never overwrites the version that is indexed; the
  previous one is removed once the new one is indexed. Recorded as ``Knowledge.source_key``.
* ``ingest/<kb id>/<knowledge id>/<sha256>/<run id>/``: one run's products -- ``parsed.md`` (or ``faq.json``),
  ``tables.json`` (data files), ``chunks.jsonl``, ``vectors.npy``. Keyed by the run (``IngestState.request_id``), so
  two runs of the same file at once (two ``ragstep ingest`` of one folder, two uploads of one path) never read or
  remove each other's products. Transient: a run removes its own once the document is indexed or skipped, or when it
  fails (a killed process can leave some behind: on AWS a lifecycle rule on ``ingest/`` sweeps them; deleting the
  document or its knowledge base removes them).
* ``data/<kb id>/<knowledge id>/<file name>``: data files, written by ``ingest_index`` just before the index swap.
* ``hashes/<kb id>/<sha256>``: content hash -> the knowledge item that indexed it (:mod:`.dedupe`).
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterable, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

# The key layout is also read where nothing is ingested (the data-analysis stage of every chat answer checks its
# results' keys against DATA_PREFIX): the models and parsers come with the functions that build them.
if TYPE_CHECKING:
    import numpy as np

    from ragstep.models import Chunk, IngestState, Knowledge, KnowledgeBase
    from ragstep.parsers import DataFileSummary
    from ragstep.parsers.faq import FaqEntry
    from ragstep.ports import BlobStore

SOURCES_PREFIX = "sources/"
INGEST_PREFIX = "ingest/"
DATA_PREFIX = "data/"
HASHES_PREFIX = "hashes/"

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
    return CONTENT_TYPES.get(PurePath(filename).suffix.lower(), "application/octet-stream")


# -- keys ----------------------------------------------------------------------------------------------------------


def source_blob_key(kb_id: str, knowledge_id: str, content_hash: str, filename: str) -> str:
    """Where the CLI keeps an original file: content-addressed, so a new version never overwrites the current one."""
    return f"{SOURCES_PREFIX}{kb_id}/{knowledge_id}/{content_hash}{PurePath(filename).suffix.lower()}"


def run_products_prefix(state: IngestState) -> str:
    """The folder of one run's products (see the module docstring: keyed by the run, not only by the content)."""
    src = state.source
    return f"{INGEST_PREFIX}{src.knowledge_base_id}/{src.knowledge_id}/{src.content_hash}/{state.request_id}/"


def product_key(state: IngestState, name: str) -> str:
    return run_products_prefix(state) + name


def data_blob_key(kb: KnowledgeBase, knowledge: Knowledge) -> str:
    """Where ingestion keeps a data file's raw bytes for the data-analysis stage."""
    return f"{DATA_PREFIX}{kb.id}/{knowledge.id}/{knowledge.filename}"


def kept_prefixes(knowledge_base_id: str, knowledge_id: str) -> tuple[str, ...]:
    """The blobs of one knowledge item that outlive a run: its stored originals and its data file."""
    return (f"{SOURCES_PREFIX}{knowledge_base_id}/{knowledge_id}/", f"{DATA_PREFIX}{knowledge_base_id}/{knowledge_id}/")


def owned_prefixes(knowledge_base_id: str, knowledge_id: str) -> tuple[str, ...]:
    """Every blob prefix ingestion writes for one knowledge item (every run's products included)."""
    return (*kept_prefixes(knowledge_base_id, knowledge_id), f"{INGEST_PREFIX}{knowledge_base_id}/{knowledge_id}/")


def knowledge_base_prefixes(knowledge_base_id: str) -> tuple[str, ...]:
    """Every blob prefix ingestion writes for one knowledge base (items that never completed included)."""
    prefixes = (SOURCES_PREFIX, INGEST_PREFIX, DATA_PREFIX, HASHES_PREFIX)
    return tuple(f"{prefix}{knowledge_base_id}/" for prefix in prefixes)


def is_owned_key(key: str) -> bool:
    """A key under ingestion's own prefixes (an upload elsewhere is the user's: only ``delete`` removes it)."""
    return key.startswith((SOURCES_PREFIX, INGEST_PREFIX, DATA_PREFIX))


def delete_blobs(blobs: BlobStore, prefixes: Iterable[str], *, keep: Iterable[str] = ()) -> list[str]:
    """Delete every key under ``prefixes`` except ``keep``; returns the keys deleted."""
    kept = set(keep)
    gone = []
    for prefix in prefixes:
        for key in blobs.list(prefix):
            if key not in kept:
                blobs.delete(key)
                gone.append(key)
    return gone


# -- serialisation -------------------------------------------------------------------------------------------------


def put_json(blobs: BlobStore, key: str, data: Any) -> None:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    blobs.put(key, body, "application/json")


def get_json(blobs: BlobStore, key: str) -> Any:
    return json.loads(blobs.get(key))


def put_chunks(blobs: BlobStore, key: str, chunks: Sequence[Chunk]) -> None:
    """One Chunk JSON per line (``embed_text`` included: the embed stage needs it)."""
    body = "\n".join(c.model_dump_json() for c in chunks).encode("utf-8")
    blobs.put(key, body, "application/x-ndjson")


def get_chunks(blobs: BlobStore, key: str) -> list[Chunk]:
    from ragstep.models import Chunk

    # Split on "\n" only: JSON escapes it inside strings, but not U+2028, U+0085 and the other breaks that
    # str.splitlines() would also cut at.
    return [Chunk.model_validate_json(line) for line in blobs.get(key).decode("utf-8").split("\n") if line]


def put_vectors(blobs: BlobStore, key: str, vectors: np.ndarray) -> None:
    import numpy as np

    out = io.BytesIO()
    np.save(out, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
    blobs.put(key, out.getvalue(), "application/octet-stream")


def get_vectors(blobs: BlobStore, key: str) -> np.ndarray:
    import numpy as np

    return np.load(io.BytesIO(blobs.get(key)), allow_pickle=False)


def faq_entries_to_json(entries: Sequence[FaqEntry]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(e) for e in entries]


def faq_entries_from_json(items: Sequence[dict[str, Any]]) -> list[FaqEntry]:
    from ragstep.parsers.faq import FaqEntry

    return [
        FaqEntry(
            standard_question=i["standard_question"],
            answers=tuple(i["answers"]),
            similar_questions=tuple(i.get("similar_questions", ())),
            negative_questions=tuple(i.get("negative_questions", ())),
            tag_id=i.get("tag_id", ""),
            id=i.get("id"),
        )
        for i in items
    ]


def summaries_to_json(summaries: Sequence[DataFileSummary]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(s) for s in summaries]


def summaries_from_json(items: Sequence[dict[str, Any]]) -> list[DataFileSummary]:
    from ragstep.parsers import ColumnSummary, DataFileSummary

    return [
        DataFileSummary(
            filename=i["filename"],
            format=i["format"],
            sheet=i["sheet"],
            row_count=i["row_count"],
            columns=tuple(ColumnSummary(**{**c, "samples": tuple(c["samples"])}) for c in i["columns"]),
            sample_rows=tuple(tuple(row) for row in i["sample_rows"]),
        )
        for i in items
    ]
