"""The files an ingest names: paths and ``file:`` URIs as given, then the files found under named folders, with a
``skipped`` or ``failed`` row for what a folder holds that is not ingested (:func:`scan_paths`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import unquote_to_bytes, urlsplit

from ragstep.app.ingest_rows import IngestResult
from ragstep.app.local_files import LINK_LEAVES, link_leaves, read_local_head
from ragstep.errors import InputError
from ragstep.parsers import NOT_TEXT, SNIFF_BYTES, accepts, extension_of, looks_like_text, unsupported
from ragstep.parsers.source_files import (
    CACHE_FOLDER,
    TEXT_EXTENSIONS,
    VIRTUALENV,
    folder_skip_reason,
    skipped_folder_reason,
)
from ragstep.parsers.source_files import SNIFF_BYTES as SOURCE_SNIFF_BYTES


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

    Found in a folder, a file of a type not in ``suffixes`` comes as a ``skipped`` row, as do an empty file, a lock
    file, minified code and a folder of installed packages (:mod:`ragstep.parsers.source_files`), each with its
    reason; a sub-folder that cannot be read comes as a ``failed`` row naming it; a file named directly is always
    yielded (ingesting it says what is wrong).
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
                why = _folder_skip_reason(path)
                if why:
                    yield IngestResult(str(path), "", "skipped", error=f"{path.name}: {why}")
                else:
                    yield from _walk(path, suffixes, root)
                continue
            if link_leaves(path, root):
                yield IngestResult(str(path), "", "skipped", error=f"{path}: {LINK_LEAVES}")
                continue
            is_file = entry.is_file()
            empty = is_file and entry.stat().st_size == 0
        except OSError as exc:
            yield IngestResult(str(path), "", "failed", error=f"{path}: cannot read it: {_reason(exc)}")
            continue
        if not is_file:
            continue  # a socket, a fifo, a dangling link: not a document
        if not accepts(path.name, suffixes):
            # A lock file's note says what it is rather than "unsupported file type .lock"; the supported types are
            # listed in the error (the summary line says where), not on every row of a folder full of them.
            why = folder_skip_reason(path.name, None)
            if why:
                yield IngestResult(str(path), "", "skipped", error=f"{path.name}: {why}")
            else:
                error = unsupported(path.name, suffixes).message
                yield IngestResult(str(path), "", "skipped", error=error, note=error.split("; supported: ")[0])
        elif empty:  # a repository's __init__.py, a placeholder: nothing to index, and no failure either
            yield IngestResult(str(path), "", "skipped", error=f"{path.name}: {EMPTY_FILE}")
        elif not extension_of(path.name) and not _starts_as_text(path):
            yield IngestResult(str(path), "", "skipped", error=f"{path.name}: {NOT_TEXT}")
        elif why := _file_skip_reason(path):
            yield IngestResult(str(path), "", "skipped", error=f"{path.name}: {why}")
        else:
            yield path


#: Why an empty file found in a folder is skipped (named on the command line, it fails: "the document is empty").
EMPTY_FILE = "an empty file (0 bytes): nothing to index"


def _file_skip_reason(path: Path) -> str:
    """Why a file of a type the knowledge base takes is skipped in a folder ("" when it is not): a lock file, minified
    code, binary content in a text type (:func:`ragstep.parsers.source_files.folder_skip_reason`)."""
    text_type = path.suffix.lower() in TEXT_EXTENSIONS
    return folder_skip_reason(path.name, read_local_head(path, SOURCE_SNIFF_BYTES) if text_type else None)


def _folder_skip_reason(folder: Path) -> str:
    """Why a sub-folder is not walked ("" when it is): installed packages, caches
    (:mod:`ragstep.parsers.source_files`)."""
    try:
        virtualenv = (folder / "pyvenv.cfg").is_file()
        # The Cache Directory Tagging convention: Cargo's target/, pip's and other tools' caches carry this file.
        cache = (folder / "CACHEDIR.TAG").is_file()
    except OSError:  # a folder that cannot be entered: walking it says so, file by file
        virtualenv = cache = False
    if virtualenv:
        return f"{VIRTUALENV}, not the folder's own documents; name it to ingest it"
    if cache:
        return f"{CACHE_FOLDER}, not the folder's own documents; name it to ingest it"
    return skipped_folder_reason(folder.name)


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
