"""The ``ragstep`` command line: kb / ingest / search / delete / demo, their ``--json`` shapes and their errors.

Most tests call :func:`ragstep.entry.cli.main.main` in-process (fast); a few run ``python -m ragstep`` as a real process
for what only a process shows: the entry point, argv bytes that are not UTF-8, and Chinese on a real stdout.
Every user error must be one ``ragstep: error: ...`` line on stderr with exit status 2, and must not cost anything
that was already indexed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from ragstep import __version__
from ragstep.entry.cli.demo import DEMO_QUERIES
from ragstep.entry.cli.main import main
from ragstep.models import SearchResult, TraceEvent
from ragstep.models.search import RetrievalOverrides

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO / "shared"
#: What an unknown --set key is told (pydantic said "Extra inputs are not permitted": no hint of what is accepted).
OVERRIDES = "overrides accepts " + ", ".join(RetrievalOverrides.model_fields)

# Four small documents on unrelated topics, two in English and two in Chinese. Both English ones contain "guide",
# so one query can hit both of them with different strengths.
DOCS = {
    "coffee.md": (
        "# Espresso guide\n\n"
        "Espresso is brewed by forcing hot water through finely ground coffee beans under high pressure.\n"
    ),
    "garden.txt": (
        "Tomato growing guide\n\n"
        "Tomatoes need full sun, regular watering and well drained soil in a vegetable garden.\n"
    ),
    "熊猫.md": "# 大熊猫\n\n大熊猫生活在四川的竹林里，主要以竹子为食，每天要吃很多竹子。\n",
    "高铁.md": "# 高速铁路\n\n高速铁路连接北京和上海，列车的时速可以达到三百五十公里。\n",
}


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults only (no embedder from the developer's shell, no RAGSTEP_DEBUG re-raising errors), but new knowledge
    bases keyword-only: these tests check exact keyword results; the default embedding model has its own tests
    (test_embedder_local.py)."""
    for key in list(os.environ):
        if key.startswith("RAGSTEP_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("RAGSTEP_EMBEDDER", "none")


@dataclass
class Run:
    code: int
    out: str
    err: str


class Cli:
    """``ragstep --data-dir DATA ...`` in-process, with captured output."""

    def __init__(self, data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.data_dir = data_dir
        self.capsys = capsys

    def __call__(self, *args: str) -> Run:
        self.capsys.readouterr()
        code = main(["--data-dir", str(self.data_dir), *args])
        captured = self.capsys.readouterr()
        return Run(code, captured.out, captured.err)

    def ok(self, *args: str) -> str:
        run = self(*args)
        assert run.code == 0, run.err
        assert run.err == ""
        return run.out

    def fails(self, *args: str) -> str:
        """Runs a command that must fail as a user error; returns the message after ``ragstep: error:``."""
        run = self(*args)
        assert_user_error(run.code, run.err)
        return run.err.removeprefix("ragstep: error: ").rstrip("\n")

    def json(self, *args: str) -> object:
        return json.loads(self.ok(*args, "--json"))

    def search(self, query: str, *args: str) -> dict:
        data = self.json("search", query, *args)
        assert isinstance(data, dict)
        return data

    def filenames(self, query: str, *args: str) -> list[str]:
        return [r["knowledge_filename"] for r in self.search(query, "--kb", "docs", *args)["results"]]


def assert_user_error(code: int, err: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ragstep: error: "), err


def write_docs(folder: Path, docs: dict[str, str] = DOCS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(tmp_path / "data", capsys)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    return write_docs(tmp_path / "docs")


@pytest.fixture
def indexed(cli: Cli, docs: Path) -> dict[str, str]:
    """Knowledge base "docs" with :data:`DOCS` ingested; returns file name -> knowledge id."""
    cli.ok("kb", "create", "docs")
    results = cli.json("ingest", str(docs), "--kb", "docs")
    assert isinstance(results, list)
    assert [r["status"] for r in results] == ["indexed"] * len(DOCS)
    return {Path(r["path"]).name: r["knowledge_id"] for r in results}


def assert_index_intact(cli: Cli) -> None:
    """What :func:`indexed` put in is all still there and searchable."""
    assert cli.filenames("espresso coffee beans")[0] == "coffee.md"
    assert cli.filenames("大熊猫吃竹子")[0] == "熊猫.md"
    (kb,) = cli.json("kb", "list")
    assert kb["documents"] == len(DOCS)


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTEP_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHARED), env.get("PYTHONPATH", "")) if p)
    return env


def run_process(*args: str | bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "ragstep", *args],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        timeout=60,
        check=False,
    )


# -- kb ------------------------------------------------------------------------------------------------------------


def test_kb_create_list_delete(cli: Cli) -> None:
    # Nothing here yet: said so, and the folder is not created by a command that only reads.
    assert cli.fails("kb", "list").startswith(f"no ragstep data in {cli.data_dir}; create some there with `ragstep")
    assert not cli.data_dir.exists()

    out = cli.ok("kb", "create", "docs")
    assert out.startswith("created knowledge base docs (document, embedding: none, id ")
    out = cli.ok("kb", "create", "常见问题", "--type", "faq")
    assert out.startswith("created knowledge base 常见问题 (faq, ")

    table = cli.ok("kb", "list")
    header, rule, *rows = table.splitlines()
    assert header.split() == ["name", "type", "embedding", "documents", "id"]
    assert set(rule) <= {"-", " "}
    assert [row.split()[:4] for row in rows] == [["docs", "document", "none", "0"], ["常见问题", "faq", "none", "0"]]

    listed = cli.json("kb", "list")
    assert [(kb["name"], kb["type"], kb["documents"]) for kb in listed] == [
        ("docs", "document", 0),
        ("常见问题", "faq", 0),
    ]
    assert set(listed[0]) == {
        "id",
        "name",
        "type",
        "embedding_model",
        "created_at",
        "description",
        "documents",
        "graph",
        "layers",
    }
    assert re.fullmatch(r"[0-9a-f]{32}", listed[0]["id"])

    assert cli.ok("kb", "delete", "常见问题") == "deleted knowledge base 常见问题 (0 chunks)\n"
    # by id as well as by name
    assert cli.ok("kb", "delete", listed[0]["id"]) == "deleted knowledge base docs (0 chunks)\n"
    assert cli.json("kb", "list") == []
    assert "no knowledge bases yet" in cli.ok("kb", "list")


