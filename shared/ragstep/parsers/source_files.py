"""Source code and configuration files read as plain text, so a repository or a docs folder is searchable as a whole
(its ``.py`` and ``.go``, its ``pyproject.toml`` and ``.github/...yaml`` aside: hidden names are never walked).

* **Read as text, as written** (decoded as ``.txt`` is: :func:`ragstep.parsers.text.read_text`):
  :data:`CONFIG_EXTENSIONS` (``.yaml`` ``.toml`` ``.ini`` ``.cfg`` ...), :data:`MARKUP_EXTENSIONS` (``.adoc``
  ``.org`` ``.tex`` ``.xml``) and :data:`CODE_EXTENSIONS` (``.py`` ``.sh`` ``.js`` ``.ts`` ``.go`` ``.rs`` ``.c``
  ``.java`` ``.sql`` ...). No fence around the code (a file fenced whole would be one protected span, cut only every
  7,500 characters instead of at its blank lines); the text is the file's, so a citation quotes the lines as they are.
  A file found in a folder gets its path inside that folder as its title (``myrepo/src/util.py``): a repository has
  many ``__init__.py`` and ``main.go``, and the path is what tells them apart (``ragstep.app.ingest``).
* ``.rst`` is reStructuredText, its section titles as headings (:mod:`ragstep.parsers.rst`); ``.jsonl`` /
  ``.ndjson`` one record a paragraph (:func:`ragstep.parsers.json_text.parse_jsonl_document`).
* **Skipped in a folder**, the row's note saying why (:func:`folder_skip_reason`; a file named on the command line
  is ingested all the same: its user asked for it): lock files (``package-lock.json``, ``yarn.lock``,
  ``Cargo.lock``, ``go.sum``: generated pins and hashes), minified or bundled code (``*.min.js``, or lines averaging
  over :data:`MINIFIED_LINE` characters: one line of tokens, nothing a reader searches), and a text type holding
  binary content (a NUL byte: ``.ts`` is also the MPEG transport stream of a video). Folders of installed
  dependencies and caches (:data:`SKIPPED_FOLDERS`, a virtual environment: a folder with ``pyvenv.cfg``, and a
  folder tagged as a cache: a ``CACHEDIR.TAG`` in it, as Cargo's ``target/``) are one ``skipped`` row each, nothing
  under them read. A file over ``RAGSTEP_MAX_FILE_BYTES`` fails with the limit in its
  note, as every type does.
* Named directly, a file of these types holding binary content is refused (``not text``), not decoded into noise.
"""

from __future__ import annotations

import codecs
import contextlib
import re
from pathlib import PurePath

from ragstep.errors import InputError
from ragstep.parsers.base import ParsedDocument
from ragstep.parsers.text import read_text

