"""The progress lines of ``ragstep ingest`` on stderr: the keyword phase (files and chunks) and the vectors' phase
(chunks embedded), as a bar redrawn in place on a terminal and as plain periodic lines otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


def clock(seconds: float) -> str:
    """``0:42``, ``12:05``, ``1:02:09``."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class StatusLine:
    """Where both phases' progress goes: on a terminal, ``[#####-----] figures  name`` redrawn in place (at most
    every :attr:`REDRAW_S`); otherwise ``ragstep: ingest: figures, 0:42 elapsed (at name)``, a plain line every
    ``every_s`` seconds (a log, a CI job, a redirected run), nothing for a run shorter than that. ``command`` names
    the command in that line (``ingest``, ``kb embed``)."""

    WIDTH = 30
    REDRAW_S = 0.1

    def __init__(self, stream: Any, every_s: float, command: str = "ingest") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.command = command
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self._shown = float("-inf")

    def show(
        self,
        fraction: Callable[[], float],
        figures: Callable[[], str],
        *,
        at: str = "",
        redraw: bool = False,
        final: bool = False,
    ) -> None:
        """Write the line if it is due: ``redraw`` makes it due on a terminal (a file begins or ends), ``final``
        either way (the last figures of a phase). The figures are worked out only when the line is written."""
        now = time.monotonic()
        if self.tty:
            if not (redraw or final) and now - self._shown < self.REDRAW_S:
                return
            filled = int(self.WIDTH * fraction())
            text = f"[{'#' * filled}{'-' * (self.WIDTH - filled)}] {figures()}"
            if at:
                text += f"  {clip_name(at, 40)}"
            # \r back to the start, \x1b[K clears what a longer previous line left behind.
            self.stream.write(f"\r{text}\x1b[K")
        else:
            if not final and (now - self.started < self.every_s or now - self._shown < self.every_s):
                return
            where = f" (at {at})" if at else ""
            self.stream.write(f"ragstep: {self.command}: {figures()}, {clock(now - self.started)} elapsed{where}\n")
        self._shown = now
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