def test_kb_create_duplicate_name_is_refused(cli: Cli) -> None:
    cli.ok("kb", "create", "docs")
    before = cli.json("kb", "list")
    message = cli.fails("kb", "create", "docs", "--type", "faq")
    assert message == "a knowledge base with name 'docs' already exists; choose another name"
    assert cli.json("kb", "list") == before


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("bad/name", "contains '/'"),
        (" padded", "starts or ends with a space"),
        ("", "name is empty"),
        ("x" * 65, "has 65 characters"),
        ("tab\there", "contains '\\t'"),
    ],
)
def test_kb_create_bad_name_is_refused(cli: Cli, name: str, problem: str) -> None:
    message = cli.fails("kb", "create", name)
    assert "knowledge base name" in message
    assert problem in message
    assert cli.json("kb", "list") == []


def test_kb_delete_unknown_and_kb_delete_removes_its_chunks(cli: Cli, indexed: dict[str, str]) -> None:
    # The error names only what was asked for, never the other knowledge bases.
    assert cli.fails("kb", "delete", "nope") == "unknown knowledge base 'nope'; `ragstep kb list` shows those there are"
    assert_index_intact(cli)

    assert cli.ok("kb", "delete", "docs") == f"deleted knowledge base docs ({len(DOCS)} chunks)\n"
    assert "unknown knowledge base 'docs'" in cli.fails("search", "espresso", "--kb", "docs")
    # A new knowledge base of the same name starts empty: nothing of the old one is left in the index.
    cli.ok("kb", "create", "docs")
    assert cli.filenames("espresso coffee beans") == []


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        ("foo", "unknown embedding provider 'foo' in 'foo'; supported: none, openai, bedrock"),
        (
            "cohere:embed-v4",
            "unknown embedding provider 'cohere' in 'cohere:embed-v4'; supported: none, openai, bedrock",
        ),
        ("openai:", "embedding model id 'openai:' names no model; write it as 'openai:<model>'"),
    ],
)
def test_kb_create_unknown_embedding_model_fails_at_once(cli: Cli, model: str, problem: str) -> None:
    assert cli.fails("kb", "create", "docs", "--embedding-model", model).startswith(problem)
    assert cli.fails("kb", "list").startswith(f"no ragstep data in {cli.data_dir};")  # nothing stored, not a catalog


def test_kb_create_embedding_model_is_stored_canonically(cli: Cli) -> None:
    # Checked and spelled canonically; no provider is called (nothing is embedded until the first ingest).
    out = cli.ok("kb", "create", "docs", "--embedding-model", " OpenAI:text-embedding-3-small ")
    assert out.startswith("created knowledge base docs (document, embedding: openai:text-embedding-3-small, id ")
    cli.ok("kb", "create", "plain", "--embedding-model", "NONE")
    assert [kb["embedding_model"] for kb in cli.json("kb", "list")] == ["openai:text-embedding-3-small", "none"]


def test_kb_show_lists_the_documents(cli: Cli, indexed: dict[str, str], tmp_path: Path) -> None:
    tagged = write_docs(tmp_path / "tagged", {"lava.md": "# Volcano\n\nVolcanoes erupt molten lava.\n"})
    (lava,) = cli.json("ingest", str(tagged), "--kb", "docs", "--tag", "geology")

    data = cli.json("kb", "show", "docs")
    assert isinstance(data, dict)
    assert set(data) == {"knowledge_base", "documents", "chunks"}
    assert data["knowledge_base"]["name"] == "docs"
    documents = data["documents"]
    assert [d["filename"] for d in documents] == sorted([*DOCS, "lava.md"])
    assert {d["filename"]: d["id"] for d in documents} == {**indexed, "lava.md": lava["knowledge_id"]}
    assert {(d["chunk_count"], d["status"]) for d in documents} == {(1, "completed")}
    assert {d["filename"]: d["tag_id"] for d in documents if d["tag_id"]} == {"lava.md": "geology"}
    assert data["chunks"] == len(DOCS) + 1

    # by id as well, and as a table: one row per document, then a summary line
    (kb,) = cli.json("kb", "list")
    out = cli.ok("kb", "show", kb["id"])
    title, header, _rule, *rows, summary = out.splitlines()
    assert title == f"knowledge base docs (document, embedding: none, id {kb['id']})"
    assert header.split() == ["id", "file", "chunks", "tag", "status", "note"]
    assert [row.split()[:5] for row in rows] == [
        [d["id"], d["filename"], "1", d["tag_id"] or "-", "completed"] for d in documents
    ]
    assert summary == f"{len(DOCS) + 1} documents, {len(DOCS) + 1} chunks"


def test_kb_show_says_in_a_note_how_a_file_was_read(cli: Cli, tmp_path: Path) -> None:
    """What ``ingest`` said in a row's note, ``kb show`` says in its note column later; ``--json`` keeps ``error``
    and adds ``note``, as ingest's rows do."""
    folder = tmp_path / "legacy"
    folder.mkdir()
    (folder / "authors.txt").write_bytes("Jürgen Weigert maintains the screen manual.\n".encode("latin-1"))
    (folder / "plain.md").write_text("# Plain\n\nNothing to say about its encoding.\n", encoding="utf-8")
    cli.ok("kb", "create", "docs")
    cli.ok("ingest", str(folder), "--kb", "docs")

    documents = {d["filename"]: d for d in cli.json("kb", "show", "docs")["documents"]}  # type: ignore[index]
    legacy = documents["authors.txt"]
    assert (legacy["error"], legacy["note"]) == ("", "read as windows-1252 (not valid UTF-8)")
    assert (documents["plain.md"]["error"], documents["plain.md"]["note"]) == ("", "")
    _title, header, _rule, *rows, _summary = cli.ok("kb", "show", "docs").splitlines()
    assert header.split()[-1] == "note"
    assert "read as windows-1252 (not valid UTF-8)" in next(row for row in rows if "authors.txt" in row)


