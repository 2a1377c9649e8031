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
(``failed``), a file of an unsupported type, an empty file, a lock file, minified code, a folder of installed packages
(``skipped``, the note saying which), and a file in which nothing finds text -- an icon OCR reads nothing in, a page of
markup only (:class:`~ragstep.errors.NoTextError`) -- which fails only when it is named itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path, PurePath

# The row of a run and the finding of files are their own modules, re-exported: entry points reach ingestion through
# this module only.
from ragstep.app.ingest_paths import check_named_paths as check_named_paths
from ragstep.app.ingest_paths import expand_paths as expand_paths
from ragstep.app.ingest_paths import local_path as local_path
from ragstep.app.ingest_paths import scan_paths as scan_paths
from ragstep.app.ingest_rows import WROTE as WROTE
from ragstep.app.ingest_rows import IngestResult as IngestResult
from ragstep.app.ingest_rows import ResultStatus as ResultStatus
from ragstep.app.local_files import read_local_file
from ragstep.context import Context
from ragstep.errors import InputError, NoTextError, RagstepError

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
from ragstep.parsers import accepts, unsupported
from ragstep.parsers.source_files import TEXT_EXTENSIONS
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


def knowledge_id_for(kb: KnowledgeBase, name: str) -> str:
    return uuid.uuid5(_NAMESPACE, f"{kb.id}/{name}").hex


def check_tag(tag_id: str) -> str:
    """A tag given to ``ingest --tag`` (or the API): a non-empty, printable id."""
    try:
        return check_identifier(tag_id)
    except ValueError as exc:
        raise InputError(f"tag {tag_id!r}: {exc}") from None


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
    in_folder: bool = False,
) -> IngestResult:
    """Ingest one file; errors are returned in the result, so one bad file never stops a batch.

    ``tag_id`` tags the document and every chunk of it. ``check_transport`` round-trips the state through JSON
    between stages as Step Functions would. ``request_id`` names the run's products (an
    :class:`~ragstep.app.ingest_scratch.IngestLease`'s, so that a killed run's are swept). ``keywords_first``:
    index the chunks for keyword search without embedding them, their vectors left to
    :mod:`ragstep.app.ingest_vectors` (:func:`pipeline_for` says when the index allows it). ``in_folder``: the file
    was found in a folder the user named, not named itself, so one without text is ``skipped`` (:data:`NO_TEXT`), not
    ``failed``. An interrupt (Ctrl-C) removes this run's products, then propagates.
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
        no_text_skips=in_folder,
    )


#: Why a file found in a folder in which nothing finds text is skipped (named itself, it fails: "the document is
#: empty", with why).
NO_TEXT = "no text found: nothing to index"


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
    *,
    no_text_skips: bool = False,
) -> IngestResult:
    """Stage, then run the ``pipeline``; a failure is the result (its run's products discarded), ``skipped`` for a
    document without text when ``no_text_skips``."""
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
        if no_text_skips and isinstance(exc, NoTextError):
            return IngestResult(label, "", "skipped", error=f"{PurePath(label).name}: {NO_TEXT}")
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
        title=title_of(path),
        content_hash=digest,
        size=size,
        tag_id=tag_id,
        options=options,
        tenant_id=ctx.tenant_id,
        request_id=request_id,
    )


def title_of(path: Path) -> str:
    """A document's title: its file name without the extension (``guide.md`` -> ``guide``); for source code and
    configuration, its path as it was named or found (``myrepo/src/util.py``): a repository holds many
    ``__init__.py`` and ``config.yaml``, and the path is what tells them apart (:mod:`ragstep.parsers.source_files`)."""
    return path.as_posix() if path.suffix.lower() in TEXT_EXTENSIONS else path.stem


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
