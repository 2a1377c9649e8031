"""PDF text with pypdf (pure Python, 2 MB in the layer): one text stream, pages separated by :data:`PAGE_MARKER`.

* Text comes in content-stream order, which is the reading order of nearly every generated PDF (word processors,
  LaTeX, reportlab), page by page. A page with no text layer, or a garbled one (:func:`~ragstep.parsers.ocr.garbled`),
  is read by OCR from the images it draws (:mod:`ragstep.parsers.ocr`; page by page, so a mixed PDF keeps its text
  pages as they are), wrapped in ``<!-- ocr page N -->`` markers; a PDF with no text even then is an
  :class:`InputError` ("the document is empty").
* Page breaks: ``\\n\\n<!-- page N -->\\n\\n`` before the text of page N, for every N >= 2 (also after a page
  without text, so the markers always count the pages). An HTML comment renders as nothing in Markdown and reads
  as plain text to the chunker.
* Images: ``![image](pdf://page/N/<XObject name>)`` where the page draws an image (an image drawn again on a later
  page, such as a logo in every header, only where it first appears). A page whose only content is images is
  still "no text": a PDF of scans is refused as empty rather than indexed as placeholders.
* Tables: pypdf has no table model, so a conservative heuristic finds them: consecutive lines (at least 2) made
  of the same number (at least 2) of separately drawn text pieces on one baseline, whose left edges line up
  with the first line's columns (within one font size), become a Markdown table with the first line as header.
  That is how word processors and reportlab draw table cells; prose, even with bold words, is drawn as one piece
  per line and is left alone. Merged or empty cells break the pattern: such a table stays plain lines.
* Encryption: a PDF encrypted with an empty user password (permissions only) is read; one that needs a password
  is refused. AES-encrypted files need the ``cryptography`` package, which the Lambda layer leaves out (18 MB);
  without it they are refused with a message that says so. RC4 works without it.
* Anything pypdf cannot read is an :class:`InputError` ``"<file>: not a readable PDF (<reason>)"``.
"""

from __future__ import annotations

import io
import math
import re
import shutil
from dataclasses import dataclass
from typing import Any

from ragstep.errors import InputError, NoTextError
from ragstep.parsers import markdown as md
from ragstep.parsers.base import ParsedDocument
from ragstep.parsers.figures import Figure, big_enough, figure
from ragstep.parsers.ocr import INSTALL_HINT, OcrOptions, garbled, ocr_pdf_page, wrap

PAGE_MARKER = "\n\n<!-- page {page} -->\n\n"
# C0 controls other than tab and newline (pypdf passes some glyph codes through as controls).
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_BLANK_LINES_RE = re.compile(r"\n{3,}")
_PLACEHOLDER_RE = re.compile(r"!\[image\]\(pdf://[^)\n]*\)")


@dataclass(frozen=True, slots=True)
class _Piece:
    text: str
    x: float
    y: float
    size: float
    image: bool = False


def _page_images(page: Any) -> dict[str, Any]:
    """``{name: indirect reference}`` of the image XObjects in the page's own resources."""
    try:
        resources = page.get("/Resources")
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        if xobjects is None:
            return {}
        xobjects = xobjects.get_object()
        return {
            str(name): ref
            for name, ref in xobjects.items()
            if ref.get_object().get("/Subtype") == "/Image"  # forms are read for their text by pypdf
        }
    except Exception:  # broken resources: no image placeholders, the text is still read
        return {}


