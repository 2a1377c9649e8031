"""``ragstep kb list`` without pydantic (issue #23): the plain listing prints exactly what the models would.

The listing reads the SQLite catalog's rows as plain data and skips building ``Settings`` when nothing in the
environment could change the outcome; these tests hold it to the ordinary path (models, settings, their errors).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ragstep.adapters.catalog.sqlite import SqliteCatalogStore
from ragstep.entry.cli.kb import KB_FIELDS, plain_listing
from ragstep.entry.cli.main import main
from ragstep.entry.cli.plain import FREE_TEXT_SETTINGS, NOT_SETTINGS
from ragstep.models import Knowledge, KnowledgeBase
from ragstep.settings import Settings


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("RAGSTEP_"):
            monkeypatch.delenv(key)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Two knowledge bases, one with three documents, one empty; names that need two columns each character."""
    catalog = SqliteCatalogStore(tmp_path / "catalog.sqlite")
    docs = catalog.create_kb(KnowledgeBase(id="kb1", name="docs", embedding_model="none", created_at=1.5))
    catalog.create_kb(KnowledgeBase(id="kb2", name="常见问题", type="faq", created_at=2.0, graph=True))
    for i in range(3):
        catalog.put_knowledge(Knowledge(id=f"k{i}", knowledge_base_id=docs.id, created_at=float(i)))
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def listing(data_dir: Path | None = None) -> list[dict[str, Any]] | None:
    return plain_listing(argparse.Namespace(data_dir=str(data_dir) if data_dir else None))


def test_the_lists_it_relies_on_match_the_models() -> None:
    assert tuple(KnowledgeBase.model_fields) == KB_FIELDS
    checked = {name for dec in Settings.__pydantic_decorators__.field_validators.values() for name in dec.info.fields}
    for name in FREE_TEXT_SETTINGS:
        field = Settings.model_fields[name]
        assert field.annotation is str and not field.metadata and name not in checked, name
    assert not NOT_SETTINGS & set(Settings.model_fields)
    # A new model-wide check could reject a combination of values: the listing's lists must then be looked at again.
    assert list(Settings.__pydantic_decorators__.model_validators) == ["_threshold_for_the_reranker"]


def test_plain_and_model_listings_print_the_same(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGSTEP_EMBEDDER", "none")  # free text: does not stand in the way
    monkeypatch.setenv("RAGSTEP_CATALOG_BACKEND", "sqlite")
    plain = listing(data_dir)
    assert plain is not None and [(kb["name"], kb["documents"]) for kb in plain] == [("docs", 3), ("常见问题", 0)]
    quick = [run(capsys, "kb", "list", "--data-dir", str(data_dir), *flag) for flag in ([], ["--json"])]

    monkeypatch.setenv("RAGSTEP_EMBEDDING_TOP_K", "7")  # valid, but only Settings may say so: the model path
    assert listing(data_dir) is None
    ordinary = [run(capsys, "kb", "list", "--data-dir", str(data_dir), *flag) for flag in ([], ["--json"])]
    assert quick == ordinary
    assert quick[0][0] == 0 and "常见问题  faq" in quick[0][1]


def test_a_bad_setting_still_fails_as_settings_say(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGSTEP_EMBEDDING_TOP_K", "many")
    code, out, err = run(capsys, "kb", "list", "--data-dir", str(data_dir))
    assert code == 2 and out == ""
    assert err.startswith("ragstep: error: embedding_top_k: ") and "integer" in err and len(err.splitlines()) == 1
    monkeypatch.setenv("RAGSTEP_EMBEDDING_TOP_K", "7")
    monkeypatch.setenv("RAGSTEP_CATALOG_BACKEND", "sqlit")
    code, _, err = run(capsys, "kb", "list", "--data-dir", str(data_dir))
    assert code == 2 and err.startswith("ragstep: error: catalog_backend: ")


def test_rows_of_another_model_version_go_through_the_model(data_dir: Path) -> None:
    """A row written before ``layers`` existed: the model fills in its default, as it always did."""
    with sqlite3.connect(data_dir / "catalog.sqlite") as conn:
        conn.execute("UPDATE knowledge_bases SET doc = json_remove(doc, '$.layers') WHERE id = 'kb2'")
    assert listing(data_dir) is None
    assert [kb.layers for kb in SqliteCatalogStore(data_dir / "catalog.sqlite").list_kbs()] == [False, False]


def test_where_the_catalog_is_and_a_data_dir_that_is_a_file(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(data_dir))
    from_env = listing()
    assert from_env is not None and len(from_env) == 2
    assert listing(tmp_path / "elsewhere") == []  # --data-dir wins over the environment, as in Settings
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAGSTEP_DATA_DIR")
    assert listing() == [] and (tmp_path / ".ragstep" / "catalog.sqlite").is_file()  # the default, ./.ragstep

    afile = tmp_path / "afile"
    afile.write_text("x")
    quick = run(capsys, "kb", "list", "--data-dir", str(afile))
    ordinary = run(capsys, "kb", "show", "docs", "--data-dir", str(afile))  # always the model path
    assert quick[0] == 2 and quick[1:] == ordinary[1:]
    assert quick[2] == f"ragstep: error: data dir {afile} is a file; pass --data-dir to a folder\n"
