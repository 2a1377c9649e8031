"""The ingest use case: files and folders into a knowledge base, one result row per file; deleting a document.

A file goes to the blob store (``sources/...``, see :mod:`ragstep.models.blob_keys`), then the ``ingest``
pipeline (parse -> chunk -> embed -> index, declared in :mod:`ragstep.pipeline.definitions`) runs in-process on it,
exactly as the state machine runs it on AWS after an upload.

Idempotent: a file's knowledge id is derived from its knowledge base and path, so ingesting it again replaces its
chunks in one index transaction (the previous version stays searchable until the new one is complete). Unchanged
content (same sha256, chunking options and tag) is skipped as ``unchanged``; the same bytes under another path of the
knowledge base are skipped as ``duplicate`` ("duplicate of a.md"). A file that fails at any step leaves the previous
version of that document, and every other document, untouched; its error is its result row, so one bad file never
stops a batch. What a folder holds that cannot be ingested is a row too: a sub-folder that cannot be read
(``failed``), a file of an unsupported type (``skipped``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Literal
from urllib.parse import unquote_to_bytes, urlsplit

from ragstep.app.local_files import LINK_LEAVES, link_leaves, read_local_file, read_local_head
from ragstep.context import Context
from ragstep.errors import InputError, RagstepError

# `listening` (the progress of the file in flight) and `allowed_suffixes` are explicit re-exports: the command line
# shows them while it ingests, and entry points reach ingestion through this module only.
from ragstep.ingest_notes import listening as listening
from ragstep.models import (
    DEFAULT_TENANT,
    IngestOptions,
    IngestSource,
    IngestState,
    Knowledge,
    KnowledgeBase,
    check_identifier,
)
from ragstep.models.catalog import WROTE_JOB_STATUSES
from ragstep.parsers import NOT_TEXT, SNIFF_BYTES, accepts, looks_like_text, unsupported
from ragstep.stages.ingest.common import allowed_suffixes as allowed_suffixes
from ragstep.stages.ingest.dedupe import unmark_hash
from ragstep.stages.ingest.products import (
    SOURCES_PREFIX,
    content_type,
    delete_blobs,
    owned_prefixes,
    run_products_prefix,
    source_blob_key,
)

_NAMESPACE = uuid.UUID("6b1d3c1e-6a53-4c5c-9d0e-3f7f2a1b9c10")

ResultStatus = Literal["indexed", "updated", "unchanged", "duplicate", "skipped", "failed"]
#: The statuses of a run that wrote the index: a first version (``indexed``) or a new one replacing it (``updated``).
WROTE: frozenset[str] = frozenset(WROTE_JOB_STATUSES)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """One row of an ingest run.

    ``indexed``: a document's first version; ``updated``: a new version replacing the one indexed (its content,
    tag or chunking changed); ``unchanged``: nothing to do. ``duplicate``: ``knowledge_id`` is the item that holds
    the content. ``skipped``: a file found in a folder whose type the knowledge base does not take. Only ``failed``
    is a failure.

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


def knowledge_id_for(kb: KnowledgeBase, name: str) -> str:
    return uuid.uuid5(_NAMESPACE, f"{kb.id}/{name}").hex


def check_tag(tag_id: str) -> str:
    """A tag given to ``ingest --tag`` (or the API): a non-empty, printable id."""
    try:
        return check_identifier(tag_id)
    except ValueError as exc:
        raise InputError(f"tag {tag_id!r}: {exc}") from None


# -- finding the files ---------------------------------------------------------------------------------------------


def local_path(arg: str) -> str:
    """A path named to ``ragstep ingest``: as given, or the local path a ``file:`` URI names, percent-escapes decoded
    (``file:///home/me/My%20Notes.md`` -> ``/home/me/My Notes.md``: what a file manager's "copy location" and a
    browser's address bar give). The URI's host must be empty or ``localhost`` (RFC 8089); a file on another host
    is not read through its URI. A path that exists as written is taken as written, URI-like or not."""
    if arg[:5].lower() != "file:" or os.path.lexists(arg):
        return arg
    parts = urlsplit(arg)
    if parts.netloc.lower() not in ("", "localhost"):
        raise InputError(
            f"{arg}: a file URI on another host ({parts.netloc}) names no local file; copy the file here and name its"
            " path, or file:///absolute/path"
        )
    if parts.query or parts.fragment:
        raise InputError(f"{arg}: a file URI with '?' or '#' in it; write them as %3F and %23, or name the path")
    path = unquote_to_bytes(parts.path)
    if not path.startswith(b"/") or b"\0" in path:
        raise InputError(f"{arg}: not a local file URI; use file:///absolute/path or the path itself")
    return os.fsdecode(path)


