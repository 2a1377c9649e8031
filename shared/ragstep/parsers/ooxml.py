"""Reading Office Open XML packages (``.docx``, ``.xlsx``) with ``zipfile`` and ``xml.etree``.

Namespaces are matched by local name, so both the transitional (``schemas.openxmlformats.org``) and the strict
(``purl.oclc.org/ooxml``) dialects are read. Parts with a DTD are refused (no legitimate Office file has one, and it
is how entity-expansion attacks start).

Decompression is bounded per file, not per part (a 149 KB DOCX can hold a 51 MB ``document.xml``), by
:class:`~ragstep.parsers.base.ParseLimits`:

* **Total inflated size.** Every part read counts against ``max_inflated_bytes`` (``RAGSTEP_PARSE_MAX_INFLATED_BYTES``,
  32 MiB): its declared size before a byte is inflated, its actual bytes while inflating (a lying header cannot
  get past either). For an XLSX, whose sheets DuckDB reads, the declared size of every part of the package counts.
* **Compression ratio.** Parts read that inflate more than :data:`MAX_INFLATION_RATIO` times their compressed size
  in total, beyond :data:`RATIO_FLOOR_BYTES`, are a decompression bomb: Office XML compresses about 5-20 times.
* **Parse time.** The XML is fed to the parser in chunks and the DOCX renderer walks its blocks against the file's
  deadline (``timeout_s``, ``RAGSTEP_PARSE_TIMEOUT_S``, 30 s).

A refused file is an :class:`~ragstep.errors.InputError` saying which limit, raised before anything is written.
"""

from __future__ import annotations

import io
import posixpath
import time
import zipfile
from xml.etree import ElementTree

from ragstep.errors import InputError
from ragstep.parsers.base import ParseLimits

REL_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
STRICT_REL_NS = "http://purl.oclc.org/ooxml/officeDocument/relationships"
MAX_INFLATION_RATIO = 100
RATIO_FLOOR_BYTES = 1024 * 1024
_CHUNK = 1024 * 1024


class Package(zipfile.ZipFile):
    """A package being parsed: the zip file, and what it has inflated so far against its limits."""

    filename: str
    kind: str
    limits: ParseLimits
    deadline: float
    inflated: int
    compressed: int

    def charge(self, inflated: int, compressed: int) -> None:
        """Count ``inflated`` bytes (from ``compressed``) against the limits; :class:`InputError` past one."""
        self.inflated += inflated
        self.compressed += compressed
        if self.inflated > RATIO_FLOOR_BYTES and self.inflated > MAX_INFLATION_RATIO * max(self.compressed, 1):
            raise InputError(
                f"{self.filename}: the {self.kind} inflates {self.inflated // max(self.compressed, 1)} times "
                f"({self.inflated} bytes from {self.compressed}); refused as a decompression bomb"
            )
        cap = self.limits.max_inflated_bytes
        if self.inflated > cap:
            raise InputError(
                f"{self.filename}: the {self.kind} inflates to more than {cap} bytes "
                "(RAGSTEP_PARSE_MAX_INFLATED_BYTES); refused -- split the document or raise the limit"
            )

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise InputError(
                f"{self.filename}: parsing the {self.kind} took longer than {self.limits.timeout_s:g}s "
                "(RAGSTEP_PARSE_TIMEOUT_S); refused"
            )

    def charge_every_part(self) -> None:
        """Count every part's declared size (for a package a library inflates whole: an XLSX read by DuckDB)."""
        infos = self.infolist()
        self.charge(sum(i.file_size for i in infos), sum(i.compress_size for i in infos))


def local(tag: str) -> str:
    """``{namespace}name`` -> ``name``."""
    return tag.rsplit("}", 1)[-1]


def attr(element: ElementTree.Element, name: str, default: str = "") -> str:
    """An attribute by local name, whatever its namespace (``w:val``, ``r:id``, ``val``)."""
    for key, value in element.attrib.items():
        if local(key) == name:
            return value
    return default


def open_package(data: bytes, filename: str, kind: str, limits: ParseLimits | None = None) -> Package:
    try:
        package = Package(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise InputError(f"{filename}: not a readable {kind} ({exc})") from exc
    package.filename, package.kind = filename, kind
    package.limits = limits or ParseLimits()
    package.deadline = time.monotonic() + package.limits.timeout_s
    package.inflated = package.compressed = 0
    return package


def read_part(package: Package, name: str, filename: str, kind: str) -> ElementTree.Element | None:
    """The parsed XML of one part, or None when the package has no such part. Inflated and parsed in chunks,
    against the package's limits."""
    try:
        info = package.getinfo(name)
    except KeyError:
        return None
    package.charge(info.file_size, info.compress_size)  # the declared size, before a byte is inflated
    parser = ElementTree.XMLParser()
    read = 0
    try:
        with package.open(info) as stream:
            while chunk := stream.read(_CHUNK):
                if not read and (b"<!DOCTYPE" in chunk[:4096] or b"<!ENTITY" in chunk[:4096]):
                    raise InputError(f"{filename}: not a readable {kind} ({name} declares a DTD)")
                read += len(chunk)
                if read > info.file_size:  # more than declared: count it, whatever the header said
                    package.charge(len(chunk), 0)
                parser.feed(chunk)
                package.check_time()
        return parser.close()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise InputError(f"{filename}: not a readable {kind} ({name}: {exc})") from exc
    except ElementTree.ParseError as exc:
        raise InputError(f"{filename}: not a readable {kind} ({name}: {exc})") from exc


def read_bytes(package: Package, name: str) -> bytes:
    """The bytes of one binary part (a picture), b"" when the package has no such part; counted against the
    package's limits as :func:`read_part` counts XML."""
    try:
        info = package.getinfo(name)
    except KeyError:
        return b""
    package.charge(info.file_size, info.compress_size)
    chunks: list[bytes] = []
    read = 0
    try:
        with package.open(info) as stream:
            while chunk := stream.read(_CHUNK):
                read += len(chunk)
                if read > info.file_size:
                    package.charge(len(chunk), 0)
                chunks.append(chunk)
                package.check_time()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise InputError(f"{package.filename}: not a readable {package.kind} ({name}: {exc})") from exc
    return b"".join(chunks)


def relationships(package: Package, part: str, filename: str, kind: str) -> dict[str, tuple[str, str, bool]]:
    """``{id: (type, target, external)}`` of ``part``; internal targets are resolved to package paths."""
    folder, base = posixpath.split(part)
    root = read_part(package, posixpath.join(folder, "_rels", base + ".rels"), filename, kind)
    out: dict[str, tuple[str, str, bool]] = {}
    if root is None:
        return out
    for rel in root:
        if local(rel.tag) != "Relationship":
            continue
        target = rel.get("Target", "")
        external = rel.get("TargetMode", "") == "External"
        if not external:
            target = (
                target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(folder, target))
            )
        out[rel.get("Id", "")] = (rel.get("Type", ""), target, external)
    return out
