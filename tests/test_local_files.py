"""What ingestion reads from disk (:mod:`ragstep.app.local_files`): links are not followed out of the folder given,
special files and the kernel's interfaces are never read -- through ``ragstep ingest`` as a user runs it."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from conftest import run_cli
from ragstep.app.local_files import read_local_file
from ragstep.errors import InputError


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    pass


def ingest(capsys: pytest.CaptureFixture[str], data: Path, *paths: Path) -> dict[str, dict[str, str]]:
    """``ragstep ingest PATHS --kb docs --json``: its rows by file name."""
    assert run_cli(capsys, "--data-dir", str(data), "kb", "create", "docs", "--embedding-model", "none")[0] == 0
    _code, out, err = run_cli(capsys, "--data-dir", str(data), "ingest", *map(str, paths), "--kb", "docs", "--json")
    assert "Traceback" not in out + err
    body = json.loads(out)
    rows = body["results"] if isinstance(body, dict) else body
    return {Path(r["path"]).name: r for r in rows}


def search(capsys: pytest.CaptureFixture[str], data: Path, query: str) -> str:
    """The hits' text of ``ragstep search QUERY --json``."""
    code, out, err = run_cli(capsys, "--data-dir", str(data), "search", query, "--kb", "docs", "--json")
    assert code == 0, err
    return json.dumps([hit["content"] for hit in json.loads(out)["results"]])


def test_links_out_of_the_folder_are_not_followed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "guide.md").write_text("# Guide\n\nThe sourdough starter needs flour and water.\n", encoding="utf-8")
    (docs / "sub" / "inner.md").write_text("# Inner\n\nRye bread proofs overnight.\n", encoding="utf-8")
    outside = tmp_path / "outside.md"
    outside.write_text("# Private\n\nOUTSIDE-CANARY lives next to the folder.\n", encoding="utf-8")
    (docs / "env.md").symlink_to("/proc/self/environ")
    (docs / "passwd.md").symlink_to("/etc/passwd")
    (docs / "up.md").symlink_to("../outside.md")
    (docs / "sub" / "deep.md").symlink_to(outside)
    (docs / "gone.md").symlink_to(tmp_path / "missing.md")
    (docs / "linked_dir").symlink_to(tmp_path)  # a linked folder: never walked
    (docs / "inside.md").symlink_to("sub/inner.md")  # stays inside: read

    rows = ingest(capsys, tmp_path / "data", docs)
    for name in ("env.md", "passwd.md", "up.md", "deep.md", "gone.md", "linked_dir"):
        assert rows[name]["status"] == "skipped", rows[name]
        assert "links are not followed out of the folder" in rows[name]["error"]
    assert rows["guide.md"]["status"] == "indexed" and rows["inside.md"]["status"] == "indexed"
    assert rows["inner.md"]["status"] == "unchanged"  # the link inside the folder was that same file
    assert "outside.md" not in rows and rows["linked_dir"]["status"] == "skipped"  # nothing under it was walked
    assert "sourdough" in search(capsys, tmp_path / "data", "sourdough starter")
    for query in ("root bin bash", "OUTSIDE-CANARY private", "PATH HOME"):
        hits = search(capsys, tmp_path / "data", query)
        assert "root:x:0:0" not in hits and "OUTSIDE-CANARY" not in hits and "PATH=" not in hits


def test_special_files_are_never_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    fifo = docs / "pipe.md"
    os.mkfifo(fifo)
    environ = docs / "environ.md"
    environ.symlink_to("/proc/self/environ")
    # Named explicitly: a FIFO is refused at once (nobody writes to it: a read would block forever), and a link to
    # the kernel's interface is refused by its real path.
    done: dict[str, dict[str, str]] = {}
    worker = threading.Thread(target=lambda: done.update(ingest(capsys, tmp_path / "data", fifo, environ)))
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():  # unblock the reader before failing
        with open(fifo, "wb"):
            pass
        pytest.fail("ingest blocked on a named pipe")
    assert done["pipe.md"]["status"] == "failed" and "not a regular file (a named pipe)" in done["pipe.md"]["error"]
    assert done["environ.md"]["status"] == "failed" and "kernel interface" in done["environ.md"]["error"]


@pytest.mark.parametrize("target", ["/proc/self/environ", "/proc/self/maps", "/sys/kernel/mm", "/dev/null"])
def test_kernel_interfaces_are_refused(tmp_path: Path, target: str) -> None:
    link = tmp_path / "doc.md"
    link.symlink_to(target)
    with pytest.raises(InputError, match=r"never read|not a regular file"):
        read_local_file(link, 1024, "doc.md")


def test_a_file_is_read_whole_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "a.md"
    path.write_bytes(b"x" * 40)
    assert read_local_file(path, 40, "a.md") == b"x" * 40
    with pytest.raises(InputError, match="41 bytes is over the 40-byte limit"):
        path.write_bytes(b"x" * 41)
        read_local_file(path, 40, "a.md")
