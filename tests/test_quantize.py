"""Int8 vectors in the embedded index: quantiser bounds, recall and order after exact rescoring, snapshot format and
size, and float32 snapshots of the previous format still opening as they are."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.index.local import LocalSearchIndex
from ragstep.models import Chunk
from ragstep.ports import SearchFilter
from ragstep.retrieval.quantize import approx_scores, fit

ALL = SearchFilter()


def unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    m = rng.standard_normal((n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def filled(root: Path, vecs: np.ndarray, **kw: object) -> LocalSearchIndex:
    idx = LocalSearchIndex(root, **kw)  # type: ignore[arg-type]
    half = len(vecs) // 4  # k0 is a quarter: filtering by it takes the selective path
    for k, part in enumerate((range(half), range(half, len(vecs)))):
        chunks = [Chunk(id=f"c{i}", knowledge_id=f"k{k}", knowledge_base_id="kb", content=f"t {i}") for i in part]
        idx.replace_knowledge(f"k{k}", chunks, vecs[part.start : part.stop], "s")
    return idx


def test_round_trip_is_within_half_a_step_and_clips_outliers() -> None:
    rng = np.random.default_rng(1)
    m = rng.standard_normal((4000, 48)).astype(np.float32)
    m[7, 3] = 40.0  # an outlier: clipped, so it does not widen dimension 3's step for everyone else
    q = fit(m)
    codes = q.encode(m)
    assert codes.dtype == np.int8 and codes.shape == m.shape
    back = q.decode(codes)
    hi = q.offset + 255 * q.step
    inside = (m >= q.offset) & (m <= hi)
    assert inside.mean() > 0.99
    err = np.abs(back - m)
    assert np.all(err[inside] <= (q.step / 2 + 1e-6)[np.nonzero(inside)[1]])
    assert back[7, 3] == pytest.approx(hi[3], rel=1e-5)  # clipped to the top of the range
    assert q.step[3] < 10 / 255  # the percentile range, not min/max
    # A constant dimension still decodes to its value.
    const = np.ones((10, 2), dtype=np.float32)
    assert fit(const).decode(fit(const).encode(const)) == pytest.approx(const)
    # The linear form the scan uses equals decoding then multiplying.
    v = rng.standard_normal(48).astype(np.float32)
    w, bias = q.query_weights(v)
    out = np.empty(len(codes), dtype=np.float32)
    approx_scores(codes, w, bias, out, block=333)  # a block size that does not divide the rows
    assert out == pytest.approx(back @ v, abs=1e-3)
    with pytest.raises(ValueError, match="shape"):
        fit(np.zeros((0, 4)))


def test_recall_at_10_against_exact_on_a_seeded_random_set(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    vecs = unit(rng, 6000, 64)
    idx = filled(tmp_path, vecs, persist_snapshots=False)
    assert idx.snapshot().spaces["s"].codes is not None
    queries = unit(rng, 50, 64)
    found = 0
    for q in queries:
        exact = set(np.argsort(-(vecs @ q))[:10].tolist())
        found += len(exact & {int(h.chunk_id[1:]) for h in idx.vector_search(q, "s", ALL, 10, -1.0)})
    assert found / (10 * len(queries)) >= 0.99


def test_rescored_hits_come_in_the_exact_order_with_exact_scores(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vecs = unit(rng, 3000, 32)
    quantised = filled(tmp_path / "q", vecs, vector_storage="int8", parallel_rows=1000)  # split scan too
    exact = filled(tmp_path / "f", vecs, vector_storage="float32")
    only_k0 = SearchFilter(knowledge_ids=("k0",))
    for q in unit(rng, 20, 32):
        for flt, threshold in ((ALL, -1.0), (only_k0, -1.0), (ALL, 0.3)):
            got = quantised.vector_search(q, "s", flt, 10, threshold)
            want = exact.vector_search(q, "s", flt, 10, threshold)
            assert [h.chunk_id for h in got] == [h.chunk_id for h in want]
            assert [h.score for h in got] == pytest.approx([h.score for h in want], abs=1e-6)


def test_int8_snapshot_reopens_and_its_vector_part_is_under_30_percent(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    vecs = unit(rng, 2000, 384)
    idx = filled(tmp_path, vecs)
    q = vecs[5]
    first = idx.vector_search(q, "s", ALL, 10, 0.0)
    (gen,) = (tmp_path / "snapshots").glob("gen-*")
    meta = json.loads((gen / "meta.json").read_text())
    assert meta["storage"] == {"s": "int8"}
    scanned = sum((gen / f"space0_{p}.npy").stat().st_size for p in ("codes", "qoffset", "qstep"))
    assert scanned / (gen / "space0_matrix.npy").stat().st_size <= 0.30
    reopened = LocalSearchIndex(tmp_path)
    sp = reopened.snapshot().spaces["s"]
    assert isinstance(sp.codes, np.memmap) and isinstance(sp.matrix, np.memmap)  # mapped, not rebuilt
    assert reopened.vector_search(q, "s", ALL, 10, 0.0) == first


def test_a_float32_snapshot_of_the_previous_format_opens_without_a_rebuild(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vecs = unit(rng, 500, 16)
    filled(tmp_path, vecs, vector_storage="float32").snapshot()
    (gen,) = (tmp_path / "snapshots").glob("gen-*")
    # Exactly what the previous version wrote: the same files, format 1, no storage map.
    meta = json.loads((gen / "meta.json").read_text())
    meta["format"] = "bm25-per-kb-1"
    del meta["storage"]
    (gen / "meta.json").write_text(json.dumps(meta))
    idx = LocalSearchIndex(tmp_path, vector_storage="int8")
    sp = idx.snapshot().spaces["s"]
    assert sp.codes is None and isinstance(sp.matrix, np.memmap)  # loaded as it is (a rebuild would quantise)
    q = rng.standard_normal(16).astype(np.float32)
    sims = vecs @ (q / np.linalg.norm(q))
    assert [h.chunk_id for h in idx.vector_search(q, "s", ALL, 5, -1.0)] == [f"c{i}" for i in np.argsort(-sims)[:5]]
    # The next write rebuilds in the configured storage.
    idx.delete_knowledge(["k0"])
    assert idx.snapshot().spaces["s"].codes is not None
