"""DOCX to Markdown with ``zipfile`` + ``xml.etree`` (no python-docx / lxml in the Lambda layer).

The body is read in document order: paragraphs, tables and images stay where they are. Why not python-docx: it
needs lxml (12 MB of the 15 MB it adds to the layer), and it exposes neither images nor hyperlinks nor list
numbering at their position in the text, so a python-docx parser walks the same XML anyway.

* Headings: a paragraph whose style is ``heading 1`` .. ``heading 6`` (Word stores these English names whatever
  the UI language), ``Title`` (level 1), or which has an outline level 1-6 (direct or through its style's
  ``basedOn`` chain) becomes ``#`` .. ``######``.
* Lists: numbered paragraphs (``w:numPr``, direct or from the style, e.g. ``List Bullet``) become ``- item`` for
  bullets and ``N. item`` for numbered levels (counted per list), indented 4 spaces per level; consecutive items
  share one block.
* Tables: a Markdown table at their position (first row is the header; a merged cell (``gridSpan``) is followed
  by empty cells; paragraphs inside a cell are joined with ``<br>``; a nested table is flattened into its cell).
  A one-cell table (a text box drawn as a table) is emitted as its paragraphs.
* Images: ``![alt](docx://word/media/image1.png)`` -- the package path of the picture (the relationship id when
  it cannot be resolved, the URL for a linked picture); ``alt`` is the picture's description, else ``image``.
  Text boxes contribute their paragraphs.
* Hyperlinks to URLs become ``[text](url)``; internal bookmarks keep their text. Tracked changes read as
  accepted: insertions are kept, deletions dropped. Field codes, comments, footnotes, headers and footers are
  left out.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from xml.etree.ElementTree import Element

from ragstep.errors import InputError
from ragstep.parsers import markdown as md
from ragstep.parsers.base import ParsedDocument, ParseLimits
from ragstep.parsers.figures import Figure, figure
from ragstep.parsers.ooxml import Package, attr, local, open_package, read_bytes, read_part, relationships

_KIND = "DOCX"
_LIST_INDENT = "    "
# Containers whose children are read as if they were in place of the container.
_TRANSPARENT = {"ins", "moveTo", "smartTag", "customXml", "sdt", "sdtContent", "fldSimple", "bdo", "dir"}
# Never text: properties, deleted text, field instructions, footnote / comment references.
_SKIP = {"pPr", "rPr", "del", "moveFrom", "instrText", "delText", "footnoteReference", "endnoteReference",
         "commentReference", "sectPr", "proofErr", "bookmarkStart", "bookmarkEnd", "sdtPr", "sdtEndPr"}  # fmt: skip


@dataclass(slots=True)
class _Style:
    name: str = ""
    based_on: str = ""
    outline: int | None = None
    num_id: str = ""
    ilvl: int = 0


@dataclass(slots=True)
class _Context:
    filename: str
    styles: dict[str, _Style]
    default_style: str
    rels: dict[str, tuple[str, str, bool]]
    # numId -> ilvl -> (numFmt, start)
    numbering: dict[str, dict[int, tuple[str, int]]]
    #: Raises once the file's parse deadline has passed (checked per block).
    check_time: Callable[[], None]
    counters: dict[str, list[int]] = field(default_factory=dict)
    #: Package paths of the pictures placed, in order, with their descriptions (for figures).
    pictures: dict[str, str] = field(default_factory=dict)


def _int(value: str, default: int = 0) -> int:
    try:
        return int(value)
    except ValueError:
        return default


def _child(element: Element, name: str) -> Element | None:
    return next((c for c in element if local(c.tag) == name), None)


def _styles(root: Element | None) -> tuple[dict[str, _Style], str]:
    styles: dict[str, _Style] = {}
    default = ""
    if root is None:
        return styles, default
    for element in root:
        if local(element.tag) != "style" or attr(element, "type") not in ("paragraph", ""):
            continue
        style = _Style()
        for child in element:
            name = local(child.tag)
            if name == "name":
                style.name = attr(child, "val")
            elif name == "basedOn":
                style.based_on = attr(child, "val")
            elif name == "pPr":
                outline = _child(child, "outlineLvl")
                if outline is not None:
                    style.outline = _int(attr(outline, "val"), 9)
                num = _child(child, "numPr")
                if num is not None:
                    style.num_id, style.ilvl = _num_pr(num)
        style_id = attr(element, "styleId")
        styles[style_id] = style
        if attr(element, "default") in ("1", "true"):
            default = style_id
    return styles, default


def _num_pr(num_pr: Element) -> tuple[str, int]:
    num_id, ilvl = "", 0
    for child in num_pr:
        if local(child.tag) == "numId":
            num_id = attr(child, "val")
        elif local(child.tag) == "ilvl":
            ilvl = _int(attr(child, "val"))
    return num_id, ilvl


def _numbering(root: Element | None) -> dict[str, dict[int, tuple[str, int]]]:
    if root is None:
        return {}
    abstract: dict[str, dict[int, tuple[str, int]]] = {}
    for element in root:
        if local(element.tag) == "abstractNum":
            levels = abstract.setdefault(attr(element, "abstractNumId"), {})
            for lvl in element:
                if local(lvl.tag) == "lvl":
                    fmt = _child(lvl, "numFmt")
                    start = _child(lvl, "start")
                    levels[_int(attr(lvl, "ilvl"))] = (
                        attr(fmt, "val", "decimal") if fmt is not None else "decimal",
                        _int(attr(start, "val"), 1) if start is not None else 1,
                    )
    out: dict[str, dict[int, tuple[str, int]]] = {}
    for element in root:
        if local(element.tag) == "num":
            ref = _child(element, "abstractNumId")
            out[attr(element, "numId")] = abstract.get(attr(ref, "val"), {}) if ref is not None else {}
    return out


def _style_chain(ctx: _Context, style_id: str) -> Iterator[_Style]:
    seen: set[str] = set()
    while style_id and style_id not in seen and style_id in ctx.styles:
        seen.add(style_id)
        style = ctx.styles[style_id]
        yield style
        style_id = style.based_on


def _heading_level(ctx: _Context, p_pr: Element | None, style_id: str) -> int:
    if p_pr is not None:
        outline = _child(p_pr, "outlineLvl")
        if outline is not None:
            level = _int(attr(outline, "val"), 9)
            return level + 1 if level < 6 else 0
    for i, style in enumerate(_style_chain(ctx, style_id)):
        name = style.name.strip().lower()
        if name.startswith("heading ") and name[8:].isdigit():
            level = int(name[8:])
            return level if 1 <= level <= 6 else 0
        if name == "title" and i == 0:
            return 1
        if style.outline is not None:
            return style.outline + 1 if style.outline < 6 else 0
    return 0


def _list_marker(ctx: _Context, p_pr: Element | None, style_id: str) -> str:
    num_id, ilvl = "", 0
    num = _child(p_pr, "numPr") if p_pr is not None else None
    if num is not None:
        num_id, ilvl = _num_pr(num)
    if not num_id:
        for style in _style_chain(ctx, style_id):
            if style.num_id:
                num_id, ilvl = style.num_id, style.ilvl
                break
    if not num_id or num_id == "0" or num_id not in ctx.numbering:
        return ""
    ilvl = max(0, min(ilvl, 8))
    fmt, start = ctx.numbering[num_id].get(ilvl, ("decimal", 1))
    if fmt == "none":
        return ""
    counters = ctx.counters.setdefault(num_id, [0] * 9)
    counters[ilvl] += 1
    for deeper in range(ilvl + 1, 9):
        counters[deeper] = 0
    marker = "- " if fmt == "bullet" else f"{start + counters[ilvl] - 1}. "
    return _LIST_INDENT * ilvl + marker


def _image(ctx: _Context, blip: Element, alt: str) -> str:
    rel_id = attr(blip, "embed") or attr(blip, "link") or attr(blip, "id")  # a:blip r:embed / v:imagedata r:id
    _, target, external = ctx.rels.get(rel_id, ("", "", False))
    if not target:
        return md.image(alt, f"docx://{rel_id}")
    if not external:
        ctx.pictures.setdefault(target, alt)
    return md.image(alt, target if external else f"docx://{target}")


def _drawing(ctx: _Context, element: Element, alt: str = "") -> Iterator[str]:
    for child in element:
        name = local(child.tag)
        if name == "docPr":
            alt = child.get("descr", "") or child.get("title", "") or alt
        if name in ("blip", "imagedata"):
            yield " " + _image(ctx, child, alt or child.get("title", "")) + " "
        elif name == "txbxContent":
            yield "\n" + "\n".join(text for text in _cell_texts(ctx, child)) + "\n"
        elif name == "Fallback":
            continue  # mc:AlternateContent: the Choice is read, the Fallback repeats it
        else:
            yield from _drawing(ctx, child, alt)


def _inline(ctx: _Context, element: Element) -> Iterator[str]:
    """The text of a paragraph's content, in order."""
    for child in element:
        name = local(child.tag)
        if name in _SKIP:
            continue
        if name == "t":
            yield child.text or ""
        elif name == "tab":
            yield "\t"
        elif name in ("br", "cr"):
            yield "\n"
        elif name == "noBreakHyphen":
            yield "-"
        elif name in ("drawing", "pict", "object", "AlternateContent"):
            yield from _drawing(ctx, child)
        elif name == "hyperlink":
            text = "".join(_inline(ctx, child))
            _, target, external = ctx.rels.get(attr(child, "id"), ("", "", False))
            if external and target and text.strip() and "](" not in text:
                yield md.link(text, target)
            else:
                yield text
        else:  # r, ins, smartTag, sdt, fldSimple, ... : read what they contain
            yield from _inline(ctx, child)


