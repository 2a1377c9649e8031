"""Which local files ingestion may read: the rule every path it reads from disk goes through.

1. **Links are not followed out of the folder given.** Walking a folder, a symbolic link is ingested only when
   what it finally points to lies inside that folder (its real path under the folder's real path); a link that
   leaves it (``env.md -> /proc/self/environ``, ``passwd.md -> /etc/passwd``, ``../../secret.md``) is a ``skipped``
   row saying so. Linked sub-folders are never walked (a link cycle would never end). A file named on the command
   line is the user's explicit choice: it is read wherever a link on it points -- under rule 2.
2. **Only regular files are read.** The file is opened without blocking (a FIFO cannot hang the run) and the
   *opened* descriptor must be a regular file (``fstat``): FIFOs, sockets, character and block devices are refused.
   The kernel's own interfaces -- ``/proc``, ``/sys`` and ``/dev``, whose "regular" files are the process's
   environment, memory maps and devices -- are refused by their real path.
3. **What is read is what was checked.** The bytes come from that same descriptor, at most the size limit plus one
   byte (a file that grows past the limit while being read is refused, never cut).

Uploads over HTTP and S3 objects are not local paths: their bytes arrive in the request or from the object store,
and their names are checked where they are stored (``app/uploads.py``, ``models/blob_keys.py``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ragstep.errors import InputError

#: The ``skipped`` row's reason for a link that leaves the folder.
LINK_LEAVES = "a link to outside the folder; links are not followed out of the folder given"
#: Mount points of the kernel's pseudo file systems on Linux: nothing under them is a document.
KERNEL_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))


def is_within(path: Path, root: Path) -> bool:
    """Whether ``path`` (a real path) is ``root`` or under it."""
    return path == root or root in path.parents


def link_leaves(entry: Path, root: Path) -> bool:
    """Whether ``entry`` (found in the folder whose real path is ``root``) is a symbolic link whose final target
    lies outside ``root`` (a dangling link counts as leaving)."""
    if not entry.is_symlink():
        return False
    try:
        target = entry.resolve(strict=True)
    except (OSError, RuntimeError):  # dangling, a loop, or not allowed to look
        return True
    return not is_within(target, root)


# Opening never blocks on a fifo or takes a terminal as the controlling one (rule 3 reads regular files only).
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


def _in_kernel_filesystem(real: Path) -> bool:
    return any(is_within(real, kernel) for kernel in KERNEL_FILESYSTEMS)


def read_local_file(path: Path, limit: int, shown: str) -> bytes:
    """The bytes of the regular file at ``path`` (rules 2 and 3); :class:`InputError` saying why otherwise.
    ``shown`` names the file in messages; ``limit`` is the size limit (``RAGSTEP_MAX_FILE_BYTES``)."""
    real = path.resolve()
    if _in_kernel_filesystem(real):
        raise InputError(f"{shown}: {real} is a kernel interface, not a document; it is never read")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file: {(exc.strerror or str(exc)).lower()}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"{shown}: not a regular file ({_kind(info.st_mode)}); only regular files are read")
        if info.st_size > limit:
            raise InputError(f"{shown}: {info.st_size} bytes is over the {limit}-byte limit (RAGSTEP_MAX_FILE_BYTES)")
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the file: {(exc.strerror or str(exc)).lower()}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise InputError(f"{shown}: more than {limit} bytes (RAGSTEP_MAX_FILE_BYTES); it grew while being read")
    return data


def read_local_head(path: Path, size: int) -> bytes | None:
    """The first ``size`` bytes of the regular file at ``path``, read under rules 2 and 3 (a folder walk telling a
    text file without an extension from a binary one); None when they may not or cannot be read (ingesting the file
    then says why)."""
    if _in_kernel_filesystem(path.resolve()):
        return None
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        return os.read(fd, size) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a special file"
