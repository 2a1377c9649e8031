"""``ragstep ingest`` and ``ragstep delete``: files into a knowledge base, with a progress bar and a summary."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstep.entry.cli.common import EXIT_USER_ERROR, context_of, print_json, validation_message
from ragstep.errors import InputError

if TYPE_CHECKING:
    from ragstep.app.ingest import IngestResult

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


class Progress:
    """``[#####-----] 3/10 files, 42 chunks`` redrawn in place on stderr; nothing at all when it is not a terminal."""

    WIDTH = 30

    def __init__(self, total: int, stream: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.done = 0
        self.chunks = 0
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())

    def draw(self, current: str = "") -> None:
        if not self.enabled:
            return
        filled = self.WIDTH * self.done // max(self.total, 1)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        line = f"[{bar}] {self.done}/{self.total} files, {self.chunks} chunks"
        if current:
            line += f"  {clip_name(current, 40)}"
        # \r back to the start, \x1b[K clears what a longer previous line left behind.
        self.stream.write(f"\r{line}\x1b[K")
        self.stream.flush()

    def advance(self, chunks: int) -> None:
        self.done += 1
        self.chunks += chunks
        self.draw()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def clip_name(name: str, width: int) -> str:
    from ragstep.entry.cli.console import clip

    return clip(name, width)


def ingest_summary(results: Sequence[IngestResult], kb_name: str) -> str:
    """``3 of 4 files ingested into docs, 12 chunks``: files not failed (indexed, unchanged or duplicate) and the
    chunks they have in the index, then how many files found in folders were skipped for their type (the table above
    says, per file, which status and which error)."""
    skipped = sum(r.status == "skipped" for r in results)
    failed = sum(r.status == "failed" for r in results)
    considered = len(results) - skipped
    chunks = sum(r.chunks for r in results)
    line = f"{considered - failed} of {considered} files ingested into {kb_name}, {chunks} chunks"
    if skipped:
        line += f"; {skipped} {'file' if skipped == 1 else 'files'} skipped (type not supported)"
    return line


def cmd_ingest(args: argparse.Namespace) -> int:
    from ragstep.app.ingest import IngestResult, check_named_paths, check_tag, ingest_file, scan_paths
    from ragstep.stages.ingest.common import allowed_suffixes

    options = ingest_options(args)  # before anything is read or written
    tag_id = check_tag(args.tag) if args.tag is not None else ""
    ctx = context_of(args)
    kb = ctx.require_kb(args.kb)
    suffixes = allowed_suffixes(kb)
    check_named_paths(args.paths)
    found = list(scan_paths(args.paths, suffixes))
    files = [f for f in found if isinstance(f, Path)]
    if not files and not any(r.status == "failed" for r in found if isinstance(r, IngestResult)):
        raise InputError(f"no supported files under {' '.join(args.paths)} (supported: {', '.join(suffixes)})")
    progress = Progress(len(files))
    results: list[IngestResult] = []
    interrupted = False
    try:
        for item in found:
            if isinstance(item, IngestResult):
                results.append(item)
                continue
            progress.draw(item.name)
            result = ingest_file(item, kb, ctx, options, tag_id=tag_id)
            results.append(result)
            progress.advance(result.chunks if result.status == "indexed" else 0)
    except KeyboardInterrupt:
        # Ctrl-C: the file in flight is abandoned (ingest_file removed its products; its previous version, if any,
        # is untouched); what was done so far is reported as usual.
        interrupted = True
    finally:
        progress.close()
    if kb.layers and not interrupted:
        from ragstep.app.viking import refresh_hierarchy

        # After every file of the run: a folder's layers summarise its children (ragstep.app.viking says why).
        refresh_hierarchy(kb, ctx, roots=args.paths)
    report(results, kb.name, as_json=args.json)
    if interrupted:
        left = len(files) - progress.done
        print(
            f"ragstep: interrupted: {left} of {len(files)} files not ingested; run the same command again to finish "
            "(files already ingested are skipped as unchanged)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return EXIT_USER_ERROR if any(r.status == "failed" for r in results) else 0


def report(results: Sequence[IngestResult], kb_name: str, *, as_json: bool) -> None:
    import dataclasses

    from ragstep.entry.cli.console import table

    if as_json:
        print_json([dataclasses.asdict(r) for r in results])
    else:
        rows = [(r.path, r.status, r.chunks, r.error) for r in results]
        print(table(("file", "status", "chunks", "error"), rows))
        print(ingest_summary(results, kb_name))
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
