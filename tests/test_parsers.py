"""File parsers (``ragstep.parsers``) and file ingestion through them, on real files built in ``tmp_path``.

DOCX files are written by python-docx, PDFs by reportlab (encrypted by pypdf), XLSX by DuckDB's excel extension
and openpyxl: all development dependencies, so the parsers are checked against files they did not write.
"""

from __future__ import annotations

import codecs
import importlib.util
import io
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from ragstep.app.ingest import ingest_file, knowledge_id_for
from ragstep.context import Context
from ragstep.errors import InputError
from ragstep.models import Chunk, ChunkType, IngestOptions, Knowledge, KnowledgeBase
from ragstep.parsers import SUPPORTED_EXTENSIONS, decode_text, listed_types, parse
from ragstep.parsers.data import connect, load_excel
from ragstep.parsers.faq import parse_faq, split_values
from ragstep.parsers.html import html_to_markdown
from ragstep.parsers.source_files import TEXT_EXTENSIONS
from ragstep.stages.ingest.chunkers import data_file_chunks
from ragstep.stages.ingest.products import data_blob_key

docx = pytest.importorskip("docx")
pytest.importorskip("reportlab")
openpyxl = pytest.importorskip("openpyxl")


def message(exc: pytest.ExceptionInfo[InputError]) -> str:
    return exc.value.message


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


def in_order(text: str, *parts: str) -> None:
    """Every part occurs in ``text``, in this order."""
    pos = 0
    for part in parts:
        found = text.find(part, pos)
        assert found >= 0, f"{part!r} missing after offset {pos} in:\n{text}"
        pos = found + len(part)


# -- registry, text --------------------------------------------------------------------------------------------


def test_supported_extensions_and_unsupported_message() -> None:
    documents = (".txt", ".md", ".markdown", ".json", ".html", ".htm", ".pdf", ".docx")
    images = (".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff")
    text = (".rst", ".jsonl", ".ndjson", *TEXT_EXTENSIONS)  # ragstep.parsers.source_files
    assert (*documents, *images, *text, ".csv", ".xlsx") == SUPPORTED_EXTENSIONS
    with pytest.raises(InputError) as exc:
        parse(b"x", "notes.rtf")
    listed = listed_types(SUPPORTED_EXTENSIONS)
    assert listed.endswith(
        ", .csv, .xlsx, source code (.py, .sh, .js, .ts, .go, .rs, .c, .h, .java, .sql and 66 more), "
        "and text files without an extension"
    )
    assert message(exc) == f"notes.rtf: unsupported file type .rtf; supported: {listed}"
    assert parse(b"# Upper case\n", "NOTES.MD").format == "markdown"


def test_a_text_file_without_an_extension_is_read_as_text() -> None:
    # How projects and /usr/share/doc name their documents: README, NEWS, LICENSE, INSTALL.
    readme = parse(b"e2fsprogs README\n\nThis is the Ext2/3/4 Filesystem Utilities package.\n", "README")
    assert (readme.format, readme.text) == (
        "text",
        "e2fsprogs README\n\nThis is the Ext2/3/4 Filesystem Utilities package.\n",
    )
    assert parse("NEWS\r\n".encode("utf-16"), "NEWS").text == "NEWS\r\n"  # UTF-16 with its mark holds NUL bytes
    with pytest.raises(InputError) as exc:
        parse(b"\x7fELF\x02\x01\x01\x00\x00\x00", "true")  # an executable
    assert message(exc).startswith("true: not a text file (binary content) and no extension to say what it is; ")


def test_text_encodings() -> None:
    chinese = "长城是中国古代的军事防御工程。\n"
    assert parse(chinese.encode("gb18030"), "长城.txt").text == chinese
    assert parse(b"\xef\xbb\xbf# Title\n\nbody\n", "bom.md").text == "# Title\n\nbody\n"  # BOM dropped
    assert decode_text("汉字".encode("gbk"), "x.txt") == "汉字"  # GBK is read as GB18030
    # Not UTF-8 and no Chinese: windows-1252, the note saying so; with a NUL byte (no 8-bit text has one), refused.
    latin = parse(b"hello \xff world", "latin.txt")
    assert (latin.text, latin.metadata["note"]) == ("hello \xff world", "read as windows-1252 (not valid UTF-8)")
    with pytest.raises(InputError) as exc:
        parse(b"hello \xff\x00 world", "binary.txt")
    assert message(exc) == (
        "binary.txt: cannot decode the text: not UTF-8, UTF-16 (with its byte order mark) or GB18030, and it holds NUL"
        " bytes, which no 8-bit text has (binary content?); convert it to UTF-8"
    )
    with pytest.raises(InputError) as exc:
        parse(b" \n\t\n", "blank.md")
    assert message(exc) == "blank.md: the document is empty"