def test_kb_show_empty_and_unknown(cli: Cli) -> None:
    cli.ok("kb", "create", "docs")
    assert (
        cli.ok("kb", "show", "docs").splitlines()[1]
        == "no documents yet; add some with `ragstep ingest PATH --kb docs`"
    )
    assert cli.json("kb", "show", "docs")["documents"] == []  # type: ignore[index]
    assert cli.fails("kb", "show", "nope") == "unknown knowledge base 'nope'; `ragstep kb list` shows those there are"


# -- ingest --------------------------------------------------------------------------------------------------------


def test_ingest_folder_prints_per_file_chunk_counts(cli: Cli, docs: Path) -> None:
    (docs / "notes.xyz").write_text("unsupported files in a folder are skipped, not failed")
    (docs / ".hidden.md").write_text("hidden files are skipped")
    cli.ok("kb", "create", "docs")
    out = cli.ok("ingest", str(docs), "--kb", "docs")
    header, _rule, *rows, summary = out.splitlines()
    assert header.split() == ["file", "status", "chunks", "note"]
    by_name = {Path(row.split()[0]).name: row.split()[1:] for row in rows}
    # The unsupported file is listed as skipped (with the reason); the hidden one is not a candidate at all.
    assert sorted(by_name) == sorted([*DOCS, "notes.xyz"])
    assert all(by_name[name] == ["indexed", "1"] for name in DOCS), rows
    assert by_name["notes.xyz"][:3] == ["skipped", "0", "notes.xyz:"]
    assert summary == (
        f"{len(DOCS)} of {len(DOCS)} files ingested into docs, {len(DOCS)} chunks; 1 file skipped (type not supported)"
    )


def test_ingest_json_gives_per_file_results(cli: Cli, docs: Path) -> None:
    cli.ok("kb", "create", "docs")
    results = cli.json("ingest", str(docs / "coffee.md"), str(docs / "熊猫.md"), "--kb", "docs")
    assert isinstance(results, list)
    assert [set(r) for r in results] == [{"path", "knowledge_id", "status", "chunks", "error", "note"}] * 2
    assert [(Path(r["path"]).name, r["status"], r["chunks"], r["error"]) for r in results] == [
        ("coffee.md", "indexed", 1, ""),
        ("熊猫.md", "indexed", 1, ""),
    ]
    assert all(re.fullmatch(r"[0-9a-f]{32}", r["knowledge_id"]) for r in results)
    assert cli.filenames("大熊猫") == ["熊猫.md"]


def test_failing_files_do_not_stop_the_batch(cli: Cli, tmp_path: Path) -> None:
    folder = write_docs(tmp_path / "mixed", {"good.md": "# Sourdough\n\nSourdough bread rises with wild yeast.\n"})
    (folder / "empty.md").write_text("  \n\n\t\n")
    # Not UTF-8, and its NUL byte is in no 8-bit text either.
    (folder / "binary.txt").write_bytes(b"hello \xff\x00 world\n")
    cli.ok("kb", "create", "docs")

    run = cli("ingest", str(folder), "--kb", "docs", "--json")
    assert run.code == 2
    assert "Traceback" not in run.err
    by_name = {Path(r["path"]).name: r for r in json.loads(run.out)}
    assert by_name["good.md"]["status"] == "indexed"
    # Blank, found in a folder: nothing to index, and no failure either (named, it fails: the document is empty).
    assert by_name["empty.md"]["status"] == "skipped"
    assert by_name["empty.md"]["note"] == "empty.md: no text found: nothing to index"
    assert by_name["binary.txt"]["status"] == "failed"
    assert by_name["binary.txt"]["error"] == (
        "binary.txt: cannot decode the text: not UTF-8, UTF-16 (with its byte order mark) or GB18030, and it holds NUL"
        " bytes, which no 8-bit text has (binary content?); convert it to UTF-8"
    )
    assert all("\n" not in r["error"] for r in by_name.values())
    assert cli.filenames("sourdough bread") == ["good.md"]

    # The table form says the same, with a summary line.
    run = cli("ingest", str(folder), "--kb", "docs")
    assert run.code == 2
    assert "cannot decode the text" in run.out
    assert run.out.splitlines()[-1] == "1 of 2 files ingested into docs, 1 chunks; 1 skipped (the note column says why)"


