"""The embedded search index: scoring arithmetic, filters, persistence, crash safety and concurrent readers."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ragstep.adapters.index.local import BM25_B, BM25_K1, LocalSearchIndex
from ragstep.errors import ConflictError, InputError, StorageError
from ragstep.models import Chunk, ChunkType
from ragstep.ports import SearchFilter

ALL = SearchFilter()
REPO = Path(__file__).resolve().parents[1]


def chunk(cid: str, content: str, kid: str = "k1", kb: str = "kb1", **kw: object) -> Chunk:
    return Chunk(id=cid, knowledge_id=kid, knowledge_base_id=kb, content=content, **kw)


def test_bm25_scores_match_the_formula(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge("k1", [chunk("d0", "apple banana"), chunk("d1", "apple apple cherry"), chunk("d2", "durian")])
    hits = idx.keyword_search(["apple"], ALL, 10, 0.0)
    n, df, avgdl = 3, 2, (2 + 3 + 1) / 3
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))

    def bm25(tf: int, dl: int) -> float:
        return idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * dl / avgdl))

    assert [h.chunk_id for h in hits] == ["d1", "d0"]
    assert hits[0].raw_score == pytest.approx(bm25(2, 3), rel=1e-5)
    assert hits[1].raw_score == pytest.approx(bm25(1, 2), rel=1e-5)
    # normalised to the best hit
    assert hits[0].score == pytest.approx(1.0)
    assert hits[1].score == pytest.approx(bm25(1, 2) / bm25(2, 3), rel=1e-5)
    # the threshold applies to the normalised score
    assert [h.chunk_id for h in idx.keyword_search(["apple"], ALL, 10, 0.9)] == ["d1"]
    assert idx.keyword_search(["nothing"], ALL, 10, 0.0) == []
    assert idx.keyword_search([], ALL, 10, 0.0) == []


def test_chinese_and_english_use_the_same_tokenizer(tmp_path: Path) -> None:
    from ragstep.retrieval.text import query_terms

    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge(
        "k1",
        [
            chunk("zh", "中华人民共和国的首都是北京，北京是政治中心。"),
            chunk("en", "Paris is the capital of France."),
        ],
    )
    assert idx.keyword_search(query_terms("北京是哪个国家的首都"), ALL, 5, 0.0)[0].chunk_id == "zh"
    assert idx.keyword_search(query_terms("What is the CAPITAL of France?"), ALL, 5, 0.0)[0].chunk_id == "en"
    # cut_for_search emits sub-words, so the short form finds the long one
    assert idx.keyword_search(query_terms("共和国"), ALL, 5, 0.0)[0].chunk_id == "zh"


def random_unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    m = rng.standard_normal((n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_vector_search_is_exact_and_respects_filters(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    idx = LocalSearchIndex(tmp_path)
    vecs = random_unit(rng, 300, 16)
    for k in range(3):
        part = range(k * 100, (k + 1) * 100)
        idx.replace_knowledge(
            f"k{k}",
            [chunk(f"c{i}", f"text {i}", kid=f"k{k}", kb=f"kb{k % 2}") for i in part],
            vecs[k * 100 : (k + 1) * 100] * 3.0,  # not unit: the index normalises
            "space",
        )
    q = rng.standard_normal(16).astype(np.float32)
    qn = q / np.linalg.norm(q)
    sims = vecs @ qn
    expected = [f"c{i}" for i in np.argsort(-sims)[:10]]
    hits = idx.vector_search(q, "space", ALL, 10, -1.0)
    assert [h.chunk_id for h in hits] == expected
    assert hits[0].score == pytest.approx(float(sims.max()), abs=1e-5)
    # a selective filter (one knowledge item) scores only its rows, with the same answer as brute force
    sel = np.arange(100, 200)
    expected_k1 = [f"c{sel[i]}" for i in np.argsort(-sims[sel])[:5]]
    assert [h.chunk_id for h in idx.vector_search(q, "space", SearchFilter(knowledge_ids=("k1",)), 5, -1.0)] == (
        expected_k1
    )
    # knowledge base filter and threshold
    kb1 = idx.vector_search(q, "space", SearchFilter(knowledge_base_ids=("kb1",)), 500, 0.0)
    assert kb1 and all(100 <= int(h.chunk_id[1:]) < 200 for h in kb1)
    assert all(h.score >= 0.0 for h in kb1)
    assert idx.vector_search(q, "other-space", ALL, 5, 0.0) == []
    with pytest.raises(InputError, match="16"):
        idx.vector_search(np.ones(8), "space", ALL, 5, 0.0)


def test_filters_by_tag_type_and_enabled(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge(
        "k1",
        [
            chunk("a", "shared words alpha", tag_id="t1"),
            chunk("b", "shared words beta", tag_id="t2", chunk_type=ChunkType.TABLE_SUMMARY),
            chunk("c", "shared words gamma", tag_id="t1", enabled=False),
        ],
    )

    def ids(flt: SearchFilter) -> set[str]:
        return {h.chunk_id for h in idx.keyword_search(["shared"], flt, 10, 0.0)}

    assert ids(ALL) == {"a", "b"}  # disabled chunks are not searchable
    assert ids(SearchFilter(enabled_only=False)) == {"a", "b", "c"}
    assert ids(SearchFilter(tag_ids=("t1",))) == {"a"}
    assert ids(SearchFilter(chunk_types=(ChunkType.TABLE_SUMMARY,))) == {"b"}
    assert ids(SearchFilter(knowledge_base_ids=("nope",))) == set()
    assert idx.set_enabled(["c"], True) == 1
    assert ids(SearchFilter(tag_ids=("t1",))) == {"a", "c"}
    assert idx.fetch(["c"])["c"].enabled is True


def test_replace_update_and_delete(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge("k1", [chunk("k1-0", "old version text"), chunk("k1-1", "more old text")])
    idx.replace_knowledge("k2", [chunk("k2-0", "other document text", kid="k2", kb="kb2")])
    idx.replace_knowledge("k1", [chunk("k1-0", "new version text")])  # update: replaces, never duplicates
    assert idx.stats().chunks == 2
    assert {h.chunk_id for h in idx.keyword_search(["text"], ALL, 10, 0.0)} == {"k1-0", "k2-0"}
    assert idx.fetch(["k1-0"])["k1-0"].content == "new version text"
    assert idx.keyword_search(["old"], ALL, 10, 0.0) == []
    assert idx.delete_knowledge(["k1"]) == 1
    assert idx.fetch(["k1-0"]) == {}
    assert idx.delete_knowledge_base("kb2") == 1
    assert idx.stats().chunks == 0
    assert idx.keyword_search(["text"], ALL, 10, 0.0) == []


def test_bad_writes_are_refused_and_change_nothing(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge("k1", [chunk("x", "kept content")], np.ones((1, 4)), "s")
    before = idx.stats()
    with pytest.raises(ConflictError, match="already used"):
        idx.replace_knowledge("k2", [chunk("x", "steals the id", kid="k2")])
    with pytest.raises(InputError, match="4-dimensional"):
        idx.replace_knowledge("k3", [chunk("y", "wrong dims", kid="k3")], np.ones((1, 8)), "s")
    with pytest.raises(InputError, match="NaN"):
        idx.replace_knowledge("k3", [chunk("y", "nan", kid="k3")], np.full((1, 4), np.nan), "s")
    with pytest.raises(InputError, match="embedding space"):
        idx.replace_knowledge("k3", [chunk("y", "no space", kid="k3")], np.ones((1, 4)), None)
    with pytest.raises(InputError, match="belongs to knowledge"):
        idx.replace_knowledge("k3", [chunk("y", "wrong owner", kid="k9")])
    with pytest.raises(InputError, match="expected 2 vectors"):
        idx.replace_knowledge("k3", [chunk("y", "a", kid="k3"), chunk("z", "b", kid="k3")], np.ones((1, 4)), "s")
    assert idx.stats() == before
    assert idx.keyword_search(["kept"], ALL, 5, 0.0)[0].chunk_id == "x"


def test_survives_restart_and_uses_the_disk_snapshot(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    idx = LocalSearchIndex(tmp_path)
    vecs = random_unit(rng, 20, 8)
    idx.replace_knowledge("k1", [chunk(f"c{i}", f"persistent words {i}") for i in range(20)], vecs, "s")
    first_kw = idx.keyword_search(["persistent"], ALL, 5, 0.0)
    first_vec = idx.vector_search(vecs[3], "s", ALL, 3, 0.0)
    snapshots = list((tmp_path / "snapshots").glob("gen-*"))
    assert len(snapshots) == 1

    reopened = LocalSearchIndex(tmp_path)
    assert reopened.keyword_search(["persistent"], ALL, 5, 0.0) == first_kw
    assert reopened.vector_search(vecs[3], "s", ALL, 3, 0.0) == first_vec
    assert first_vec[0].chunk_id == "c3"

    # a damaged snapshot cache is ignored and rebuilt from SQLite, never trusted
    (snapshots[0] / "meta.json").write_text("{not json")
    third = LocalSearchIndex(tmp_path)
    assert third.keyword_search(["persistent"], ALL, 5, 0.0) == first_kw
    shutil.rmtree(tmp_path / "snapshots")
    assert LocalSearchIndex(tmp_path, persist_snapshots=False).vector_search(vecs[3], "s", ALL, 3, 0.0) == first_vec


def test_another_process_sees_writes_without_restart(tmp_path: Path) -> None:
    reader = LocalSearchIndex(tmp_path)
    writer = LocalSearchIndex(tmp_path)
    writer.replace_knowledge("k1", [chunk("a", "first words")])
    assert [h.chunk_id for h in reader.keyword_search(["first"], ALL, 5, 0.0)] == ["a"]
    writer.replace_knowledge("k1", [chunk("a", "second words")])
    assert reader.keyword_search(["first"], ALL, 5, 0.0) == []
    assert [h.chunk_id for h in reader.keyword_search(["second"], ALL, 5, 0.0)] == ["a"]


CRASH_SCRIPT = """
import os, sys
sys.path.insert(0, sys.argv[2])
from pathlib import Path
from ragstep.adapters.index.local import LocalSearchIndex
idx = LocalSearchIndex(Path(sys.argv[1]))
conn = idx._conn()
conn.execute("BEGIN IMMEDIATE")
conn.execute("DELETE FROM chunks WHERE knowledge_id = 'k1'")
conn.execute("INSERT INTO chunks (id, knowledge_id, knowledge_base_id, chunk_type, tokens, doc)"
             " VALUES ('half', 'k1', 'kb1', 'text', 'half', '{}')")
