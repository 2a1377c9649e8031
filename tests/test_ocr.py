"""OCR of images and scanned PDFs, on fixtures made here: English and Chinese text rendered to images with the system's
fonts (Pillow), assembled into a scanned PDF and a mixed PDF (a text page, then a scanned one). Tesseract reads them;
the character accuracy against the rendered text has a floor a broken engine would not reach."""

from __future__ import annotations

import difflib
import io
import shutil
from pathlib import Path

import pytest

from ragstep.app.ingest import ingest_file
from ragstep.app.search import knowledge_search
from ragstep.context import Context
from ragstep.errors import InputError
from ragstep.models import ChunkType, KnowledgeBase, SearchRequest
from ragstep.parsers import OcrOptions, ParseLimits, parse

PIL = pytest.importorskip("PIL", reason="Pillow (dev extra) renders the fixtures")
from PIL import Image, ImageDraw, ImageFont  # noqa: E402

LATIN_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
pytestmark = pytest.mark.skipif(
    shutil.which("tesseract") is None or not LATIN_FONT.is_file() or not CJK_FONT.is_file(),
    reason="needs tesseract-ocr (+ -eng, -chi-sim) and fonts-dejavu-core / fonts-wqy-microhei (./dev installs them)",
)

ENGLISH = [
    "The lighthouse keeper lights the lamp at dusk",
    "and logs every passing ship in a blue ledger.",
    "Descale the espresso machine every two months.",
]
CHINESE = ["北京到上海的高铁全程最快约4小时18分钟。", "混合检索同时使用关键词检索和向量检索。"]


def rendered(lines: list[str], font: Path, size: int = 34) -> Image.Image:
    face = ImageFont.truetype(str(font), size)
    image = Image.new("L", (1300, 60 + 64 * len(lines)), 255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((40, 30 + 64 * i), line, font=face, fill=0)
    return image


def encoded(image: Image.Image, kind: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind)
    return buffer.getvalue()


def accuracy(read: str, truth: str) -> float:
    """Character accuracy: 1 - edit distance / length, on the text without whitespace."""
    a, b = "".join(read.split()), "".join(truth.split())
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def scanned_pdf(*pages: Image.Image) -> bytes:
    buffer = io.BytesIO()
    pages[0].convert("RGB").save(buffer, "PDF", save_all=True, append_images=[p.convert("RGB") for p in pages[1:]])
    return buffer.getvalue()


def mixed_pdf(scan: Image.Image) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    buffer = io.BytesIO()
    pdf = canvas.Canvas(buffer, pagesize=A4)
    pdf.drawString(72, 760, "Page one has a text layer about the harbour master.")
    pdf.showPage()
    pdf.drawImage(ImageReader(scan.convert("RGB")), 20, 400, width=560, height=560 * scan.height / scan.width)
    pdf.showPage()
    pdf.save()
    return buffer.getvalue()


def test_images_are_read_in_english_and_chinese_with_their_lines() -> None:
    english = parse(encoded(rendered(ENGLISH, LATIN_FONT), "PNG"), "keeper.png")
    text = english.text.split("-->", 1)[1].rsplit("<!--", 1)[0].strip()
    assert accuracy(text, " ".join(ENGLISH)) >= 0.95, text
    assert text.splitlines()[0].startswith("The lighthouse keeper")  # reading order and lines kept
    chinese = parse(encoded(rendered(CHINESE, CJK_FONT), "JPEG"), "高铁.jpg")
    text = chinese.text.split("-->", 1)[1].rsplit("<!--", 1)[0].strip()
    assert accuracy(text, "".join(CHINESE)) >= 0.85, text
    assert "4小时18分钟" in text


def test_a_scanned_pdf_is_read_page_by_page() -> None:
    doc = parse(scanned_pdf(rendered(ENGLISH, LATIN_FONT), rendered(CHINESE, CJK_FONT)), "scan.pdf")
    assert doc.pages == 2
    assert "<!-- ocr page 1 -->" in doc.text and "<!-- ocr page 2 -->" in doc.text
    assert "blue ledger" in doc.text and "高铁" in doc.text


def test_a_mixed_pdf_keeps_its_text_page_and_reads_the_scanned_one() -> None:
    doc = parse(mixed_pdf(rendered(ENGLISH, LATIN_FONT)), "mixed.pdf")
    first, second = doc.text.split("<!-- page 2 -->")
    assert "harbour master" in first and "ocr" not in first
    assert "<!-- ocr page 2 -->" in second and "blue ledger" in second


def test_ocr_limits_and_switch_refuse_with_a_message() -> None:
    scan = scanned_pdf(*(rendered([f"Page {n} of the report."], LATIN_FONT) for n in range(3)))
    with pytest.raises(InputError, match="3 scanned pages is over the limit of 2"):
        parse(scan, "long.pdf", ParseLimits(ocr=OcrOptions(max_pages=2)))
    with pytest.raises(InputError, match="RAGSTEP_OCR_ENGINE=none"):
        parse(encoded(rendered(ENGLISH, LATIN_FONT), "PNG"), "a.png", ParseLimits(ocr=OcrOptions(engine="none")))
    with pytest.raises(InputError, match="not a readable PNG"):
        parse(b"this is not an image", "fake.png")


def test_scanned_content_is_searchable_and_its_chunks_say_ocr_and_page(
    ctx: Context, make_kb: object, tmp_path: Path
) -> None:
    kb: KnowledgeBase = make_kb("scans", embedding_model="none")  # type: ignore[operator]
    scan = tmp_path / "scan.pdf"
    scan.write_bytes(mixed_pdf(rendered(ENGLISH, LATIN_FONT)))
    photo = tmp_path / "photo.png"
    photo.write_bytes(encoded(rendered(CHINESE, CJK_FONT), "PNG"))
    assert ingest_file(scan, kb, ctx).status == "indexed"
    assert ingest_file(photo, kb, ctx).status == "indexed"
    found = knowledge_search(SearchRequest(query="where are ships logged blue ledger", knowledge_base_ids=[kb.id]), ctx)
    hit = found.final_results[0]
    assert hit.knowledge_filename == "scan.pdf" and "blue ledger" in hit.content
    assert hit.chunk_type == ChunkType.IMAGE_OCR and hit.metadata["page"] == 2
    found = knowledge_search(SearchRequest(query="北京到上海高铁要多久", knowledge_base_ids=[kb.id]), ctx)
    assert found.final_results[0].knowledge_filename == "photo.png"
    assert found.final_results[0].chunk_type == ChunkType.IMAGE_OCR
