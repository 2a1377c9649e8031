"""A saved snapshot's chunk ids (issue #23): mapped from ``ids_*.npy`` instead of parsed from meta.json, found by a
binary search instead of a dict of every id; snapshots of the formats that listed them in meta.json still open."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.index._ids import StringColumn, ids_at
from ragstep.adapters.index._snapshot import SNAPSHOT_FORMAT, load_snapshot
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.models import Chunk
from ragstep.ports import SearchFilter

# Ids of every shape a caller may choose: UUID-like, short, non-ASCII, prefixes of one another, a lone surrogate.
IDS = ["c-10", "c-1", "c-2", "知识-3", "ä", "a" * 300, "c", "x\udcff", "0", "Z", "c-1 ", "émoji-😀"]
#: What an index stores (its rows are JSON: no lone surrogates).
STORED = [cid for cid in IDS if cid != "x\udcff"]


def index_with(root: Path, ids: list[str]) -> LocalSearchIndex:
    idx = LocalSearchIndex(root)
    chunks = [
        Chunk(id=cid, knowledge_id="k", knowledge_base_id="kb", content=f"word{i % 3} shared", chunk_index=i)
        for i, cid in enumerate(ids)
    ]
    vecs = np.random.default_rng(0).standard_normal((len(ids), 8)).astype(np.float32)
    idx.replace_knowledge("k", chunks, vecs / np.linalg.norm(vecs, axis=1, keepdims=True), "s")
    return idx


def test_the_column_reads_and_finds_what_the_list_held() -> None:
    parts = StringColumn.arrays(IDS)
    col = StringColumn(parts["blob"], parts["offsets"], parts["order"])
    assert len(col) == len(IDS) and [col[i] for i in range(len(col))] == IDS
    assert [col.find(cid) for cid in IDS] == list(range(len(IDS)))
    assert col.find("c-") is None and col.find("zz") is None and col.find("") is None


def test_take_reads_what_indexing_reads() -> None:
    parts = StringColumn.arrays(IDS)
    col = StringColumn(parts["blob"], parts["offsets"], parts["order"])
    positions = np.array([7, 0, 11, 3, 3, 5], dtype=np.int32)
    assert col.take(positions) == [IDS[i] for i in positions] == ids_at(col, positions) == ids_at(IDS, positions)
    assert col.take(np.array([], dtype=np.int64)) == []
    with pytest.raises(IndexError, match="outside the snapshot's 12 rows"):
        col.take(np.array([0, len(IDS)]))
    with pytest.raises(IndexError):
        col.take(np.array([-1]))
    assert col[np.int64(3)] == "知识-3"
    with pytest.raises(IndexError):
        col[len(IDS)]
    empty = StringColumn(**StringColumn.arrays([]))
    assert len(empty) == 0 and empty.find("a") is None


def test_a_saved_snapshot_maps_its_ids_and_searches_as_the_built_one(tmp_path: Path) -> None:
    built = index_with(tmp_path, STORED)
    snap = built.snapshot()
    assert isinstance(snap.ids, list)  # built in this process: the list the build made
    kw, vec = (
        built.keyword_search(["word1"], SearchFilter(), 20, 0.0),
        built.vector_search(np.ones(8, dtype=np.float32) / np.sqrt(8), "s", SearchFilter(), 5, -1.0),
    )
    wanted = ["c-2", "a" * 300, "知识-3", "missing"]
    got = built.vectors(wanted, "s")

    folder = next((tmp_path / "snapshots").glob("gen-*"))
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    assert meta["format"] == SNAPSHOT_FORMAT and "ids" not in meta
    # A reader of formats 1-3 expects meta.json's ids: it must see another format (and rebuild), not a KeyError.
    assert SNAPSHOT_FORMAT not in {"bm25-per-kb-1", "bm25-per-kb-2", "bm25-per-kb-3"}

    reopened = LocalSearchIndex(tmp_path)
    loaded = reopened.snapshot()
    assert reopened.snapshot_builds == 0 and isinstance(loaded.ids, StringColumn)
    assert isinstance(loaded.ids.blob, np.memmap)
    assert [loaded.position(cid) for cid in STORED] == [snap.position(cid) for cid in STORED] == list(range(11))
    assert reopened.keyword_search(["word1"], SearchFilter(), 20, 0.0) == kw
    assert reopened.vector_search(np.ones(8, dtype=np.float32) / np.sqrt(8), "s", SearchFilter(), 5, -1.0) == vec
    again = reopened.vectors(wanted, "s")
    assert sorted(again) == sorted(got) == ["a" * 300, "c-2", "知识-3"]
    assert all(np.array_equal(again[k], got[k]) for k in got)


def test_a_snapshot_that_lists_its_ids_in_meta_json_still_opens(tmp_path: Path) -> None:
    """Format 3 (and before): ``ids`` in meta.json, no ``ids_*.npy``."""
    index_with(tmp_path, STORED).snapshot()
    folder = next((tmp_path / "snapshots").glob("gen-*"))
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    column = StringColumn(*(np.load(folder / f"ids_{p}.npy") for p in ("blob", "offsets", "order")))
    ids = [column[i] for i in range(len(column))]
    for part in ("blob", "offsets", "order"):
        (folder / f"ids_{part}.npy").unlink()
    meta |= {"format": "bm25-per-kb-3", "ids": ids}
    (folder / "meta.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
    gen = int(folder.name.removeprefix("gen-"))
    old = load_snapshot(tmp_path / "snapshots", gen)
    assert old is not None and old.ids == STORED and old.position("知识-3") == 3 and old.position("nope") is None
    reopened = LocalSearchIndex(tmp_path)
    assert [h.chunk_id for h in reopened.keyword_search(["word0"], SearchFilter(), 20, 0.0)]
    assert reopened.snapshot_builds == 0


def test_vectors_of_ids_some_of_which_have_none_in_the_space(tmp_path: Path) -> None:
    """The rerank stage's lookup: one binary search over the space's rows for all ids; rows with no vector are left
    out."""
    idx = index_with(tmp_path, STORED)
    words = [
        Chunk(id=f"w{i}", knowledge_id="w", knowledge_base_id="kb", content="plain", chunk_index=i) for i in (0, 1)
    ]
    idx.replace_knowledge("w", words, None, None)
    wanted = ["w0", "c-2", "nope", "知识-3", "w1", "c-2"]
    built = idx.vectors(wanted, "s")
    reopened = LocalSearchIndex(tmp_path).vectors(wanted, "s")
    assert list(built) == list(reopened) == ["c-2", "知识-3"]
    assert all(np.array_equal(built[k], reopened[k]) for k in built)
    assert LocalSearchIndex(tmp_path).vectors(wanted, "other") == {}
