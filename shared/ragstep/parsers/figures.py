"""Pictures inside documents (figures): what the parsers hand over besides the text, and how their kind and size are
read from their first bytes.

A parser that finds a picture leaves its placeholder ``![alt](ref)`` where the picture is in the text, as before,
and, for a picture whose bytes are in the file, a :class:`Figure` in :attr:`ParsedDocument.figures
<ragstep.parsers.base.ParsedDocument.figures>` with the same ``ref``:

* PDF: the image XObjects a page draws (``pdf://page/N/<name>``), decoded by pypdf only when the dictionary's
  ``/Width`` x ``/Height`` says the picture is big enough to hold text;
* DOCX: the ``word/media/*`` parts a picture points at (``docx://word/media/image1.png``), read against the zip's
  inflation limits;
* HTML: ``data:`` URI images (``data:image/png#N``, the N-th of the page). A page ingested by URL has its same-site
  images inlined as ``data:`` URIs when it is fetched (:mod:`ragstep.app.urls`), so they arrive this way too.

Parsers stay pure: storing, OCR and captions are the parse stage's (:mod:`ragstep.stages.ingest.figures`).

Decorative pictures (icons, bullets, rules, spacer GIFs) are not figures: a picture smaller than
:data:`MIN_PIXELS` in area or :data:`MIN_SIDE` on a side is left as a placeholder. Formats other than PNG, JPEG,
GIF, WebP, TIFF and BMP (vector EMF/WMF/SVG drawings) are left as placeholders too: Tesseract and the vision models
read rasters only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: A picture smaller than this in area (64 x 64 pixels) is an icon or an ornament, not a figure.
MIN_PIXELS = 64 * 64
#: ... and one thinner than this on either side is a rule or a spacer.
MIN_SIDE = 16
#: The raster types read (media type -> extension of the stored image).
EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "image/tiff": ".tif",
    "image/bmp": ".bmp",
}


@dataclass(frozen=True, slots=True)
class Figure:
    """A picture of a document: the target of its placeholder in the text, its bytes and what they are."""

    ref: str
    data: bytes
    media_type: str
    width: int
    height: int
    #: The PDF page it is drawn on (None outside PDFs).
    page: int | None = None
    alt: str = ""

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.media_type]


def big_enough(width: int, height: int) -> bool:
    """Whether a picture of this size may hold text (0 = unknown size: given the benefit of the doubt)."""
    if width == 0 or height == 0:
        return True
    return min(width, height) >= MIN_SIDE and width * height >= MIN_PIXELS


def sniff(data: bytes) -> tuple[str, int, int] | None:
    """``(media type, width, height)`` of a raster image from its header (size 0 when the header does not say),
    None when ``data`` is not one of :data:`EXTENSIONS`."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return "image/png", width, height
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return "image/gif", width, height
    if data.startswith(b"\xff\xd8\xff"):
        width, height = _jpeg_size(data)
        return "image/jpeg", width, height
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        width, height = _webp_size(data)
        return "image/webp", width, height
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "image/tiff", 0, 0
    if data[:2] == b"BM" and len(data) >= 26:
        width, height = struct.unpack("<ii", data[18:26])
        return "image/bmp", abs(width), abs(height)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """The frame size of a JPEG: the first SOFn segment's height and width."""
    pos = 2
    while pos + 9 <= len(data):
        if data[pos] != 0xFF:
            return 0, 0
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return width, height
        pos += 2 + length
    return 0, 0


def _webp_size(data: bytes) -> tuple[int, int]:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1
    return 0, 0


def figure(ref: str, data: bytes, *, page: int | None = None, alt: str = "") -> Figure | None:
    """``data`` as a figure when it is a raster picture big enough to hold text, else None."""
    found = sniff(data)
    if found is None:
        return None
    media_type, width, height = found
    if not big_enough(width, height):
        return None
    return Figure(ref, data, media_type, width, height, page, alt)
