"""Input checks every SearchIndex.replace_knowledge shares, so each backend refuses the same bad writes; and the
progress notes it may send as it takes a large document's chunks (:mod:`ragstep.ingest_notes`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragstep.errors import InputError
from ragstep.ingest_notes import noting_indexed as noting_indexed
from ragstep.models import Chunk


def checked_replacement(
    knowledge_id: str, chunks: Sequence[Chunk], vectors: np.ndarray | None, space: str | None
) -> np.ndarray | None:
    """Validate a replacement; returns the vectors as float32 rows of unit length (zero rows stay zero), or None."""
    if not knowledge_id:
        raise InputError("knowledge_id is empty")
    for c in chunks:
        if c.knowledge_id != knowledge_id:
            raise InputError(f"chunk {c.id} belongs to knowledge {c.knowledge_id}, not {knowledge_id}")
    if len({c.id for c in chunks}) != len(chunks):
        raise InputError(f"duplicate chunk ids in knowledge {knowledge_id}")
    if vectors is None:
        return None
    if not space:
        raise InputError("vectors given without the embedding space (model id) they belong to")
    vecs = np.asarray(vectors, dtype=np.float32)
    if vecs.ndim != 2 or vecs.shape[0] != len(chunks):
        raise InputError(f"expected {len(chunks)} vectors, got an array of shape {vecs.shape}")
    if not np.isfinite(vecs).all():
        raise InputError(f"embedding of knowledge {knowledge_id} contains NaN or infinity")
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.where(norms == 0, 1, norms)
