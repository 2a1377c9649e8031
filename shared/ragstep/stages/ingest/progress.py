"""What the ingest stages tell whoever shows progress: the chunks a document was cut into, the chunks embedded so far.

The CLI's progress line wants to move while one large file is being embedded (minutes on a small machine), but the
stages take only ``(state, ctx)``. As with the request deadline (:mod:`ragstep.deadline`), the listener lives in a
:class:`~contextvars.ContextVar`: scoped to the block that set it (one ``ragstep ingest`` run), invisible elsewhere
(a Lambda stage, a server's request), and every note is a no-op when nobody listens.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Protocol


class IngestListener(Protocol):
    """Told, in the thread that runs the stages, what the stages have done."""

    def chunking(self, done: int, total: int) -> None:
        """The document in flight is being cut into chunks: ``done`` of its ``total`` characters so far (told after
        each chunk: a large text takes seconds)."""

    def chunked(self, count: int) -> None:
        """The document in flight was cut into ``count`` chunks (all of which will be embedded)."""

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


def note_ocr_page(done: int, total: int) -> None:
    listener = _listener.get()
    if listener is not None:
        listener.ocr_page(done, total)


def note_embedded(count: int) -> None:
    listener = _listener.get()
    if listener is not None:
        listener.embedded(count)
