"""HTML to Markdown with the standard library's ``html.parser`` (no dependency).

The main text only: ``script``, ``style``, ``template``, ``nav``, ``aside``, forms' controls, hidden elements and
page-level ``header`` / ``footer`` (not those inside an ``article``, ``main`` or ``section``, which hold an
article's title and byline) are dropped. When the page has a ``<main>`` element, only its content is kept. The
navigation documentation generators write without those elements is dropped too, by its class: Texinfo's
``div.header`` / ``div.nav-panel`` ("Previous: ..., Up: ... [Index]"), DocBook's ``navheader`` / ``navfooter`` /
``nav``, breadcrumbs, and the permalink marks after headings (Sphinx's and MkDocs' ``a.headerlink``, a "¶"). A
``header`` or ``footer`` class holding a heading is kept (a page's title block).

Output: ``h1``..``h6`` as ``#`` headings, paragraphs and blocks separated by blank lines, ``ul``/``ol`` as ``-`` /
``1.`` lists (nested lists indented), ``table`` as a Markdown table (first row is the header; ``colspan`` repeats
an empty cell), ``pre`` as a fenced code block, inline ``code`` in backticks, ``blockquote`` with ``>``, links as
``[text](href)`` (``javascript:`` and same-page ``#`` links keep their text only) and images as ``![alt](src)``
(a ``data:`` URI is shortened to its media type, numbered -- ``data:image/png#2`` -- when it is base64 and so handed
over as a figure: :mod:`ragstep.parsers.figures`). Character references are decoded. The encoding comes from a
byte order mark, else ``<meta charset>`` in the first 4 KiB, else as for text files (:mod:`ragstep.parsers.text`):
UTF-8, GB18030, Big5, else windows-1252 (what browsers read an old page without a charset in), with the same note.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from ragstep.errors import InputError
from ragstep.parsers import markdown as md
from ragstep.parsers.base import ParsedDocument
from ragstep.parsers.figures import Figure, figure
from ragstep.parsers.text import read_text

# Elements that never contain main text.
_DROP = {
    "script", "style", "noscript", "template", "nav", "aside", "head", "svg", "math", "iframe", "canvas",
    "object", "embed", "select", "button", "input", "textarea", "option", "dialog", "map",
}  # fmt: skip
_DROP_ROLES = {"navigation", "banner", "contentinfo", "complementary", "search", "dialog"}
# Classes of the navigation and permalink marks documentation generators write with plain elements.
_DROP_CLASSES = {
    "nav", "nav-panel", "navheader", "navfooter", "navbar", "navigation", "breadcrumb", "breadcrumbs", "headerlink",
}  # fmt: skip
# Classes that are page chrome unless they hold a heading (Texinfo's "Previous: ..., Up: ..." line is a div.header).
_CHROME_CLASSES = {"header", "footer"}
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCK = {
    "address", "article", "blockquote", "body", "caption", "dd", "details", "div", "dl", "dt", "fieldset",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "html", "legend",
    "li", "main", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
}  # fmt: skip
# Opening one of these closes an open element of the key's kind first (HTML's implied end tags, simplified).
_CLOSES = {
    "li": {"li"},
    "dt": {"dt", "dd"},
    "dd": {"dt", "dd"},
    "tr": {"tr", "td", "th"},
    "td": {"td", "th"},
    "th": {"td", "th"},
    "thead": {"tbody", "tfoot", "tr", "td", "th"},
    "tbody": {"thead", "tfoot", "tr", "td", "th"},
    "tfoot": {"thead", "tbody", "tr", "td", "th"},
    "option": {"option"},
}
# ... but never beyond these (a <li> of a nested list does not close the outer one).
_SCOPES = {"li": {"ul", "ol"}, "dt": {"dl"}, "dd": {"dl"}, "td": {"table", "tr"}, "th": {"table", "tr"}}
_SPACES_RE = re.compile(r"\s+")
# Deeper elements (thousands of unclosed <font> tags) are flattened into their ancestor at this depth, so that
# rendering never exceeds Python's recursion limit.
_MAX_DEPTH = 128
_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


@dataclass(eq=False, slots=True)
class _Node:
    tag: str
    attrs: dict[str, str]
    parent: _Node | None = None
    children: list[_Node | str] = field(default_factory=list)


class _TreeBuilder(HTMLParser):
    """A forgiving DOM: unknown end tags are ignored, an end tag closes everything opened after its start tag."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Node("#root", {})
        self.stack = [self.root]
        self.title = ""

    def _close(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        closes = _CLOSES.get(tag)
        if closes:
            scope = _SCOPES.get(tag, {"table"} if tag in ("tr", "thead", "tbody", "tfoot") else set())
            outermost = 0
            for i in range(len(self.stack) - 1, 0, -1):
                open_tag = self.stack[i].tag
                if open_tag in scope:
                    break
                if open_tag in closes:
                    outermost = i
            if outermost:
                del self.stack[outermost:]
        if tag in _BLOCK and tag != "p":
            # A block element ends an open paragraph (<p>a<div>b</div> is two blocks).
            for i in range(len(self.stack) - 1, 0, -1):
                if self.stack[i].tag == "p":
                    del self.stack[i:]
                    break
                if self.stack[i].tag in _BLOCK:
                    break
        elif tag == "p":
            self._close_open_p()
        parent = self.stack[-1]
        node = _Node(tag, {k: v or "" for k, v in attrs}, parent)
        parent.children.append(node)
        if tag not in _VOID and len(self.stack) < _MAX_DEPTH:
            self.stack.append(node)

    def _close_open_p(self) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == "p":
                del self.stack[i:]
                return
            if self.stack[i].tag in _BLOCK:
                return

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self._close(tag)

    def handle_endtag(self, tag: str) -> None:
        self._close(tag)

    def handle_data(self, data: str) -> None:
        if data:
            self.stack[-1].children.append(data)


def _dropped(node: _Node) -> bool:
    if node.tag in _DROP or "hidden" in node.attrs or node.attrs.get("aria-hidden", "").lower() == "true":
        return True
    if node.attrs.get("role", "").lower() in _DROP_ROLES:
        return True
    classes = set(node.attrs.get("class", "").lower().split())
    if classes & _DROP_CLASSES or (classes & _CHROME_CLASSES and not _holds_heading(node)):
        return True
    if node.tag in ("header", "footer"):
        # Page-level header/footer is chrome; inside an article or section it belongs to the content.
        parent = node.parent
        while parent is not None:
            if parent.tag in ("article", "main", "section"):
                return False
            parent = parent.parent
        return True
    style = node.attrs.get("style", "").replace(" ", "").lower()
    return "display:none" in style or "visibility:hidden" in style


def _holds_heading(node: _Node) -> bool:
    return any(
        isinstance(child, _Node) and (child.tag in _HEADINGS or _holds_heading(child)) for child in node.children
    )


def _find(node: _Node, tag: str) -> _Node | None:
    for child in node.children:
        if isinstance(child, _Node) and not _dropped(child):
            if child.tag == tag:
                return child
            found = _find(child, tag)
            if found is not None:
                return found
    return None


def _text_of(node: _Node) -> str:
    """All text below ``node`` (for ``pre``), whitespace kept."""
    out: list[str] = []
    for child in node.children:
        if isinstance(child, str):
            out.append(child)
        elif child.tag == "br":
            out.append("\n")
        elif not _dropped(child):
            out.append(_text_of(child))
    return "".join(out)


class _Renderer:
    def __init__(self, pictures: list[tuple[str, str, str]] | None = None) -> None:
        self.blocks: list[str] = []
        self.inline: list[str] = []
        #: ``(placeholder target, data: URI, alt)`` of every embedded picture, shared with the sub-renderers.
        self.pictures: list[tuple[str, str, str]] = [] if pictures is None else pictures

    # -- inline content --------------------------------------------------------------------------------------

    def flush(self) -> None:
        text = "".join(self.inline)
        self.inline = []
        lines = [_SPACES_RE.sub(" ", line).strip() for line in text.split("\n")]
        block = "\n".join(line for line in lines if line)
        if block:
            self.blocks.append(block)

    def inline_text(self, node: _Node) -> str:
        """The inline rendering of ``node``'s children (nested blocks become line breaks)."""
        sub = _Renderer(self.pictures)
        sub.walk_children(node)
        sub.flush()
        return "\n".join(sub.blocks)

    # -- walking ---------------------------------------------------------------------------------------------

    def walk_children(self, node: _Node) -> None:
        for child in node.children:
            if isinstance(child, str):
                self.inline.append(child)
            else:
                self.walk(child)

    def walk(self, node: _Node) -> None:
        tag = node.tag
        if _dropped(node):
            return
        if tag in _HEADINGS:
            self.flush()
            title = _SPACES_RE.sub(" ", self.inline_text(node)).strip()
            if title:
                self.blocks.append("#" * _HEADINGS[tag] + " " + title)
        elif tag == "br":
            self.inline.append("\n")
        elif tag == "img":
            src = node.attrs.get("src", "").strip()
            alt = node.attrs.get("alt", "") or node.attrs.get("title", "")
            if src.startswith("data:"):
                uri, src = src, src.split(";", 1)[0].split(",", 1)[0]
                if ";base64," in uri[:64]:
                    src = f"{src}#{len(self.pictures) + 1}"  # numbered, so the figure finds its placeholder
                    self.pictures.append((src, uri, alt))
            if src:
                self.inline.append(" " + md.image(alt, src) + " ")
        elif tag == "a":
            href = node.attrs.get("href", "").strip()
            text = _SPACES_RE.sub(" ", self.inline_text(node)).strip()
            if href and not href.startswith(("#", "javascript:")) and text and "](" not in text:
                self.inline.append(md.link(text, href))
            else:
                self.inline.append(text)
        elif tag in ("ul", "ol"):
            self.flush()
            block = self.list_block(node)
            if block:
                self.blocks.append(block)
        elif tag == "table":
            self.flush()
            block = self.table_block(node)
            if block:
                self.blocks.append(block)
        elif tag == "pre":
            self.flush()
            code = _text_of(node).strip("\n")
            if code.strip():
                language = ""
                inner = next((c for c in node.children if isinstance(c, _Node) and c.tag == "code"), None)
                for cls in ((inner.attrs if inner else node.attrs).get("class", "")).split():
                    if cls.startswith(("language-", "lang-")):
                        language = cls.split("-", 1)[1]
                fence = "~~~" if "```" in code else "```"
                self.blocks.append(f"{fence}{language}\n{code}\n{fence}")
        elif tag == "code":
            code = _SPACES_RE.sub(" ", _text_of(node)).strip()
            if code:
                self.inline.append(f"``{code}``" if "`" in code else f"`{code}`")
        elif tag == "blockquote":
            self.flush()
            sub = _Renderer(self.pictures)
            sub.walk_children(node)
            sub.flush()
            quoted = md.join_blocks(sub.blocks)
            if quoted:
                self.blocks.append("\n".join(f"> {line}" if line else ">" for line in quoted.split("\n")))
        elif tag == "hr":
            self.flush()
        elif tag in _BLOCK:
            self.flush()
            self.walk_children(node)
            self.flush()
        else:
            self.walk_children(node)

    def list_block(self, node: _Node) -> str:
        lines: list[str] = []
        number = 1
        ordered = node.tag == "ol"
        if ordered and node.attrs.get("start", "").strip().isdigit():
            number = int(node.attrs["start"])
        for child in node.children:
            if not isinstance(child, _Node) or child.tag != "li" or _dropped(child):
                if isinstance(child, _Node) and child.tag in ("ul", "ol"):
                    lines.extend(self.list_block(child).split("\n"))  # a list nested without <li>
                continue
            marker = f"{number}. " if ordered else "- "
            number += 1
            sub = _Renderer(self.pictures)
            sub.walk_children(child)
            sub.flush()
            body = "\n".join(sub.blocks)
            item = body.split("\n") if body else [""]
            lines.append(marker + item[0])
            lines.extend(" " * len(marker) + line if line else "" for line in item[1:])
        return "\n".join(line for line in lines if line.strip())

    def table_block(self, node: _Node) -> str:
        rows: list[list[str]] = []
        caption = ""

        def collect(parent: _Node) -> None:
            nonlocal caption
            for child in parent.children:
                if not isinstance(child, _Node) or _dropped(child):
                    continue
                if child.tag == "tr":
                    row: list[str] = []
                    for c in child.children:
                        if isinstance(c, _Node) and c.tag in ("td", "th") and not _dropped(c):
                            row.append(self.inline_text(c))
                            span = c.attrs.get("colspan", "1").strip()
                            row.extend([""] * (min(int(span), 100) - 1 if span.isdigit() and int(span) > 1 else 0))
                    if any(cell.strip() for cell in row):
                        rows.append(row)
                elif child.tag == "caption":
                    caption = _SPACES_RE.sub(" ", self.inline_text(child)).strip()
                elif child.tag in ("thead", "tbody", "tfoot"):
                    collect(child)

        collect(node)
        if not rows:
            return ""
        if len(rows) == 1 and len(rows[0]) == 1:
            return rows[0][0]  # a one-cell layout table is just its text
        out = md.table(rows)
        return f"{caption}\n\n{out}" if caption else out


def _decode(data: bytes, filename: str) -> tuple[str, str]:
    """``(text, note)``: the note says how a page without a usable charset was decoded when that was a guess."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16"), ""
    if not data.startswith(codecs.BOM_UTF8):
        m = _CHARSET_RE.search(data[:4096])
        if m:
            try:
                encoding = codecs.lookup(m.group(1).decode("ascii")).name
            except LookupError:
                encoding = ""
            if encoding in ("gb2312", "gbk"):
                encoding = "gb18030"  # a superset: pages labelled GB2312 routinely use GBK characters
            if encoding:
                try:
                    return data.decode(encoding), ""
                except UnicodeDecodeError:
                    pass  # a wrong label: fall back to detection
    # An old page that declares no charset and is neither UTF-8 nor Chinese is read as windows-1252 there, the
    # default browsers read such a page in (WHATWG Encoding).
    return read_text(data, filename)


def html_to_markdown(html: str) -> tuple[str, str]:
    """``(markdown, title)`` of an HTML document."""
    markdown, title, _ = _render(html)
    return markdown, title


def _render(html: str) -> tuple[str, str, list[tuple[str, str, str]]]:
    """``(markdown, title, embedded pictures)`` of an HTML document."""
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    title_node = _find_any(builder.root, "title")
    title = _SPACES_RE.sub(" ", _text_of(title_node)).strip() if title_node else ""
    root = _find(builder.root, "main") or builder.root
    renderer = _Renderer()
    renderer.walk_children(root) if root is builder.root else renderer.walk(root)
    renderer.flush()
    return md.join_blocks(renderer.blocks), title, renderer.pictures


def _find_any(node: _Node, tag: str) -> _Node | None:
    for child in node.children:
        if isinstance(child, _Node):
            if child.tag == tag:
                return child
            found = _find_any(child, tag)
            if found is not None:
                return found
    return None


def parse_html(data: bytes, filename: str, max_figures: int = 0) -> ParsedDocument:
    """``max_figures``: the most ``data:`` URI pictures handed over as figures (:mod:`ragstep.parsers.figures`)."""
    decoded, note = _decode(data, filename)
    try:
        text, title, pictures = _render(decoded)
    except RecursionError as exc:
        raise InputError(f"{filename}: the HTML is nested too deeply to read") from exc
    figures: list[Figure] = []
    for ref, uri, alt in pictures:
        if len(figures) >= max_figures:
            break
        try:
            raw = base64.b64decode(uri.split(",", 1)[1], validate=False)
        except (ValueError, IndexError, binascii.Error):
            continue  # a broken data: URI stays a placeholder
        found = figure(ref, raw, alt=alt)
        if found is not None and md.image(alt, ref) in text:
            figures.append(found)
    metadata = {"title": title} if title else {}
    if note:
        metadata["note"] = note
    return ParsedDocument(filename, "html", text, metadata=metadata, figures=tuple(figures))
