"""File parsers: bytes in, ONE ordered text stream out (modelled on WeKnora's docreader).

Document formats become Markdown-flavoured text that :func:`ragstep.retrieval.chunking.split_text` understands:
headings as ``#`` lines, tables as Markdown tables, images as ``![alt](target)`` placeholders and links as
``[text](url)``, all in the order they appear in the file; the pictures whose bytes are in the file (PDF, DOCX,
HTML ``data:`` URIs) also come as :class:`~ragstep.parsers.figures.Figure` objects, for the parse stage to store, OCR
and caption. Data files (``.csv``, ``.xlsx``) become
:class:`DataFileSummary` objects instead (one per sheet), rendered to text for display; FAQ files are read by
:mod:`ragstep.parsers.faq`.

Conventions shared by every parser:

* ``.txt`` / ``.md`` text is returned exactly as decoded (UTF-16 with its BOM, UTF-8, UTF-8 with BOM, else
  GB18030 or Big5 when it reads as Chinese, else windows-1252 with a note: :mod:`ragstep.parsers.text`); the other
  parsers emit ``\\n`` line ends, blocks separated by one blank line and no trailing whitespace.
* A file without an extension (``README``, ``NEWS``, ``LICENSE``, ``INSTALL``: how projects and ``/usr/share/doc``
  name their documents) is read as plain text when it is text: no NUL byte in its first 8 KiB (UTF-16 with its byte
  order mark aside), :func:`looks_like_text`; a binary one (an executable) is refused.
* PDF pages are separated by :data:`ragstep.parsers.pdf.PAGE_MARKER` (``\\n\\n<!-- page N -->\\n\\n`` before page
  N >= 2); an HTML comment, so renderers hide it and the chunker treats it as plain text.
* Table cells: ``|`` is escaped as ``\\|`` and a line break inside a cell becomes ``<br>``.
* A document without any text is a :class:`~ragstep.errors.NoTextError` ("the document is empty"), an
  :class:`~ragstep.errors.InputError` an ingest of a folder reads as "skip this file" (an icon, a blank page).

Heavy libraries (pypdf, DuckDB) are imported by the parser that needs them, so a cold start that only reads
Markdown never loads them.
"""

from __future__ import annotations

import codecs
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import PurePath

from ragstep.errors import InputError, NoTextError
from ragstep.parsers.base import ColumnSummary, DataFileSummary, ParsedDocument, ParseLimits
from ragstep.parsers.ocr import OcrOptions
from ragstep.parsers.source_files import CODE_EXTENSIONS, TEXT_EXTENSIONS
from ragstep.parsers.text import decode_text, join_hyphenated, read_text

__all__ = [
    "DATA_EXTENSIONS",
    "DOCUMENT_EXTENSIONS",
    "FAQ_EXTENSIONS",
    "NOT_TEXT",
    "SNIFF_BYTES",
    "SUPPORTED_EXTENSIONS",
    "ColumnSummary",
    "DataFileSummary",
    "OcrOptions",
    "ParseLimits",
    "ParsedDocument",
    "accepts",
    "decode_text",
    "extension_of",
    "listed_types",
    "looks_like_text",
    "parse",
    "unsupported",
]