def test_utf16_text_with_its_byte_order_mark_is_decoded() -> None:
    # As Windows tools write "Unicode" text: the mark first, little- or big-endian.
    text = "Notes from Windows: 长城 and résumé.\r\n"
    assert parse(text.encode("utf-16"), "notes.txt").text == text
    assert parse(codecs.BOM_UTF16_BE + text.encode("utf-16-be"), "notes.md").text == text
    # An odd number of bytes after the mark is no UTF-16: refused with what to do, never guessed.
    with pytest.raises(InputError) as exc:
        parse(codecs.BOM_UTF16_LE + b"a\x00b", "odd.txt")
    assert message(exc) == "odd.txt: starts with a UTF-16 byte order mark but is not UTF-16; convert it to UTF-8"


# -- HTML ------------------------------------------------------------------------------------------------------

PAGE = """<!doctype html>
<html><head><title>Coffee &amp; Tea</title><style>p { color: red }</style><script>track("x")</script></head>
<body>
<header><nav><a href="/">Home</a> <a href="/shop">Shop</a></nav></header>
<article>
  <header><h1>Brewing guide</h1></header>
  <p>Water at <b>93&nbsp;°C</b> and a <a href="https://example.com/grind size">grind chart</a>.<br>Second line.
  <h2>Prices</h2>
  <p>Before the table.</p>
  <table>
    <thead><tr><th>Drink</th><th>Price</th></tr></thead>
    <tbody><tr><td>Espresso</td><td>3|50</td></tr><tr><td>Latte</td><td>4.20</td></tr></tbody>
  </table>
  <p>After the table <img src="/img/cup.png" alt="a cup"> and after the image.</p>
  <ul><li>Grind<li>Tamp<ul><li>Level</li></ul><li>Pull</ul>
  <ol><li>Heat</li><li>Pour</li></ol>
  <pre><code class="language-python">def brew():
    return "coffee"</code></pre>
  <h3>熊猫咖啡</h3>
  <p>中文段落，<a href="javascript:void(0)">点击</a>。</p>
  <div hidden>hidden text</div><aside>Related posts</aside>
</article>
<footer>© 2024 Coffee Co</footer>
</body></html>"""


def test_html_main_text_structure_and_order() -> None:
    doc = parse(PAGE.encode(), "guide.html")
    assert doc.format == "html"
    assert doc.metadata == {"title": "Coffee & Tea"}
    text = doc.text
    for dropped in ("track(", "color: red", "Home", "Shop", "hidden text", "Related posts", "© 2024", "Coffee & Tea"):
        assert dropped not in text
    in_order(
        text,
        "# Brewing guide\n\n",
        "Water at 93 °C and a [grind chart](https://example.com/grind%20size).\nSecond line.",
        "\n\n## Prices\n\nBefore the table.\n\n",
        "| Drink | Price |\n| --- | --- |\n| Espresso | 3\\|50 |\n| Latte | 4.20 |\n\n",
        "After the table ![a cup](/img/cup.png) and after the image.",
        "- Grind\n- Tamp\n  - Level\n- Pull\n\n1. Heat\n2. Pour\n\n",
        '```python\ndef brew():\n    return "coffee"\n```',
        "### 熊猫咖啡\n\n中文段落，点击。",
    )
    assert text == text.strip() and "\n\n\n" not in text


def test_html_prefers_main_and_reads_declared_charset() -> None:
    assert html_to_markdown("<nav>menu</nav><main><p>only this</p></main><p>not this</p>")[0] == "only this"
    page = '<html><head><meta charset="gb2312"></head><body><p>你好，世界</p></body></html>'.encode("gbk")
    assert parse(page, "gbk.htm").text == "你好，世界"
    deep = "<div>" * 5000 + "deep text"  # malformed nesting is flattened, not a RecursionError
    assert html_to_markdown(deep)[0] == "deep text"
    with pytest.raises(InputError, match=r"^empty\.html: the document is empty$"):
        parse(b"<html><script>x()</script><nav>menu</nav></html>", "empty.html")


