"""The data dir's one check, shared by the clients (:class:`ragstep.context.Clients`) and the command line's
pydantic-free catalog read (:mod:`ragstep.entry.cli.plain`), so both say the same thing."""

from __future__ import annotations

from pathlib import Path

from ragstep.errors import StorageError


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