def test_gb18030_text_is_decoded(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "长城.txt"
    path.write_bytes("长城是中国古代的军事防御工程，绵延万里。".encode("gb18030"))
    cli.ok("kb", "create", "docs")
    (result,) = cli.json("ingest", str(path), "--kb", "docs")
    assert result["status"] == "indexed"
    (hit,) = cli.search("长城 防御工程", "--kb", "docs")["results"]
    assert hit["content"] == "长城是中国古代的军事防御工程，绵延万里。"


def test_unsupported_file_fails_only_when_named(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "only-xyz"
    folder.mkdir()
    (folder / "data.xyz").write_text("not a supported type")
    cli.ok("kb", "create", "docs")

    run = cli("ingest", str(folder / "data.xyz"), "--kb", "docs", "--json")
    assert run.code == 2
    (result,) = json.loads(run.out)
    assert result["status"] == "failed"
    supported = (
        ".txt, .md, .markdown, .json, .html, .htm, .pdf, .docx, .png, .jpg, .jpeg, .webp, .tif, .tiff, .rst, .jsonl, "
        ".ndjson, .yaml, .yml, .toml, .ini, .cfg, .conf, .properties, .adoc, .asciidoc, .org, .tex, .xml, .csv, .xlsx, "
        "source code (.py, .sh, .js, .ts, .go, .rs, .c, .h, .java, .sql and 66 more), and text files without an "
        "extension"
    )
    assert result["error"] == f"data.xyz: unsupported file type .xyz; supported: {supported}"

    message = cli.fails("ingest", str(folder), "--kb", "docs")
    assert message == f"no supported files under {folder} (supported: {supported})"


def test_text_files_without_an_extension_are_ingested_and_binaries_skipped(cli: Cli, tmp_path: Path) -> None:
    folder = tmp_path / "e2fsprogs"
    folder.mkdir()
    (folder / "README").write_text("This is the Ext2/3/4 Filesystem Utilities package, e2fsprogs.\n")
    (folder / "mke2fs").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(64))  # a program, not a document
    cli.ok("kb", "create", "docs")
    run = cli("ingest", str(folder), "--kb", "docs", "--json")
    assert run.code == 0, run.err
    rows = {Path(r["path"]).name: (r["status"], r["error"]) for r in json.loads(run.out)}
    assert rows == {
        "README": ("indexed", ""),
        "mke2fs": ("skipped", "mke2fs: not a text file (binary content) and no extension to say what it is"),
    }
    assert cli.filenames("Ext2 filesystem utilities")[0] == "README"


def test_reingest_unchanged_and_changed(cli: Cli, docs: Path, indexed: dict[str, str]) -> None:
    again = cli.json("ingest", str(docs), "--kb", "docs")
    assert [(r["status"], r["chunks"]) for r in again] == [("unchanged", 1)] * len(DOCS)
    assert {Path(r["path"]).name: r["knowledge_id"] for r in again} == indexed

    (docs / "coffee.md").write_text(
        "# Cold brew guide\n\nCold brew coffee steeps coarse grounds in cold water overnight.\n"
    )
    (result,) = cli.json("ingest", str(docs / "coffee.md"), "--kb", "docs")
    assert (result["status"], result["knowledge_id"]) == ("updated", indexed["coffee.md"])
    assert result["note"] == "replaced the version indexed before (1 chunk)" and result["error"] == ""

    # Replaced, not added: the old text is gone, the new text is there once, the document count is unchanged.
    assert cli.filenames("espresso pressure") == []
    hits = cli.search("cold brew overnight", "--kb", "docs")["results"]
    assert [(h["knowledge_filename"], h["knowledge_id"]) for h in hits] == [("coffee.md", indexed["coffee.md"])]
    assert hits[0]["content"].startswith("# Cold brew guide")
    (kb,) = cli.json("kb", "list")
    assert kb["documents"] == len(DOCS)


def test_failed_reingest_keeps_the_previous_version(cli: Cli, docs: Path, indexed: dict[str, str]) -> None:
    (docs / "coffee.md").write_bytes(b"broken \xff\x00\xff")  # not UTF-8, and a NUL byte: no 8-bit text either
    run = cli("ingest", str(docs / "coffee.md"), "--kb", "docs", "--json")
    assert run.code == 2
    assert json.loads(run.out)[0]["status"] == "failed"
    assert_index_intact(cli)

    (docs / "coffee.md").write_text("   \n")
    assert cli("ingest", str(docs / "coffee.md"), "--kb", "docs").code == 2
    assert_index_intact(cli)


@pytest.mark.parametrize("kind", ["missing", "broken-symlink"])
def test_unreadable_path_is_refused_before_anything_is_ingested(
    cli: Cli, indexed: dict[str, str], tmp_path: Path, kind: str
) -> None:
    bad = tmp_path / "gone.md"
    if kind == "broken-symlink":
        bad.symlink_to(tmp_path / "no-such-target.md")
    new = write_docs(tmp_path / "new", {"new.md": "# Volcano\n\nVolcanoes erupt molten lava.\n"}) / "new.md"
    message = cli.fails("ingest", str(new), str(bad), "--kb", "docs")
    assert message == f"{bad}: no such file or folder"
    assert cli.filenames("volcano lava") == []
    assert_index_intact(cli)


def test_file_uris_name_local_paths(cli: Cli, tmp_path: Path) -> None:
    """``file:///abs/path`` (what a file manager's "copy location" gives) was "no such file or folder": it names the
    path, percent-escapes decoded, with an empty or ``localhost`` host; another host is a one-line error."""
    from urllib.parse import quote

    folder = write_docs(tmp_path / "my notes", {"café menu.md": "# Mango\n\nMangoes ripen in the summer heat.\n"})
    other = write_docs(tmp_path / "more", {"tea.md": "# Tea\n\nGreen tea leaves are steamed.\n"})
    cli.ok("kb", "create", "docs", "--embedding-model", "none")
    file_uri = "file://" + quote(str(folder / "café menu.md"))
    assert "%20" in file_uri and "%C3%A9" in file_uri
    results = cli.json("ingest", file_uri, f"file://localhost{quote(str(other))}", "--kb", "docs")
    assert isinstance(results, list)
    assert [(r["path"], r["status"]) for r in results] == [
        (str(folder / "café menu.md"), "indexed"),
        (str(other / "tea.md"), "indexed"),
    ]
    assert cli.filenames("mango summer") == ["café menu.md"]

    assert cli.fails("ingest", f"file://fileserver{quote(str(other))}", "--kb", "docs") == (
        f"file://fileserver{quote(str(other))}: a file URI on another host (fileserver) names no local file; copy"
        " the file here and name its path, or file:///absolute/path"
    )
    gone = tmp_path / "gone.md"
    assert cli.fails("ingest", f"file://{gone}", "--kb", "docs") == f"{gone}: no such file or folder"


def test_ingest_into_unknown_kb(cli: Cli, indexed: dict[str, str], docs: Path) -> None:
    assert cli.fails("ingest", str(docs), "--kb", "nope") == (
        "unknown knowledge base 'nope'; create it with `ragstep kb create nope` "
        "(`ragstep kb list` shows those there are)"
    )
    assert_index_intact(cli)


def test_non_utf8_file_name_in_a_folder_fails_alone(cli: Cli, tmp_path: Path) -> None:
    folder = write_docs(tmp_path / "names", {"ok.md": "# Mango\n\nMangoes ripen in the summer heat.\n"})
    with open(os.path.join(os.fsencode(folder), b"caf\xff.md"), "wb") as f:
        f.write(b"# Tea\n\nGreen tea leaves are steamed.\n")
    cli.ok("kb", "create", "docs")
    run = cli("ingest", str(folder), "--kb", "docs", "--json")
    assert run.code == 2
    assert "Traceback" not in run.err
    by_name = {Path(r["path"]).name: r for r in json.loads(run.out)}
    assert by_name["ok.md"]["status"] == "indexed"
    assert by_name["caf\ufffd.md"]["status"] == "failed"
    assert "file name is not valid UTF-8" in by_name["caf\ufffd.md"]["error"]
    assert cli.filenames("mangoes summer") == ["ok.md"]


def test_faq_knowledge_base(cli: Cli, tmp_path: Path) -> None:
    faq = tmp_path / "faq.json"
    entries = [
        {
            "standard_question": "How do I reset my password?",
            "similar_questions": ["I forgot my password"],
            "answers": ["Open Settings, then Security, then Reset password."],
        },
        {"standard_question": "营业时间是几点？", "answers": ["每天早上九点到晚上六点。"]},
    ]
    faq.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    cli.ok("kb", "create", "faq", "--type", "faq")
    (result,) = cli.json("ingest", str(faq), "--kb", "faq")
    # one index row per phrasing: 2 + 1 questions
    assert (result["status"], result["chunks"]) == ("indexed", 3)

    hits = cli.search("forgot password", "--kb", "faq")["results"]
    assert hits[0]["chunk_type"] == "faq"
    assert "Reset password" in hits[0]["content"]
    assert "九点" in cli.search("营业时间", "--kb", "faq")["results"][0]["content"]

    # A FAQ knowledge base takes JSON only.
    md = write_docs(tmp_path / "md", {"a.md": "# A\n\ntext\n"}) / "a.md"
    run = cli("ingest", str(md), "--kb", "faq", "--json")
    assert run.code == 2
    assert json.loads(run.out)[0]["error"] == "a.md: unsupported file type .md; supported: .json, .csv"


# -- search --------------------------------------------------------------------------------------------------------


def test_search_json_shape(cli: Cli, indexed: dict[str, str]) -> None:
    data = cli.search("  espresso coffee  ", "--kb", "docs")
    assert list(data) == ["query", "request_id", "results", "trace", "profile", "usage"]
    assert data["profile"] == "standard" and data["usage"]["cost"]["currency"] == "USD"
    assert data["query"] == "espresso coffee"
    assert re.fullmatch(r"[0-9a-f]{32}", data["request_id"])
    assert data["results"]
    for result in data["results"]:
        # The models forbid unknown keys: every key is a SearchResult field, and dumping gives the same JSON back.
        assert SearchResult.model_validate(result).model_dump(mode="json") == result
    first = data["results"][0]
    assert (first["knowledge_filename"], first["knowledge_id"]) == ("coffee.md", indexed["coffee.md"])
    assert first["content"] == DOCS["coffee.md"].strip()
    assert {t["stage"] for t in data["trace"]} >= {"chunk_search", "filter_top_k"}
    for event in data["trace"]:
        assert TraceEvent.model_validate(event).model_dump(mode="json") == event


def test_search_text_output(cli: Cli, indexed: dict[str, str]) -> None:
    out = cli.ok("search", "大熊猫", "--kb", "docs")
    assert out.startswith("query: 大熊猫\n")
    assert "熊猫.md" in out
    assert "filter_top_k" in out
    out = cli.ok("search", "zeppelin", "--kb", "docs")
    assert "no results" in out


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("How is espresso brewed?", "coffee.md"),
        ("tomatoes need sun and watering", "garden.txt"),
        ("大熊猫吃什么？", "熊猫.md"),
        ("北京到上海的高速铁路有多快", "高铁.md"),
    ],
)
def test_search_ranks_the_right_document_first(cli: Cli, indexed: dict[str, str], query: str, expected: str) -> None:
    assert cli.filenames(query)[0] == expected


