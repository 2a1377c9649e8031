"""A folder as blob store: the embedded :class:`ragstep.ports.BlobStore` (S3 plays this role on AWS).

Key ``a/b/c.json`` is the file ``<root>/a/b/c.json``. Keys follow S3's rules where a folder can:
'/'-separated, at most 1024 bytes of UTF-8, listed in code-point order (which is S3's byte order of UTF-8).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO

from ragstep.adapters.blobs._keys import TMP_PREFIX, check_blob_key, check_segments, check_text
from ragstep.errors import ConflictError, InputError, NotFoundError, StorageError

_HINT = "pass --data-dir to a writable folder"


class LocalBlobStore:
    """Blobs as files under ``root`` (created if missing).

    ``content_type`` is accepted for parity with S3 but not kept: a file has nowhere to store it, and readers
    here know what they stored. Files get mode 0600 (``mkstemp``'s default): blobs are user documents.

    Keys under one of ``scratch_prefixes`` (what the ingest stages hand to each other, rebuilt by running the
    ingestion again) are written with the same atomic rename but without the two fsyncs, which were half the time
    of ingesting a folder of small files (``ragstep bench ingest``): after a crash such a blob may be missing or
    empty, never torn in a way a reader would take for whole.
    """

    def __init__(self, root: Path, *, scratch_prefixes: tuple[str, ...] = ()) -> None:
        self.root = Path(root).resolve()
        self.scratch_prefixes = tuple(scratch_prefixes)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot open blob dir {self.root}: {exc.strerror or exc}; {_HINT}") from exc
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise StorageError(f"cannot open blob dir {self.root}: Permission denied; {_HINT}")

    def _path(self, key: str) -> Path:
        # Safe to join: check_blob_key rejected absolute keys and '..', so the path stays under root.
        return self.root.joinpath(*check_blob_key(key).split("/"))

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Write ``data`` to a temp file in the target folder, fsync it, then rename it over the key.

        The rename is atomic, so readers (and a crash) see the old blob or the new one, never a partial one.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InputError(f"blob data must be bytes, got {type(data).__name__}")
        return self._store(key, data)

    def put_file(self, key: str, source: BinaryIO, content_type: str = "application/octet-stream") -> str:
        """As :meth:`put`, copying ``source`` (from its current position) in 1 MiB pieces."""
        return self._store(key, source)

    def _store(self, key: str, data: bytes | bytearray | memoryview | BinaryIO) -> str:
        path = self._path(key)
        start = None if isinstance(data, bytes | bytearray | memoryview) else data.tell()
        # A concurrent delete may prune the folder between mkdir and mkstemp; trying again recreates it.
        for attempt in range(3):
            try:
                if start is not None and not isinstance(data, bytes | bytearray | memoryview):
                    data.seek(start)  # a retry copies the whole file again
                self._write(path, data, durable=not key.startswith(self.scratch_prefixes))
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise StorageError(f"cannot write blob {key!r}: its folder keeps disappearing") from None
            except (NotADirectoryError, FileExistsError) as exc:
                blocker = self._file_above(path)
                raise ConflictError(
                    f"cannot store {key!r}: {blocker!r} is already a blob, and a folder cannot hold both; "
                    "choose another key"
                ) from exc
            except IsADirectoryError as exc:
                raise ConflictError(
                    f"cannot store {key!r}: other blobs are stored under {key + '/'!r}; choose another key"
                ) from exc
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    raise InputError(f"blob key {key!r} has a segment too long for the file system") from exc
                raise StorageError(f"cannot write blob {key!r} to {self.root}: {exc.strerror or exc}; {_HINT}") from exc
        return path.as_uri()

    @staticmethod
    def _write(path: Path, data: bytes | bytearray | memoryview | BinaryIO, *, durable: bool = True) -> None:
        if not path.parent.is_dir():  # a stat, where mkdir(exist_ok=True) on an existing folder costs a failed mkdir
            path.parent.mkdir(parents=True, exist_ok=True)
        # Same folder as the target: os.replace is only atomic within one file system.
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                if isinstance(data, bytes | bytearray | memoryview):
                    fh.write(data)
                else:
                    shutil.copyfileobj(data, fh, 1 << 20)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())  # the bytes are on disk before the name points at them
            os.replace(tmp, path)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise
        if durable:
            _fsync_dir(path.parent)

    def _file_above(self, path: Path) -> str:
        """The key of the blob that sits where ``path`` needs a folder (for the conflict message)."""
        for parent in reversed(path.parents):
            if parent.is_relative_to(self.root) and parent != self.root and parent.is_file():
                return parent.relative_to(self.root).as_posix()
        return path.relative_to(self.root).as_posix()

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFoundError(f"blob {key!r} not found in {self.root}") from None
        except OSError as exc:
            raise StorageError(f"cannot read blob {key!r} from {self.root}: {exc.strerror or exc}") from exc

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        """Remove the blob, then any folders it leaves empty (so the key's prefix can become a blob again)."""
        path = self._path(key)
        if path.is_dir():
            return  # a "folder" is not a blob, as on S3
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise StorageError(f"cannot delete blob {key!r} from {self.root}: {exc.strerror or exc}") from exc
        parent = path.parent
        while parent != self.root:
            try:
                parent.rmdir()
            except OSError:
                break  # not empty (or in use by a concurrent put): keep it
            parent = parent.parent

    def list(self, prefix: str = "") -> list[str]:
        """Keys starting with ``prefix`` (a plain string prefix, as on S3), sorted."""
        check_text("blob prefix", prefix)
        folder, _, _ = prefix.rpartition("/")
        if folder:
            check_segments("blob prefix", prefix, folder.split("/"))
        start = self.root.joinpath(*folder.split("/")) if folder else self.root
        keys: list[str] = []
        for dirpath, _dirs, files in os.walk(start, onerror=self._walk_error):
            base = Path(dirpath).relative_to(self.root).as_posix()
            for name in files:
                if name.startswith(TMP_PREFIX):
                    continue
                key = name if base == "." else f"{base}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def _walk_error(self, exc: OSError) -> None:
        # A prefix whose folder does not exist (or is a blob) matches nothing; anything else is a real fault.
        if isinstance(exc, FileNotFoundError | NotADirectoryError):
            return
        raise StorageError(f"cannot list blobs in {self.root}: {exc.strerror or exc}") from exc


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable. Not possible on Windows (directories cannot be opened); skip there."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
