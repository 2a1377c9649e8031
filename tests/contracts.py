"""Behaviour every implementation of a storage port must show, local or AWS.

Not collected on its own (the file name does not start with ``test_``): a test module subclasses a contract
and provides its fixture, e.g. ``class TestLocalBlobStore(BlobStoreContract)`` with a ``blob_store`` fixture.

* :class:`BlobStoreContract` needs ``blob_store``: a fresh, empty :class:`~ragstep.ports.BlobStore`.
* :class:`HistoryStoreContract` needs ``make_history_store``: a factory
  ``(ttl_seconds: float | None = None, clock: Callable[[], float] | None = None) -> HistoryStore`` over fresh,
  empty storage (``clock=None`` means the real clock).
* :class:`CatalogStoreContract` needs ``catalog_store``: a fresh, empty :class:`~ragstep.ports.CatalogStore`.

Only the Protocol methods and the documented errors (``NotFoundError``, ``ConflictError``, ``InputError``) are
used here, so the same tests hold the S3/DynamoDB adapters to the same behaviour.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import pytest

from ragstep.errors import ConflictError, InputError, NotFoundError
from ragstep.models import (
    ChunkType,
    ImageInfo,
    Knowledge,
    KnowledgeBase,
    KnowledgeBaseType,
    MatchType,
    SearchResult,
    Turn,
)
from ragstep.ports import BlobStore, CatalogStore, HistoryStore

READER_THREADS = 8
READS_PER_THREAD = 25


def run_in_threads(fn: Callable[[int], Any], threads: int = READER_THREADS) -> list[Any]:
    """Run ``fn(i)`` for i in range(threads) concurrently; re-raises the first failure."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(fn, range(threads)))