def test_search_by_kb_id_and_several_kbs(cli: Cli, indexed: dict[str, str], tmp_path: Path) -> None:
    (kb,) = cli.json("kb", "list")
    assert cli.filenames("大熊猫") == [
        r["knowledge_filename"] for r in cli.search("大熊猫", "--kb", kb["id"])["results"]
    ]

    cli.ok("kb", "create", "other")
    other = write_docs(tmp_path / "other", {"lava.md": "# Volcano guide\n\nVolcanoes erupt molten lava.\n"})
    cli.ok("ingest", str(other), "--kb", "other")
    assert "lava.md" not in cli.filenames("volcano guide")
    assert [r["knowledge_filename"] for r in cli.search("volcano", "--kb", "other")["results"]] == ["lava.md"]
    both = cli.search(
        "volcano guide", "--kb", "docs", "--kb", "other", "--set", "keyword_threshold=0", "--set", "rerank_threshold=0"
    )["results"]
    # Both knowledge bases answer, ranked on one scale: BM25 uses their joint statistics, so "volcano" (in one of
    # their five chunks) outweighs "guide" (in three) and the chunk holding both ranks first.
    assert both[0]["knowledge_filename"] == "lava.md"
    assert {r["knowledge_filename"] for r in both} == {"lava.md", "coffee.md", "garden.txt"}


def test_top_k_limits_the_results(cli: Cli, indexed: dict[str, str]) -> None:
    assert len(cli.filenames("guide")) == 2
    assert cli.filenames("espresso guide", "--top-k", "1") == ["coffee.md"]
    # The errors name the flag that was typed, not the setting behind it.
    assert cli.fails("search", "guide", "--kb", "docs", "--top-k", "0") == (
        "--top-k: Input should be greater than or equal to 1"
    )
    assert cli.fails("search", "guide", "--kb", "docs", "--top-k", "201") == (
        "--top-k: Input should be less than or equal to 200"
    )


