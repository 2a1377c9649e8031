"""OCR of images and scanned pages with Tesseract, embedded and offline: its engine and trained models (English,
simplified Chinese) come from the system's packages (``apt-get install tesseract-ocr tesseract-ocr-eng
tesseract-ocr-chi-sim``; ``./dev`` installs them), never from a download at run time.

Why Tesseract through its command line: its models ship in Debian's packages (~25 MB with Chinese) and it reads PNG,
JPEG, TIFF and WebP itself, so ragstep needs no Python imaging stack to OCR an image file. The ONNX alternatives
that bundle their models on PyPI pull in OpenCV (~60 MB wheels that need the system's libGL), which is more than
a parser earns. The engine runs as a child process with a time limit per image (``RAGSTEP_OCR_TIMEOUT_S``), so a
pathological image cannot hold a worker.

The text keeps Tesseract's reading order and line structure (one line per printed line, a blank line between
blocks). Tesseract separates Chinese characters by spaces; those between two CJK characters are removed.

OCR'd text is wrapped in markers the chunker reads as plain text and renderers hide (as PDF page markers are):
``<!-- ocr page N -->`` before and ``<!-- /ocr -->`` after, so the chunk stage can mark the chunks that came from
OCR (``ChunkType.IMAGE_OCR``, with their page). The text of a picture inside a document names the stored picture
too: ``<!-- ocr page N image <sha256>.png -->`` (no page outside PDFs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from ragstep.errors import InputError

OCR_CLOSE = "<!-- /ocr -->"
#: A span of OCR'd text in a parsed document: its page (None for a picture outside a PDF), the stored picture it was
#: read from (None for a scanned page), and where it is.
OCR_SPAN = re.compile(r"<!-- ocr(?: page (\d+))?(?: image ([\w.-]+))? -->(.*?)<!-- /ocr -->", re.S)
_CJK = r"[\u3000-\u303f\u3400-\u9fff\uf900-\ufaff\uff00-\uffef]"
# Spaces Tesseract puts between two CJK characters, or between a CJK character and a digit (约 4 小时 -> 约4小时).
_CJK_GAP = re.compile(rf"(?<={_CJK}) +(?={_CJK}|[0-9])|(?<=[0-9]) +(?={_CJK})")
_BLANKS = re.compile(r"\n{3,}")
INSTALL_HINT = "install Tesseract: apt-get install tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim"


@dataclass(frozen=True, slots=True)
class OcrOptions:
    """How OCR runs (``RAGSTEP_OCR_*``): the engine (``tesseract`` or ``none``), its languages, the time one image
    may take, and how many pages of one file may be OCR'd (a file over it is refused)."""

    engine: str = "tesseract"
    languages: str = "eng+chi_sim"
    timeout_s: float = 60.0
    max_pages: int = 50
    #: Told ``(pages read, pages to read)`` after each scanned page is OCR'd: the ingest progress shows pages.
    on_page: Callable[[int, int], None] | None = field(default=None, compare=False)

    @property
    def enabled(self) -> bool:
        return self.engine != "none"


def wrap(text: str, page: int | None, image: str = "") -> str:
    opening = "<!-- ocr" + (f" page {page}" if page is not None else "") + (f" image {image}" if image else "") + " -->"
    return f"{opening}\n\n{text}\n\n{OCR_CLOSE}"


def clean(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\f", "\n").splitlines()]
    joined = _CJK_GAP.sub("", "\n".join(lines))
    return _BLANKS.sub("\n\n", joined).strip()


def ocr_image(data: bytes, name: str, options: OcrOptions) -> str:
    """The text Tesseract reads in the image ``data`` ("" when there is none)."""
    if not options.enabled:
        raise InputError(f"{name}: reading it needs OCR, which RAGSTEP_OCR_ENGINE=none turns off")
    binary = shutil.which("tesseract")
    if binary is None:
        raise InputError(f"{name}: reading it needs OCR and Tesseract is not installed; {INSTALL_HINT}")
    command = [binary, "stdin", "stdout", "-l", options.languages, "--psm", "3"]
    try:
        # One thread per image: Tesseract's OpenMP threads only contend on a busy machine (and under Lambda's
        # fractional vCPUs); files run in parallel at the job level instead.
        env = {**os.environ, "OMP_THREAD_LIMIT": "1"}
        done = subprocess.run(command, input=data, capture_output=True, timeout=options.timeout_s, check=False, env=env)
    except subprocess.TimeoutExpired:
        raise InputError(
            f"{name}: OCR took longer than {options.timeout_s:g} s (RAGSTEP_OCR_TIMEOUT_S); the file is refused"
        ) from None
    if done.returncode != 0:
        reason = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no reason given"])[-1]
        if "Failed loading language" in reason or "Error opening data file" in reason:
            reason += f" (RAGSTEP_OCR_LANGUAGES={options.languages}; {INSTALL_HINT})"
        raise InputError(f"{name}: OCR failed: {reason[:300]}")
    return clean(done.stdout.decode("utf-8", "replace"))


def garbled(text: str) -> bool:
    """A text layer that is not text: mostly symbols, replacement characters or private-use glyph codes (a scanner's
    invisible layer gone wrong, fonts without a Unicode map)."""
    visible = [c for c in text if not c.isspace()]
    if len(visible) < 20:
        return False
    readable = sum(1 for c in visible if c.isalnum() or c in ".,;:!?'\"()-%/&" or "\u3000" <= c <= "\u9fff")
    return readable / len(visible) < 0.6


def ocr_pdf_page(page: object, number: int, name: str, options: OcrOptions) -> str:
    """The text of a scanned PDF page: each image the page draws, OCR'd in drawing order ("" when none has text).
    The images are read as pypdf decodes them (Pillow writes the ones that are not JPEG already)."""
    texts = []
    try:
        images = list(page.images)  # type: ignore[attr-defined]
    except Exception as exc:  # an image pypdf cannot decode (or Pillow missing): say so, do not guess
        raise InputError(
            f"{name}: page {number} is scanned and its image cannot be read ({type(exc).__name__})"
        ) from exc
    for image in images:
        text = ocr_image(image.data, f"{name} (page {number})", options)
        if text:
            texts.append(text)
    return "\n\n".join(texts)