def test_html_drops_the_navigation_documentation_generators_write() -> None:
    # Texinfo 6 (GNU manuals), DocBook (table navigation), Sphinx (permalink marks): the page's text only.
    texinfo = (
        '<div class="section" id="Thread-Safety"><div class="header"><p>Previous: <a href="a.html">Closure Example</a>,'
        ' Up: <a href="u.html">Using libffi</a> [<a href="Index.html">Index</a>]</p></div><hr>'
        '<h3 class="section">2.7 Thread Safety</h3><p>libffi is not completely thread-safe.</p>'
        '<div class="nav-panel"><p>Next: <a href="n.html">Memory Usage</a></p></div></div>'
    )
    assert html_to_markdown(texinfo)[0] == "### 2.7 Thread Safety\n\nlibffi is not completely thread-safe."
    docbook = (
        '<div class="navheader"><table summary="Navigation header"><tr><td><a href="p.html">Prev</a></td>'
        '<td>Up</td></tr></table></div><table class="nav" summary="Navigation header"><tr><td>Home</td></tr></table>'
        '<div class="chapter"><h1>Quick Start</h1><p>Run valgrind.</p></div>'
        '<div class="breadcrumbs"><a href="/">Docs</a> &raquo; Quick Start</div>'
    )
    assert html_to_markdown(docbook)[0] == "# Quick Start\n\nRun valgrind."
    sphinx = '<h1>Abstract<a class="headerlink" href="#abstract" title="Permalink">¶</a></h1><p>Packaging.</p>'
    assert html_to_markdown(sphinx)[0] == "# Abstract\n\nPackaging."
    # A header class that holds the page's title is content, not chrome.
    titled = '<div class="header"><h1>Orchard 2.4</h1><p>Release notes.</p></div><p>Body.</p>'
    assert html_to_markdown(titled)[0] == "# Orchard 2.4\n\nRelease notes.\n\nBody."


# -- PDF -------------------------------------------------------------------------------------------------------