class Progress:
    """Files, chunks, embedded chunks, the embedding rate and an ETA, on stderr.

    On a terminal, ``[#####-----] 3/10 files, 420 chunks, 380 embedded, 14.2 chunks/s, ETA 1:05  name`` redrawn in
    place; otherwise a plain line every ``every_s`` seconds (:class:`StatusLine`). The stages and the index report
    chunks cut, indexed and embedded while one file is in flight (:mod:`ragstep.ingest_notes`), so a single large
    file moves too.

    The bar and the ETA follow the work left: with an embedding model, the chunks of the file in flight not yet
    embedded plus the chunks the files not yet read will make (their bytes at the chunks per byte seen so far),
    at the embedding rate seen so far; without one (or in the keyword phase), the bytes not yet read at the rate
    seen since the first note that read any (none before a second one), the file in flight counted by how much of it
    the chunker has cut, then shown as ``indexing``
    with the chunks the index has taken (``indexing 0/61485`` while the index stage reads them back: a 20 MB text
    file spends ~8 s of a ~16 s keyword phase in its index stage, :mod:`ragstep.stages.ingest.index`).
    """

    def __init__(
        self, sizes: Sequence[int], *, embeds: bool, stream: Any = None, every_s: float = 10.0, phase: str = ""
    ) -> None:
        self.out = StatusLine(stream, every_s)
        self.started = self.out.started
        self.phase = phase  # "keywords": the first of two phases (``--vectors-later`` or the vectors after it)
        self.sizes = list(sizes)
        self.total = len(self.sizes)
        self.embeds = embeds
        self.done = 0
        self.chunks = 0  # chunks of the files done, as indexed
        self.embedded_chunks = 0  # every chunk embedded in this run
        self.current = ""
        self._file_chunks = 0  # the file in flight
        self._file_embedded = 0
        self._file_pages = (0, 0)  # scanned pages of the file in flight OCR'd, of how many
        self._file_cut = 0.0  # the part of the file in flight's text cut into chunks
        self._file_indexed = (0, 0)  # chunks of the file in flight the index has taken, of how many
        self._bytes_done = 0
        self._bytes_chunked = 0  # bytes of the files cut into chunks (chunks per byte, for the ETA)
        self._chunks_cut = 0
        self._embed_s = 0.0  # time spent embedding: from the first chunks of a file to its end
        self._embed_from: float | None = None
        #: (bytes read, time) at the first note that read any: where the keyword ETA is measured from.
        self._read_from: tuple[float, float] | None = None
        #: (chunks cut, time) at that note: where the keyword rate is measured from.
        self._cut_from: tuple[int, float] | None = None

    # -- events (the ingest stages' notes come through chunked / embedded) --

    def start(self, name: str) -> None:
        self.current = name
        self._forget_file()
        self.draw(force=True)

    def chunking(self, done: int, total: int) -> None:
        self._file_cut = min(1.0, done / total) if total > 0 else 0.0
        self._mark_read()
        self.draw()

    def ocr_page(self, done: int, total: int) -> None:
        self._file_pages = (done, total)
        self.draw()

    def indexing(self, done: int, total: int) -> None:
        self._file_indexed = (done, total)
        self.draw()

    def chunked(self, count: int) -> None:
        self._file_chunks = count
        self._file_cut = 1.0
        self._chunks_cut += count
        self._bytes_chunked += self.sizes[self.done] if self.done < self.total else 0
        if self.embeds:
            self._embed_from = time.monotonic()
        self._mark_read()
        self.draw()

    def embedded(self, count: int) -> None:
        self._file_embedded += count
        self.embedded_chunks += count
        self.draw()

    def advance(self, chunks: int) -> None:
        """The file in flight is done (``chunks`` indexed: 0 when it failed, was unchanged or a duplicate)."""
        if self._embed_from is not None:
            self._embed_s += time.monotonic() - self._embed_from
            self._embed_from = None
        size = self.sizes[self.done] if self.done < self.total else 0
        if chunks and not self._file_chunks:  # ingested by a worker thread, whose stages send no notes
            self._chunks_cut += chunks
            self._bytes_chunked += size
        self._bytes_done += size
        self.done += 1
        self.chunks += chunks
        self.current = ""
        self._forget_file()
        self._mark_read()
        self.draw(force=True)

    def _mark_read(self) -> None:
        if self._read_from is None and (read := self._bytes_read()) > 0:
            now = time.monotonic()
            self._read_from, self._cut_from = (read, now), (self._chunks_cut, now)

    def _forget_file(self) -> None:
        self._file_chunks = self._file_embedded = 0
        self._file_pages = self._file_indexed = (0, 0)
        self._file_cut = 0.0

    # -- figures --

    def rate(self) -> float:
        """Chunks embedded per second of embedding; without a model, chunks cut per second since the first note
        that read any bytes (the chunks counted then left out: the first file's parse and the tokenizer's warm-up
        came before it, as the model's load comes before the first vectors)."""
        if not self.embeds:
            if self._cut_from is None:
                return 0.0
            first, since = self._cut_from
            elapsed = time.monotonic() - since
            return (self._chunks_cut - first) / elapsed if elapsed > 0 and self._chunks_cut > first else 0.0
        spent = self._embed_s + (time.monotonic() - self._embed_from if self._embed_from is not None else 0.0)
        return self.embedded_chunks / spent if spent > 0 and self.embedded_chunks else 0.0

    def fraction(self) -> float:
        total = sum(self.sizes)
        if not total:
            return self.done / max(self.total, 1)
        if self.embeds:
            within = self._file_embedded / self._file_chunks if self._file_chunks else 0.0
        else:
            within = self._file_cut
        in_flight = self.sizes[self.done] if self.done < self.total else 0
        return min(1.0, (self._bytes_done + in_flight * within) / total)

    def eta_s(self) -> float | None:
        left_bytes = sum(self.sizes) - self._bytes_done
        if self.embeds:
            rate = self.rate()
            if not rate or not self._bytes_chunked:
                return None
            in_flight = self.sizes[self.done] if self.done < self.total and self._file_chunks else 0
            per_byte = self._chunks_cut / self._bytes_chunked
            left = (self._file_chunks - self._file_embedded) + (left_bytes - in_flight) * per_byte
            return max(0.0, left / rate)
        # Measured from the first note that read any bytes, not from the start: the first file's parse, the
        # chunker's preparation and the tokenizer's warm-up came before it and, counted in, made the first ETAs of a
        # 1 s phase read several minutes. No ETA until a second note has read more.
        if self._read_from is None:
            return None
        first, since = self._read_from
        read, elapsed = self._bytes_read(), time.monotonic() - since
        return (sum(self.sizes) - read) * elapsed / (read - first) if read > first and elapsed > 0 else None

    def _bytes_read(self) -> float:
        """The bytes of the files done, and of the file in flight the part the chunker has cut."""
        in_flight = self.sizes[self.done] if self.done < self.total else 0
        return self._bytes_done + in_flight * self._file_cut

    def line(self) -> str:
        text = f"{self.phase}: " if self.phase else ""
        text += f"{self.done}/{self.total} files, {self.chunks + self._file_chunks} chunks"
        if self.embeds:
            text += f", {self.embedded_chunks} embedded"
        rate, eta = self.rate(), self.eta_s()
        if rate:
            text += f", {rate:.1f} chunks/s"
        # Cut and being indexed, with no file after it: the ETA would read 0:00 for the seconds the index takes.
        indexing = not self.embeds and bool(self._file_chunks) and bool(self.current)
        if eta is not None and self.done < self.total and not (indexing and self.done == self.total - 1):
            text += f", ETA {clock(eta)}"
        taken, among = self._file_indexed
        if among and self.current:  # the index's notes (with a model too: a file is indexed once it is embedded)
            text += f", indexing {taken}/{among}"
        elif indexing:
            text += ", indexing"
        pages, of = self._file_pages
        if of and not self._file_chunks:  # a scanned PDF being read: its pages are what moves
            text += f", OCR page {pages}/{of}"
        return text

    # -- output --

    def draw(self, *, force: bool = False) -> None:
        """``force``: redraw the bar now (a file begins or ends); the plain lines keep their period."""
        self.out.show(self.fraction, self.line, at=self.current, redraw=force)

    def close(self) -> None:
        self.out.close()


