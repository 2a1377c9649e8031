"""One row of an ingest run (:mod:`ragstep.app.ingest`): what happened to a file, in a status and a note."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ragstep.models.catalog import WROTE_JOB_STATUSES

ResultStatus = Literal["indexed", "updated", "unchanged", "duplicate", "skipped", "failed"]
#: The statuses of a run that wrote the index: a first version (``indexed``) or a new one replacing it (``updated``).
WROTE: frozenset[str] = frozenset(WROTE_JOB_STATUSES)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """One row of an ingest run.

    ``indexed``: a document's first version; ``updated``: a new version replacing the one indexed (its content,
    tag or chunking changed); ``unchanged``: nothing to do. ``duplicate``: ``knowledge_id`` is the item that holds
    the content. ``skipped``: a file found in a folder that is not ingested (its type, an empty file, a lock file,
    minified code, a folder of installed packages: :mod:`ragstep.app.ingest_paths`). Only ``failed`` is a failure.

    ``note``: what to know about the row, in words, whatever its status ("duplicate of a.md", how the file was read,
    what an update replaced, why it failed). ``error`` is kept as it always was for the readers of ``--json``: the
    failure's message, and the note of a ``duplicate`` or ``skipped`` row."""

    path: str
    knowledge_id: str
    status: ResultStatus
    chunks: int = 0
    error: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if not self.note and self.error:  # the failure's message, or the duplicate's / skipped file's note
            object.__setattr__(self, "note", self.error)
