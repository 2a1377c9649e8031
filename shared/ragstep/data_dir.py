"""The data dir's one check, shared by the clients (:class:`ragstep.context.Clients`) and the command line's
pydantic-free catalog read (:mod:`ragstep.entry.cli.plain`), so both say the same thing."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ragstep.errors import NotFoundError, StorageError

#: What a data dir that holds anything of ragstep's has at least one of: the default tenant's catalog of knowledge
#: bases, the other tenants' folder, the stores of keys, usage and chat history the embedded backends keep there.
DATA_MARKERS = ("catalog.sqlite", "tenants", "keys.sqlite", "usage.sqlite", "history.sqlite")


def usable_data_dir(path: Path) -> Path:
    """``path`` when it can be a data dir (a folder, or nothing yet); :class:`StorageError` saying what to do if not."""
    try:
        if path.exists() and not path.is_dir():
            raise StorageError(f"data dir {path} is a file; pass --data-dir to a folder")
    except OSError as exc:  # a folder above it cannot be searched: Permission denied
        raise StorageError(
            f"cannot open data dir {path}: {exc.strerror or exc}; pass --data-dir to a writable folder"
        ) from None
    return path


def existing_data_dir(path: Path) -> Path:
    """``path`` when it holds ragstep's data (:data:`DATA_MARKERS`); :class:`NotFoundError` saying how to make some
    if not.

    What the commands that only read ask for: a mistyped ``--data-dir`` is said so, rather than answered with an
    empty result from a catalog created on the spot (which left the mistyped folder behind)."""
    usable_data_dir(path)
    if not any((path / marker).exists() for marker in DATA_MARKERS):
        above = next((folder for folder in path.parents if folder.exists()), None)
        if above is not None and not above.is_dir():  # below a file: what creating it would have said
            raise StorageError(
                f"cannot open data dir {path}: {os.strerror(errno.ENOTDIR)}; pass --data-dir to a writable folder"
            )
        raise NotFoundError(
            f"no ragstep data in {path}; create some there with `ragstep ingest FILES --kb NAME` "
            "(after `ragstep kb create NAME`), or pass --data-dir to the folder that holds yours"
        )
    return path