def test_set_overrides_retrieval_settings(cli: Cli, indexed: dict[str, str]) -> None:
    # The search thresholds, with the rerank threshold out of the way (it prunes one-word matches on its own).
    keep = ("--set", "rerank_threshold=0")
    # coffee.md matches only "guide": a weak hit (keyword score ~0.38 of the best) next to garden.txt's two words
    # ("vegetable", once: "tomato" would count "Tomatoes" too, and garden.txt's lead would cut coffee.md).
    assert cli.filenames("vegetable guide", *keep) == ["garden.txt", "coffee.md"]
    assert cli.filenames("vegetable guide", *keep, "--set", "keyword_threshold=0.9") == ["garden.txt"]
    # The other way: garden.txt's hit on "espresso guide" (~0.28) is below the default threshold of 0.3.
    assert cli.filenames("espresso guide", *keep) == ["coffee.md"]
    assert cli.filenames("espresso guide", *keep, "--set", "keyword_threshold=0") == ["coffee.md", "garden.txt"]
    assert cli.filenames("vegetable guide", *keep, "--set", "rerank_top_k=1", "--set", "fusion=rrf") == ["garden.txt"]
    # Keyword-only knowledge base: the rerank threshold does not apply to the model-free reranker's token scale
    # (issue 17), so the keyword threshold is the one cut-off: the one-word match stays, below the two-word one.
    assert cli.filenames("vegetable guide") == ["garden.txt", "coffee.md"]


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("rerank_topk=1", f"overrides.rerank_topk: unknown field (did you mean rerank_top_k?); {OVERRIDES}"),
        ("keyword_threshold=2", "overrides.keyword_threshold: Input should be less than or equal to 1"),
        ("fusion=average", "overrides.fusion: Input should be 'absolute', 'adaptive', 'minmax', 'dbsf' or 'rrf'"),
        ("keyword_threshold", "--set expects KEY=VALUE, got 'keyword_threshold'"),
        ("=0.5", "--set expects KEY=VALUE, got '=0.5'"),
    ],
)
def test_bad_set_override(cli: Cli, indexed: dict[str, str], setting: str, message: str) -> None:
    assert cli.fails("search", "espresso", "--kb", "docs", "--set", setting) == message


def test_knowledge_scoping(cli: Cli, indexed: dict[str, str]) -> None:
    garden = indexed["garden.txt"]
    hits = cli.search("guide", "--knowledge", garden)["results"]
    assert [h["knowledge_id"] for h in hits] == [garden]
    # No match inside the chosen item: RAGFlow's scoped fallback returns its chunks in document order.
    scoped = cli.search("espresso", "--knowledge", garden)
    assert [h["knowledge_id"] for h in scoped["results"]] == [garden] * len(scoped["results"])
    assert [h["chunk_index"] for h in scoped["results"]] == sorted(h["chunk_index"] for h in scoped["results"])
    assert any(t["action"] == "fallback" for t in scoped["trace"])
    pair = cli.search("guide", "--knowledge", garden, "--knowledge", indexed["coffee.md"])["results"]
    assert {h["knowledge_filename"] for h in pair} == {"garden.txt", "coffee.md"}
    message = cli.fails("search", "guide", "--knowledge", "0" * 32)
    assert message.startswith(f"unknown knowledge item '{'0' * 32}'")


def test_knowledge_inside_a_knowledge_base(cli: Cli, indexed: dict[str, str], tmp_path: Path) -> None:
    # --kb X --knowledge ID searches that document inside X, not the rest of X.
    garden = indexed["garden.txt"]
    hits = cli.search("guide", "--kb", "docs", "--knowledge", garden)["results"]
    assert hits and {h["knowledge_id"] for h in hits} == {garden}
    assert {h["knowledge_id"] for h in cli.search("guide", "--kb", "docs")["results"]} > {garden}

    # A document of another knowledge base is an error that names the knowledge base searched.
    cli.ok("kb", "create", "other")
    (lava,) = cli.json(
        "ingest", str(write_docs(tmp_path / "other", {"lava.md": "# Lava\n\nMolten lava.\n"})), "--kb", "other"
    )
    message = cli.fails("search", "lava", "--kb", "docs", "--knowledge", lava["knowledge_id"])
    assert message == f"knowledge item {lava['knowledge_id']!r} is not in the knowledge base(s) searched (docs)"
    hits = cli.search("lava", "--kb", "other", "--knowledge", lava["knowledge_id"])["results"]
    assert [h["knowledge_filename"] for h in hits] == ["lava.md"]


@pytest.mark.parametrize(
    "spelling",
    ["keyword_threshold", "RAGSTEP_KEYWORD_THRESHOLD", "ragstep_keyword_threshold", "Ragstep_Keyword_Threshold"],
)
def test_set_accepts_the_environment_names(cli: Cli, indexed: dict[str, str], spelling: str) -> None:
    # The documented RAGSTEP_* names work as well as the field names, in any case (as environment names do).
    keep = ("--set", "RAGSTEP_RERANK_THRESHOLD=0")
    assert cli.filenames("vegetable guide", *keep) == ["garden.txt", "coffee.md"]
    assert cli.filenames("vegetable guide", *keep, "--set", f"{spelling}=0.9") == ["garden.txt"]


def test_set_environment_name_of_no_retrieval_setting(cli: Cli, indexed: dict[str, str]) -> None:
    message = cli.fails("search", "espresso", "--kb", "docs", "--set", "RAGSTEP_DATA_DIR=/tmp")
    assert message == f"overrides.data_dir: unknown field; {OVERRIDES}"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "query: query is empty; pass the question to search for"),
        (" \t\n ", "query: query is empty; pass the question to search for"),
        ("a" * 4001, "query: query has 4001 characters; the limit is 4000"),
        ("espresso\x00coffee", "query: query contains the control character U+0000; remove it"),
        ("espresso\x1b[31m", "query: query contains the control character U+001B; remove it"),
        ("espresso\u202e", "query: query contains the control character U+202E; remove it"),
        # What Python makes of argv bytes that are not UTF-8 (surrogateescape); a real process is tested below.
        ("caf\udcff", "query: query is not valid UTF-8; re-encode it as UTF-8"),
    ],
    ids=["empty", "whitespace", "4001-chars", "nul", "escape", "bidi-override", "invalid-utf8"],
)
def test_bad_query_is_one_clear_line(cli: Cli, indexed: dict[str, str], query: str, message: str) -> None:
    assert cli.fails("search", query, "--kb", "docs") == message
    assert_index_intact(cli)


def test_query_at_the_limit_is_accepted(cli: Cli, indexed: dict[str, str]) -> None:
    query = ("espresso " * 500)[:4000]
    assert cli.filenames(query)[0] == "coffee.md"


def test_search_needs_a_target_and_a_known_kb(cli: Cli, indexed: dict[str, str]) -> None:
    # In the command's words, not the HTTP body's fields.
    assert cli.fails("search", "espresso") == (
        "name what to search: --kb NAME (`ragstep kb list` shows them), --knowledge ID, or the web with "
        "--set web_search=true"
    )
    assert (
        cli.fails("search", "espresso", "--kb", "nope")
        == "unknown knowledge base 'nope'; `ragstep kb list` shows those there are"
    )
    assert_index_intact(cli)