def _paragraph_text(ctx: _Context, p: Element) -> str:
    lines = [line.strip() for line in "".join(_inline(ctx, p)).split("\n")]
    return "\n".join(line for line in lines if line)


def _table_rows(ctx: _Context, tbl: Element) -> list[list[str]]:
    rows: list[list[str]] = []
    for tr in _children(tbl, "tr"):
        row: list[str] = []
        for tc in _children(tr, "tc"):
            row.append("\n".join(_cell_texts(ctx, tc)))
            tc_pr = _child(tc, "tcPr")
            span = _child(tc_pr, "gridSpan") if tc_pr is not None else None
            if span is not None:
                row.extend([""] * max(0, min(_int(attr(span, "val"), 1), 64) - 1))
        rows.append(row)
    return rows


def _children(element: Element, name: str) -> Iterator[Element]:
    """Children called ``name``, looking through content controls and custom XML wrappers."""
    for child in element:
        tag = local(child.tag)
        if tag == name:
            yield child
        elif tag in _TRANSPARENT:
            yield from _children(child, name)


def _cell_texts(ctx: _Context, container: Element) -> Iterator[str]:
    """The paragraphs of a table cell or text box as plain lines (a nested table: one line per row)."""
    for child in _blocks(container):
        if local(child.tag) == "p":
            text = _paragraph_text(ctx, child)
            if text:
                yield text
        else:
            for row in _table_rows(ctx, child):
                line = "; ".join(c.replace("\n", " ") for c in row if c.strip())
                if line:
                    yield line


