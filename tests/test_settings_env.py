"""``Settings`` reads ``RAGSTEP_*`` itself (pydantic-settings' rules, without its import cost)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ragstep.errors import InputError
from ragstep.settings import Settings


def test_variables_are_read_in_any_case_and_empty_ones_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTEP_EMBEDDING_TOP_K", "7")
    monkeypatch.setenv("ragstep_vector_threshold", "0.33")
    monkeypatch.setenv("RAGSTEP_RERANKER", "")  # empty: the default stands
    monkeypatch.setenv("RAGSTEP_NOT_A_SETTING", "x")  # unknown names are ignored
    monkeypatch.setenv("RAGSTEP_OPENSEARCH_SERVER_HYBRID", "yes")
    settings = Settings()
    assert settings.embedding_top_k == 7 and settings.vector_threshold == 0.33
    assert settings.reranker == "none" and settings.opensearch_server_hybrid is True
    assert {"embedding_top_k", "vector_threshold"} <= settings.model_fields_set
    assert "reranker" not in settings.model_fields_set


def test_values_passed_in_win_over_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGSTEP_DATA_DIR", "/somewhere/else")
    monkeypatch.setenv("RAGSTEP_EMBEDDING_TOP_K", "7")
    settings = Settings(data_dir=tmp_path)
    assert settings.data_dir == tmp_path and settings.embedding_top_k == 7
    # As with pydantic-settings, model_validate reads it too.
    assert Settings.model_validate({"data_dir": str(tmp_path)}).embedding_top_k == 7


def test_list_settings_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTEP_WEB_SEARCH_BLACKLIST", '["*://x.example/*", "/ads/"]')
    assert Settings().web_search_blacklist == ["*://x.example/*", "/ads/"]
    monkeypatch.setenv("RAGSTEP_WEB_SEARCH_BLACKLIST", "*://x.example/*")
    with pytest.raises(InputError, match="RAGSTEP_WEB_SEARCH_BLACKLIST must be JSON"):
        Settings()


def test_a_bad_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTEP_EMBEDDING_TOP_K", "many")
    with pytest.raises(ValidationError) as caught:
        Settings()
    assert caught.value.errors()[0]["loc"] == ("embedding_top_k",)