def make_pdf(path: Path, pages: list[list[object]]) -> bytes:
    """A PDF written by reportlab; a page is a list of ("h1"|"p"|"zh", text), ("table", rows), ("image", None)."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.platypus import Image, PageBreak, Paragraph, SimpleDocTemplate, Spacer, Table

    pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
    styles = getSampleStyleSheet()
    chinese = ParagraphStyle("zh", parent=styles["Normal"], fontName="STSong-Light")
    story: list[object] = []
    for i, page in enumerate(pages):
        if i:
            story.append(PageBreak())
        if not page:
            story.append(Spacer(1, 10))
        for kind, value in page:  # type: ignore[misc]
            if kind == "table":
                story.append(Table(value))
            elif kind == "image":
                story.append(Image(io.BytesIO(tiny_png()), 20, 20))
            else:
                style = {"h1": styles["Heading1"], "p": styles["Normal"], "zh": chinese}[kind]
                story.append(Paragraph(value, style))
    SimpleDocTemplate(str(path), pagesize=A4).build(story)
    return path.read_bytes()


@pytest.fixture
def pdf_bytes(tmp_path: Path) -> bytes:
    return make_pdf(
        tmp_path / "guide.pdf",
        [
            [
                ("h1", "Brewing guide"),
                ("p", "Espresso needs finely ground coffee. " * 6),
                ("table", [["Drink", "Price", "Origin"], ["Espresso", "3.50", "Italy"], ["Latte", "4.20", "France"]]),
                ("p", "After the table."),
                ("image", None),
                ("p", "After the image."),
            ],
            [],
            [("zh", "熊猫是中国的国宝，主要生活在四川。"), ("p", "Last page.")],
        ],
    )


def test_pdf_pages_tables_and_chinese(pdf_bytes: bytes) -> None:
    doc = parse(pdf_bytes, "guide.pdf")
    assert (doc.format, doc.pages) == ("pdf", 3)
    text = doc.text
    in_order(
        text,
        "Brewing guide\nEspresso needs finely ground coffee.",
        "\n\n| Drink | Price | Origin |\n| --- | --- | --- |\n"
        "| Espresso | 3.50 | Italy |\n| Latte | 4.20 | France |\n\n",
        "After the table.\n\n![image](pdf://page/1/",
        ")\n\nAfter the image.",
        # Page 2 has no text: its marker is still there, so markers always count pages.
        "\n\n<!-- page 2 -->\n\n\n\n<!-- page 3 -->\n\n",
        "熊猫是中国的国宝，主要生活在四川。\nLast page.",
    )
    assert text.count("<!-- page") == 2 and "<!-- page 1 -->" not in text


def test_pdf_errors(tmp_path: Path, pdf_bytes: bytes) -> None:
    from pypdf import PdfReader, PdfWriter

    with pytest.raises(InputError, match=r"^junk\.pdf: not a readable PDF \(no %PDF header\)$"):
        parse(b"this is not a pdf at all", "junk.pdf")
    with pytest.raises(InputError, match=r"^broken\.pdf: not a readable PDF \(.+\)$"):
        parse(b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\n%%EOF", "broken.pdf")

    def encrypted(user: str, algorithm: str = "RC4-128") -> bytes:
        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes)))
        writer.encrypt(user_password=user, owner_password="owner-secret", algorithm=algorithm)
        out = io.BytesIO()
        writer.write(out)
        return out.getvalue()

    with pytest.raises(InputError) as exc:
        parse(encrypted("secret"), "locked.pdf")
    assert message(exc) == "locked.pdf: the PDF is encrypted with a password; remove the password and retry"
    # Permissions-only encryption (empty user password) is read like any PDF.
    assert "Brewing guide" in parse(encrypted(""), "restricted.pdf").text
    if importlib.util.find_spec("cryptography") is not None:
        assert "Brewing guide" in parse(encrypted("", "AES-256"), "aes.pdf").text

    for pages in ([[], []], [[("image", None)]]):  # no text, or images only (a scan)
        with pytest.raises(InputError) as exc:
            parse(make_pdf(tmp_path / "blank.pdf", pages), "blank.pdf")
        assert message(exc).startswith("blank.pdf: the document is empty (no text layer")


# -- DOCX ------------------------------------------------------------------------------------------------------


def add_hyperlink(paragraph: object, text: str, url: str) -> None:
    from docx.opc.constants import RELATIONSHIP_TYPE
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    rel_id = paragraph.part.relate_to(url, RELATIONSHIP_TYPE.HYPERLINK, is_external=True)  # type: ignore[attr-defined]
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), rel_id)
    run = OxmlElement("w:r")
    t = OxmlElement("w:t")
    t.text = text
    run.append(t)
    link.append(run)
    paragraph._p.append(link)  # type: ignore[attr-defined]


@pytest.fixture
def docx_bytes() -> bytes:
    document = docx.Document()
    document.add_heading("Coffee handbook", 0)
    document.add_heading("Beans", level=1)
    intro = document.add_paragraph("Arabica is sweet; see ")
    add_hyperlink(intro, "the bean guide", "https://example.com/beans")
    intro.add_run(" for more.")
    document.add_paragraph("Grind", style="List Bullet")
    document.add_paragraph("Tamp", style="List Bullet")
    document.add_paragraph("Heat water", style="List Number")
    document.add_paragraph("Pour", style="List Number")
    document.add_heading("Prices", level=2)
    table = document.add_table(rows=4, cols=2)
    for r, (a, b) in enumerate([("Drink", "Price"), ("Espresso", "3|50"), ("Latte", "4.20"), ("Seasonal", "")]):
        table.cell(r, 0).text = a
        table.cell(r, 1).text = b
    merged = table.cell(3, 0).merge(table.cell(3, 1))
    merged.text = "Ask the barista"
    document.add_paragraph("After the table.")
    document.add_picture(io.BytesIO(tiny_png()))
    document.add_paragraph("After the image.")
    document.add_heading("熊猫", level=3)
    chinese = document.add_paragraph("熊猫是中国的国宝。")
    chinese.add_run("加粗结尾。").bold = True
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_docx_order_headings_tables_images(docx_bytes: bytes) -> None:
    doc = parse(docx_bytes, "handbook.docx")
    assert doc.format == "docx"
    assert doc.text == (
        "# Coffee handbook\n\n"
        "# Beans\n\n"
        "Arabica is sweet; see [the bean guide](https://example.com/beans) for more.\n\n"
        "- Grind\n- Tamp\n1. Heat water\n2. Pour\n\n"
        "## Prices\n\n"
        "| Drink | Price |\n| --- | --- |\n| Espresso | 3\\|50 |\n| Latte | 4.20 |\n| Ask the barista |  |\n\n"
        "After the table.\n\n"
        "![image](docx://word/media/image1.png)\n\n"
        "After the image.\n\n"
        "### 熊猫\n\n"
        "熊猫是中国的国宝。加粗结尾。"
    )


def test_docx_errors() -> None:
    with pytest.raises(InputError, match=r"^old\.docx: not a readable DOCX \(File is not a zip file\)$"):
        parse(b"\xd0\xcf\x11\xe0 an OLE2 .doc", "old.docx")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as package:
        package.writestr("hello.txt", "not an office file")
    with pytest.raises(InputError, match=r"^zip\.docx: not a readable DOCX \(no word/document\.xml"):
        parse(buffer.getvalue(), "zip.docx")
    empty = io.BytesIO()
    docx.Document().save(empty)
    with pytest.raises(InputError, match=r"^empty\.docx: the document is empty$"):
        parse(empty.getvalue(), "empty.docx")


# -- data files ------------------------------------------------------------------------------------------------

CSV = (
    "id,name,day,amount\n"
    "1,熊猫,2024-01-02,3.5\n"
    '2,"a|b",2024-01-03,\n'
    "3,熊猫,,7\n"
    "4,Latte,2024-01-05,2.25\n"
    "5,Mocha,2024-01-06,1\n"
    "6,Chai,2024-01-07,8\n"
)


def test_csv_summary_numbers_and_types() -> None:
    doc = parse(CSV.encode("gb18030"), "sales.csv")  # GB18030 is decoded before DuckDB reads it
    (summary,) = doc.tables
    assert (summary.filename, summary.format, summary.sheet, summary.row_count) == ("sales.csv", "csv", None, 6)
    columns = {c.name: c for c in summary.columns}
    assert [(c.name, c.type) for c in summary.columns] == [
        ("id", "BIGINT"),
        ("name", "VARCHAR"),
        ("day", "DATE"),
        ("amount", "DOUBLE"),
    ]
    assert [(c.distinct_count, c.null_count) for c in summary.columns] == [(6, 0), (5, 0), (5, 1), (5, 1)]
    assert columns["name"].samples == ("熊猫", "a|b", "Latte", "Mocha", "Chai")  # distinct, in file order
    assert columns["day"].samples[0] == "2024-01-02"
    assert len(summary.sample_rows) == 5
    assert summary.sample_rows[1] == ("2", "a|b", "2024-01-03", "")
    assert summary.sample_table().splitlines()[:3] == [
        "| id | name | day | amount |",
        "| --- | --- | --- | --- |",
        "| 1 | 熊猫 | 2024-01-02 | 3.5 |",
    ]
    assert "| 2 | a\\|b | 2024-01-03 |  |" in summary.sample_table()
    # The BOM Excel writes does not end up in the first column's name.
    (bom,) = parse(b"\xef\xbb\xbf" + CSV.encode(), "bom.csv").tables
    assert bom.columns[0].name == "id"


def test_data_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^header\.csv: the data file has no rows$"):
        parse(b"id,name\n", "header.csv")
    with pytest.raises(InputError, match=r"^empty\.csv: the document is empty$"):
        parse(b"\n\n", "empty.csv")
    with pytest.raises(InputError, match=r"^fake\.xlsx: not a readable XLSX \(File is not a zip file\)$"):
        parse(b"id,name\n1,a\n", "fake.xlsx")


def test_xlsx_written_by_duckdb(tmp_path: Path) -> None:
    path = tmp_path / "coffee.xlsx"
    con = connect()
    try:
        load_excel(con)
        con.execute(
            "COPY (SELECT * FROM (VALUES (1, 'Espresso', DATE '2024-01-02'), (2, 'Latte', DATE '2024-02-03'),"
            " (3, 'Espresso', NULL)) v(id, drink, day)) TO $path (FORMAT xlsx, HEADER true, SHEET 'Orders')",
            {"path": str(path)},
        )
    finally:
        con.close()
    (summary,) = parse(path.read_bytes(), "coffee.xlsx").tables
    assert (summary.sheet, summary.row_count) == ("Orders", 3)
    assert [(c.name, c.type, c.distinct_count) for c in summary.columns] == [
        ("id", "DOUBLE", 3),  # Excel stores every number as a double
        ("drink", "VARCHAR", 2),
        ("day", "DATE", 2),
    ]


@pytest.fixture
def workbook_bytes() -> bytes:
    import datetime as dt

    book = openpyxl.Workbook()
    sales = book.active
    sales.title = "销售"
    sales.append(["city", "amount", "day"])
    sales.append(["北京", 10, dt.date(2024, 1, 2)])
    sales.append(["上海", 12.5, dt.date(2024, 1, 3)])
    sales.append(["北京", "n/a", dt.date(2024, 1, 4)])  # a text cell in a number column
    book.create_sheet("empty")
    stock = book.create_sheet("Stock")
    stock.append(["item", "count"])
    for i in range(7):
        stock.append([f"item-{i}", i * 10])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_xlsx_every_sheet_mixed_types_and_empty_sheets(workbook_bytes: bytes) -> None:
    doc = parse(workbook_bytes, "stock.xlsx")
    sales, stock = doc.tables
    assert doc.metadata == {"skipped_sheets": ["empty"]}
    assert (sales.sheet, sales.row_count, stock.sheet, stock.row_count) == ("销售", 3, "Stock", 7)
    # The mixed column is read as text rather than losing "n/a"; the clean ones keep their types.
    assert [(c.name, c.type) for c in sales.columns] == [("city", "VARCHAR"), ("amount", "VARCHAR"), ("day", "DATE")]
    assert sales.columns[1].samples == ("10", "12.5", "n/a")
    assert [(c.name, c.distinct_count) for c in sales.columns] == [("city", 2), ("amount", 3), ("day", 3)]
    assert len(stock.sample_rows) == 5 and stock.columns[1].type == "DOUBLE"


def test_data_file_chunks(workbook_bytes: bytes) -> None:
    kb = KnowledgeBase(id="kb1", name="kb")
    knowledge = Knowledge(id="k1", knowledge_base_id="kb1", filename="stock.xlsx", title="stock")
    doc = parse(workbook_bytes, "stock.xlsx")
    sales, stock = doc.tables
    first = data_file_chunks(kb, knowledge, sales)
    assert [c.chunk_type for c in first] == [ChunkType.TABLE_SUMMARY] + [ChunkType.TABLE_COLUMN] * 3
    summary = first[0]
    assert summary.content.startswith("Data file: stock.xlsx\nSheet: 销售\nRows: 3\n")
    assert "Columns (3): city (VARCHAR), amount (VARCHAR), day (DATE)" in summary.content
    assert "| city | amount | day |\n| --- | --- | --- |\n| 北京 | 10 | 2024-01-02 |" in summary.content
    assert summary.metadata["blob_key"] == "data/kb1/k1/stock.xlsx" == data_blob_key(kb, knowledge)
    assert summary.metadata["row_count"] == 3 and summary.metadata["sheet"] == "销售"
    amount = first[2]
    assert amount.content == (
        "Column: amount\nData file: stock.xlsx (sheet 销售)\nType: VARCHAR\nDistinct values: 3\n"
        "Sample values: 10, 12.5, n/a"
    )
    assert amount.metadata["distinct_count"] == 3 and amount.metadata["samples"] == ["10", "12.5", "n/a"]
    second = data_file_chunks(kb, knowledge, stock, start_index=len(first), offset=first[-1].end_at + 2)
    chunks = first + second
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert len({c.id for c in chunks}) == len(chunks)
    assert all(doc.text[c.start_at : c.end_at] == c.content for c in chunks)


# -- FAQ -------------------------------------------------------------------------------------------------------


def test_faq_csv() -> None:
    data = (
        "\ufeffStandard_Question,similar_questions,negative_questions,answers,tag_id\n"
        'How do I reset my password?,"Forgot password | lost password\ncan\'t log in",Reset my router?,'
        '"Open Settings > Account.|Click \\| Reset \\|.",account\n'
        "\n"
        "营业时间？,几点开门,,每天九点到五点。,\n"
    ).encode()
    first, second = parse_faq(data, "faq.csv")
    assert first.standard_question == "How do I reset my password?"
    assert first.similar_questions == ("Forgot password", "lost password", "can't log in")
    assert first.negative_questions == ("Reset my router?",)
    assert first.answers == ("Open Settings > Account.", "Click | Reset |.")
    assert first.tag_id == "account"
    assert (second.standard_question, second.similar_questions, second.answers) == (
        "营业时间？",
        ("几点开门",),
        ("每天九点到五点。",),
    )
    assert split_values(" a |\r\n b \\| c ||") == ("a", "b | c")
    tsv = parse_faq("standard_question\tanswers\nQ, with comma\tA\n".encode("gb18030"), "faq.csv")
    assert [(e.standard_question, e.answers) for e in tsv] == [("Q, with comma", ("A",))]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (
            b"question,answers\nq,a\n",
            "faq.csv: unknown column 'question' in the header; FAQ CSV columns are "
            "standard_question, similar_questions, negative_questions, answers, tag_id",
        ),
        (
            b"standard_question,tag_id\nq,t\n",
            "faq.csv: the header has no 'answers' column (found: standard_question, tag_id)",
        ),
        (b"standard_question,answers\nq,a\n,b\n", "faq.csv: line 3 needs a non-empty 'standard_question'"),
        (b"standard_question,answers\nq,\n", "faq.csv: line 2 needs at least one answer in 'answers'"),
        (b"standard_question,answers\nq,a,extra\n", "faq.csv: line 2 has 3 cells but the header has 2"),
        (b"standard_question,answers\n", "faq.csv: expected at least one FAQ entry after the header"),
        (
            b"",
            "faq.csv: expected a header row (standard_question, similar_questions, negative_questions, answers, "
            "tag_id) and FAQ entries",
        ),
    ],
)
def test_faq_csv_errors(data: bytes, error: str) -> None:
    with pytest.raises(InputError) as exc:
        parse_faq(data, "faq.csv")
    assert message(exc) == error


# -- ingestion end to end --------------------------------------------------------------------------------------


def stored_chunks(ctx: Context, kid: str) -> list[Chunk]:
    return ctx.index.knowledge_chunks(kid, 10_000)


def assert_offsets(text: str, chunks: list[Chunk]) -> None:
    assert chunks
    for chunk in chunks:
        body = text[chunk.start_at : chunk.end_at]
        # A table continued from the previous chunk gets its header rows repeated in front: not part of the offsets.
        assert chunk.content == body or (chunk.content.endswith(body) and chunk.content.startswith("|")), chunk


def test_ingest_every_document_format(
    ctx: Context,
    make_kb: Callable[..., KnowledgeBase],
    tmp_path: Path,
    pdf_bytes: bytes,
    docx_bytes: bytes,
) -> None:
    kb = make_kb("docs")
    long_md = "# Guide\n\n" + "\n\n".join(f"## Part {i}\n\n" + "Brewing coffee takes patience. " * 12 for i in range(8))
    files = {
        "notes.txt": "长城是中国古代的军事防御工程。\n".encode("gb18030"),
        "guide.md": b"\xef\xbb\xbf" + long_md.encode(),
        "page.html": PAGE.encode(),
        "guide.pdf": pdf_bytes,
        "handbook.docx": docx_bytes,
    }
    for name, data in files.items():
        path = tmp_path / name
        path.write_bytes(data)
        result = ingest_file(path, kb, ctx)
        assert result.status == "indexed", result.error
        chunks = stored_chunks(ctx, result.knowledge_id)
        assert len(chunks) == result.chunks
        assert all(c.chunk_type == ChunkType.TEXT for c in chunks)
        assert_offsets(parse(data, name).text, chunks)
    assert stored_chunks(ctx, knowledge_id_for(kb, str((tmp_path / "guide.md").resolve())))[0].content.startswith(
        "# Guide"
    )


def test_a_long_docx_table_repeats_its_header_in_every_chunk_it_continues_into(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path
) -> None:
    document = docx.Document()
    document.add_heading("Price list", level=1)
    document.add_paragraph("Every drink we sell, in the order of the menu.")
    table = document.add_table(rows=61, cols=3)
    for c, name in enumerate(("Drink", "Size", "Price")):
        table.cell(0, c).text = name
    for r in range(1, 61):
        for c, value in enumerate((f"Drink number {r:02d}", "large", f"{r}.50")):
            table.cell(r, c).text = value
    document.add_paragraph("Prices include tax.")
    path = tmp_path / "prices.docx"
    document.save(str(path))

    kb = make_kb("docs")
    result = ingest_file(path, kb, ctx, IngestOptions(chunk_size=256, chunk_overlap=0))
    assert result.status == "indexed", result.error
    chunks = stored_chunks(ctx, result.knowledge_id)
    text = parse(path.read_bytes(), "prices.docx").text
    header = "| Drink | Size | Price |\n| --- | --- | --- |\n"
    assert text.count(header) == 1
    continued = [c for c in chunks if c.content.startswith(header) and text[c.start_at : c.end_at] != c.content]
    assert len(continued) >= 5
    for chunk in chunks:
        if chunk in continued:
            assert text[chunk.start_at : chunk.end_at] == chunk.content[len(header) :]
            assert chunk.content[len(header) :].startswith("| Drink number ")
        else:
            assert text[chunk.start_at : chunk.end_at] == chunk.content
    # Every row is in exactly one chunk, rows in document order, chunks numbered in order.
    rows = [f"| Drink number {r:02d} | large | {r}.50 |" for r in range(1, 61)]
    assert all(sum(row in c.content for c in chunks) == 1 for row in rows)
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert [c.start_at for c in chunks] == sorted(c.start_at for c in chunks)
    assert chunks[-1].content.endswith("Prices include tax.")


def test_ingest_data_files_store_the_raw_file(
    ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path, workbook_bytes: bytes
) -> None:
    kb = make_kb("data")
    for name, data in (("sales.csv", CSV.encode()), ("stock.xlsx", workbook_bytes)):
        path = tmp_path / name
        path.write_bytes(data)
        result = ingest_file(path, kb, ctx)
        assert result.status == "indexed", result.error
        chunks = stored_chunks(ctx, result.knowledge_id)
        key = f"data/{kb.id}/{result.knowledge_id}/{name}"
        assert ctx.blobs.get(key) == data
        assert {c.metadata["blob_key"] for c in chunks} == {key}
        summaries = [c for c in chunks if c.chunk_type == ChunkType.TABLE_SUMMARY]
        columns = [c for c in chunks if c.chunk_type == ChunkType.TABLE_COLUMN]
        doc = parse(data, name)
        assert len(summaries) == len(doc.tables)
        assert len(columns) == sum(len(t.columns) for t in doc.tables)
        assert_offsets(doc.text, chunks)
    assert ingest_file(tmp_path / "sales.csv", kb, ctx).status == "unchanged"


def test_ingest_faq_csv_and_refusals(ctx: Context, make_kb: Callable[..., KnowledgeBase], tmp_path: Path) -> None:
    faq_kb = make_kb("faq", kb_type="faq")
    path = tmp_path / "faq.csv"
    path.write_text("standard_question,similar_questions,answers\n营业时间？,几点开门|几点关门,每天九点到五点。\n")
    result = ingest_file(path, faq_kb, ctx)
    assert result.status == "indexed", result.error
    rows = stored_chunks(ctx, result.knowledge_id)
    assert [r.index_text for r in rows] == ["营业时间？", "几点开门", "几点关门"]
    assert {r.chunk_type for r in rows} == {ChunkType.FAQ}
    assert rows[0].content == "Q: 营业时间？\nAnswer:\n- 每天九点到五点。"

    doc_kb = make_kb("docs")
    odd = tmp_path / "slides.pptx"
    odd.write_bytes(b"PK")
    assert ingest_file(odd, doc_kb, ctx).error == (
        f"slides.pptx: unsupported file type .pptx; supported: {listed_types(SUPPORTED_EXTENSIONS)}"
    )
    md = tmp_path / "a.md"
    md.write_text("# A\n\ntext\n")
    assert ingest_file(md, faq_kb, ctx).error == "a.md: unsupported file type .md; supported: .json, .csv"
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\ntruncated")
    failed = ingest_file(broken, doc_kb, ctx)
    assert failed.status == "failed" and failed.error.startswith("broken.pdf: not a readable PDF (")