def _blocks(container: Element) -> Iterator[Element]:
    """``w:p`` and ``w:tbl`` children in document order, through content controls."""
    for child in container:
        tag = local(child.tag)
        if tag in ("p", "tbl"):
            yield child
        elif tag in _TRANSPARENT:
            yield from _blocks(child)
        elif tag == "AlternateContent":
            choice = _child(child, "Choice")
            if choice is not None:
                yield from _blocks(choice)


def _render(ctx: _Context, body: Element) -> str:
    blocks: list[str] = []
    lists: list[int] = []  # indexes of list blocks
    in_list = False
    for element in _blocks(body):
        ctx.check_time()
        if local(element.tag) == "tbl":
            in_list = False
            rows = [row for row in _table_rows(ctx, element) if any(cell.strip() for cell in row)]
            if len(rows) == 1 and len(rows[0]) == 1:
                blocks.append(rows[0][0])  # a one-cell table frames text; it is not tabular data
            elif rows:
                blocks.append(md.table(rows))
            continue
        p_pr = _child(element, "pPr")
        style_el = _child(p_pr, "pStyle") if p_pr is not None else None
        style_id = attr(style_el, "val") if style_el is not None else ctx.default_style
        text = _paragraph_text(ctx, element)
        if not text:
            continue
        level = _heading_level(ctx, p_pr, style_id)
        if level:
            in_list = False
            blocks.append("#" * level + " " + " ".join(text.split()))
            continue
        marker = _list_marker(ctx, p_pr, style_id)
        if marker:
            item = marker + text.replace("\n", "\n" + " " * len(marker))
            if in_list:
                blocks[-1] += "\n" + item
            else:
                lists.append(len(blocks))
                blocks.append(item)
            in_list = True
            continue
        in_list = False
        blocks.append(text)
    for i in lists:
        # A list that starts at a deeper level must not start indented (4 spaces would make it a code block).
        blocks[i] = textwrap.dedent(blocks[i])
    return md.join_blocks(blocks)


