"""Image files (``.png``, ``.jpg``, ``.jpeg``, ``.webp``, ``.tif``, ``.tiff``): their text, read by OCR
(:mod:`ragstep.parsers.ocr`). An image with no text is "the document is empty", as a blank file is."""

from __future__ import annotations

from ragstep.errors import InputError, NoTextError
from ragstep.parsers.base import ParsedDocument
from ragstep.parsers.ocr import OcrOptions, ocr_image, wrap

#: The first bytes of each image format Tesseract reads, so a misnamed file is refused before the engine runs.
_SIGNATURES = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*")


def parse_image(data: bytes, filename: str, options: OcrOptions) -> ParsedDocument:
    is_webp = data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    if not (is_webp or data.startswith(_SIGNATURES)):
        raise InputError(f"{filename}: not a readable PNG, JPEG, WebP or TIFF image")
    text = ocr_image(data, filename, options)
    if not text.strip():
        raise NoTextError(f"{filename}: the document is empty (OCR found no text in the image)")
    return ParsedDocument(filename, "image", wrap(text, 1), pages=1, metadata={"ocr_pages": [1]})