def _parse_text(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    suffix = extension_of(filename)
    text, note = read_text(data, filename)
    kind = "markdown" if suffix in (".md", ".markdown") else "text"
    return ParsedDocument(filename, kind, join_hyphenated(text), metadata={"note": note} if note else {})


#: How much of a file without an extension :func:`looks_like_text` reads.
SNIFF_BYTES = 8192
#: Why a file without an extension is refused when it is not text.
NOT_TEXT = "not a text file (binary content) and no extension to say what it is"


def looks_like_text(head: bytes) -> bool:
    """Whether the first bytes of a file without an extension are text: no NUL byte (which text encodings other than
    UTF-16 never write; every executable and archive has them early), or a UTF-16 byte order mark."""
    return head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\0" not in head[:SNIFF_BYTES]


def _parse_json(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.json_text import parse_json_document

    return parse_json_document(data, filename)


def _parse_jsonl(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.json_text import parse_jsonl_document

    return parse_jsonl_document(data, filename)


def _parse_rst(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.rst import rst_to_markdown

    decoded, read_as = read_text(data, filename)
    text, titles = rst_to_markdown(join_hyphenated(decoded))
    headings = f"reStructuredText: {titles} section {'title' if titles == 1 else 'titles'} read as headings"
    note = "; ".join(n for n in (read_as, headings if titles else "") if n)
    return ParsedDocument(filename, "rst", text, metadata={"note": note} if note else {})


def _parse_source(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.source_files import parse_source_text

    return parse_source_text(data, filename)


def _parse_html(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.html import parse_html

    return parse_html(data, filename, limits.max_figures)


def _parse_pdf(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.pdf import parse_pdf

    return parse_pdf(data, filename, limits.ocr, limits.max_figures)


def _parse_image(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.image import parse_image

    return parse_image(data, filename, limits.ocr)


def _parse_docx(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.docx import parse_docx

    return parse_docx(data, filename, limits)


def _parse_csv(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.data import parse_csv

    return parse_csv(data, filename)


def _parse_xlsx(data: bytes, filename: str, limits: ParseLimits) -> ParsedDocument:
    from ragstep.parsers.data import parse_xlsx

    return parse_xlsx(data, filename, limits)


#: Each parser gets the file's :class:`ParseLimits` (the compressed formats honour them; the others are bounded by
#: the file size limit).
_DOCUMENT_PARSERS: dict[str, Callable[[bytes, str, ParseLimits], ParsedDocument]] = {
    ".txt": _parse_text,
    ".md": _parse_text,
    ".markdown": _parse_text,
    # As text in a document knowledge base (a FAQ knowledge base reads it as FAQ entries): ragstep.parsers.json_text.
    ".json": _parse_json,
    ".html": _parse_html,
    ".htm": _parse_html,
    ".pdf": _parse_pdf,
    ".docx": _parse_docx,
    # Images, read by OCR (ragstep.parsers.ocr).
    **dict.fromkeys((".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff"), _parse_image),
    # Text formats, source code and configuration (ragstep.parsers.source_files says which, how, and what a folder's
    # walk skips).
    ".rst": _parse_rst,
    ".jsonl": _parse_jsonl,
    ".ndjson": _parse_jsonl,
    **dict.fromkeys(TEXT_EXTENSIONS, _parse_source),
}
_DATA_PARSERS: dict[str, Callable[[bytes, str, ParseLimits], ParsedDocument]] = {
    ".csv": _parse_csv,
    ".xlsx": _parse_xlsx,
}
_PARSERS = {**_DOCUMENT_PARSERS, **_DATA_PARSERS}

#: Files a document knowledge base takes as text (chunked by the structure-preserving chunker).
DOCUMENT_EXTENSIONS: tuple[str, ...] = tuple(_DOCUMENT_PARSERS)
#: Tabular files a document knowledge base takes as data files (summary + per-column chunks, raw file kept).
DATA_EXTENSIONS: tuple[str, ...] = tuple(_DATA_PARSERS)
#: Everything :func:`parse` reads.
SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(_PARSERS)
#: Files a FAQ knowledge base takes (see :mod:`ragstep.parsers.faq`).
FAQ_EXTENSIONS: tuple[str, ...] = (".json", ".csv")


#: The names projects and ``/usr/share/doc`` give their documents: with a suffix no parser reads (``README.Debian``,
#: ``NEWS.old``, ``copyright.source``) they are text files all the same, read as a file without an extension.
DOCUMENT_NAMES = frozenset(
    {
        *("readme", "authors", "bugs", "changelog", "changes", "contributing", "contributors", "copying", "copyright"),
        *("credits", "faq", "hacking", "history", "install", "licence", "license", "news", "notice", "thanks", "todo"),
    }
)
#: A gzip-compressed document (``README.Debian.gz``, ``guide.md.gz``: most of ``/usr/share/doc``) is read as the
#: file its name has without ``.gz``, decompressed up to ``ParseLimits.max_inflated_bytes``; not data files (the
#: data-analysis stage reads a data file's original).
GZIP = ".gz"


def extension_of(filename: str) -> str:
    """The extension that says how a file is read: its last suffix, lower-cased; none ("": text if it is) when that
    suffix is a version number (``Apache-2.0``, ``LGPL-2.1``, ``libc.so.6``: the digits say nothing of the type) or
    qualifies a document's name (``README.Debian``, ``changelog.Debian.amd64``: :data:`DOCUMENT_NAMES`) and no
    parser reads it."""
    path = PurePath(filename)
    suffix = path.suffix.lower()
    if suffix in _PARSERS or suffix == GZIP:
        return suffix
    if suffix[1:].isdigit() or path.name.split(".")[0].lower() in DOCUMENT_NAMES:
        return ""
    return suffix


def _inner_name(filename: str) -> str | None:
    """The name of the document inside a ``.gz`` file a document knowledge base reads (None when it is none)."""
    if extension_of(filename) != GZIP:
        return None
    inner = filename[: -len(GZIP)]
    return None if not inner or extension_of(inner) in (GZIP, *_DATA_PARSERS) else inner


def accepts(filename: str, supported: tuple[str, ...]) -> bool:
    """Whether a knowledge base that takes the extensions ``supported`` takes this file by its name: its extension is
    one of them, or it has none and plain text is among them (read as text if it is: :func:`parse`); in a knowledge
    base that takes plain text (a document one), a ``.gz`` of a document it takes."""
    suffix = extension_of(filename)
    inner = _inner_name(filename) if ".txt" in supported else None
    if inner is not None:
        return accepts(inner, supported)
    return suffix in supported or (not suffix and ".txt" in supported)


#: The source code types a message names; the others are counted (the CLI guide lists them all).
_NAMED_CODE = (".py", ".sh", ".js", ".ts", ".go", ".rs", ".c", ".h", ".java", ".sql")


def listed_types(supported: tuple[str, ...]) -> str:
    """What a knowledge base taking the extensions ``supported`` takes, for messages: every type but source code,
    of which the common ones are named and the others counted (a hundred extensions would drown the message)."""
    code = [s for s in supported if s in CODE_EXTENSIONS]
    listed = [s for s in supported if s not in CODE_EXTENSIONS]
    if code:
        named = [s for s in _NAMED_CODE if s in code]
        more = len(code) - len(named)
        listed.append(f"source code ({', '.join(named)}{f' and {more} more' if more else ''})")
    return ", ".join(listed) + (", and text files without an extension" if ".txt" in supported else "")


def unsupported(filename: str, supported: tuple[str, ...]) -> InputError:
    suffix = extension_of(filename)
    return InputError(f"{filename}: unsupported file type {suffix or '(none)'}; supported: {listed_types(supported)}")


def parse(data: bytes, filename: str, limits: ParseLimits | None = None) -> ParsedDocument:
    """Parse a file by its extension. Raises :class:`InputError` for an unsupported, unreadable or empty file, or
    one past ``limits`` (total inflated size, parse time: :mod:`ragstep.parsers.ooxml`)."""
    limits = limits or ParseLimits()
    inner = _inner_name(filename)
    if inner is not None:
        content = gunzip(data, filename, limits.max_inflated_bytes)
        try:
            doc = parse(content, inner, limits)
        except InputError as exc:  # said of the file the user has, not of the name inside it
            raise type(exc)(f"{filename}: {exc.message.removeprefix(f'{inner}: ')}") from None
        note = "; ".join(n for n in ("decompressed from gzip", str(doc.metadata.get("note") or "")) if n)
        return replace(doc, filename=filename, metadata={**doc.metadata, "note": note})
    suffix = extension_of(filename)
    parser = _PARSERS.get(suffix)
    if parser is None and not suffix:
        if not looks_like_text(data):
            raise InputError(f"{filename}: {NOT_TEXT}; supported: {listed_types(SUPPORTED_EXTENSIONS)}")
        parser = _parse_text
    if parser is None:
        raise unsupported(filename, SUPPORTED_EXTENSIONS)
    doc = parser(data, filename, limits)
    if not doc.tables and not doc.text.strip():
        raise NoTextError(f"{filename}: the document is empty")
    return doc


def gunzip(data: bytes, filename: str, limit: int) -> bytes:
    """The content of a gzip file, refused past ``limit`` bytes inflated (a decompression bomb never fills memory)."""
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InputError(f"{filename}: not a readable gzip file ({exc})") from None
    if len(out) > limit:
        raise InputError(
            f"{filename}: inflates to over {limit} bytes, past the limit (RAGSTEP_PARSE_MAX_INFLATED_BYTES)"
        )
    if not inflater.eof:
        raise InputError(f"{filename}: not a readable gzip file (truncated)")
    return out
