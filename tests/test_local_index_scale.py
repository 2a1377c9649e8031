"""The local index's layout for large indexes (issue #23): snapshots mapped from disk on open, never rebuilt; the
float32 matrix streamed to the snapshot folder while building; the IVF first pass above ``ivf_min_rows`` rows; the
sampled-cut top-k and the in-place postings build giving exactly what the plain versions give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.index import _snapshot
from ragstep.adapters.index._snapshot import csc_postings, top
from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.models import Chunk
from ragstep.ports import SearchFilter

ALL = SearchFilter()
DIM = 32
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def clustered(rng: np.random.Generator, n: int, centers: int = 40) -> np.ndarray:
    """Unit vectors around ``centers`` topics, as embeddings of a corpus are (random vectors have no neighbours)."""
    c = rng.standard_normal((centers, DIM), dtype=np.float32)
    m = c[rng.integers(0, centers, n)] + 0.3 * rng.standard_normal((n, DIM), dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def fill(idx: LocalSearchIndex, vecs: np.ndarray, items: int = 6) -> None:
    n = vecs.shape[0]
    for k, part in enumerate(np.array_split(np.arange(n), items)):
        kid = f"k{k}"
        chunks = [
            Chunk(
                id=f"c{i}",
                knowledge_id=kid,
                knowledge_base_id="kb",
                content=f"{WORDS[i % 10]} {WORDS[(i * 7) % 10]} item {i % 13}",
                chunk_index=j,
            )
            for j, i in enumerate(part.tolist())
        ]
        idx.replace_knowledge(kid, chunks, vecs[part], "s")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    root = tmp_path_factory.mktemp("scale")
    vecs = clustered(np.random.default_rng(3), 3000)
    idx = LocalSearchIndex(root, ivf_min_rows=1000)
    fill(idx, vecs)
    idx.snapshot()
    return root, vecs


def test_a_reopened_index_maps_its_snapshot_and_answers_the_same(built: tuple[Path, np.ndarray]) -> None:
    root, vecs = built
    first = LocalSearchIndex(root, ivf_min_rows=1000)
    kw = first.keyword_search(["alpha", "delta"], ALL, 20, 0.0)
    vec = first.vector_search(vecs[7], "s", ALL, 10, 0.0)
    assert first.snapshot_builds == 0  # the fixture's build was saved; this object only mapped it

    reopened = LocalSearchIndex(root, ivf_min_rows=1000)
    snap = reopened.snapshot()
    space = snap.spaces["s"]
    assert reopened.snapshot_builds == 0
    assert isinstance(space.matrix, np.memmap) and isinstance(space.codes, np.memmap)
    assert isinstance(snap.post_rows, np.memmap)
    assert space.partition is not None and space.partition.lists > 1
    assert reopened.keyword_search(["alpha", "delta"], ALL, 20, 0.0) == kw
    assert reopened.vector_search(vecs[7], "s", ALL, 10, 0.0) == vec
    assert vec[0].chunk_id == "c7"


def test_the_building_process_maps_the_matrix_it_streamed_to_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vecs = clustered(np.random.default_rng(4), 400)
    on_disk = LocalSearchIndex(tmp_path / "a")
    in_ram = LocalSearchIndex(tmp_path / "b", persist_snapshots=False)
    fill(on_disk, vecs)
    fill(in_ram, vecs)
    assert isinstance(on_disk.snapshot().spaces["s"].matrix, np.memmap)
    assert not isinstance(in_ram.snapshot().spaces["s"].matrix, np.memmap)
    assert on_disk.snapshot_builds == in_ram.snapshot_builds == 1
    for q in vecs[:20]:
        assert on_disk.vector_search(q, "s", ALL, 5, 0.0) == in_ram.vector_search(q, "s", ALL, 5, 0.0)
    assert on_disk.keyword_search(["beta"], ALL, 50, 0.0) == in_ram.keyword_search(["beta"], ALL, 50, 0.0)
    # stored vectors come back exactly from the mapped file, also after its pages were released
    got = on_disk.vectors(["c0", "c399"], "s")
    np.testing.assert_array_equal(got["c399"], vecs[399])
    space = on_disk.snapshot().spaces["s"]
    rows = np.arange(400)[::-1]
    expected = np.array(space.matrix[rows])
    np.testing.assert_array_equal(space.take(rows), expected)
    assert space._taken == 0  # a matrix this small stays mapped: never released, nothing counted
    monkeypatch.setattr(_snapshot, "_KEEP_MAPPED_BYTES", 0)  # as if it were larger than the bound
    for _ in range(7):  # 2,800 rows: past the release threshold twice (at 1,200 and 2,400), 400 counted since
        np.testing.assert_array_equal(space.take(rows), expected)
    assert space._taken == 400


def test_the_ivf_first_pass_finds_the_exact_neighbours(built: tuple[Path, np.ndarray]) -> None:
    root, vecs = built
    ivf_index = LocalSearchIndex(root, ivf_min_rows=1000)
    exact = LocalSearchIndex(root, ivf_min_rows=10**9, persist_snapshots=False)
    assert exact.snapshot().spaces["s"].partition is None
    rng = np.random.default_rng(5)
    queries = vecs[rng.integers(0, len(vecs), 40)] + 0.05 * rng.standard_normal((40, DIM), dtype=np.float32)
    found = 0
    for q in queries:
        got = {h.chunk_id for h in ivf_index.vector_search(q, "s", ALL, 10, 0.0)}
        want = {h.chunk_id for h in exact.vector_search(q, "s", ALL, 10, 0.0)}
        found += len(got & want)
    assert found / 400 >= 0.95


def test_a_filter_the_probed_lists_cannot_satisfy_falls_back_to_an_exact_scan(built: tuple[Path, np.ndarray]) -> None:
    root, vecs = built
    ivf_index = LocalSearchIndex(root, ivf_min_rows=1000)
    exact = LocalSearchIndex(root, ivf_min_rows=10**9, persist_snapshots=False)
    one_item = SearchFilter(knowledge_ids=("k2",))  # 500 rows; 100 hits want 400 candidates, more than the
    # probed lists (~3/8 of the rows) hold of them, and more than 4x as many lists is every list: an exact scan
    for q in vecs[:: len(vecs) // 10]:
        got = ivf_index.vector_search(q, "s", one_item, 100, 0.0)
        assert len(got) == 100
        assert got == exact.vector_search(q, "s", one_item, 100, 0.0)


def test_top_with_a_sampled_cut_equals_a_full_sort() -> None:
    rng = np.random.default_rng(0)
    for n in (40_000, 200_000):
        for k in (1, 30, 500):
            for gone in (0.0, 0.5, 0.9995):
                scores = rng.standard_normal(n).astype(np.float32)
                scores[::5] = np.round(scores[::5], 1)  # many ties
                scores[rng.random(n) < gone] = -np.inf
                finite = np.flatnonzero(np.isfinite(scores))
                expected = finite[np.lexsort((finite, -scores[finite]))][:k]
                np.testing.assert_array_equal(top(scores, k), expected)


def test_postings_built_in_place_equal_np_unique() -> None:
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 30, 500)
    terms = rng.integers(0, 80, int(lengths.sum())).astype(np.int32)
    indptr, rows, tf = csc_postings(terms, lengths, 80)
    n = len(lengths)
    keys, counts = np.unique(terms.astype(np.int64) * n + np.repeat(np.arange(n), lengths), return_counts=True)
    np.testing.assert_array_equal(rows, (keys % n).astype(np.int32))
    np.testing.assert_array_equal(tf, counts.astype(np.float32))
    np.testing.assert_array_equal(np.diff(indptr), np.bincount(keys // n, minlength=80))
