"""The (de)serialisation of what the ingest stages hand to each other, and the blob store's key layout as they use it.

The key layout has one home, :mod:`ragstep.models.blob_keys` (what each prefix holds, and for how long); it is
re-exported here for the ingest stages, which import it with the functions that read and write the products.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ragstep.models.blob_keys import (  # noqa: F401 -- re-exported: the ingest stages' keys
    CONTENT_TYPES,
    DATA_PREFIX,
    HASHES_PREFIX,
    IMAGES_PREFIX,
    INGEST_PREFIX,
    PENDING_PREFIX,
    SOURCES_PREFIX,
    content_type,
    data_blob_key,
    image_blob_key,
    is_owned_key,
    kept_prefixes,
    knowledge_base_prefixes,
    owned_prefixes,
    pending_chunks_key,
    pending_prefix,
    product_key,
    run_products_prefix,
    source_blob_key,
)

# The models, parsers and numpy load with the functions that need them: the ingest stages' modules import this one
# for its keys too.
if TYPE_CHECKING:
    import numpy as np

    from ragstep.models import Chunk
    from ragstep.parsers import DataFileSummary
    from ragstep.parsers.faq import FaqEntry
    from ragstep.ports import BlobStore


# -- keys ----------------------------------------------------------------------------------------------------------


def image_url(kb_id: str, knowledge_id: str, name: str) -> str:
    """The path a client fetches a stored picture at (``GET``, relative to the API's root; tenant-scoped by the
    caller's key like every knowledge-base route)."""
    return f"/v1/knowledge-bases/{kb_id}/images/{knowledge_id}/{name}"


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


#: The content type of a chunks file (:func:`put_chunks`).
CHUNKS_TYPE = "application/x-ndjson"


def put_chunks(blobs: BlobStore, key: str, chunks: Sequence[Chunk]) -> None:
    """One Chunk JSON per line (``embed_text`` included: the embed stage needs it)."""
    body = "\n".join(c.model_dump_json() for c in chunks).encode("utf-8")
    blobs.put(key, body, CHUNKS_TYPE)


def get_chunks(blobs: BlobStore, key: str) -> list[Chunk]:
    return chunks_of(blobs.get(key))


def chunks_of(body: bytes, reading: Callable[[int, int], None] | None = None) -> list[Chunk]:
    """The chunks of a chunks file's ``body``; ``reading(done, total)`` is told before each line is read (a large
    document's 60,000 chunks take seconds)."""
    from ragstep.models import Chunk

    # Split on "\n" only: JSON escapes it inside strings, but not U+2028, U+0085 and the other breaks that
    # str.splitlines() would also cut at.
    lines = [line for line in body.decode("utf-8").split("\n") if line]
    if reading is None:
        return [Chunk.model_validate_json(line) for line in lines]
    chunks: list[Chunk] = []
    for line in lines:
        reading(len(chunks), len(lines))
        chunks.append(Chunk.model_validate_json(line))
    return chunks


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
