"""``ragstep ingest`` and ``ragstep delete``: files into a knowledge base, with a progress bar and a summary."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstep.entry.cli.common import (
    EXIT_USER_ERROR,
    context_of,
    keep_logs_off_the_terminal,
    print_json,
    validation_message,
)
from ragstep.entry.cli.ingest_progress import EmbedProgress, Progress, clock
from ragstep.errors import InputError, NotFoundError

if TYPE_CHECKING:
    from ragstep.app.ingest import IngestResult
    from ragstep.app.ingest_vectors import EmbedOutcome
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


def ingest_summary(results: Sequence[IngestResult], kb_name: str, *, files: int | None = None) -> str:
    """``3 of 4 files ingested into docs, 12 chunks``: files not failed (indexed, updated, unchanged or duplicate)
    and the chunks they have in the index, then how many files (or folders of installed packages) found in folders were
    skipped (the table above says, per file, which status and what happened).

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
        # Lock files, minified code, folders of installed packages are skipped too: then their notes say why.
        if all("unsupported" in r.note for r in results if r.status == "skipped"):
            line += f"; {skipped} {'file' if skipped == 1 else 'files'} skipped (type not supported)"
        else:
            line += f"; {skipped} skipped (the note column says why)"
    return line


def once_each(found: Iterable[Path | IngestResult]) -> list[Path | IngestResult]:
    """``found`` with each path once: a file named twice, or named and inside a folder named too, is one document,
    so ingesting it again in the same run would only add an ``unchanged`` row and count its chunks twice in the
    summary. A link inside the folder to another file of it keeps its own row (the user sees both names; the second
    says ``unchanged``): only the same path is dropped, not the same target."""
    seen: set[Path] = set()
    kept: list[Path | IngestResult] = []
    for item in found:
        if isinstance(item, Path):
            real = item.absolute()
            if real in seen:
                continue
            seen.add(real)
        kept.append(item)
    return kept


