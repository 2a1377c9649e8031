"""What ingestion tells whoever shows progress: the pages OCR'd, the chunks a document was cut into, the chunks in
the index, the chunks embedded so far.

The CLI's progress line wants to move while one large file is being cut, indexed or embedded (seconds to minutes on
a small machine), but the stages take only ``(state, ctx)`` and the index adapter only its chunks. As with the
request deadline (:mod:`ragstep.deadline`), the listener lives in a :class:`~contextvars.ContextVar`: scoped to the
block that set it (one ``ragstep ingest`` run), invisible elsewhere (a Lambda stage, a server's request), and every
note is a no-op when nobody listens. It sits below the stages and the adapters so that both can take notes: the
index's own write of a large document (its keyword statistics) is the longest part of its keyword phase.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class IngestListener(Protocol):
    """Told, in the thread that runs the stages, what the stages have done."""

    def chunking(self, done: int, total: int) -> None:
        """The document in flight is being cut into chunks: ``done`` of its ``total`` characters so far (told after
        each chunk: a large text takes seconds)."""

    def chunked(self, count: int) -> None:
        """The document in flight was cut into ``count`` chunks (all of which will be embedded)."""

    def indexing(self, done: int, total: int) -> None:
        """The document in flight is going into the index: ``done`` of its ``total`` chunks so far (told while the
        index stage reads them back, with ``done`` 0, then as the index takes each one: a large text's take
        seconds)."""

    def embedded(self, count: int) -> None:
        """``count`` more chunks of the document in flight have their vectors."""

    def ocr_page(self, done: int, total: int) -> None:
        """``done`` of the ``total`` scanned pages of the document in flight have been OCR'd (the slow part of a
        scanned PDF: seconds per page)."""


_listener: contextvars.ContextVar[IngestListener | None] = contextvars.ContextVar(
    "ragstep_ingest_listener", default=None
)


@contextlib.contextmanager
def listening(listener: IngestListener) -> Iterator[None]:
    """Send the notes of the stages run inside the block to ``listener``."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def note_chunking(done: int, total: int) -> None:
    listener = _listener.get()
    if listener is not None:
        listener.chunking(done, total)


def note_chunked(count: int) -> None:
    listener = _listener.get()
    if listener is not None:
        listener.chunked(count)


def note_indexing(done: int, total: int) -> None:
    listener = _listener.get()
    if listener is not None:
        listener.indexing(done, total)


def noting_indexed(chunks: Sequence[T]) -> Iterator[T]:
    """``chunks`` one by one, each noted (:meth:`IngestListener.indexing`) as the index takes it: for an index that
    makes its rows one chunk at a time (tokenizing each for its keyword statistics), then writes them at once."""
    listener = _listener.get()
    if listener is None:
        yield from chunks
        return
    total = len(chunks)
    for done, chunk in enumerate(chunks):
        listener.indexing(done, total)
        yield chunk
    listener.indexing(total, total)


def note_ocr_page(done: int, total: int) -> None:
    listener = _listener.get()
    if listener is not None:
        listener.ocr_page(done, total)


def note_embedded(count: int) -> None:
    listener = _listener.get()
    if listener is not None:
        listener.embedded(count)