@pytest.mark.parametrize(
    "args",
    [
        ("search", "espresso", "--kb", "do\udcffcs"),
        ("search", "espresso", "--knowledge", "k\udcff"),
        ("delete", "k\udcff"),
        ("ingest", "caf\udcff.md", "--kb", "docs"),
    ],
    ids=["kb", "knowledge", "delete", "ingest-path"],
)
def test_invalid_utf8_arguments(cli: Cli, indexed: dict[str, str], args: tuple[str, ...]) -> None:
    message = cli.fails(*args)
    assert "is not valid UTF-8" in message
    assert_index_intact(cli)


# -- data dir ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("kb", "create", "docs"),
        ("kb", "list"),
        ("ingest", "DOCS", "--kb", "docs"),
        ("search", "espresso", "--kb", "docs"),
        ("delete", "0" * 32),
        ("demo",),
    ],
    ids=["kb-create", "kb-list", "ingest", "search", "delete", "demo"],
)
def test_unwritable_data_dir(
    tmp_path: Path, docs: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("a file, not a folder")
    args = tuple(str(docs) if a == "DOCS" else a for a in args)

    # Below a regular file: nobody can create it, root included (chmod would not stop root).
    message = Cli(blocker / "data", capsys).fails(*args)
    assert message == f"cannot open data dir {blocker / 'data'}: Not a directory; pass --data-dir to a writable folder"
    # The data dir is itself a regular file.
    message = Cli(blocker, capsys).fails(*args)
    assert message == f"data dir {blocker} is a file; pass --data-dir to a folder"
    assert blocker.read_text() == "a file, not a folder"


def test_data_dir_before_or_after_the_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert main(["--data-dir", data, "kb", "create", "before"]) == 0
    assert main(["kb", "--data-dir", data, "create", "middle"]) == 0
    assert main(["kb", "create", "after", "--data-dir", data]) == 0
    capsys.readouterr()
    assert main(["kb", "list", "--json", "--data-dir", data]) == 0
    assert [kb["name"] for kb in json.loads(capsys.readouterr().out)] == ["before", "middle", "after"]
    assert (tmp_path / "data" / "catalog.sqlite").is_file()


# -- delete --------------------------------------------------------------------------------------------------------


def test_delete_one_document(cli: Cli, indexed: dict[str, str]) -> None:
    coffee = indexed["coffee.md"]
    assert cli.ok("delete", coffee) == "deleted coffee.md (1 chunks)\n"
    assert cli.filenames("espresso coffee beans") == []
    assert cli.filenames("大熊猫")[0] == "熊猫.md"
    (kb,) = cli.json("kb", "list")
    assert kb["documents"] == len(DOCS) - 1
    hint = "delete takes the document's id (`ragstep kb show KB` lists them)"
    assert cli.fails("delete", coffee) == f"unknown knowledge id {coffee!r}; {hint}"
    # A file name (what `kb show` lists first) is not an id: the message gives the id it has.
    garden = indexed["garden.txt"]
    message = cli.fails("delete", "garden.txt")
    assert (
        message == f"unknown knowledge id 'garden.txt'; delete takes the document's id: garden.txt is {garden} in docs"
    )


# -- demo ----------------------------------------------------------------------------------------------------------


def test_demo_runs_and_is_idempotent(cli: Cli) -> None:
    first = cli.ok("demo")
    assert first.startswith(f"ragstep demo: data dir {cli.data_dir.resolve()}\n")
    ingested = [line for line in first.splitlines() if line.startswith("  demo-")]
    assert ingested and all(": indexed, " in line for line in ingested), ingested
    for query, _kb in DEMO_QUERIES:
        assert f"query: {query}\n" in first
    # Every demo query finds something.
    assert "no results" not in first

    second = cli.ok("demo")
    again = [line for line in second.splitlines() if line.startswith("  demo-")]
    assert again == [line.replace(": indexed, ", ": unchanged, ") for line in ingested]
    assert [kb["name"] for kb in cli.json("kb", "list")] == ["demo-docs", "demo-faq"]


def test_demo_streams_two_answers_with_their_sources(cli: Cli) -> None:
    from ragstep.entry.cli.demo import DEMO_QUESTIONS

    out = cli.ok("demo")
    assert len(DEMO_QUESTIONS) == 2
    for question, kb_name in DEMO_QUESTIONS:
        _, found, block = out.partition(f"\nchat (rag_stream, {kb_name}): {question}\n")
        assert found, f"the demo asks {question!r}"
        answer, _, rest = block.partition("\n")
        assert "[1]" in answer, "the extractive answer cites its source"
        assert rest.startswith("(answered by the extractive answerer")
        assert "\nSources:\n#  file" in rest
    assert len(cli.json("sessions", "list")) == 2, "each question is its own session"


# -- bad options and serve -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("serve", "--port", "99999"),
            "argument --port: 99999 is not a TCP port; use 1-65535 (see `ragstep serve --help`)",
        ),
        (("serve", "--port", "0"), "argument --port: 0 is not a TCP port; use 1-65535 (see `ragstep serve --help`)"),
        (
            ("serve", "--port", "eighty"),
            "argument --port: expected a whole number, got 'eighty' (see `ragstep serve --help`)",
        ),
        (("serve", "--bogus"), "unrecognized arguments: --bogus (see `ragstep --help`)"),
        (("kb", "create"), "the following arguments are required: name (see `ragstep kb create --help`)"),
        (
            ("kb", "create", "x", "--type", "wiki"),
            "argument --type: invalid choice: 'wiki'",
        ),
        (("search",), "the following arguments are required: query (see `ragstep search --help`)"),
        (("frobnicate",), "argument COMMAND: invalid choice: 'frobnicate'"),
        (
            ("bench", "latency", "--docs", "0"),
            "argument --docs: must be at least 1, got 0 (see `ragstep bench latency --help`)",
        ),
    ],
    ids=[
        "port-too-big",
        "port-zero",
        "port-not-a-number",
        "unknown-option",
        "missing-name",
        "bad-choice",
        "missing-query",
        "unknown-command",
        "bench-docs",
    ],
)
def test_bad_options_are_one_line(cli: Cli, args: tuple[str, ...], message: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(*args)
    err = cli.capsys.readouterr().err
    assert_user_error(int(exit_info.value.code or 0), err)
    assert err.removeprefix("ragstep: error: ").startswith(message), err


def test_serve_on_a_port_in_use_is_one_line(cli: Cli) -> None:
    pytest.importorskip("uvicorn", reason="`ragstep serve` needs uvicorn (pip install 'ragstep[serve]')")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        message = cli.fails("serve", "--port", str(port))
    assert message == f"cannot listen on 127.0.0.1:{port}: Address already in use; choose another --port"
    assert cli.fails("serve", "--host", "no-such-host.invalid").startswith("--host 'no-such-host.invalid': ")


def test_serve_on_a_data_dir_without_data_says_so(tmp_path: Path) -> None:
    """Started from another folder, or on a mistyped --data-dir, the console would just be empty."""
    pytest.importorskip("uvicorn", reason="`ragstep serve` needs uvicorn (pip install 'ragstep[serve]')")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    typo = tmp_path / "ragstep-dta"
    server = subprocess.Popen(
        [sys.executable, "-m", "ragstep", "--data-dir", str(typo), "serve", "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        first = server.stderr.readline()  # the server keeps running: its first line is what we wait for
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert first.startswith(f"ragstep: serve: no ragstep data in {typo}; create some there with `ragstep ingest")
    assert first.rstrip().endswith("; serving it empty")


# -- the README ----------------------------------------------------------------------------------------------------


def quick_start_commands() -> list[str]:
    """The command lines of the README's quick start, as a new user would paste them."""
    blocks = []
    for page in (REPO / "README.md", REPO / "docs" / "getting-started.md"):  # the docs site's page is the same tour
        section = page.read_text(encoding="utf-8").split("## 30-second quick start", 1)[1]
        blocks.append(section.split("```bash\n", 1)[1].split("```", 1)[0])
    assert blocks[0] == blocks[1], "README.md and docs/getting-started.md give different quick starts"
    return [line for line in blocks[0].splitlines() if line.strip()]


def test_readme_quick_start_works_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `./dev demo` runs the demo on the default data dir, which every later command uses too.
    dev_demo = (REPO / "dev").read_text(encoding="utf-8").split("\n  demo)\n", 1)[1].split(";;", 1)[0]
    assert '"$VENV/bin/ragstep" demo "$@"' in dev_demo
    assert "--data-dir" not in dev_demo

    monkeypatch.chdir(tmp_path)
    ran = []
    for line in quick_start_commands():
        words = shlex.split(line, comments=True)
        if words == ["./dev", "demo"]:
            words = ["ragstep", "demo"]
        if words[0] != "ragstep" or words[1] == "serve":  # `source ...`; serve is tests/test_api.py's
            continue
        for word in words:  # the files the quick start ingests are the repository's own
            if (REPO / word).exists() and not (tmp_path / word).exists():
                copy = shutil.copytree if (REPO / word).is_dir() else shutil.copy
                (tmp_path / word).parent.mkdir(parents=True, exist_ok=True)
                copy(REPO / word, tmp_path / word)
        capsys.readouterr()
        code = main(words[1:])
        out, err = capsys.readouterr()
        assert (code, err) == (0, ""), line
        ran.append((words[1:], out))
    assert [args[0] for args, _ in ran][:2] == ["demo", "kb"]
    assert (tmp_path / ".ragstep" / "catalog.sqlite").is_file()
    searches = [out for args, out in ran if args[0] == "search"]
    assert searches and all("no results" not in out for out in searches)


# -- real processes ------------------------------------------------------------------------------------------------


def test_process_ingest_and_search_in_english_and_chinese(tmp_path: Path, docs: Path) -> None:
    data = str(tmp_path / "data")
    version = run_process("--version", cwd=tmp_path)
    assert (version.returncode, version.stdout.decode().strip()) == (0, f"ragstep {__version__}")

    created = run_process("--data-dir", data, "kb", "create", "docs", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    ingested = run_process("--data-dir", data, "ingest", str(docs), "--kb", "docs", cwd=tmp_path)
    assert ingested.returncode == 0, ingested.stderr
    assert f"{len(DOCS)} of {len(DOCS)} files ingested into docs" in ingested.stdout.decode("utf-8")

    for query, expected in (("espresso coffee beans", "coffee.md"), ("大熊猫吃竹子", "熊猫.md")):
        found = run_process("--data-dir", data, "search", query, "--kb", "docs", "--json", cwd=tmp_path)
        assert found.returncode == 0, found.stderr
        assert found.stderr == b""
        data_out = json.loads(found.stdout.decode("utf-8"))
        assert data_out["query"] == query
        assert data_out["results"][0]["knowledge_filename"] == expected


def test_process_invalid_utf8_argv(tmp_path: Path, cli: Cli, indexed: dict[str, str]) -> None:
    data = os.fsencode(cli.data_dir)
    for args in (
        (b"search", b"caf\xff", b"--kb", b"docs"),
        (b"search", b"espresso", b"--kb", b"do\xffcs"),
        (b"ingest", b"caf\xff.md", b"--kb", b"docs"),
    ):
        run = run_process(b"--data-dir", data, *args, cwd=tmp_path)
        err = run.stderr.decode("utf-8")
        assert_user_error(run.returncode, err)
        assert "is not valid UTF-8" in err
        assert run.stdout == b""
    assert_index_intact(cli)


def test_process_user_error_has_no_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    run = run_process("--data-dir", str(blocker / "data"), "kb", "list", cwd=tmp_path)
    err = run.stderr.decode("utf-8")
    assert_user_error(run.returncode, err)
    assert "cannot open data dir" in err


def test_a_reader_that_goes_away_is_not_an_error(tmp_path: Path) -> None:
    # `ragstep search ... | head -1`: the pipe closes before ragstep has written; it exits quietly, status 0.
    assert main(["--data-dir", str(tmp_path), "kb", "create", "docs"]) == 0
    cmd = [sys.executable, "-m", "ragstep.entry.cli.main", "--data-dir", str(tmp_path), "kb", "list"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # long before the interpreter has started: its first write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert err == ""
