"""A docs folder or a repository is searchable: ``.rst`` (titles as headings), ``.jsonl`` (a record a paragraph),
configuration and source code as text; lock files, minified code, binary content and folders of installed packages are
skipped in a folder with the reason in the row's note (:mod:`ragstep.parsers.source_files`). ``/usr/share/doc`` too:
``README.Debian``, ``Apache-2.0`` and gzip-compressed documents."""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from ragstep.errors import InputError
from ragstep.parsers import SUPPORTED_EXTENSIONS, ParseLimits, listed_types, parse
from ragstep.parsers.rst import rst_to_markdown
from test_ingest_pipeline import Cli, write


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    cli = Cli(tmp_path / "data", capsys)
    cli.ok("kb", "create", "code", "--embedding-model", "none")
    return cli


GUIDE_RST = """\
==========
User Guide
==========

Welcome.

Installing
----------

Run the installer.

On Windows
~~~~~~~~~~

Use the MSI package.

----

Upgrading
---------

A paragraph that ends on a dash line
--
is no title: the underline is shorter than the text.
"""


def test_rst_section_titles_become_headings_by_the_order_their_styles_appear() -> None:
    text, titles = rst_to_markdown(GUIDE_RST)
    assert titles == 4
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings == ["# User Guide", "## Installing", "### On Windows", "## Upgrading"]
    assert "\n----\n" in text  # a transition is kept as written
    assert "ends on a dash line\n--\nis no title" in text
    doc = parse(GUIDE_RST.encode(), "guide.rst")
    assert doc.format == "rst" and doc.metadata["note"] == "reStructuredText: 4 section titles read as headings"


def test_jsonl_is_one_record_a_paragraph_and_source_code_is_its_text() -> None:
    data = b'{"id": 1, "text": "Caf\\u00e9 opens at 7"}\n\n{"id": 2}\nnot json\n'
    doc = parse(data, "events.jsonl")
    assert doc.text == '{"id": 1, "text": "Café opens at 7"}\n\n{"id": 2}\n\nnot json'
    assert doc.metadata["note"] == "JSON Lines: 2 records, one a paragraph; 1 line not valid JSON kept as text"
    plain = parse(b"just a line\n", "odd.ndjson")
    assert plain.format == "text" and "read as plain text" in plain.metadata["note"]

    code = "# comment\ndef add(a, b):\n    return a + b\n"
    assert parse(code.encode(), "util.py").text == code and parse(code.encode(), "util.py").format == "code"
    assert parse(b"[server]\nport = 8080\n", "app.ini").text == "[server]\nport = 8080\n"
    assert parse("retries: 5\n".encode("utf-16"), "cfg.yaml").text == "retries: 5\n"  # UTF-16 with its mark
    with pytest.raises(InputError, match=r"video\.ts: binary content, not text"):
        parse(b"G@\x00\x10\x00\x00", "video.ts")  # an MPEG transport stream, not TypeScript
    for suffix in (".rst", ".yaml", ".yml", ".toml", ".jsonl", ".ini", ".cfg", ".py", ".sh", ".js", ".ts", ".go"):
        assert suffix in SUPPORTED_EXTENSIONS
    for suffix in (".rs", ".c", ".h", ".java", ".sql"):
        assert suffix in SUPPORTED_EXTENSIONS
    listed = listed_types(SUPPORTED_EXTENSIONS)
    assert ".rst" in listed and "source code (.py, .sh, .js" in listed and len(listed) < 500


