"""Reading Office Open XML packages (``.docx``, ``.xlsx``) with ``zipfile`` and ``xml.etree``.

Namespaces are matched by local name, so both the transitional (``schemas.openxmlformats.org``) and the strict
(``purl.oclc.org/ooxml``) dialects are read. Parts with a DTD are refused (no legitimate Office file has one, and it
is how entity-expansion attacks start), and a part that inflates beyond :data:`MAX_PART_BYTES` is refused too.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from xml.etree import ElementTree

from ragstep.errors import InputError

MAX_PART_BYTES = 200 * 1024 * 1024
REL_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
STRICT_REL_NS = "http://purl.oclc.org/ooxml/officeDocument/relationships"


def local(tag: str) -> str:
    """``{namespace}name`` -> ``name``."""
    return tag.rsplit("}", 1)[-1]


def attr(element: ElementTree.Element, name: str, default: str = "") -> str:
    """An attribute by local name, whatever its namespace (``w:val``, ``r:id``, ``val``)."""
    for key, value in element.attrib.items():
        if local(key) == name:
            return value
    return default


def open_package(data: bytes, filename: str, kind: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise InputError(f"{filename}: not a readable {kind} ({exc})") from exc


def read_part(package: zipfile.ZipFile, name: str, filename: str, kind: str) -> ElementTree.Element | None:
    """The parsed XML of one part, or None when the package has no such part."""
    try:
        info = package.getinfo(name)
    except KeyError:
        return None
    if info.file_size > MAX_PART_BYTES:
        raise InputError(f"{filename}: part {name} inflates to {info.file_size} bytes; refusing a {kind} that large")
    try:
        raw = package.read(info)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise InputError(f"{filename}: not a readable {kind} ({name}: {exc})") from exc
    if b"<!DOCTYPE" in raw[:4096] or b"<!ENTITY" in raw[:4096]:
        raise InputError(f"{filename}: not a readable {kind} ({name} declares a DTD)")
    try:
        return ElementTree.fromstring(raw)
    except ElementTree.ParseError as exc:
        raise InputError(f"{filename}: not a readable {kind} ({name}: {exc})") from exc


def relationships(package: zipfile.ZipFile, part: str, filename: str, kind: str) -> dict[str, tuple[str, str, bool]]:
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
