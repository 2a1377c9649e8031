"""The embedded catalog read without pydantic, where that read gives what the settings and the catalog's models
would: ``kb list`` prints it, and ``ragstep search`` finds the embedding model to start early from it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragstep.adapters.catalog.sqlite import SqliteCatalogStore

#: Settings that every value of is valid (plain text, no validator), which neither reader depends on (the catalog's
#: place, a knowledge base's stored embedding model): building ``Settings`` would accept them as they are, so they
#: do not stand in the way of a plain read (tests/test_cli_quick_list.py holds this list to the model too).
FREE_TEXT_SETTINGS = frozenset(
    {
        "embedder", "embedding_model", "embedding_base_url", "chat_model", "chat_base_url", "rerank_model",
        "rerank_url", "rerank_flavour", "catalog_table", "history_table", "blob_bucket", "blob_prefix",
        "cache_table", "graph_table", "keys_table", "usage_table", "idempotency_table", "index_s3_bucket",
        "index_s3_prefix", "opensearch_index",
    }
)  # fmt: skip
#: RAGSTEP_* variables that are not settings (Settings ignores them).
NOT_SETTINGS = frozenset({"debug"})


def plain_catalog(data_dir: str | None, environ: os._Environ[str] | dict[str, str]) -> SqliteCatalogStore | None:
    """The default tenant's SQLite catalog, where ``Settings`` and ``Clients`` would find it, or None when the
    environment holds a setting other than the data dir, ``RAGSTEP_CATALOG_BACKEND=sqlite`` and
    :data:`FREE_TEXT_SETTINGS`. The environment is read as ``ragstep.settings.environment_values`` reads it."""

    where: Path | None = None
    for key, text in environ.items():
        if not text or key[:8].upper() != "RAGSTEP_":
            continue
        name = key[8:].lower()
        if name in FREE_TEXT_SETTINGS or name in NOT_SETTINGS:
            continue
        if name == "catalog_backend" and text == "sqlite":
            continue
        if name != "data_dir":
            return None
        where = Path(text)
    path = Path(data_dir) if data_dir else where or Path(".ragstep")
    # As Clients.data_dir says it (tests/test_cli_quick_list.py compares the two).
    from ragstep.adapters.catalog.sqlite import SqliteCatalogStore
    from ragstep.data_dir import usable_data_dir

    usable_data_dir(path)

    return SqliteCatalogStore(path / "catalog.sqlite")


def embedded_data_dir(
    data_dir: str | None, environ: os._Environ[str] | dict[str, str], store: str = "catalog"
) -> Path | None:
    """The data dir ``--data-dir`` (``data_dir``) or ``RAGSTEP_DATA_DIR`` names, as ``Settings`` reads it, when the
    ``store`` (catalog, history, keys, usage) is the embedded (SQLite) one kept there; None when its
    ``RAGSTEP_<STORE>_BACKEND`` puts it elsewhere (then the data dir need not hold anything)."""
    values = {key[8:].lower(): text for key, text in environ.items() if text and key[:8].upper() == "RAGSTEP_"}
    if values.get(f"{store}_backend", "sqlite") != "sqlite":
        return None
    return Path(data_dir) if data_dir else Path(values.get("data_dir") or ".ragstep")
