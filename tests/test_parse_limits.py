"""Decompression amplification in DOCX/XLSX (:mod:`ragstep.parsers.ooxml`): the total inflated size and the parse
time of one file are bounded, and a refused file is a clear failed row with nothing of it stored."""

from __future__ import annotations

import io
import json
import os
import time
import zipfile
from pathlib import Path

import docx
import openpyxl
import pytest

from conftest import run_cli
from ragstep.errors import InputError
from ragstep.parsers import ParseLimits, parse

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def package(parts: dict[str, bytes], level: int = 9) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    return out.getvalue()


def docx_with_body(paragraphs: list[str], extra: dict[str, bytes] | None = None) -> bytes:
    """A minimal DOCX: ``word/document.xml`` holding ``paragraphs`` (and any ``extra`` parts)."""
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    document = f'<?xml version="1.0"?><w:document xmlns:w="{W}"><w:body>{body}</w:body></w:document>'
    return package({"word/document.xml": document.encode(), **(extra or {})})


def bomb(megabytes: int) -> bytes:
    """Identical paragraphs: the XML compresses several hundred times (the issue's 149 KB -> 51 MB file)."""
    para = "All work and no play makes Jack a dull boy. "
    return docx_with_body([para] * (megabytes * 1024 * 1024 // (len(para) + 36)))


def test_a_docx_that_inflates_hundreds_of_times_is_refused_before_it_is_parsed() -> None:
    data = bomb(51)
    assert len(data) < 400 * 1024  # a few hundred KB on disk ...
    started = time.perf_counter()
    with pytest.raises(InputError, match=r"^bomb\.docx: the DOCX inflates \d+ times .*decompression bomb$"):
        parse(data, "bomb.docx")
    # ... refused from the sizes the package declares, before the 51 MB part is inflated (the old parser took 17 s
    # and 650 MB on it); generous for a busy machine.
    assert time.perf_counter() - started < 5


def test_the_total_inflated_size_is_bounded_across_parts() -> None:
    # Text that does not compress much, in two parts that are each under the limit: together they are over it.
    words = [os.urandom(300).hex() for _ in range(2000)]
    data = docx_with_body(words, {"word/styles.xml": b"<w:styles xmlns:w='" + W.encode() + b"'/>" + b" " * 0})
    one_mib = ParseLimits(max_inflated_bytes=1024 * 1024)
    with pytest.raises(InputError, match=r"inflates to more than 1048576 bytes \(RAGSTEP_PARSE_MAX_INFLATED_BYTES\)"):
        parse(data, "big.docx", one_mib)
    assert parse(data, "big.docx").text.startswith(words[0])  # the default limit takes it


def test_an_ordinary_docx_with_a_large_image_is_read() -> None:
    document = docx.Document()
    document.add_paragraph("A photo follows.")
    out = io.BytesIO()
    document.save(out)
    with zipfile.ZipFile(out, "a") as z:  # an incompressible 3 MB image part: inflates 1:1, never read
        z.writestr("word/media/photo.jpeg", os.urandom(3 * 1024 * 1024))
    assert parse(out.getvalue(), "photo.docx", ParseLimits(max_inflated_bytes=1024 * 1024)).text == "A photo follows."


def test_the_parse_time_is_bounded() -> None:
    data = docx_with_body([f"paragraph {i}" for i in range(20000)])
    with pytest.raises(InputError, match=r"took longer than 1e-06s \(RAGSTEP_PARSE_TIMEOUT_S\); refused$"):
        parse(data, "slow.docx", ParseLimits(timeout_s=0.000001))
    assert parse(data, "slow.docx").text.startswith("paragraph 0\n\nparagraph 1")


def test_an_xlsx_counts_every_part_duckdb_would_inflate() -> None:
    book = openpyxl.Workbook()
    book.active.append(["city", "price"])
    book.active.append(["Beijing", 1])
    out = io.BytesIO()
    book.save(out)
    with zipfile.ZipFile(out, "a", zipfile.ZIP_DEFLATED) as z:
        z.writestr("xl/worksheets/sheet9.xml", b"<x/>" + b" " * (20 * 1024 * 1024))
    with pytest.raises(InputError, match=r"^bomb\.xlsx: the XLSX inflates \d+ times"):
        parse(out.getvalue(), "bomb.xlsx")


@pytest.mark.usefixtures("plain_environment")
def test_ingest_reports_the_bomb_and_stores_nothing_of_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docs, data = tmp_path / "docs", tmp_path / "data"
    docs.mkdir()
    (docs / "bomb.docx").write_bytes(bomb(51))
    (docs / "fine.md").write_text("# Fine\n\nA small note.\n", encoding="utf-8")
    assert run_cli(capsys, "--data-dir", str(data), "kb", "create", "docs", "--embedding-model", "none")[0] == 0
    code, out, err = run_cli(capsys, "--data-dir", str(data), "ingest", str(docs), "--kb", "docs", "--json")
    assert "Traceback" not in out + err
    rows = {Path(r["path"]).name: r for r in json.loads(out)}
    assert rows["fine.md"]["status"] == "indexed"
    assert rows["bomb.docx"]["status"] == "failed"
    assert "decompression bomb" in rows["bomb.docx"]["error"]
    stored = [str(p.relative_to(data)) for p in data.rglob("*") if p.is_file()]
    assert not any("parsed.md" in p or "chunks.jsonl" in p for p in stored), stored
    code, out, err = run_cli(capsys, "--data-dir", str(data), "kb", "show", "docs", "--json")
    assert code == 0, err
    assert "bomb.docx" not in out and "fine.md" in out
