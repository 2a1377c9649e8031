"""The sign-bit first pass (:mod:`ragstep.retrieval.signs`): distances equal to a plain bit count, the candidate cut,
the calibration on real embedding vectors, and the local index using it between ``signs.MIN_ROWS`` rows and the IVF
threshold with the exact neighbours found, its arrays saved in the snapshot (an older snapshot without them scans
every code)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.bench.vectors import tiled
from ragstep.models import Chunk
from ragstep.ports import SearchFilter
from ragstep.retrieval import signs
from ragstep.retrieval.quantize import fit


def unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_distances_count_the_differing_bits_of_rows_and_query_with_a_padded_last_word() -> None:
    rng = np.random.default_rng(0)
    m = unit(rng.standard_normal((300, 100)))  # 100 dims: two words, the second padded
    quantizer = fit(m)
    codes = quantizer.encode(m)
    sc = signs.encode(codes, quantizer)
    assert sc.words.shape == (2, 300) and sc.words.dtype == np.uint64
    q = unit(rng.standard_normal((1, 100)))[0]
    dist = np.empty(300, dtype=np.uint16)
    sc.distances(sc.query_words(q), 0, 300, dist)
    threshold = np.rint(codes.mean(axis=0, dtype=np.float64)).astype(np.int8)
    expected = ((codes > threshold) != (q > sc.centre)).sum(axis=1)
    assert np.array_equal(dist, expected)
    part = np.empty(50, dtype=np.uint16)
    sc.distances(sc.query_words(q), 100, 150, part)
    assert np.array_equal(part, expected[100:150])


def test_nearest_keeps_ties_at_the_cut_and_never_a_row_the_mask_excludes() -> None:
    dist = np.array([5, 1, 3, 3, 3, 0, 9, 2], dtype=np.uint16)
    assert nearest_list(dist, None, 3) == [1, 5, 7]
    assert nearest_list(dist, None, 4) == [1, 2, 3, 4, 5, 7]  # the three rows at distance 3 tie for the 4th place
    allowed = np.array([True, False, True, True, False, False, True, True])
    assert nearest_list(dist, allowed, 2) == [2, 3, 7]
    assert nearest_list(dist, allowed, 100) == [0, 2, 3, 6, 7]  # fewer allowed rows than asked: all of them


def nearest_list(dist: np.ndarray, allowed: np.ndarray | None, count: int) -> list[int]:
    return signs.nearest(dist.copy(), allowed, count).tolist()


@pytest.mark.parametrize(
    ("corpus", "queries", "used"),
    [
        ("msmarco-5k/corpus.emb.npy", "msmarco-5k/queries.emb.npy", True),  # MiniLM
        ("msmarco-5k/corpus.e5.npy", "msmarco-5k/queries.e5.npy", True),
        # e5 on a small Chinese set: flat scores, sign bits rank neighbours far down: every code is scanned instead
        ("cmrc2018-zh/corpus.e5.npy", "cmrc2018-zh/queries.e5.npy", False),
    ],
)
def test_the_calibrated_candidates_hold_the_exact_neighbours_of_real_queries(
    bench_dir: Path, corpus: str, queries: str, used: bool
) -> None:
    m, qs = unit(np.load(bench_dir / corpus)), unit(np.load(bench_dir / queries)[:50])
    quantizer = fit(m)
    sc = signs.encode(quantizer.encode(m), quantizer)
    assert (sc.share <= signs.MAX_SHARE) == used
    if not used:
        return
    # The share alone, without the 2,000-row floor that would cover these 5,000-row sets: MiniLM 1.000, e5 0.986
    # (its calibration, on the index's own rows as queries, is a little optimistic for e5's real queries)
    count = int(len(m) * sc.share)
    truth = np.argsort(-(m @ qs.T), axis=0)[:10].T
    found = sum(np.isin(truth[i], sc.candidates(q, None, count)).sum() for i, q in enumerate(qs))
    assert found / truth.size >= 0.98


def fill(idx: LocalSearchIndex, m: np.ndarray, items: int = 8) -> None:
    for k, part in enumerate(np.array_split(np.arange(len(m)), items)):
        chunks = [Chunk(id=f"c{i}", knowledge_id=f"k{k}", knowledge_base_id="kb", content=f"v{i}") for i in part]
        idx.replace_knowledge(f"k{k}", chunks, m[part], "s")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    from conftest import SHARED_BENCH

    if not SHARED_BENCH.is_dir():
        pytest.skip(f"benchmark sets not found at {SHARED_BENCH}")
    rng = np.random.default_rng(0)
    m = tiled(np.load(SHARED_BENCH / "msmarco-5k/corpus.emb.npy"), signs.MIN_ROWS + 4000, rng)
    root = tmp_path_factory.mktemp("signs")
    idx = LocalSearchIndex(root)
    fill(idx, m)
    idx.snapshot()
    return root, m


def test_the_index_finds_the_exact_neighbours_through_the_sign_pass(built: tuple[Path, np.ndarray]) -> None:
    root, m = built
    idx = LocalSearchIndex(root)
    sp = idx.snapshot().spaces["s"]
    assert sp.partition is None and sp.signs is not None and sp.signs.share <= signs.MAX_SHARE
    exact = LocalSearchIndex(root, vector_storage="float32")
    qs = tiled(m[::997][:24], 24, np.random.default_rng(1))  # near rows of the index, not on them
    most = SearchFilter(knowledge_ids=tuple(f"k{k}" for k in range(1, 8)))  # 7 of 8 items: still the full pass
    found = 0
    for q in qs:
        got = [h.chunk_id for h in idx.vector_search(q, "s", SearchFilter(), 10, -1.0)]
        want = [h.chunk_id for h in exact.vector_search(q, "s", SearchFilter(), 10, -1.0)]
        found += len(set(got) & set(want))
        filtered = idx.vector_search(q, "s", most, 10, -1.0)
        assert len(filtered) == 10
        assert all(int(h.chunk_id[1:]) >= len(m) // 8 for h in filtered)  # nothing of k0
    assert found / (10 * len(qs)) >= 0.99


def test_the_sign_codes_are_saved_with_the_snapshot_and_an_older_snapshot_scans_every_code(
    built: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    root = tmp_path / "copy"
    shutil.copytree(built[0], root)
    m = built[1]
    gen = next((root / "snapshots").glob("gen-*"))
    meta = json.loads((gen / "meta.json").read_text(encoding="utf-8"))
    assert set(meta["signs"]) == {"s"}
    saved = LocalSearchIndex(root).snapshot().spaces["s"].signs
    assert saved is not None and isinstance(saved.words, np.memmap)
    # A folder written before the sign codes existed: no files, no meta entry
    del meta["signs"]
    (gen / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    for name in ("space0_signs.npy", "space0_signcentre.npy"):
        (gen / name).unlink()
    older = LocalSearchIndex(root)
    assert older.snapshot().spaces["s"].signs is None
    q = m[123]
    # Exact, as before the sign codes: the same hits as the float32 product, and nothing made at query time.
    hits = older.vector_search(q, "s", SearchFilter(), 5, -1.0)
    assert [h.chunk_id for h in hits] == [f"c{i}" for i in np.argsort(-(m @ q), kind="stable")[:5]]
    assert older.snapshot().spaces["s"].signs is None