def check_named_paths(paths: Iterable[str | Path]) -> None:
    """Refuse, before anything is read or written, a named path that does not exist. A path that cannot be looked
    at (a folder above it is not readable) is not refused here: it becomes that file's error row."""
    for raw in paths:
        try:
            os.stat(raw)
        except (FileNotFoundError, NotADirectoryError):
            raise InputError(f"{raw}: no such file or folder") from None
        except OSError:
            continue


def scan_paths(paths: Iterable[str | Path], suffixes: tuple[str, ...]) -> Iterator[Path | IngestResult]:
    """Files named directly, plus the files found under named folders, in path order (hidden names skipped).

    Found in a folder, a file of a type not in ``suffixes`` comes as a ``skipped`` row and a sub-folder that cannot be
    read as a ``failed`` row naming it; a file named directly is always yielded (ingesting it says what is wrong).
    """
    for raw in paths:
        path = Path(raw)
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except OSError:
            is_dir = False  # ingest_file reports why it cannot be read
        if is_dir:
            yield from _walk(path, suffixes, path.resolve())
        else:
            yield path


def _walk(folder: Path, suffixes: tuple[str, ...], root: Path) -> Iterator[Path | IngestResult]:
    """The files under ``folder``; ``root`` is the real path of the folder the user named (links may not leave it:
    :mod:`ragstep.app.local_files`)."""
    try:
        with os.scandir(folder) as it:
            # Sorted by name at each level, sub-folders in place: the order of sorted(folder.rglob("*")).
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        yield IngestResult(str(folder), "", "failed", error=f"{folder}: cannot read the folder: {_reason(exc)}")
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        try:
            # Symlinked folders are not followed (as rglob): a link cycle would never end.
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(path, suffixes, root)
                continue
            if link_leaves(path, root):
                yield IngestResult(str(path), "", "skipped", error=f"{path}: {LINK_LEAVES}")
                continue
            is_file = entry.is_file()
        except OSError as exc:
            yield IngestResult(str(path), "", "failed", error=f"{path}: cannot read it: {_reason(exc)}")
            continue
        if not is_file:
            continue  # a socket, a fifo, a dangling link: not a document
        if not accepts(path.name, suffixes):
            yield IngestResult(str(path), "", "skipped", error=unsupported(path.name, suffixes).message)
        elif not path.suffix and not _starts_as_text(path):
            yield IngestResult(str(path), "", "skipped", error=f"{path.name}: {NOT_TEXT}")
        else:
            yield path


def _starts_as_text(path: Path) -> bool:
    """Whether a file without an extension found in a folder is text (a README), not a binary (an executable)."""
    head = read_local_head(path, SNIFF_BYTES)
    return head is None or looks_like_text(head)  # one that cannot be read is ingested, which says why


def expand_paths(paths: Iterable[str | Path], suffixes: tuple[str, ...]) -> Iterator[Path]:
    """The files :func:`scan_paths` finds, for callers that ingest a known-good folder (the demo's sample); a folder
    that cannot be read is an :class:`InputError`, unsupported files are left out."""
    for found in scan_paths(paths, suffixes):
        if isinstance(found, Path):
            yield found
        elif found.status == "failed":
            raise InputError(found.error)


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()


# -- one file ------------------------------------------------------------------------------------------------------


def new_ingest_state(
    kb: KnowledgeBase,
    *,
    knowledge_id: str,
    blob_key: str,
    filename: str,
    uri: str = "",
    title: str = "",
    content_hash: str = "",
    size: int | None = None,
    tag_id: str = "",
    options: IngestOptions | None = None,
    tenant_id: str = DEFAULT_TENANT,
    request_id: str | None = None,
) -> IngestState:
    """The state the ``ingest`` pipeline starts from (the AWS starter builds the same from an S3 event).
    ``request_id`` names the run's products (a fresh one when None; see :mod:`ragstep.app.ingest_scratch`)."""
    source = IngestSource(
        knowledge_base_id=kb.id,
        knowledge_id=knowledge_id,
        blob_key=blob_key,
        filename=filename,
        uri=uri,
        title=title,
        content_hash=content_hash,
        size=size,
        tag_id=tag_id,
    )
    state = IngestState(tenant_id=tenant_id, source=source, options=options or IngestOptions())
    return state if request_id is None else state.model_copy(update={"request_id": request_id})