def _pieces(page: Any, number: int, seen_images: set[Any], drawn: list[str] | None = None) -> list[_Piece]:
    """The page's text as pypdf draws it, with where each piece starts, and its images as placeholder pieces
    where they are drawn (their XObject names appended to ``drawn``). The texts joined are the page's plain text."""
    pieces: list[_Piece] = []
    images = _page_images(page)

    def visit(text: str, cm: list[float], tm: list[float], _font: Any, size: float) -> None:
        if not text:
            return
        # Text space -> user space: tm then cm.
        x = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]
        y = tm[4] * cm[1] + tm[5] * cm[3] + cm[5]
        scale = math.sqrt(abs((tm[0] * tm[3] - tm[1] * tm[2]) * (cm[0] * cm[3] - cm[1] * cm[2]))) or 1.0
        pieces.append(_Piece(text, x, y, max(float(size or 0) * scale, 1.0)))

    def operator(op: bytes, args: list[Any], _cm: Any, _tm: Any) -> None:
        if op != b"Do" or not args or str(args[0]) not in images:
            return
        ref = images[str(args[0])]
        key = (ref.idnum, ref.generation) if hasattr(ref, "idnum") else id(ref)
        if key in seen_images:
            return  # a logo repeated on every page is shown once, where it first appears
        seen_images.add(key)
        if drawn is not None:
            drawn.append(str(args[0]))
        placeholder = md.image("image", f"pdf://page/{number}/{str(args[0]).lstrip('/')}")
        pieces.append(_Piece(f"\n\n{placeholder}\n\n", 0.0, 0.0, 1.0, image=True))

    page.extract_text(visitor_text=visit, visitor_operand_before=operator)
    return pieces


def _rows(pieces: list[_Piece]) -> list[tuple[int, int]]:
    """``(start, end)`` index ranges of pieces that form one table-like line: 2+ single-line pieces on a baseline."""
    rows: list[tuple[int, int]] = []
    i = 0
    while i < len(pieces):
        j = i
        while (
            j < len(pieces)
            and not pieces[j].image
            and pieces[j].text.strip()
            and "\n" not in pieces[j].text.strip("\n")
            and abs(pieces[j].y - pieces[i].y) <= pieces[i].size * 0.3
            and (j == i or pieces[j].x > pieces[j - 1].x + 1.0)
        ):
            j += 1
        if j - i >= 2:
            rows.append((i, j))
            i = j
        else:
            i += 1
    return rows


def _tables(pieces: list[_Piece]) -> list[tuple[int, int, str]]:
    """``(first piece, end piece, markdown)`` of every table found on a page."""
    out: list[tuple[int, int, str]] = []
    rows = _rows(pieces)
    k = 0
    while k < len(rows):
        start, end = rows[k]
        columns = [p.x for p in pieces[start:end]]
        tolerance = max(p.size for p in pieces[start:end])
        group = [rows[k]]
        m = k + 1
        while m < len(rows):
            s, e = rows[m]
            prev_end = group[-1][1]
            between = pieces[prev_end:s]
            if (
                any(p.text.strip() for p in between)
                or e - s != len(columns)
                or pieces[s].y >= pieces[group[-1][0]].y  # rows go down the page
                or any(abs(p.x - c) > tolerance for p, c in zip(pieces[s:e], columns, strict=True))
            ):
                break
            group.append(rows[m])
            m += 1
        if len(group) >= 2:
            table = md.table([[p.text.strip() for p in pieces[s:e]] for s, e in group])
            out.append((group[0][0], group[-1][1], table))
            k = m
        else:
            k += 1
    return out


def page_text(page: Any, number: int = 1, seen_images: set[Any] | None = None, drawn: list[str] | None = None) -> str:
    """The text of page ``number`` (1-based); ``seen_images`` carries the images placed on earlier pages, ``drawn``
    receives the names of the images it places."""
    pieces = _pieces(page, number, set() if seen_images is None else seen_images, drawn)
    parts: list[str] = []
    pos = 0
    for start, end, table in _tables(pieces):
        parts.extend(p.text for p in pieces[pos:start])
        parts.append(f"\n\n{table}\n\n")
        pos = end
    parts.extend(p.text for p in pieces[pos:])
    text = _CONTROL_RE.sub("", "".join(parts).replace("\r\n", "\n").replace("\r", "\n"))
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_LINES_RE.sub("\n\n", text).strip("\n")