def cmd_ingest(args: argparse.Namespace) -> int:
    from ragstep.app.ingest import (
        IngestResult,
        allowed_suffixes,
        check_named_paths,
        check_tag,
        local_path,
        pipeline_for,
        scan_paths,
    )
    from ragstep.parsers import listed_types

    # pypdf logs what it repairs or cannot read in a PDF ("EOF marker not found"); the file's row says what failed.
    keep_logs_off_the_terminal("pypdf", "ragstep.providers")
    options = ingest_options(args)  # before anything is read or written
    tag_id = check_tag(args.tag) if args.tag is not None else ""
    ctx = context_of(args)
    try:
        kb = ctx.require_kb(args.kb)
    except NotFoundError as exc:  # a first ingest into a name not created yet: say how to create it
        raise NotFoundError(
            f"{exc.message}; create it with `ragstep kb create {args.kb}` (`ragstep kb list` shows those there are)"
        ) from None
    suffixes = allowed_suffixes(kb)
    # Web pages (http/https) mix with files and folders on the command line: the files first, then the pages.
    urls = [p for p in args.paths if p.startswith(("http://", "https://"))]
    paths = [local_path(p) for p in args.paths if p not in urls]  # file:///... URIs as their paths
    check_named_paths(paths)
    found = once_each(scan_paths(paths, suffixes))
    files = [f for f in found if isinstance(f, Path)]
    if not urls and not files and not any(r.status == "failed" for r in found if isinstance(r, IngestResult)):
        raise InputError(f"no supported files under {' '.join(args.paths)} (supported: {listed_types(suffixes)})")
    # Progressive indexing where the index allows it: every file searchable by keyword first, then the vectors.
    keywords_first = pipeline_for(kb, ctx, keywords_first=True) == "ingest_keywords"
    progress = Progress(
        [_size(f) for f in files],
        embeds=kb.embedding_model != "none" and not keywords_first,
        every_s=ctx.settings.ingest_progress_every_s,
        phase="keywords" if keywords_first else "",
    )
    results: list[IngestResult] = []
    # The rest was found in folders, where a file without text is skipped.
    named = frozenset(Path(p).absolute() for p in paths)
    interrupted = _ingest_found(found, kb, ctx, options, tag_id, progress, results, keywords_first, named)
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
    vectors = VectorsPhase(kb, ctx)
    if keywords_first and not interrupted:
        searchable = sum(r.status in SEARCHABLE for r in results)
        vectors.run(progress, later=args.vectors_later, searchable=searchable)
    report(results, kb.name, as_json=args.json, files=len(files) if interrupted else None)
    if vectors.run_ended(args.vectors_later):
        return EXIT_INTERRUPTED
    if interrupted:
        left = len(files) - progress.done
        print(
            f"ragstep: interrupted: {left} of {len(files)} files not ingested; run the same command again to finish "
            "(files already ingested are skipped as unchanged)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    failed = any(r.status == "failed" for r in results) or bool(vectors.outcome and vectors.outcome.failed)
    return EXIT_USER_ERROR if failed else 0


#: The results whose file is searchable once the first phase is over (a duplicate's content is, under its twin).
SEARCHABLE = frozenset({"indexed", "updated", "unchanged", "duplicate"})


class VectorsPhase:
    """The second phase of ``ragstep ingest`` (:mod:`ragstep.app.ingest_vectors`): the vectors of every chunk of the
    knowledge base still searchable by keyword only (this run's, and any an earlier run left), with its own progress
    line; and what to tell the user when it ends."""

    def __init__(self, kb: KnowledgeBase, ctx: Context) -> None:
        self.kb, self.ctx = kb, ctx
        self.waiting = 0
        self.interrupted = False
        self.outcome: EmbedOutcome | None = None

    def run(self, first: Progress, *, later: bool, searchable: int) -> None:
        """Embed what waits; ``searchable``: the files of the first phase that are searchable now (those that
        failed or were skipped are not)."""
        from ragstep.app.ingest import listening
        from ragstep.app.ingest_vectors import embed_pending, pending_chunks

        progress: EmbedProgress | None = None
        try:  # Ctrl-C from here on stops this phase only: the first one's report is still printed
            self.waiting = pending_chunks(self.kb, self.ctx)
            if not self.waiting or later:
                return
            elapsed = clock(time.monotonic() - first.started)
            progress = EmbedProgress(self.waiting, every_s=self.ctx.settings.ingest_progress_every_s)
            print(
                f"ragstep: ingest: {searchable} {'file' if searchable == 1 else 'files'} searchable by keyword "
                f"after {elapsed}; "
                f"adding the vectors of {self.waiting} {'chunk' if self.waiting == 1 else 'chunks'}",
                file=sys.stderr,
                flush=True,
            )
            with listening(progress):
                self.outcome = embed_pending(self.kb, self.ctx)
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            if progress is not None:
                progress.draw(force=True)
                progress.close()

    def run_ended(self, later: bool) -> bool:
        """Say what is left to do, if anything; True when Ctrl-C stopped the phase."""
        from ragstep.app.ingest_vectors import pending_chunks

        name = self.kb.name
        if self.interrupted:
            left = pending_chunks(self.kb, self.ctx)
            print(
                f"ragstep: interrupted: {left} chunks are searchable by keyword only (no vector yet); run `ragstep kb "
                f"embed {name}` (or this command again) to add them",
                file=sys.stderr,
            )
            return True
        if later and self.waiting:
            print(
                f"ragstep: ingest: {self.waiting} chunks searchable by keyword only; add their vectors with "
                f"`ragstep kb embed {name}`",
                file=sys.stderr,
            )
        for filename, error in self.outcome.failed if self.outcome else ():
            print(
                f"ragstep: error: {filename}: its vectors could not be made ({error}); it stays searchable by "
                f"keyword; run `ragstep kb embed {name}` to try again",
                file=sys.stderr,
            )
        say_left_to_others(self.outcome, name, "ingest")
        return False


def say_left_to_others(outcome: EmbedOutcome | None, kb_name: str, command: str) -> None:
    """Name the documents another process on the data dir was embedding (``ragstep serve``'s worker, another ingest
    or ``kb embed``: :mod:`ragstep.app.ingest_vectors` leaves a claimed document to its claimant), or the chunks still
    without a vector after a run that ended well would go unexplained."""
    names = outcome.elsewhere if outcome else []
    if not names:
        return
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    print(
        f"ragstep: {command}: left to another process on this data dir (`ragstep serve`, another ingest or kb embed), "
        f"which is adding the vectors of {shown}; `ragstep kb show {kb_name}` lists "
        f"{'it' if len(names) == 1 else 'them'} as `vectors pending` until it is done",
        file=sys.stderr,
    )


def cmd_kb_embed(args: argparse.Namespace) -> int:
    """``ragstep kb embed KB``: add the vectors of the chunks still searchable by keyword only (a progressive ingest
    interrupted, or run with ``--vectors-later``). Only those are embedded; running it again after Ctrl-C goes on
    where it stopped."""
    from ragstep.app.ingest import listening
    from ragstep.app.ingest_vectors import embed_pending, pending_chunks, pending_documents, require_backfill

    ctx = context_of(args)
    kb = ctx.require_kb(args.name)
    if kb.embedding_model == "none":
        raise InputError(f"knowledge base {kb.name} has no embedding model (keyword search only): nothing to embed")
    require_backfill(ctx)
    documents = len(pending_documents(kb, ctx))
    waiting = pending_chunks(kb, ctx)
    progress = EmbedProgress(waiting, every_s=ctx.settings.ingest_progress_every_s, command="kb embed")
    interrupted = False
    outcome = None
    try:
        with listening(progress):
            outcome = embed_pending(kb, ctx)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if waiting:
            progress.draw(force=True)
        progress.close()
    left = pending_chunks(kb, ctx)
    failed = outcome.failed if outcome else []
    if args.json:
        print_json(
            {
                "knowledge_base": kb.name,
                "documents": documents,
                "chunks": waiting - left,
                "keyword_only_chunks": left,
                "failed": [{"file": f, "error": e} for f, e in failed],
                "embedded_elsewhere": outcome.elsewhere if outcome else [],
            }
        )
    elif not waiting:
        print(f"nothing to embed: every chunk of {kb.name} has its vector")
    else:
        print(f"{waiting - left} of {waiting} chunks of {kb.name} given their vectors ({documents} documents)")
    for filename, error in failed:
        print(f"ragstep: error: {filename}: its vectors could not be made: {error}", file=sys.stderr)
    say_left_to_others(outcome, kb.name, "kb embed")
    if interrupted:
        print(f"ragstep: interrupted: {left} chunks still have no vector; run the same command again", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_USER_ERROR if failed else 0


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
    keywords_first: bool = False,
    named: frozenset[Path] = frozenset(),
) -> bool:
    """Ingest the files found, appending a row per file to ``results``; True when Ctrl-C stopped the run. A file not
    in ``named`` was found in a folder (its row is ``skipped`` when it holds no text).

    The run holds a lease on its scratch files and first removes those of earlier runs that were killed
    (:mod:`ragstep.app.ingest_scratch`). On Ctrl-C the file in flight is abandoned (``ingest_file`` removed its
    products; its previous version, if any, is untouched) and what was done so far is reported as usual."""
    from ragstep.app.ingest import ingest_file, listening
    from ragstep.app.ingest_scratch import IngestLease, sweep_stale_products

    try:
        with IngestLease(ctx) as lease, listening(progress):
            sweep_stale_products(ctx, lease)

            def one(path: Path) -> IngestResult:
                rid = lease.request_id()
                return ingest_file(
                    path,
                    kb,
                    ctx,
                    options,
                    tag_id=tag_id,
                    request_id=rid,
                    keywords_first=keywords_first,
                    in_folder=path.absolute() not in named,
                )

            # Side by side only where no file waits on the embedding model (it computes one call at a time).
            side_by_side = keywords_first or kb.embedding_model == "none"
            return _ingest_each(found, one, progress, results, ctx.settings.ingest_files_at_once if side_by_side else 1)
    except KeyboardInterrupt:
        return True
    finally:
        progress.close()


#: A file larger than this runs alone, in the main thread: Ctrl-C then never waits on a large file in a worker.
#: Smaller ones go ``RAGSTEP_INGEST_FILES_AT_ONCE`` at a time (keyword phase, or no embedding model): a small file's
#: time is mostly its durable writes (the original, its record, its index transaction: fsyncs) waiting on the disk,
#: not the CPU, so files in flight together overlap those waits (BENCHMARKS.md, "Progressive indexing"). The index
#: takes one writer at a time; the others wait their turn.
SIDE_BY_SIDE_MAX_BYTES = 1 << 20


def _ingest_each(
    found: Sequence[Path | IngestResult],
    one: Callable[[Path], IngestResult],
    progress: Progress,
    results: list[IngestResult],
    workers: int,
) -> bool:
    """Run ``one`` on each file found, ``workers`` small files at a time, appending the rows in the order found;
    True when Ctrl-C stopped the run.

    On Ctrl-C no further file starts; the small files already in the workers' hands finish (milliseconds) and are
    reported, so the summary counts every document the index holds. The file in the main thread is abandoned
    (``ingest_file`` removes its products; its previous version, if any, is untouched)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from ragstep.app.ingest import IngestResult

    def done(result: IngestResult) -> None:
        results.append(result)
        progress.advance(result.chunks if result.status in ("indexed", "updated") else 0)

    # A plain pool, not a context-copying one: the workers' stages send no notes to the progress line (it counts
    # the files as they are reported, in order).
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ragstep-ingest") if workers > 1 else None
    window: list[tuple[Path, Future[IngestResult]]] = []
    sizes: dict[Path, int] = {}

    def drain(keep: int) -> None:
        while len(window) > keep:
            path, future = window[0]
            progress.start(path.name)
            result = future.result()  # Ctrl-C here leaves it in the window, reported below
            window.pop(0)
            done(result)

    try:
        for item in found:
            if isinstance(item, IngestResult):
                drain(0)
                results.append(item)
            elif pool is not None and (size := _size(item)) <= SIDE_BY_SIDE_MAX_BYTES:
                # Two copies of one file must not be in flight together: the second is found a duplicate of the
                # first only once the first is indexed. Same bytes means same size, so a file waits for any of
                # its size (a cheap check; a rare wait).
                while any(sizes[p] == size for p, _ in window):
                    drain(len(window) - 1)
                sizes[item] = size
                window.append((item, pool.submit(one, item)))
                drain(2 * workers)  # a few queued ahead, so a worker never waits on the main thread
            else:
                drain(0)
                progress.start(item.name)
                done(one(item))
        drain(0)
    except KeyboardInterrupt:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            for path, future in window:
                if not future.cancelled() and future.exception() is None:
                    progress.start(path.name)
                    done(future.result())
        return True
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    return False


def report(results: Sequence[IngestResult], kb_name: str, *, as_json: bool, files: int | None = None) -> None:
    import dataclasses

    from ragstep.entry.cli.console import table

    if as_json:
        print_json([dataclasses.asdict(r) for r in results])
    else:
        # "note", not "error": a row's note may be a failure's message, but also "duplicate of a.md" or what an update
        # replaced; the status says which rows failed.
        rows = [(r.path, r.status, r.chunks, r.note) for r in results]
        print(table(("file", "status", "chunks", "note"), rows))
        print(ingest_summary(results, kb_name, files=files))
    sys.stdout.flush()


def cmd_delete(args: argparse.Namespace) -> int:
    from ragstep.app.ingest import delete_knowledge

    ctx = context_of(args)
    item = ctx.catalog.get_knowledge(args.knowledge_id)
    if item is None:
        raise InputError(f"unknown knowledge id {args.knowledge_id!r}{_ids_of_file(ctx, args.knowledge_id)}")
    removed = delete_knowledge(item, ctx)
    print(f"deleted {item.filename or item.id} ({removed} chunks)")
    return 0


def _ids_of_file(ctx: Any, name: str) -> str:
    """What to say when ``ragstep delete`` is given a file name (what ``kb show`` lists first) instead of an id: the
    ids of the documents of that name, and that the id is what it takes. A name can be in several knowledge bases,
    so it is never deleted by name."""
    base = os.path.basename(name.rstrip("/")) or name
    found = [
        f"{item.id} in {kb.name}"
        for kb in ctx.catalog.list_kbs()
        for item in ctx.catalog.list_knowledge(kb.id)
        if base in (item.filename, os.path.basename(item.filename or ""))
    ]
    if found:
        return f"; delete takes the document's id: {base} is {', '.join(found)}"
    return "; delete takes the document's id (`ragstep kb show KB` lists them)"
