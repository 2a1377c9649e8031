"""``ragstep bench ocr``: OCR throughput (pages/s) and character accuracy, English and Chinese.

The bundled demo documents (English and Chinese) are rendered to page images with the system's fonts (Pillow:
DejaVu Sans, WenQuanYi Micro Hei; 150 dpi A4-like pages, 28 px text), assembled into one scanned PDF per language,
and parsed as ingestion parses them (:func:`ragstep.parsers.parse`, Tesseract through :mod:`ragstep.parsers.ocr`).
Accuracy is 1 - (edit distance / length) of the OCR'd text against the rendered text, whitespace ignored.
"""

from __future__ import annotations

import difflib
import io
import re
import time
from pathlib import Path
from typing import Any

from ragstep.errors import InputError
from ragstep.parsers.ocr import OCR_SPAN

FONTS = {
    "en": Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
    "zh": Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"),
}
PAGE = (1240, 1754)  # A4 at 150 dpi
MARGIN = 90
SIZE = 28


def _demo_text(language: str) -> str:
    folder = Path(__file__).resolve().parents[1] / "data" / "demo" / "docs"
    names = sorted(p for p in folder.iterdir() if p.suffix == ".md")
    chosen = [p for p in names if (p.stem.isascii()) == (language == "en")]
    text = "\n".join(p.read_text(encoding="utf-8") for p in chosen)
    return "\n".join(line.lstrip("#").strip() for line in text.splitlines() if line.strip() and "|" not in line)


def _wrap(text: str, font: Any, width: int) -> list[str]:
    lines: list[str] = []
    for paragraph in text.splitlines():
        units = paragraph.split(" ") if paragraph.isascii() else list(paragraph)
        joiner = " " if paragraph.isascii() else ""
        line = ""
        for unit in units:
            candidate = f"{line}{joiner}{unit}" if line else unit
            if font.getlength(candidate) > width and line:
                lines.append(line)
                line = unit
            else:
                line = candidate
        if line:
            lines.append(line)
    return lines


def _pages(language: str) -> tuple[list[Any], str]:
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(str(FONTS[language]), SIZE)
    lines = _wrap(_demo_text(language), font, PAGE[0] - 2 * MARGIN)
    per_page = (PAGE[1] - 2 * MARGIN) // int(SIZE * 1.6)
    pages = []
    for start in range(0, len(lines), per_page):
        image = Image.new("L", PAGE, 255)
        draw = ImageDraw.Draw(image)
        for i, line in enumerate(lines[start : start + per_page]):
            draw.text((MARGIN, MARGIN + i * int(SIZE * 1.6)), line, font=font, fill=0)
        pages.append(image.convert("RGB"))
    return pages, "".join("".join(lines).split())


def run_ocr(repeat: int = 1) -> dict[str, Any]:
    from ragstep.parsers import parse

    missing = [str(f) for f in FONTS.values() if not f.is_file()]
    if missing:
        raise InputError(f"bench ocr renders with {', '.join(missing)}: install fonts-dejavu-core fonts-wqy-microhei")
    result: dict[str, Any] = {"languages": {}}
    for language in FONTS:
        pages, truth = _pages(language)
        buffer = io.BytesIO()
        pages[0].save(buffer, "PDF", save_all=True, append_images=pages[1:])
        data = buffer.getvalue()
        times = []
        text = ""
        for _ in range(repeat):
            started = time.perf_counter()
            text = parse(data, f"scan-{language}.pdf").text
            times.append(time.perf_counter() - started)
        read = "".join("".join(m.group(3) for m in OCR_SPAN.finditer(text)).split())
        read = re.sub(r"<!--.*?-->", "", read)
        best = min(times)
        result["languages"][language] = {
            "pages": len(pages),
            "characters": len(truth),
            "seconds": round(best, 2),
            "pages_per_s": round(len(pages) / best, 3),
            "accuracy": round(difflib.SequenceMatcher(None, read, truth, autojunk=False).ratio(), 4),
        }
    return result


def render(result: dict[str, Any]) -> str:
    lines = ["OCR of scanned PDFs rendered from the demo documents (Tesseract)"]
    for language, row in result["languages"].items():
        lines.append(
            f"  {language}: {row['pages']} pages, {row['characters']} characters, {row['seconds']} s "
            f"({row['pages_per_s']} pages/s), character accuracy {row['accuracy']:.4f}"
        )
    return "\n".join(lines)