class EmbedProgress:
    """The second phase of a progressive ingest (:mod:`ragstep.app.ingest_vectors`): chunks given their vector out of
    those waiting, the rate and an ETA, on stderr as :class:`Progress` shows the first (a bar redrawn in place on a
    terminal, a plain line every ``every_s`` seconds otherwise). The total is known before the first chunk is
    embedded, so the ETA is the chunks left at the rate seen so far -- counted from the first chunks embedded, not
    from the start: the first call also loads and warms the model, which made the first lines' ETA several times
    too long (54 minutes for a 10-minute run)."""

    def __init__(self, total: int, *, stream: Any = None, every_s: float = 10.0, command: str = "ingest") -> None:
        self.out = StatusLine(stream, every_s, command)
        self.total = total
        self.done = 0
        #: (chunks, time) when the first ones were embedded: where the rate is measured from.
        self._first: tuple[int, float] | None = None

    def chunking(self, done: int, total: int) -> None:
        """Nothing is chunked in this phase."""

    def chunked(self, count: int) -> None:
        """Nothing is chunked in this phase."""

    def ocr_page(self, done: int, total: int) -> None:
        """Nothing is parsed in this phase."""

    def indexing(self, done: int, total: int) -> None:
        """The vectors are added to chunks already indexed."""

    def embedded(self, count: int) -> None:
        self.done += count
        if self._first is None:
            self._first = (self.done, time.monotonic())
        self.draw()

    def rate(self) -> float:
        if self._first is None:
            return 0.0
        first, since = self._first
        elapsed = time.monotonic() - since
        return (self.done - first) / elapsed if elapsed > 0 and self.done > first else 0.0

    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 1.0

    def line(self) -> str:
        text = f"vectors: {self.done}/{self.total} chunks embedded"
        rate = self.rate()
        if rate:
            text += f", {rate:.1f} chunks/s, ETA {clock(max(0, self.total - self.done) / rate)}"
        return text

    def draw(self, *, force: bool = False) -> None:
        """``force``: the phase's last figures, written now on a terminal or not."""
        self.out.show(self.fraction, self.line, final=force)

    def close(self) -> None:
        self.out.close()


def clip_name(name: str, width: int) -> str:
    from ragstep.entry.cli.console import clip

    return clip(name, width)