def test_a_repository_folder_is_searchable_and_says_what_it_skipped(cli: Cli, tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    write(repo / "src", "__init__.py", 'def settle(a, b):\n    """Settle the ledger, rounding half to even."""\n')
    write(repo, "config.yaml", "# Retry policy of the uploader\nretries: 5\nbackoff_seconds: 12\n")
    write(repo / "docs", "guide.rst", GUIDE_RST)
    write(repo, "events.jsonl", '{"event": "deploy", "by": "Zoë"}\n{"event": "rollback", "by": "Ana"}\n')
    write(repo, "schema.sql", "CREATE TABLE invoices (id INTEGER PRIMARY KEY, overdue BOOLEAN);\n")
    write(repo, "package-lock.json", '{"lockfileVersion": 3}\n')
    write(repo, "yarn.lock", "# yarn lockfile v1\n")
    write(repo, "app.min.js", "var a=1;" * 600)
    write(repo, "bundle.js", "var a=1,b=function(){return 2};" * 200 + "\n")
    write(repo, "clip.ts", b"G@\x00\x10" * 64)
    write(repo / "node_modules" / "left-pad", "index.js", "module.exports = leftPad;\n")
    write(repo / "env", "pyvenv.cfg", "home = /usr/bin\n")
    write(repo / "env" / "lib", "site.py", "print('installed')\n")
    write(repo / "src" / "__pycache__", "x.py", "cached = True\n")
    write(repo / "target", "CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n")  # Cargo's build output
    write(repo / "target" / "debug", "build.rs", "fn main() {}\n")
    write(repo / "src" / "empty", "__init__.py", "")  # a package marker: skipped, not a failure that makes exit 2

    rows = {Path(r["path"]).relative_to(repo).as_posix(): r for r in cli.json("ingest", str(repo), "--kb", "code")}
    status = {path: row["status"] for path, row in rows.items()}
    assert status == {
        "src/__init__.py": "indexed",
        "config.yaml": "indexed",
        "docs/guide.rst": "indexed",
        "events.jsonl": "indexed",
        "schema.sql": "indexed",
        "package-lock.json": "skipped",
        "yarn.lock": "skipped",
        "app.min.js": "skipped",
        "bundle.js": "skipped",
        "clip.ts": "skipped",
        "node_modules": "skipped",
        "env": "skipped",
        "src/__pycache__": "skipped",
        "src/empty/__init__.py": "skipped",
        "target": "skipped",
    }
    assert rows["target"]["note"].startswith("target: a cache or build output (CACHEDIR.TAG)")
    assert rows["src/empty/__init__.py"]["note"] == "__init__.py: an empty file (0 bytes): nothing to index"
    assert rows["package-lock.json"]["note"].startswith("package-lock.json: a lock file")
    assert rows["yarn.lock"]["note"].startswith("yarn.lock: a lock file")
    assert "minified" in rows["app.min.js"]["note"] and "minified" in rows["bundle.js"]["note"]
    assert "binary content" in rows["clip.ts"]["note"]
    assert rows["node_modules"]["note"].startswith("node_modules: installed npm packages")
    assert "virtual environment" in rows["env"]["note"]
    assert rows["docs/guide.rst"]["note"] == "reStructuredText: 4 section titles read as headings"
    assert rows["events.jsonl"]["note"] == "JSON Lines: 2 records, one a paragraph"

    table = cli.ok("ingest", str(repo), "--kb", "code")  # exit 0: nothing failed
    assert table.splitlines()[-1] == "5 of 5 files ingested into code, 5 chunks; 10 skipped (the note column says why)"

    (hit,) = cli.json("search", "settle the ledger", "--kb", "code")["results"][:1]  # type: ignore[index]
    assert hit["knowledge_filename"] == "__init__.py"
    assert hit["knowledge_title"] == (repo / "src" / "__init__.py").as_posix()  # the path tells the many apart
    found = cli.json("search", "Zoë deploy", "--kb", "code")["results"]  # type: ignore[index]
    assert found[0]["knowledge_filename"] == "events.jsonl" and '"by": "Zoë"' in found[0]["content"]
    found = cli.json("search", "MSI package", "--kb", "code")["results"]  # type: ignore[index]
    assert (
        found[0]["knowledge_filename"] == "guide.rst"
        and "### On Windows\n\nUse the MSI package." in found[0]["content"]
    )


def test_a_lock_file_or_minified_file_named_directly_is_ingested(cli: Cli, tmp_path: Path) -> None:
    lock = write(tmp_path, "package-lock.json", json.dumps({"name": "shop", "lockfileVersion": 3}))
    bundle = write(tmp_path, "app.min.js", "var shopName='Acme';" * 200)
    rows = cli.json("ingest", str(lock), str(bundle), "--kb", "code")
    assert [(Path(r["path"]).name, r["status"]) for r in rows] == [
        ("package-lock.json", "indexed"),
        ("app.min.js", "indexed"),
    ]
    binary = write(tmp_path, "clip.ts", b"G@\x00\x10" * 64)
    (row,) = cli.json("ingest", str(binary), "--kb", "code")
    assert row["status"] == "failed" and row["note"].startswith("clip.ts: binary content, not text")


def test_a_usr_share_doc_folder_is_read_whole(cli: Cli, tmp_path: Path) -> None:
    """What ``/usr/share/doc/<package>`` and ``/usr/share/common-licenses`` hold: documents named ``README.Debian`` or
    ``Apache-2.0`` (a suffix that is no type), and most of them gzip-compressed."""
    doc = tmp_path / "doc" / "tar"
    write(doc, "README.Debian", "The Debian package of tar keeps rmt in /usr/sbin/rmt-tar.\n")
    write(doc, "Apache-2.0", "Grant of Copyright License. Subject to the terms of this License ...\n")
    write(
        doc,
        "changelog.Debian.amd64.gz",
        gzip.compress(b"tar (1.34) unstable; binNMU: rebuild for the zstd migration\n"),
    )
    write(doc, "NEWS.gz", gzip.compress(b"* Noteworthy changes in release 1.35\n\nThe --zstd option was added.\n"))
    write(doc, "guide.md.gz", gzip.compress("# Guide\n\nExtract with `tar xf`, café.\n".encode()))
    write(doc, "broken.txt.gz", b"\x1f\x8b\x08\x00not gzip at all")
    write(doc, "libfoo.so.6", b"\x7fELF\x02\x01\x01\x00" * 8)
    write(doc, "photo.heic", b"\x00\x00\x00\x18ftypheic")

    rows = {Path(r["path"]).name: r for r in cli.json("ingest", str(doc), "--kb", "code")}
    status = {name: row["status"] for name, row in rows.items()}
    assert status == {
        "README.Debian": "indexed",
        "Apache-2.0": "indexed",
        "changelog.Debian.amd64.gz": "indexed",
        "NEWS.gz": "indexed",
        "guide.md.gz": "indexed",
        "broken.txt.gz": "failed",
        "libfoo.so.6": "skipped",
        "photo.heic": "skipped",
    }
    assert rows["NEWS.gz"]["note"] == "decompressed from gzip"
    assert rows["broken.txt.gz"]["note"].startswith("broken.txt.gz: not a readable gzip file")
    assert "not a text file (binary content)" in rows["libfoo.so.6"]["note"]
    # A folder's row names the type it does not take; the error keeps the list of those it does.
    assert rows["photo.heic"]["note"] == "photo.heic: unsupported file type .heic"
    assert rows["photo.heic"]["error"].startswith("photo.heic: unsupported file type .heic; supported: .txt, .md")

    found = cli.json("search", "zstd option release", "--kb", "code")["results"]  # type: ignore[index]
    assert found[0]["knowledge_filename"] == "NEWS.gz" and "The --zstd option was added." in found[0]["content"]
    found = cli.json("search", "rmt-tar", "--kb", "code")["results"]  # type: ignore[index]
    assert found[0]["knowledge_filename"] == "README.Debian"


def test_a_picture_or_page_without_text_is_skipped_in_a_folder_and_fails_named(cli: Cli, tmp_path: Path) -> None:
    """An icon beside the docs (OCR finds nothing in it) and a page of markup only are nothing to index: skipped in a
    folder, so the ingest exits 0; named on their own they fail, saying why."""
    if shutil.which("tesseract") is None:
        pytest.skip("needs the tesseract OCR engine (apt-get install tesseract-ocr)")
    icon = io.BytesIO()
    Image.new("RGB", (16, 16), (40, 120, 200)).save(icon, format="PNG")
    site = tmp_path / "site"
    write(site, "icon.png", icon.getvalue())
    write(site, "blank.html", "<html><head><style>p {color: red}</style><script>go()</script></head><body><div>")
    write(site, "index.html", "<html><body><p>Deploys run every Tuesday at noon.</p></body></html>")

    run = cli("ingest", str(site), "--kb", "code", "--json")
    rows = {Path(r["path"]).name: r for r in json.loads(run.out)}
    assert run.code == 0, run.err
    assert {name: row["status"] for name, row in rows.items()} == {
        "blank.html": "skipped",
        "icon.png": "skipped",
        "index.html": "indexed",
    }
    assert rows["icon.png"]["note"] == "icon.png: no text found: nothing to index"
    assert rows["blank.html"]["note"] == "blank.html: no text found: nothing to index"
    table = cli.ok("ingest", str(site), "--kb", "code")
    assert table.splitlines()[-1].endswith("2 skipped (the note column says why)"), table

    named = cli("ingest", str(site / "icon.png"), "--kb", "code", "--json")
    (row,) = json.loads(named.out)
    assert named.code == 2 and row["status"] == "failed"
    assert row["error"] == "icon.png: the document is empty (OCR found no text in the image)"


def test_a_gzip_file_is_refused_past_the_inflation_limit() -> None:
    bomb = gzip.compress(b"a" * 5000)
    with pytest.raises(InputError, match=r"notes\.txt\.gz: inflates to over 4096 bytes, past the limit"):
        parse(bomb, "notes.txt.gz", ParseLimits(max_inflated_bytes=4096))
    assert parse(bomb, "notes.txt.gz").text == "a" * 5000
    with pytest.raises(InputError, match=r"^empty\.md\.gz: the document is empty$"):
        parse(gzip.compress(b" \n"), "empty.md.gz")
    with pytest.raises(InputError, match="unsupported file type"):
        parse(gzip.compress(b"a,b\n1,2\n"), "table.csv.gz")  # a data file's original is read by the data analysis


def test_search_and_chat_name_a_source_file_by_its_path(cli: Cli, tmp_path: Path) -> None:
    repo = tmp_path / "shop"
    write(repo / "billing", "__init__.py", 'def refund(order):\n    """Refund an order within 30 days."""\n')
    write(repo / "shipping", "__init__.py", 'def dispatch(order):\n    """Dispatch an order by courier."""\n')
    cli.ok("ingest", str(repo), "--kb", "code")
    out = cli.ok("search", "refund an order within 30 days", "--kb", "code")
    first = out.splitlines()[3]  # query, header, rule, then the first result
    assert "…" in first and "billing/__init__.py" in first, out
    answer = cli.ok("chat", "how do I refund an order?", "--kb", "code")
    assert "billing/__init__.py" in answer.split("Sources:")[1], answer


def test_a_file_is_read_in_the_encoding_it_declares() -> None:
    """Legacy files of /usr/share/doc: XML declaring ISO-8859-1, a Latin-1 source with a coding comment, an old page
    that declares no charset (read as browsers read it, windows-1252)."""
    xml = b"<?xml version='1.0' encoding='ISO-8859-1'?>\n<spec><author>Fran\xe7ois Yergeau</author></spec>\n"
    assert "François Yergeau" in parse(xml, "REC-xml.xml").text
    python = b"# -*- coding: latin-1 -*-\nAUTHOR = 'J\xfcrgen'\n"
    assert "AUTHOR = 'Jürgen'" in parse(python, "authors.py").text
    liar = b'<?xml version="1.0" encoding="UTF-16"?>\n<a>plain ASCII saved as UTF-8</a>\n'
    assert "plain ASCII saved as UTF-8" in parse(liar, "liar.xml").text  # the label cannot be true: not obeyed
    page = b"<html><head><title>XSLT</title></head><body><p>Daniel Veillard\x92s caf\xe9 notes</p></body></html>"
    assert "Daniel Veillard\u2019s café notes" in parse(page, "xslt.html").text
    # windows-1252's five undefined bytes read as Latin-1 reads them; a NUL byte is in no 8-bit text: refused.
    assert parse(b"<p>caf\xe9 \x81\x8d</p>", "odd.html").text == "caf\xe9 \x81\x8d"
    with pytest.raises(InputError, match=r"cannot decode the text: not UTF-8, .* it holds NUL bytes"):
        parse(b"<p>\x81\x00\xff</p>", "noise.html")


def test_a_text_mostly_in_utf8_or_cut_mid_character_is_read_as_what_it_mostly_is() -> None:
    """A changelog in UTF-8 with an old entry pasted in Latin-1 (``libmp3lame0``'s): UTF-8, the stray bytes as
    windows-1252 -- not GB18030, in which its UTF-8 letters happen to be Chinese characters ("é" -> "茅"). A Chinese
    file cut mid-character is still Chinese."""
    changelog = (
        "Released by Gabriel Bouvigné, see Frédéric's notes.\n".encode() + b"Takehiro Tominaga, Jos\xe9 Vi\xf1a\n"
    )
    read = parse(changelog, "changelog.txt")
    assert read.text == "Released by Gabriel Bouvigné, see Frédéric's notes.\nTakehiro Tominaga, José Viña\n"
    assert read.metadata["note"] == "read as UTF-8, the 2 bytes that are not UTF-8 read as windows-1252"
    cut = "长城是中国古代的军事防御工程。".encode("gb18030")[:-1]
    read = parse(cut, "长城.txt")
    assert read.text == "长城是中国古代的军事防御工程\ufffd"
    assert read.metadata["note"] == "read as GB18030, the one byte that is not GB18030 shown as \ufffd"


def test_a_latin1_text_is_read_as_windows_1252_and_says_so(cli: Cli, tmp_path: Path) -> None:
    """Text files from /usr/share/doc and old Windows tools, in Latin-1 / windows-1252 without a declared encoding
    (not valid UTF-8, no NUL byte): read, the row's note saying how; Chinese in GB18030 is still read as Chinese."""
    docs = tmp_path / "doc"
    write(docs, "AUTHORS", "Jürgen Weigert wrote the screen manual.\n".encode("latin-1"))
    write(docs, "notes.txt", "Don\u2019t forget: the café opens at 8 \u20ac.\n".encode("cp1252"))
    write(docs, "readme.rst", "Crédits\n=======\n\nFrançois Pinard.\n".encode("latin-1"))
    write(docs, "长城.txt", "长城是中国古代的军事防御工程。\n".encode("gb18030"))

    run = cli("ingest", str(docs), "--kb", "code", "--json")
    rows = {Path(r["path"]).name: r for r in json.loads(run.out)}
    assert run.code == 0, run.err
    assert {name: row["status"] for name, row in rows.items()} == dict.fromkeys(rows, "indexed")
    windows_1252 = "read as windows-1252 (not valid UTF-8)"
    assert rows["AUTHORS"]["note"] == rows["notes.txt"]["note"] == windows_1252
    assert rows["readme.rst"]["note"] == f"{windows_1252}; reStructuredText: 1 section title read as headings"
    assert rows["长城.txt"]["note"] == ""
    assert rows["AUTHORS"]["error"] == ""  # a note, not a failure

    found = cli.json("search", "Jürgen Weigert", "--kb", "code")["results"]  # type: ignore[index]
    assert found[0]["knowledge_filename"] == "AUTHORS" and "Jürgen Weigert" in found[0]["content"]
    found = cli.json("search", "café opens", "--kb", "code")["results"]  # type: ignore[index]
    assert "Don\u2019t forget: the café opens at 8 \u20ac." in found[0]["content"]
    found = cli.json("search", "长城 防御工程", "--kb", "code")["results"]  # type: ignore[index]
    assert found[0]["knowledge_filename"] == "长城.txt" and "长城是中国古代的军事防御工程" in found[0]["content"]