class FakeClock:
    """A clock the test moves by hand, so TTL tests need no sleeping."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class HistoryFactory(Protocol):
    def __call__(self, ttl_seconds: float | None = None, clock: Callable[[], float] | None = None) -> HistoryStore: ...


# -- blobs ---------------------------------------------------------------------------------------------------

BAD_KEYS = {
    "empty": "",
    "absolute": "/etc/passwd",
    "parent segment": "a/../b",
    "only parent": "..",
    "empty segment": "a//b",
    "trailing slash": "a/",
    "backslash": "a\\b",
    "NUL": "a\0b",
    "too long": "k" * 1025,
}


def _key_of_length(n: int) -> str:
    """A valid key of exactly ``n`` ASCII characters, in segments short enough for any file system."""
    head = "/".join(["x" * 200] * ((n - 1) // 201))
    return f"{head}/{'y' * (n - len(head) - 1)}"


class BlobStoreContract:
    def test_round_trip(self, blob_store: BlobStore) -> None:
        data = bytes(range(256)) * 17
        uri = blob_store.put("docs/report.bin", data)
        assert isinstance(uri, str) and uri
        assert blob_store.get("docs/report.bin") == data
        assert blob_store.exists("docs/report.bin")

    def test_empty_blob_and_content_type(self, blob_store: BlobStore) -> None:
        blob_store.put("empty.json", b"", content_type="application/json")
        assert blob_store.get("empty.json") == b""
        assert blob_store.exists("empty.json")

    def test_unicode_key(self, blob_store: BlobStore) -> None:
        blob_store.put("文档/报告 2024.pdf", b"pdf")
        assert blob_store.get("文档/报告 2024.pdf") == b"pdf"
        assert blob_store.list("文档/") == ["文档/报告 2024.pdf"]

    def test_overwrite_replaces_whole_blob_and_leaves_no_temp_files(self, blob_store: BlobStore) -> None:
        blob_store.put("state/x.json", b"a much longer first version " * 100)
        blob_store.put("state/x.json", b"short")
        assert blob_store.get("state/x.json") == b"short"
        assert blob_store.list() == ["state/x.json"]
        assert blob_store.list("state/") == ["state/x.json"]

    def test_get_missing_names_the_key(self, blob_store: BlobStore) -> None:
        with pytest.raises(NotFoundError, match=r"nope/missing\.txt"):
            blob_store.get("nope/missing.txt")
        assert not blob_store.exists("nope/missing.txt")

    def test_delete(self, blob_store: BlobStore) -> None:
        blob_store.put("a/b.txt", b"x")
        blob_store.put("a/c.txt", b"y")
        blob_store.delete("a/b.txt")
        assert not blob_store.exists("a/b.txt")
        with pytest.raises(NotFoundError):
            blob_store.get("a/b.txt")
        assert blob_store.list() == ["a/c.txt"]

    def test_delete_missing_is_a_no_op(self, blob_store: BlobStore) -> None:
        blob_store.delete("never/was.txt")
        blob_store.put("k", b"1")
        blob_store.delete("k")
        blob_store.delete("k")
        assert blob_store.list() == []

    def test_list_by_prefix_is_sorted(self, blob_store: BlobStore) -> None:
        keys = ["b/2", "a/10", "a/2", "ab", "a/sub/x", "z", "a/1"]
        for key in keys:
            blob_store.put(key, key.encode())
        assert blob_store.list() == sorted(keys)
        assert blob_store.list("a/") == ["a/1", "a/10", "a/2", "a/sub/x"]
        assert blob_store.list("a") == ["a/1", "a/10", "a/2", "a/sub/x", "ab"]
        assert blob_store.list("a/1") == ["a/1", "a/10"]
        assert blob_store.list("a/sub/") == ["a/sub/x"]
        assert blob_store.list("nope/") == []
        assert blob_store.list("zz") == []

    @pytest.mark.parametrize("key", list(BAD_KEYS.values()), ids=list(BAD_KEYS))
    def test_bad_keys_are_rejected(self, blob_store: BlobStore, key: str) -> None:
        for call in (
            lambda: blob_store.put(key, b"x"),
            lambda: blob_store.get(key),
            lambda: blob_store.exists(key),
            lambda: blob_store.delete(key),
        ):
            with pytest.raises(InputError) as info:
                call()
            assert not isinstance(info.value, NotFoundError)
            assert info.value.message
        assert blob_store.list() == []

    def test_key_at_the_length_limit_is_fine(self, blob_store: BlobStore) -> None:
        key = _key_of_length(1024)
        assert len(key) == 1024
        blob_store.put(key, b"edge")
        assert blob_store.get(key) == b"edge"

    def test_concurrent_readers(self, blob_store: BlobStore) -> None:
        blobs = {f"c/{i:02d}.bin": bytes([i]) * (1000 + i) for i in range(20)}
        for key, data in blobs.items():
            blob_store.put(key, data)

        def read(_: int) -> None:
            for _ in range(READS_PER_THREAD // 5):
                assert blob_store.list("c/") == sorted(blobs)
                for key, data in blobs.items():
                    assert blob_store.get(key) == data

        run_in_threads(read)


# -- history -------------------------------------------------------------------------------------------------


def make_turn(session_id: str, created_at: float, query: str = "q", **extra: Any) -> Turn:
    return Turn(session_id=session_id, created_at=created_at, query=query, **extra)


class HistoryStoreContract:
    @pytest.fixture
    def history_store(self, make_history_store: HistoryFactory) -> HistoryStore:
        return make_history_store()

    def test_round_trip_with_references(self, history_store: HistoryStore) -> None:
        ref = SearchResult(
            id="c1",
            content="退货政策：30 天内可退。",
            knowledge_id="k1",
            knowledge_base_id="kb1",
            knowledge_title="FAQ",
            chunk_index=3,
            start_at=10,
            end_at=42,
            score=0.8734,
            match_type=MatchType.VECTOR,
            chunk_type=ChunkType.FAQ,
            sub_chunk_ids=["c1a", "c1b"],
            metadata={"page": 2, "tags": ["a", "b"], "nested": {"x": 1.5}},
            image_info=[ImageInfo(url="s3://b/i.png", caption="cap", ocr_text="ocr")],
        )
        turn = make_turn("s1", 1000.25, "怎么退货？", answer="30 天内。\nline two", references=[ref])
        history_store.append(turn)
        assert history_store.recent("s1") == [turn]

    def test_oldest_first_whatever_the_append_order(self, history_store: HistoryStore) -> None:
        turns = [make_turn("s", t, f"q{t}") for t in (3.0, 1.0, 2.0, 5.0, 4.0)]
        for turn in turns:
            history_store.append(turn)
        assert [t.created_at for t in history_store.recent("s")] == [1.0, 2.0, 3.0, 4.0, 5.0]

    def test_limit_keeps_the_newest(self, history_store: HistoryStore) -> None:
        for t in range(1, 13):
            history_store.append(make_turn("s", float(t), f"q{t}"))
        assert [t.query for t in history_store.recent("s", limit=3)] == ["q10", "q11", "q12"]
        assert len(history_store.recent("s")) == 10  # the default limit
        assert len(history_store.recent("s", limit=100)) == 12
        assert history_store.recent("s", limit=0) == []

    def test_same_timestamp_turns_are_all_kept(self, history_store: HistoryStore) -> None:
        a, b = make_turn("s", 5.0, "a"), make_turn("s", 5.0, "b")
        history_store.append(a)
        history_store.append(b)
        assert {t.turn_id for t in history_store.recent("s")} == {a.turn_id, b.turn_id}

    def test_appending_the_same_turn_twice_stores_it_once(self, history_store: HistoryStore) -> None:
        turn = make_turn("s", 1.0)
        history_store.append(turn)
        history_store.append(turn)  # a retried stage
        assert history_store.recent("s") == [turn]

    def test_sessions_are_isolated(self, history_store: HistoryStore) -> None:
        history_store.append(make_turn("alice", 1.0, "a1"))
        history_store.append(make_turn("bob", 2.0, "b1"))
        history_store.append(make_turn("alice", 3.0, "a2"))
        assert [t.query for t in history_store.recent("alice")] == ["a1", "a2"]
        assert [t.query for t in history_store.recent("bob")] == ["b1"]
        assert history_store.recent("carol") == []

    def test_delete_session_returns_the_count(self, history_store: HistoryStore) -> None:
        for t in range(4):
            history_store.append(make_turn("gone", float(t)))
        history_store.append(make_turn("kept", 1.0))
        assert history_store.delete_session("gone") == 4
        assert history_store.recent("gone") == []
        assert len(history_store.recent("kept")) == 1
        assert history_store.delete_session("gone") == 0
        assert history_store.delete_session("never-existed") == 0

    def test_ttl_hides_expired_turns(self, make_history_store: HistoryFactory) -> None:
        clock = FakeClock()
        store = make_history_store(ttl_seconds=60, clock=clock)
        t0 = clock.now
        store.append(make_turn("s", t0, "old"))
        clock.advance(30)
        store.append(make_turn("s", clock.now, "new"))
        assert [t.query for t in store.recent("s")] == ["old", "new"]
        clock.advance(31)  # "old" is 61 s old, "new" 31 s
        assert [t.query for t in store.recent("s")] == ["new"]
        store.append(make_turn("other", clock.now, "x"))  # a write may purge the expired turn
        assert [t.query for t in store.recent("s")] == ["new"]
        clock.advance(30)  # "new" is 61 s old, "x" 30 s
        assert store.recent("s") == []
        assert [t.query for t in store.recent("other")] == ["x"]

    def test_delete_session_counts_only_live_turns(self, make_history_store: HistoryFactory) -> None:
        clock = FakeClock()
        store = make_history_store(ttl_seconds=10, clock=clock)
        store.append(make_turn("s", clock.now - 20, "expired"))
        store.append(make_turn("s", clock.now, "live"))
        assert store.delete_session("s") == 1
        assert store.recent("s") == []

    def test_without_ttl_nothing_expires(self, make_history_store: HistoryFactory) -> None:
        clock = FakeClock()
        store = make_history_store(clock=clock)
        store.append(make_turn("s", clock.now - 10 * 365 * 86400, "ancient"))
        assert [t.query for t in store.recent("s")] == ["ancient"]

    def test_concurrent_readers(self, history_store: HistoryStore) -> None:
        expected = [make_turn(f"s{s}", float(t), f"q{s}-{t}") for s in range(4) for t in range(6)]
        for turn in expected:
            history_store.append(turn)

        def read(i: int) -> None:
            session = f"s{i % 4}"
            want = [t for t in expected if t.session_id == session]
            for _ in range(READS_PER_THREAD):
                assert history_store.recent(session) == want

        run_in_threads(read)


# -- catalog -------------------------------------------------------------------------------------------------


def make_kb(kb_id: str, name: str, created_at: float = 0.0, **extra: Any) -> KnowledgeBase:
    return KnowledgeBase(id=kb_id, name=name, created_at=created_at, **extra)


def make_knowledge(kid: str, kb_id: str, created_at: float = 0.0, **extra: Any) -> Knowledge:
    return Knowledge(id=kid, knowledge_base_id=kb_id, created_at=created_at, **extra)


GOOD_NAMES = [
    "docs",
    "产品手册",
    "Ünïcödé docs",
    "v1.2_final-draft",
    "a",
    "n" * 64,
    "हिन्दी",
    "Отчёт 2024",
    "٣٤",
]
BAD_NAMES = {
    "empty": "",
    "leading space": " docs",
    "trailing space": "docs ",
    "slash": "a/b",
    "tab": "a\tb",
    "newline": "a\nb",
    "too long": "n" * 65,
    "semicolon": "drop;table",
    "emoji": "docs 📚",
    "quote": "it's",
}


class CatalogStoreContract:
    def test_kb_round_trip_by_id_and_name(self, catalog_store: CatalogStore) -> None:
        kb = make_kb("kb-1", "Handbook", 12.5, type=KnowledgeBaseType.FAQ, embedding_model="bge-m3")
        assert catalog_store.create_kb(kb) == kb
        assert catalog_store.get_kb("kb-1") == kb
        assert catalog_store.get_kb("Handbook") == kb
        assert catalog_store.get_kb("handbook") is None  # names are case-sensitive
        assert catalog_store.get_kb("missing") is None

    def test_id_wins_over_a_name_equal_to_it(self, catalog_store: CatalogStore) -> None:
        first = catalog_store.create_kb(make_kb("alpha", "First"))
        second = catalog_store.create_kb(make_kb("kb-2", "alpha"))
        assert catalog_store.get_kb("alpha") == first
        assert catalog_store.get_kb("kb-2") == second

    def test_duplicate_name_conflicts(self, catalog_store: CatalogStore) -> None:
        catalog_store.create_kb(make_kb("kb-1", "Docs"))
        with pytest.raises(ConflictError, match="Docs"):
            catalog_store.create_kb(make_kb("kb-2", "Docs"))
        catalog_store.create_kb(make_kb("kb-3", "docs"))  # differs in case: allowed
        assert {kb.id for kb in catalog_store.list_kbs()} == {"kb-1", "kb-3"}

    def test_duplicate_id_conflicts(self, catalog_store: CatalogStore) -> None:
        catalog_store.create_kb(make_kb("kb-1", "Docs"))
        with pytest.raises(ConflictError, match="kb-1"):
            catalog_store.create_kb(make_kb("kb-1", "Other"))
        assert catalog_store.get_kb("Other") is None

    @pytest.mark.parametrize("name", GOOD_NAMES)
    def test_valid_names(self, catalog_store: CatalogStore, name: str) -> None:
        catalog_store.create_kb(make_kb("kb-x", name))
        kb = catalog_store.get_kb(name)
        assert kb is not None and kb.name == name

    @pytest.mark.parametrize("name", list(BAD_NAMES.values()), ids=list(BAD_NAMES))
    def test_invalid_names_say_what_is_allowed(self, catalog_store: CatalogStore, name: str) -> None:
        with pytest.raises(InputError, match="letters") as info:
            catalog_store.create_kb(make_kb("kb-x", name))
        assert not isinstance(info.value, NotFoundError | ConflictError)
        assert catalog_store.list_kbs() == []

    def test_list_kbs_oldest_first(self, catalog_store: CatalogStore) -> None:
        catalog_store.create_kb(make_kb("c", "C", 2.0))
        catalog_store.create_kb(make_kb("b", "B", 1.0))
        catalog_store.create_kb(make_kb("a", "A", 2.0))
        assert [kb.id for kb in catalog_store.list_kbs()] == ["b", "a", "c"]

    def test_knowledge_round_trip_and_upsert(self, catalog_store: CatalogStore) -> None:
        catalog_store.create_kb(make_kb("kb", "KB"))
        item = make_knowledge(
            "k1", "kb", 5.0, title="手册", filename="a.pdf", source_uri="file:///x/a.pdf", content_hash="ab12"
        )
        catalog_store.put_knowledge(item)
        assert catalog_store.get_knowledge("k1") == item
        done = item.model_copy(update={"status": "completed", "chunk_count": 42, "updated_at": 9.0})
        catalog_store.put_knowledge(done)
        assert catalog_store.get_knowledge("k1") == done
        assert catalog_store.list_knowledge("kb") == [done]
        assert catalog_store.get_knowledge("missing") is None

    def test_put_knowledge_needs_its_kb(self, catalog_store: CatalogStore) -> None:
        with pytest.raises(NotFoundError, match="no-such-kb"):
            catalog_store.put_knowledge(make_knowledge("k1", "no-such-kb"))
        assert catalog_store.get_knowledge("k1") is None

    def test_list_knowledge_by_created_at_then_id(self, catalog_store: CatalogStore) -> None:
        catalog_store.create_kb(make_kb("kb", "KB"))
        catalog_store.create_kb(make_kb("other", "Other"))
        for kid, created in [("k3", 2.0), ("k2", 1.0), ("k1", 2.0), ("k0", 3.0)]:
            catalog_store.put_knowledge(make_knowledge(kid, "kb", created))
        catalog_store.put_knowledge(make_knowledge("o1", "other", 0.5))
        assert [k.id for k in catalog_store.list_knowledge("kb")] == ["k2", "k1", "k3", "k0"]
        assert [k.id for k in catalog_store.list_knowledge("other")] == ["o1"]
        assert catalog_store.list_knowledge("missing") == []

    def test_delete_knowledge(self, catalog_store: CatalogStore) -> None:
        catalog_store.create_kb(make_kb("kb", "KB"))
        catalog_store.put_knowledge(make_knowledge("k1", "kb"))
        catalog_store.put_knowledge(make_knowledge("k2", "kb"))
        catalog_store.delete_knowledge("k1")
        catalog_store.delete_knowledge("k1")  # missing: no-op
        assert catalog_store.get_knowledge("k1") is None
        assert [k.id for k in catalog_store.list_knowledge("kb")] == ["k2"]

    def test_delete_kb_cascades_to_its_knowledge_only(self, catalog_store: CatalogStore) -> None:
        catalog_store.create_kb(make_kb("kb", "Doomed"))
        catalog_store.create_kb(make_kb("keep", "Kept"))
        for i in range(3):
            catalog_store.put_knowledge(make_knowledge(f"d{i}", "kb"))
        catalog_store.put_knowledge(make_knowledge("s0", "keep"))
        catalog_store.delete_kb("kb")
        assert catalog_store.get_kb("kb") is None
        assert catalog_store.get_kb("Doomed") is None
        assert catalog_store.list_knowledge("kb") == []
        assert all(catalog_store.get_knowledge(f"d{i}") is None for i in range(3))
        assert [k.id for k in catalog_store.list_knowledge("keep")] == ["s0"]
        catalog_store.delete_kb("kb")  # missing: no-op
        # The name is free again.
        catalog_store.create_kb(make_kb("kb-new", "Doomed"))

    def test_concurrent_readers(self, catalog_store: CatalogStore) -> None:
        for i in range(4):
            catalog_store.create_kb(make_kb(f"kb{i}", f"KB {i}", float(i)))
            for j in range(5):
                catalog_store.put_knowledge(make_knowledge(f"k{i}-{j}", f"kb{i}", float(j)))
        kbs = catalog_store.list_kbs()

        def read(i: int) -> None:
            for _ in range(READS_PER_THREAD):
                assert catalog_store.list_kbs() == kbs
                assert catalog_store.get_kb(f"KB {i % 4}") == kbs[i % 4]
                assert [k.id for k in catalog_store.list_knowledge(f"kb{i % 4}")] == [f"k{i % 4}-{j}" for j in range(5)]

        # One lookup of each name first, alone: a GetItem that misses (a name tried as an id) makes moto's in-memory
        # table add an empty entry, and a query iterating the table in another thread at that moment fails inside
        # moto ("dictionary changed size during iteration"). DynamoDB itself has no such race.
        for i in range(4):
            assert catalog_store.get_kb(f"KB {i}") == kbs[i]
        run_in_threads(read)