os.kill(os.getpid(), 9)  # the process dies mid-transaction, as on a crash or a Lambda timeout
"""


def test_a_crash_mid_write_keeps_what_was_committed(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge("k1", [chunk("a", "committed words"), chunk("b", "more committed words")])
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(tmp_path), str(REPO / "shared")], capture_output=True, timeout=60
    )
    assert proc.returncode == -9
    fresh = LocalSearchIndex(tmp_path)
    assert fresh.stats().chunks == 2
    assert {h.chunk_id for h in fresh.keyword_search(["committed"], ALL, 5, 0.0)} == {"a", "b"}
    assert fresh.fetch(["half"]) == {}
    fresh.replace_knowledge("k2", [chunk("c", "still writable", kid="k2")])  # no stale lock left behind
    assert fresh.stats().chunks == 3


def test_concurrent_readers_see_whole_versions(tmp_path: Path) -> None:
    """Readers in threads never see half of a replace: every answer comes from one committed version."""
    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge("k1", [chunk(f"c{i}", f"common v0 {i}") for i in range(10)])
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        local = LocalSearchIndex(tmp_path)
        try:
            while not stop.is_set():
                hits = local.keyword_search(["common"], ALL, 50, 0.0)
                chunks = local.fetch([h.chunk_id for h in hits])
                versions = {c.content.split()[1] for c in chunks.values()}
                assert len(hits) == 10 and len(versions) <= 2, (len(hits), versions)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for v in range(1, 15):
        idx.replace_knowledge("k1", [chunk(f"c{i}", f"common v{v} {i}") for i in range(10)])
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, errors[0]
    final = idx.fetch([f"c{i}" for i in range(10)])
    assert {c.content.split()[1] for c in final.values()} == {"v14"}


def test_knowledge_chunks_come_in_document_order(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge("k1", [chunk(f"c{i}", f"part {i}", chunk_index=i) for i in (2, 0, 1)])
    assert [c.chunk_index for c in idx.knowledge_chunks("k1", 10)] == [0, 1, 2]
    assert len(idx.knowledge_chunks("k1", 2)) == 2


def test_unusable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="writable folder"):
        LocalSearchIndex(blocker / "index")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a second process")
def test_a_second_process_reads_while_this_one_writes(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge("k1", [chunk("a", "crossprocess words")])
    script = (
        "import sys; sys.path.insert(0, sys.argv[2]);"
        "from pathlib import Path; from ragstep.adapters.index.local import LocalSearchIndex;"
        "from ragstep.ports import SearchFilter;"
        "idx = LocalSearchIndex(Path(sys.argv[1]));"
        "n = [len(idx.keyword_search(['crossprocess'], SearchFilter(), 10, 0.0)) for _ in range(200)];"
        "assert min(n) >= 1, n; print(max(n))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path), str(REPO / "shared")], stdout=subprocess.PIPE, text=True
    )
    for v in range(20):
        idx.replace_knowledge(f"w{v}", [chunk(f"w{v}", "crossprocess extra", kid=f"w{v}")])
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert 1 <= int(out) <= 21


def test_parallel_matvec_gives_the_same_ranking(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vecs = random_unit(rng, 500, 32)
    serial = LocalSearchIndex(tmp_path / "a")
    split = LocalSearchIndex(tmp_path / "b", parallel_rows=10)  # every product split into row blocks
    for idx in (serial, split):
        idx.replace_knowledge("k", [chunk(f"c{i}", f"t {i}", kid="k") for i in range(500)], vecs, "s")
    q = rng.standard_normal(32)
    expected = serial.vector_search(q, "s", ALL, 20, -1.0)
    got = split.vector_search(q, "s", ALL, 20, -1.0)
    assert [h.chunk_id for h in got] == [h.chunk_id for h in expected]
    assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=1e-6)


def test_stored_vectors_are_served_by_chunk_id(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    vecs = np.array([[3.0, 4.0], [1.0, 0.0]], dtype=np.float32)
    idx.replace_knowledge("k1", [chunk("a", "x"), chunk("b", "y")], vecs, "s")
    idx.replace_knowledge("k2", [chunk("c", "z", kid="k2")])  # no vector
    got = idx.vectors(["a", "b", "c", "missing"], "s")
    assert set(got) == {"a", "b"}
    assert got["a"] == pytest.approx([0.6, 0.8])  # stored normalised
    assert idx.vectors(["a"], "other") == {}


def test_two_vector_spaces_and_unembedded_rows_in_one_snapshot(tmp_path: Path) -> None:
    """The snapshot is built by streaming rows: each space gets its own matrix, in row order, beside chunks that
    have no vector at all, and every search sees the same rows after a rebuild from SQLite."""
    rng = np.random.default_rng(7)
    idx = LocalSearchIndex(tmp_path, persist_snapshots=False)
    small, large = random_unit(rng, 6, 4), random_unit(rng, 5, 16)
    idx.replace_knowledge("ka", [chunk(f"a{i}", f"alpha words {i}", kid="ka") for i in range(6)], small, "small")
    idx.replace_knowledge("kn", [chunk(f"n{i}", f"alpha plain {i}", kid="kn") for i in range(3)], None, None)
    idx.replace_knowledge("kb", [chunk(f"b{i}", f"beta words {i}", kid="kb") for i in range(5)], large, "large")
    for i in range(6):
        assert idx.vector_search(small[i], "small", ALL, 1, 0.0)[0].chunk_id == f"a{i}"
    for i in range(5):
        assert idx.vector_search(large[i], "large", ALL, 1, 0.0)[0].chunk_id == f"b{i}"
    assert {h.chunk_id for h in idx.keyword_search(["alpha"], ALL, 20, 0.0)} == {f"a{i}" for i in range(6)} | {
        "n0",
        "n1",
        "n2",
    }
    assert set(idx.vectors(["a2", "b4", "n1"], "small")) == {"a2"}
    np.testing.assert_array_equal(idx.vectors(["b4"], "large")["b4"], large[4].astype(np.float32))
    reopened = LocalSearchIndex(tmp_path, persist_snapshots=False)
    assert reopened.keyword_search(["words"], ALL, 20, 0.0) == idx.keyword_search(["words"], ALL, 20, 0.0)


def test_a_stored_vector_of_the_wrong_width_is_a_clear_error(tmp_path: Path) -> None:
    import sqlite3

    rng = np.random.default_rng(8)
    LocalSearchIndex(tmp_path).replace_knowledge(
        "k1", [chunk("c0", "one"), chunk("c1", "two")], random_unit(rng, 2, 4), "s"
    )
    with sqlite3.connect(tmp_path / "index.sqlite") as conn:  # damage one row behind the index's back
        conn.execute("UPDATE chunks SET vector = ? WHERE id = 'c1'", (np.zeros(3, dtype="<f4").tobytes(),))
    shutil.rmtree(tmp_path / "snapshots", ignore_errors=True)
    with pytest.raises(StorageError, match="'c1' has a 3-dimension vector in space 's', whose others have 4"):
        LocalSearchIndex(tmp_path).keyword_search(["one"], ALL, 5, 0.0)


def test_keyword_scores_of_a_knowledge_base_ignore_the_others(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    idx.replace_knowledge(
        "a1",
        [
            chunk("a0", "apple banana", kid="a1", kb="A"),
            chunk("a1", "apple apple cherry", kid="a1", kb="A"),
            chunk("a2", "banana cherry durian", kid="a1", kb="A"),
            chunk("a3", "cherry", kid="a1", kb="A"),
        ],
    )
    in_a = SearchFilter(knowledge_base_ids=("A",))
    terms = ["apple", "cherry"]
    before = [(h.chunk_id, h.score, h.raw_score) for h in idx.keyword_search(terms, in_a, 10, 0.0)]
    by_item = [
        (h.chunk_id, h.raw_score) for h in idx.keyword_search(terms, SearchFilter(knowledge_ids=("a1",)), 10, 0.0)
    ]

    # A large, different corpus in B: every chunk has "cherry", none has "apple", all are much longer.
    filler = " ".join(f"word{i}" for i in range(40))
    idx.replace_knowledge("b1", [chunk(f"b{i}", f"cherry {filler} {i}", kid="b1", kb="B") for i in range(300)])
    after = [(h.chunk_id, h.score, h.raw_score) for h in idx.keyword_search(terms, in_a, 10, 0.0)]
    assert [c for c, _, _ in after] == [c for c, _, _ in before]
    assert [s for _, s, _ in after] == pytest.approx([s for _, s, _ in before], rel=1e-6)
    assert [r for _, _, r in after] == pytest.approx([r for _, _, r in before], rel=1e-6)
    # A search by knowledge item uses its knowledge base's statistics: the same raw scores.
    by_item_after = idx.keyword_search(terms, SearchFilter(knowledge_ids=("a1",)), 10, 0.0)
    assert [(h.chunk_id, h.raw_score) for h in by_item_after] == [(c, pytest.approx(r, rel=1e-6)) for c, r in by_item]
    # Each chunk of B is scored with B's statistics: N = df = 300 for "cherry", every chunk of B's average length.
    (b_best,) = idx.keyword_search(["cherry"], SearchFilter(knowledge_base_ids=("B",)), 1, 0.0)
    idf = math.log(1 + (300 - 300 + 0.5) / (300 + 0.5))
    assert b_best.raw_score == pytest.approx(idf * (BM25_K1 + 1) / (1 + BM25_K1), rel=1e-5)

    # And the statistics survive a restart (the snapshot on disk carries the per-knowledge-base norms).
    again = LocalSearchIndex(tmp_path)
    assert [(h.chunk_id, h.raw_score) for h in again.keyword_search(terms, in_a, 10, 0.0)] == [
        (c, pytest.approx(r, rel=1e-6)) for c, _, r in before
    ]


def _apple_kbs(idx: LocalSearchIndex) -> None:
    # A: small, "apple" in every chunk (a common term there); B: larger, "apple" in one chunk of eight (a rare one).
    idx.replace_knowledge(
        "a1", [chunk("a0", "apple pie", kid="a1", kb="A"), chunk("a1", "apple tart crust", kid="a1", kb="A")]
    )
    idx.replace_knowledge(
        "b1",
        [chunk("b0", "apple orchard harvest time", kid="b1", kb="B")]
        + [chunk(f"b{i}", f"pear plum fig {i}", kid="b1", kb="B") for i in range(1, 8)],
    )
    # C is never searched below: its chunks must not move the scores of a search over A and B.
    idx.replace_knowledge("c1", [chunk(f"c{i}", "apple " * 9 + str(i), kid="c1", kb="C") for i in range(30)])


def test_keyword_search_over_several_knowledge_bases_uses_their_joint_statistics(tmp_path: Path) -> None:
    idx = LocalSearchIndex(tmp_path)
    _apple_kbs(idx)
    both = SearchFilter(knowledge_base_ids=("A", "B"))
    hits = idx.keyword_search(["apple"], both, 10, 0.0)

    # One scale for A and B: N = 10 chunks, df("apple") = 3, the average length over both (C left out).
    lengths = {"a0": 2, "a1": 3, "b0": 4, **{f"b{i}": 4 for i in range(1, 8)}}
    n, df, avgdl = 10, 3, sum(lengths.values()) / 10
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))

    def bm25(dl: int) -> float:
        return idf * (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B + BM25_B * dl / avgdl))

    # Shorter chunks holding the term rank first, wherever they live (with per-knowledge-base statistics "apple"
    # weighed ~0.18 in A, where every chunk holds it, and ~1.8 in B, so b0 came first).
    assert [h.chunk_id for h in hits] == ["a0", "a1", "b0"]
    assert [h.raw_score for h in hits] == pytest.approx([bm25(2), bm25(3), bm25(4)], rel=1e-5)

    # The same scores as an index holding only A and B; the same from a process that maps the snapshot from disk
    # (its chunk lengths come from the postings); the same when the knowledge bases are named by their items.
    alone = LocalSearchIndex(tmp_path / "alone")
    _apple_kbs(alone)
    alone.delete_knowledge_base("C")
    expected = [(h.chunk_id, pytest.approx(h.raw_score, rel=1e-6)) for h in hits]
    assert [(h.chunk_id, h.raw_score) for h in alone.keyword_search(["apple"], ALL, 10, 0.0)] == expected
    reopened = LocalSearchIndex(tmp_path)
    assert [(h.chunk_id, h.raw_score) for h in reopened.keyword_search(["apple"], both, 10, 0.0)] == expected
    by_items = SearchFilter(knowledge_ids=("a1", "b1"))
    assert [(h.chunk_id, h.raw_score) for h in reopened.keyword_search(["apple"], by_items, 10, 0.0)] == expected

    # One knowledge base alone still scores with its own statistics (N = 2 and df = 2 in A).
    (a_best, _) = idx.keyword_search(["apple"], SearchFilter(knowledge_base_ids=("A",)), 10, 0.0)
    a_idf = math.log(1 + (2 - 2 + 0.5) / (2 + 0.5))
    assert a_best.raw_score == pytest.approx(a_idf * (BM25_K1 + 1) / (1 + BM25_K1 * (1 - BM25_B + BM25_B * 2 / 2.5)))


def test_bm25_statistics_of_index_parts_add_up_to_the_whole(tmp_path: Path) -> None:
    # The S3-snapshot index keeps one local index per knowledge base and scores each with the sum of their
    # statistics: that must rank exactly as one index holding both.
    from ragstep.retrieval.bm25 import joint

    whole = LocalSearchIndex(tmp_path / "whole")
    _apple_kbs(whole)
    parts = {kb: LocalSearchIndex(tmp_path / kb) for kb in "AB"}
    for kb, part in parts.items():
        _apple_kbs(part)
        for other in "ABC":
            if other != kb:
                part.delete_knowledge_base(other)
    flt = SearchFilter(knowledge_base_ids=("A", "B"))
    terms = ["apple", "fig", "missing"]
    stats = joint(p.bm25_stats(terms, flt) for p in parts.values())
    assert (stats.docs, stats.tokens, dict(stats.df)) == (10, 37, {"apple": 3, "fig": 7})
    assert stats == whole.bm25_stats(terms, flt)
    merged = sorted(
        (h for p in parts.values() for h in p.keyword_search(terms, flt, 10, 0.0, stats=stats)),
        key=lambda h: -h.raw_score,
    )
    expected = [(h.chunk_id, pytest.approx(h.raw_score, rel=1e-6)) for h in whole.keyword_search(terms, flt, 10, 0.0)]
    assert [(h.chunk_id, h.raw_score) for h in merged] == expected