def _target(rels: dict[str, tuple[str, str, bool]], kind: str, default: str) -> str:
    for rel_type, target, external in rels.values():
        if rel_type.endswith("/" + kind) and not external:
            return target
    return default


def parse_docx(data: bytes, filename: str, limits: ParseLimits | None = None) -> ParsedDocument:
    """``limits``: the total inflated size and the parse time of this file (:mod:`ragstep.parsers.ooxml`)."""
    with open_package(data, filename, _KIND, limits) as package:
        main = _target(relationships(package, "", filename, _KIND), "officeDocument", "word/document.xml")
        document = read_part(package, main, filename, _KIND)
        if document is None:
            raise InputError(f"{filename}: not a readable DOCX (no {main}; is it a .doc saved as .docx?)")
        body = _child(document, "body")
        if body is None:
            raise InputError(f"{filename}: not a readable DOCX ({main} has no body)")
        rels = relationships(package, main, filename, _KIND)
        styles, default = _styles(read_part(package, _target(rels, "styles", ""), filename, _KIND))
        ctx = _Context(
            filename=filename,
            styles=styles,
            default_style=default,
            rels=rels,
            numbering=_numbering(read_part(package, _target(rels, "numbering", ""), filename, _KIND)),
            check_time=package.check_time,
        )
        try:
            text = _render(ctx, body)
        except RecursionError as exc:
            raise InputError(f"{filename}: the DOCX is nested too deeply to read") from exc
        figures = _figures(package, ctx.pictures, package.limits.max_figures)
    return ParsedDocument(filename, "docx", text, figures=figures)


def _figures(package: Package, pictures: dict[str, str], budget: int) -> tuple[Figure, ...]:
    """The placed pictures that may hold text (``word/media/*``, in order of placement), at most ``budget``; their
    bytes count against the file's inflation limits like every part read."""
    out: list[Figure] = []
    for target, alt in pictures.items():
        if len(out) >= budget:
            break
        data = read_bytes(package, target)
        found = figure(f"docx://{target}", data, alt=alt) if data else None
        if found is not None:
            out.append(found)
    return tuple(out)
