"""A mistyped ``--data-dir`` given to a command that only reads is said so, and nothing is created there.

Before, the command opened a catalog in the folder (creating it and ``catalog.sqlite``) and answered as if the data
were merely empty ("unknown knowledge base", an empty list), leaving the mistyped folder behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstep.entry.cli.main import main

READ_ONLY = [
    ("search", "espresso", "--kb", "docs"),
    ("kb", "list"),
    ("kb", "show", "docs"),
    ("chat", "what is espresso?", "--kb", "docs"),
    ("find", "espresso", "--kb", "docs"),
    ("sessions", "list"),
    ("sessions", "show", "0" * 32),
    ("keys", "list"),
    ("tenants", "list"),
    ("usage",),
]


@pytest.mark.parametrize("args", READ_ONLY, ids=[" ".join(a[:2]) for a in READ_ONLY])
@pytest.mark.parametrize("exists", [False, True], ids=["missing", "empty-folder"])
def test_a_folder_without_data_is_named_and_left_as_it_was(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...],
    exists: bool,
) -> None:
    monkeypatch.delenv("RAGSTEP_CATALOG_BACKEND", raising=False)
    typo = tmp_path / "dta"
    if exists:
        typo.mkdir()
    code = main(["--data-dir", str(typo), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"ragstep: error: no ragstep data in {typo}; create some there with `ragstep ingest FILES --kb NAME` "
        "(after `ragstep kb create NAME`), or pass --data-dir to the folder that holds yours\n"
    )
    assert (list(typo.iterdir()) == []) if exists else not typo.exists()


def test_the_environment_names_the_folder_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGSTEP_CATALOG_BACKEND", raising=False)
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(tmp_path / "nowhere"))
    assert main(["kb", "list"]) == 2
    assert f"no ragstep data in {tmp_path / 'nowhere'};" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


def test_commands_that_write_still_start_a_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "fresh"
    assert main(["--data-dir", str(data), "kb", "create", "docs", "--embedding-model", "none"]) == 0
    assert main(["--data-dir", str(data), "kb", "list", "--json"]) == 0
    assert '"name": "docs"' in capsys.readouterr().out
