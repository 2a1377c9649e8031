"""A data dir the process may not look into (a folder above it is not searchable) is the documented one-line error
and exit 2, never ``ragstep: internal error: PermissionError``.

Permissions are real: the parent folder is mode 000 and the command runs as a process the kernel holds to it -- as
this user when it is not root, and under root with the capabilities that bypass file permissions dropped
(``setpriv``), since chmod alone does not stop root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_ingest_pipeline import subprocess_env

COMMANDS = [("kb", "list"), ("kb", "create", "docs"), ("search", "espresso", "--kb", "docs"),
            ("ingest", "DOC", "--kb", "docs"), ("chat", "hello", "--kb", "docs")]  # fmt: skip


def held_to_permissions() -> list[str]:
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot drop the capabilities that bypass file permissions")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[Path]:
    parent = tmp_path / "locked"
    (parent / "data").mkdir(parents=True)
    parent.chmod(0)
    yield parent
    parent.chmod(0o755)


@pytest.mark.parametrize("below", ["data", "data/new"], ids=["existing", "to-create"])
@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_an_unsearchable_data_dir_is_a_user_error(
    locked: Path, tmp_path: Path, below: str, args: tuple[str, ...]
) -> None:
    doc = tmp_path / "note.md"
    doc.write_text("# Note\n\nEspresso.\n", encoding="utf-8")
    data = locked / below
    argv = [a if a != "DOC" else str(doc) for a in args]
    run = subprocess.run(
        [*held_to_permissions(), sys.executable, "-m", "ragstep", "--data-dir", str(data), *argv],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == (
        f"ragstep: error: cannot open data dir {data}: Permission denied; pass --data-dir to a writable folder"
    )
    assert "Traceback" not in run.stdout + run.stderr
