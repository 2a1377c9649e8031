"""``ragstep ingest`` and ``ragstep delete``: files into a knowledge base, with a progress bar and a summary."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstep.entry.cli.common import EXIT_USER_ERROR, context_of, print_json, validation_message
from ragstep.errors import InputError

if TYPE_CHECKING:
    from ragstep.app.ingest import IngestResult
    from ragstep.context import Context
    from ragstep.models import IngestOptions, KnowledgeBase

#: The exit status of a run stopped by Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130


def ingest_options(args: argparse.Namespace) -> Any:
    """The chunking flags as validated :class:`IngestOptions`; a bad value is one error line naming the flag."""
    from pydantic import ValidationError

    from ragstep.models import IngestOptions

    given = {k: v for k, v in (("chunk_size", args.chunk_size), ("chunk_overlap", args.chunk_overlap)) if v is not None}
    if "chunk_size" in given and "chunk_overlap" not in given and not args.parent_child:
        # The default overlap (80), capped as the chunker caps it (half the size): --chunk-size 64 alone is valid.
        # (With --parent-child, IngestOptions picks its own defaults: 384-character children overlapping by a fifth.)
        default = IngestOptions.model_fields["chunk_overlap"].default
        given["chunk_overlap"] = max(0, min(default, given["chunk_size"] // 2))
    try:
        return IngestOptions(**given, parent_child=args.parent_child)
    except ValidationError as exc:
        message = validation_message(exc)
        for field in ("chunk_size", "chunk_overlap"):
            message = message.replace(field, "--" + field.replace("_", "-"))
        raise InputError(message) from None


def _clock(seconds: float) -> str:
    """``0:42``, ``12:05``, ``1:02:09``."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Files, chunks, embedded chunks, the embedding rate and an ETA, on stderr.

    On a terminal, ``[#####-----] 3/10 files, 420 chunks, 380 embedded, 14.2 chunks/s, ETA 1:05  name`` redrawn in
    place (at most every :attr:`REDRAW_S`); otherwise a plain line every ``every_s`` seconds (a log, a CI job, a
    redirected run), nothing for a run shorter than that. The stages report chunks and embedded chunks while one
    file is in flight (:mod:`ragstep.stages.ingest.progress`), so a single large file moves too.

    The bar and the ETA follow the work left: with an embedding model, the chunks of the file in flight not yet
    embedded plus the chunks the files not yet read will make (their bytes at the chunks per byte seen so far),
    at the embedding rate seen so far; without one, the bytes not yet read at the rate seen so far.
    """

    WIDTH = 30
    REDRAW_S = 0.1

    def __init__(self, sizes: Sequence[int], *, embeds: bool, stream: Any = None, every_s: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.sizes = list(sizes)
        self.total = len(self.sizes)
        self.embeds = embeds
        self.every_s = every_s
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.started = time.monotonic()
        self.done = 0
        self.chunks = 0  # chunks of the files done, as indexed
        self.embedded_chunks = 0  # every chunk embedded in this run
        self.current = ""
        self._file_chunks = 0  # the file in flight
        self._file_embedded = 0
        self._bytes_done = 0
        self._bytes_chunked = 0  # bytes of the files cut into chunks (chunks per byte, for the ETA)
        self._chunks_cut = 0
        self._embed_s = 0.0  # time spent embedding: from the first chunks of a file to its end
        self._embed_from: float | None = None
        self._shown = float("-inf")

    # -- events (the ingest stages' notes come through chunked / embedded) --

    def start(self, name: str) -> None:
        self.current = name
        self._file_chunks = self._file_embedded = 0
        self.draw(force=True)

    def chunked(self, count: int) -> None:
        self._file_chunks = count
        self._chunks_cut += count
        self._bytes_chunked += self.sizes[self.done] if self.done < self.total else 0
        if self.embeds:
            self._embed_from = time.monotonic()
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
        self._bytes_done += self.sizes[self.done] if self.done < self.total else 0
        self.done += 1
        self.chunks += chunks
        self.current = ""
        self._file_chunks = self._file_embedded = 0
        self.draw(force=True)

    # -- figures --

    def rate(self) -> float:
        """Chunks embedded per second of embedding; without a model, chunks cut per second of the run."""
        if not self.embeds:
            elapsed = time.monotonic() - self.started
            return self._chunks_cut / elapsed if elapsed > 0 else 0.0
        spent = self._embed_s + (time.monotonic() - self._embed_from if self._embed_from is not None else 0.0)
        return self.embedded_chunks / spent if spent > 0 and self.embedded_chunks else 0.0

    def fraction(self) -> float:
        total = sum(self.sizes)
        if not total:
            return self.done / max(self.total, 1)
        within = self._file_embedded / self._file_chunks if self.embeds and self._file_chunks else 0.0
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
        elapsed = time.monotonic() - self.started
        read = self._bytes_done
        return left_bytes * elapsed / read if read and elapsed > 0 else None

    def line(self) -> str:
        text = f"{self.done}/{self.total} files, {self.chunks + self._file_chunks} chunks"
        if self.embeds:
            text += f", {self.embedded_chunks} embedded"
        rate, eta = self.rate(), self.eta_s()
        if rate:
            text += f", {rate:.1f} chunks/s"
        if eta is not None and self.done < self.total:
            text += f", ETA {_clock(eta)}"
        return text

    # -- output --

    def draw(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            if not force and now - self._shown < self.REDRAW_S:
                return
            filled = int(self.WIDTH * self.fraction())
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            text = f"[{bar}] {self.line()}"
            if self.current:
                text += f"  {clip_name(self.current, 40)}"
            # \r back to the start, \x1b[K clears what a longer previous line left behind.
            self.stream.write(f"\r{text}\x1b[K")
        else:
            if now - self.started < self.every_s or now - self._shown < self.every_s:
                return
            at = f" (at {self.current})" if self.current else ""
            self.stream.write(f"ragstep: ingest: {self.line()}, {_clock(now - self.started)} elapsed{at}\n")
        self._shown = now
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def clip_name(name: str, width: int) -> str:
    from ragstep.entry.cli.console import clip

    return clip(name, width)


def ingest_summary(results: Sequence[IngestResult], kb_name: str, *, files: int | None = None) -> str:
    """``3 of 4 files ingested into docs, 12 chunks``: files not failed (indexed, unchanged or duplicate) and the
    chunks they have in the index, then how many files found in folders were skipped for their type (the table above
    says, per file, which status and which error).

    ``files``: how many files the run set out to ingest, when it stopped before the end (Ctrl-C): the count is then
    of those, the files never reached included (``2 of 400 files ingested into docs, 12 chunks``)."""
    skipped = sum(r.status == "skipped" for r in results)
    failed = sum(r.status == "failed" for r in results)
    considered = len(results) - skipped
    if files is not None:
        considered = files + sum(r.status == "failed" and not r.knowledge_id for r in results)
    chunks = sum(r.chunks for r in results)
    line = f"{len(results) - skipped - failed} of {considered} files ingested into {kb_name}, {chunks} chunks"
    if skipped:
        line += f"; {skipped} {'file' if skipped == 1 else 'files'} skipped (type not supported)"
    return line


def cmd_ingest(args: argparse.Namespace) -> int:
    from ragstep.app.ingest import IngestResult, check_named_paths, check_tag, scan_paths
    from ragstep.stages.ingest.common import allowed_suffixes

    options = ingest_options(args)  # before anything is read or written
    tag_id = check_tag(args.tag) if args.tag is not None else ""
    ctx = context_of(args)
    kb = ctx.require_kb(args.kb)
    suffixes = allowed_suffixes(kb)
    # Web pages (http/https) mix with files and folders on the command line: the files first, then the pages.
    urls = [p for p in args.paths if p.startswith(("http://", "https://"))]
    paths = [p for p in args.paths if p not in urls]
    check_named_paths(paths)
    found = list(scan_paths(paths, suffixes))
    files = [f for f in found if isinstance(f, Path)]
    if not urls and not files and not any(r.status == "failed" for r in found if isinstance(r, IngestResult)):
        raise InputError(f"no supported files under {' '.join(args.paths)} (supported: {', '.join(suffixes)})")
    progress = Progress([_size(f) for f in files], embeds=kb.embedding_model != "none")
    results: list[IngestResult] = []
    interrupted = _ingest_found(found, kb, ctx, options, tag_id, progress, results)
    if urls and not interrupted:
        from ragstep.app.urls import ingest_urls

        try:
            results.extend(ingest_urls(urls, kb, ctx, max_pages=args.max_pages, tag_id=tag_id, options=options))
        except KeyboardInterrupt:
            interrupted = True
    if kb.layers and not interrupted:
        from ragstep.app.viking import refresh_hierarchy

        # After every file of the run: a folder's layers summarise its children (ragstep.app.viking says why).
        refresh_hierarchy(kb, ctx, roots=paths)
    report(results, kb.name, as_json=args.json, files=len(files) if interrupted else None)
    if interrupted:
        left = len(files) - progress.done
        print(
            f"ragstep: interrupted: {left} of {len(files)} files not ingested; run the same command again to finish "
            "(files already ingested are skipped as unchanged)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return EXIT_USER_ERROR if any(r.status == "failed" for r in results) else 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # ingesting it says why


def _ingest_found(
    found: Sequence[Path | IngestResult],
    kb: KnowledgeBase,
    ctx: Context,
    options: IngestOptions,
    tag_id: str,
    progress: Progress,
    results: list[IngestResult],
) -> bool:
    """Ingest the files found, appending a row per file to ``results``; True when Ctrl-C stopped the run.

    The run holds a lease on its scratch files and first removes those of earlier runs that were killed
    (:mod:`ragstep.app.ingest_scratch`). On Ctrl-C the file in flight is abandoned (``ingest_file`` removed its
    products; its previous version, if any, is untouched) and what was done so far is reported as usual."""
    from ragstep.app.ingest import IngestResult, ingest_file
    from ragstep.app.ingest_scratch import IngestLease, sweep_stale_products
    from ragstep.stages.ingest.progress import listening

    try:
        with IngestLease(ctx) as lease, listening(progress):
            sweep_stale_products(ctx, lease)
            for item in found:
                if isinstance(item, IngestResult):
                    results.append(item)
                    continue
                progress.start(item.name)
                result = ingest_file(item, kb, ctx, options, tag_id=tag_id, request_id=lease.request_id())
                results.append(result)
                progress.advance(result.chunks if result.status == "indexed" else 0)
    except KeyboardInterrupt:
        return True
    finally:
        progress.close()
    return False


def report(results: Sequence[IngestResult], kb_name: str, *, as_json: bool, files: int | None = None) -> None:
    import dataclasses

    from ragstep.entry.cli.console import table

    if as_json:
        print_json([dataclasses.asdict(r) for r in results])
    else:
        rows = [(r.path, r.status, r.chunks, r.error) for r in results]
        print(table(("file", "status", "chunks", "error"), rows))
        print(ingest_summary(results, kb_name, files=files))
    sys.stdout.flush()


def cmd_delete(args: argparse.Namespace) -> int:
    from ragstep.app.ingest import delete_knowledge

    ctx = context_of(args)
    item = ctx.catalog.get_knowledge(args.knowledge_id)
    if item is None:
        raise InputError(f"unknown knowledge id {args.knowledge_id!r}")
    removed = delete_knowledge(item, ctx)
    print(f"deleted {item.filename or item.id} ({removed} chunks)")
    return 0