#: Configuration: read as text.
CONFIG_EXTENSIONS: tuple[str, ...] = (".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".properties")
#: Markup read as plain text (no converter: their words are found, their markup kept).
MARKUP_EXTENSIONS: tuple[str, ...] = (".adoc", ".asciidoc", ".org", ".tex", ".xml")
#: Source code: read as text.
CODE_EXTENSIONS: tuple[str, ...] = (
    *(".py", ".pyi", ".pyx", ".ipy"),
    *(".sh", ".bash", ".zsh", ".fish", ".ps1", ".bat", ".cmd"),
    *(".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx", ".vue", ".svelte"),
    *(".css", ".scss", ".sass", ".less"),
    *(".go", ".rs", ".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx", ".m", ".mm", ".zig"),
    *(".java", ".kt", ".kts", ".scala", ".groovy", ".gradle", ".cs", ".fs", ".swift", ".dart"),
    *(".rb", ".php", ".pl", ".pm", ".lua", ".r", ".jl", ".ex", ".exs", ".erl", ".hrl", ".hs", ".ml", ".mli"),
    *(".clj", ".cljs", ".el", ".lisp", ".scm", ".nix"),
    *(".sql", ".proto", ".graphql", ".gql", ".tf", ".hcl", ".cmake", ".mk"),
)
#: Every type this module reads as plain text.
TEXT_EXTENSIONS: tuple[str, ...] = (*CONFIG_EXTENSIONS, *MARKUP_EXTENSIONS, *CODE_EXTENSIONS)

#: Folder names whose content is installed or generated, not written by the folder's owner.
SKIPPED_FOLDERS: dict[str, str] = {
    "node_modules": "installed npm packages",
    "bower_components": "installed Bower packages",
    "site-packages": "installed Python packages",
    "dist-packages": "installed Python packages",
    "__pycache__": "Python's compiled cache",
}
#: Why a virtual environment (a folder with ``pyvenv.cfg``) is not walked.
VIRTUALENV = "a Python virtual environment (installed packages)"
#: Why a folder tagged as a cache (a ``CACHEDIR.TAG`` in it: Cargo's ``target/``, pip's cache) is not walked.
CACHE_FOLDER = "a cache or build output (CACHEDIR.TAG)"
#: Lock files: dependency pins and hashes a package manager writes.
LOCK_FILES = frozenset(
    {
        "package-lock.json",
        "npm-shrinkwrap.json",
        "pnpm-lock.yaml",
        "yarn.lock",
        "cargo.lock",
        "poetry.lock",
        "pipfile.lock",
        "composer.lock",
        "gemfile.lock",
        "uv.lock",
        "pdm.lock",
        "flake.lock",
        "go.sum",
        "packages.lock.json",
    }
)
#: Mean line length (characters, over the first bytes of a code file) past which it is minified or bundled code.
MINIFIED_LINE = 300
#: How much of a file :func:`folder_skip_reason` reads.
SNIFF_BYTES = 8192


def skipped_folder_reason(name: str) -> str:
    """Why a sub-folder of that name is not walked ("" when it is)."""
    reason = SKIPPED_FOLDERS.get(name)
    return f"{reason} ({name}), not the folder's own documents; name it to ingest it" if reason else ""


def folder_skip_reason(name: str, head: bytes | None) -> str:
    """Why a file found in a folder is skipped although its type is read ("" when it is not): a lock file, minified
    code, binary content in a text type. ``head``: the file's first :data:`SNIFF_BYTES` (None when it could not be
    read: ingesting it then says why)."""
    lower = name.lower()
    suffix = PurePath(lower).suffix
    if lower in LOCK_FILES or suffix == ".lock":
        return "a lock file (dependency pins and hashes a package manager writes); name it to ingest it"
    if ".min." in lower and suffix in (".js", ".mjs", ".cjs", ".css"):
        return "minified code (nothing a reader searches); name it to ingest it"
    if head is None or suffix not in TEXT_EXTENSIONS:
        return ""
    if _binary(head):
        return f"binary content, not text (a NUL byte), although {suffix} names a text type"
    if suffix in CODE_EXTENSIONS and is_minified(head):
        return f"minified or generated code (lines of over {MINIFIED_LINE} characters on average); name it to ingest it"
    return ""


def _binary(head: bytes) -> bool:
    """A NUL byte in the first bytes, which no text encoding but UTF-16 writes (a UTF-16 file starts with its mark)."""
    return b"\0" in head[:SNIFF_BYTES] and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))


def is_minified(head: bytes) -> bool:
    """Whether the first bytes of a code file are minified or bundled code: long, with few line breaks."""
    if len(head) < 2048:
        return False
    return len(head) / (head.count(b"\n") + 1) > MINIFIED_LINE


# What a file may say of its own encoding: an XML declaration (``<?xml version="1.0" encoding="ISO-8859-1"?>``), or
# a coding comment in its first two lines (Python's PEP 263, Emacs' ``-*- coding: latin-1 -*-``, vim's
# ``fileencoding=``), as the tools that read such files honour it.
_XML_ENCODING_RE = re.compile(rb"""\A<\?xml[^>\n]*?\sencoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
_CODING_RE = re.compile(rb"coding[:=][ \t]*([-\w.]+)")


def declared_encoding(data: bytes) -> str:
    """The encoding a text file declares of itself (an XML declaration, a coding comment), as Python names it; ""
    when it declares none, or one Python does not know."""
    match = _XML_ENCODING_RE.match(data)
    if match is None:
        match = _CODING_RE.search(b"\n".join(data[:1024].split(b"\n", 2)[:2]))
    if match is None:
        return ""
    try:
        name = codecs.lookup(match.group(1).decode("ascii")).name
    except LookupError:
        return ""
    # A declaration readable as ASCII is not in UTF-16/32 whatever it says (a file saved as UTF-8 under an old
    # header); a real one starts with its byte order mark, which decode_text reads.
    return "" if name.startswith(("utf-16", "utf-32")) else name


def parse_source_text(data: bytes, filename: str) -> ParsedDocument:
    """A code, configuration or markup file as its text (module docstring); binary content is refused. A file that
    declares its encoding is read in it (legacy XML in ISO-8859-1, a Latin-1 Python module); one that does not, or
    whose bytes do not fit what it declares, is decoded as ``.txt`` is."""
    if _binary(data):
        raise InputError(f"{filename}: binary content, not text (a NUL byte), although its extension names a text type")
    suffix = PurePath(filename).suffix.lower()
    text = None
    note = ""
    encoding = declared_encoding(data)
    if encoding and not data.startswith(codecs.BOM_UTF8):
        with contextlib.suppress(UnicodeDecodeError):
            text = data.decode(encoding)
    if text is None:
        text, note = read_text(data, filename)
    kind = "code" if suffix in CODE_EXTENSIONS else "text"
    return ParsedDocument(filename, kind, text, metadata={"note": note} if note else {})