def _figures(page: Any, number: int, names: list[str], budget: int) -> list[Figure]:
    """The pictures of a page with a text layer that may hold text, at most ``budget``. The size is read from the
    image dictionary first, so icons and ornaments are never decoded; a picture pypdf cannot decode (or without
    Pillow installed) stays a placeholder."""
    images = _page_images(page)
    out: list[Figure] = []
    for name in names:
        if len(out) >= budget:
            break
        try:
            obj = images[name].get_object()
            if not big_enough(int(obj.get("/Width", 0)), int(obj.get("/Height", 0))):
                continue
            data = page.images[name].data
        except Exception:  # an undecodable picture is not a reason to refuse the document
            continue
        found = figure(f"pdf://page/{number}/{name.lstrip('/')}", data, page=number)
        if found is not None:
            out.append(found)
    return out


def _reason(exc: BaseException) -> str:
    message = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _aes_error(filename: str) -> InputError:
    return InputError(
        f"{filename}: the PDF is encrypted with AES and this installation cannot decrypt it "
        "(install the 'cryptography' package)"
    )


def parse_pdf(data: bytes, filename: str, ocr: OcrOptions | None = None, max_figures: int = 0) -> ParsedDocument:
    """``max_figures``: the most pictures of pages with a text layer handed over as figures
    (:mod:`ragstep.parsers.figures`)."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, FileNotDecryptedError

    if b"%PDF-" not in data[:1024]:  # the header may follow up to 1 KiB of junk
        raise InputError(f"{filename}: not a readable PDF (no %PDF header)")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            decrypted = reader.decrypt("")
            if not decrypted:
                raise InputError(f"{filename}: the PDF is encrypted with a password; remove the password and retry")
        count = len(reader.pages)
    except InputError:
        raise
    except DependencyError as exc:
        raise _aes_error(filename) from exc
    except FileNotDecryptedError as exc:
        raise InputError(f"{filename}: the PDF is encrypted with a password; remove the password and retry") from exc
    except Exception as exc:  # pypdf raises many types (PdfReadError, ValueError, KeyError, ...) on broken files
        raise InputError(f"{filename}: not a readable PDF ({_reason(exc)})") from exc
    texts: list[str] = []
    drawn: list[list[str]] = []
    seen_images: set[Any] = set()
    for number in range(count):
        drawn.append([])
        try:
            texts.append(page_text(reader.pages[number], number + 1, seen_images, drawn[-1]))
        except DependencyError as exc:  # pypdf decrypts lazily: AES without its library fails on the first page
            raise _aes_error(filename) from exc
        except Exception as exc:
            raise InputError(f"{filename}: not a readable PDF (page {number + 1}: {_reason(exc)})") from exc
    scanned = [n for n, t in enumerate(texts) if not _PLACEHOLDER_RE.sub("", t).strip() or garbled(t)]
    options = ocr or OcrOptions()
    can_read = options.enabled and shutil.which("tesseract") is not None
    if scanned and can_read:
        if len(scanned) > options.max_pages:
            raise InputError(
                f"{filename}: {len(scanned)} scanned pages is over the limit of {options.max_pages} "
                "(RAGSTEP_OCR_MAX_PAGES)"
            )
        for done, n in enumerate(scanned, start=1):
            read = ocr_pdf_page(reader.pages[n], n + 1, filename, options)
            if read:
                texts[n] = wrap(read, n + 1)
            if options.on_page is not None:
                options.on_page(done, len(scanned))
    if not any(_PLACEHOLDER_RE.sub("", t).strip() for t in texts):
        if can_read:
            raise NoTextError(f"{filename}: the document is empty (no text layer, and OCR found no text on its pages)")
        why = "RAGSTEP_OCR_ENGINE=none turns OCR off" if not options.enabled else INSTALL_HINT
        raise InputError(f"{filename}: the document is empty (no text layer; a scanned PDF needs OCR: {why})")
    figures: list[Figure] = []
    for n, names in enumerate(drawn):
        if n not in scanned and names and len(figures) < max_figures:
            figures += _figures(reader.pages[n], n + 1, names, max_figures - len(figures))
    text = texts[0] if texts else ""
    for number, page in enumerate(texts[1:], start=2):
        text += PAGE_MARKER.format(page=number) + page
    return ParsedDocument(filename, "pdf", text, pages=count, figures=tuple(figures))