def ingest_file(
    path: Path,
    kb: KnowledgeBase,
    ctx: Context,
    options: IngestOptions | None = None,
    *,
    tag_id: str = "",
    check_transport: bool = False,
    request_id: str | None = None,
    keywords_first: bool = False,
) -> IngestResult:
    """Ingest one file; errors are returned in the result, so one bad file never stops a batch.

    ``tag_id`` tags the document and every chunk of it. ``check_transport`` round-trips the state through JSON
    between stages as Step Functions would. ``request_id`` names the run's products (an
    :class:`~ragstep.app.ingest_scratch.IngestLease`'s, so that a killed run's are swept). ``keywords_first``:
    index the chunks for keyword search without embedding them, their vectors left to
    :mod:`ragstep.app.ingest_vectors` (:func:`pipeline_for` says when the index allows it). An interrupt (Ctrl-C)
    removes this run's products, then propagates.
    """
    resolved = str(path.resolve())
    if any(0xD800 <= ord(ch) <= 0xDFFF for ch in resolved):
        # A name that is not UTF-8 (decoded with surrogateescape) can be neither stored nor printed: refuse the file.
        shown = Path(str(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        return IngestResult(
            str(shown), "", "failed", error=f"{shown.name}: the file name is not valid UTF-8; rename it"
        )
    kid = knowledge_id_for(kb, resolved)
    return _run(
        str(path),
        kid,
        ctx,
        lambda: _stage_file(path, kb, kid, ctx, options, tag_id, request_id),
        check_transport,
        pipeline_for(kb, ctx, keywords_first),
    )


def pipeline_for(kb: KnowledgeBase, ctx: Context, keywords_first: bool) -> str:
    """``ingest_keywords`` (chunks indexed now, vectors later) when asked for, progressive indexing is on
    (``RAGSTEP_INGEST_PROGRESSIVE``) and the index takes vectors after the chunks, with a model to embed with; else
    ``ingest`` (chunks and vectors together)."""
    from ragstep.index_capabilities import vector_backfill

    wanted = keywords_first and ctx.settings.ingest_progressive and kb.embedding_model != "none"
    wanted = wanted and vector_backfill(ctx.index) is not None
    return "ingest_keywords" if wanted else "ingest"


def ingest_blob(
    kb: KnowledgeBase,
    ctx: Context,
    *,
    knowledge_id: str,
    blob_key: str,
    filename: str,
    content_hash: str,
    size: int,
    tag_id: str = "",
    options: IngestOptions | None = None,
    uri: str = "",
    keywords_first: bool = False,
) -> IngestResult:
    """Ingest an original already in the blob store (an HTTP upload, stored under ``sources/`` by its sha256), as
    :func:`ingest_file` ingests a file: same statuses, same rules. A failure removes the stored original unless it is
    the version indexed. ``uri``: where the original came from (a web page's URL), which answers link to.
    ``keywords_first``: as for :func:`ingest_file`."""

    def stage() -> IngestState:
        return new_ingest_state(
            kb,
            knowledge_id=knowledge_id,
            blob_key=blob_key,
            filename=filename,
            uri=uri,
            title=PurePath(filename).stem,
            content_hash=content_hash,
            size=size,
            tag_id=tag_id,
            options=options,
            tenant_id=ctx.tenant_id,
        )

    return _run(filename, knowledge_id, ctx, stage, False, pipeline_for(kb, ctx, keywords_first))


def _run(
    label: str,
    kid: str,
    ctx: Context,
    stage: Callable[[], IngestState],
    check_transport: bool,
    pipeline: str = "ingest",
) -> IngestResult:
    """Stage, then run the ``pipeline``; a failure is the result (its run's products discarded)."""
    from ragstep.pipeline import run_pipeline

    state: IngestState | None = None
    try:
        state = stage()
        state = run_pipeline(pipeline, state, ctx, check_transport=check_transport)
    except RagstepError as exc:
        failed = exc.state if isinstance(exc.state, IngestState) else state
        if failed is not None:
            # The failure to report is the first one; leftovers under ingest/ would be harmless.
            with contextlib.suppress(RagstepError):
                discard_products(failed, ctx)
        return IngestResult(label, kid, "failed", error=exc.message)
    except BaseException:
        if state is not None:
            with contextlib.suppress(RagstepError):
                discard_products(state, ctx)
        raise
    return result_of(label, kid, state)


def result_of(label: str, kid: str, state: IngestState) -> IngestResult:
    """The row of a run that ended at ``state`` (not failed): ``updated`` when it replaced an indexed version."""
    if state.status == "duplicate":
        return IngestResult(label, state.duplicate_of or kid, "duplicate", 0, state.note)
    chunks = state.counts.get("chunks", 0)
    if state.status == "unchanged":
        return IngestResult(label, kid, "unchanged", chunks, note=state.note)
    replaced = state.counts.get("replaced_chunks")
    if replaced is None:
        return IngestResult(label, kid, "indexed", chunks, note=state.note)
    note = f"replaced the version indexed before ({replaced} {'chunk' if replaced == 1 else 'chunks'})"
    return IngestResult(label, kid, "updated", chunks, note="; ".join(n for n in (state.note, note) if n))


def _stage_file(
    path: Path,
    kb: KnowledgeBase,
    kid: str,
    ctx: Context,
    options: IngestOptions | None,
    tag_id: str,
    request_id: str | None,
) -> IngestState:
    """Store the original (content-addressed) and build the state the pipeline starts from."""
    name = path.name
    if not accepts(name, allowed_suffixes(kb)):
        raise unsupported(name, allowed_suffixes(kb))
    data = read_local_file(path, ctx.settings.max_file_bytes, name)  # regular files only, never past the limit
    size = len(data)
    digest = hashlib.sha256(data).hexdigest()
    key = source_blob_key(kb.id, kid, digest, name)
    if not ctx.blobs.exists(key):
        ctx.blobs.put(key, data, content_type(name))
    return new_ingest_state(
        kb,
        knowledge_id=kid,
        blob_key=key,
        filename=name,
        uri=path.resolve().as_uri(),
        title=path.stem,
        content_hash=digest,
        size=size,
        tag_id=tag_id,
        options=options,
        tenant_id=ctx.tenant_id,
        request_id=request_id,
    )


def discard_products(state: IngestState, ctx: Context) -> list[str]:
    """After a failed run: remove its transient products, and its staged original unless it is the one indexed.

    The indexed version (its chunks, its original, its data file) is never touched, nor are other runs' products.
    """
    src = state.source
    if not src.content_hash:
        return []
    current = ctx.catalog.get_knowledge(src.knowledge_id)
    keep = {current.source_key} if current and current.source_key else set()
    gone = delete_blobs(ctx.blobs, [run_products_prefix(state)])
    if src.blob_key.startswith(SOURCES_PREFIX) and src.blob_key not in keep and ctx.blobs.exists(src.blob_key):
        ctx.blobs.delete(src.blob_key)
        gone.append(src.blob_key)
    return gone


# -- deleting ------------------------------------------------------------------------------------------------------


def delete_knowledge(knowledge: Knowledge, ctx: Context) -> int:
    """Remove a knowledge item everywhere: its chunks, its blobs (original, products, data file), then its record.

    The record goes last, so an interrupted delete can be run again. Returns the number of chunks removed.
    """
    kb = ctx.catalog.get_kb(knowledge.knowledge_base_id)
    if kb is not None and kb.graph:  # before the chunks: no node ever points at a chunk that is gone
        ctx.graph.delete_knowledge([knowledge.id])
    removed = ctx.index.delete_knowledge([knowledge.id])
    delete_blobs(ctx.blobs, owned_prefixes(knowledge.knowledge_base_id, knowledge.id))
    unmark_hash(ctx, knowledge)
    if knowledge.source_key:
        ctx.blobs.delete(knowledge.source_key)  # an upload outside ingestion's prefixes (S3) is the original too
    ctx.catalog.delete_knowledge(knowledge.id)
    return removed


# -- enabling ------------------------------------------------------------------------------------------------------


def set_document_enabled(knowledge: Knowledge, enabled: bool, ctx: Context) -> Knowledge:
    """Switch a document's chunks off (kept, never retrieved) or back on; returns the stored record.

    The index lists only a document's enabled chunks, so the ids switched off are kept on the record to switch the
    same ones back on. Always applied, never skipped as "already so": running it again repairs a switch that failed
    between the record and the index.
    """
    if enabled:
        ctx.index.set_enabled(knowledge.disabled_chunks, True)
        updated = knowledge.model_copy(update={"enabled": True, "disabled_chunks": []})
        ctx.catalog.put_knowledge(updated)
        return updated
    # chunk_count is every index row of the document; the margin covers a count written before a change of rows.
    found = ctx.index.knowledge_chunks(knowledge.id, max(knowledge.chunk_count, 1) + 1000)
    ids = list(dict.fromkeys([*knowledge.disabled_chunks, *(chunk.id for chunk in found)]))
    updated = knowledge.model_copy(update={"enabled": False, "disabled_chunks": ids})
    # The record first: should the index fail, the ids are known and this call can be made again.
    ctx.catalog.put_knowledge(updated)
    ctx.index.set_enabled(ids, False)
    return updated
