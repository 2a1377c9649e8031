"""The S3 and DynamoDB adapters against moto: the shared contracts, plus what only AWS shows (pagination, TTL,
item size, transactions, missing resources), the wiring in Clients, and the template's matching resources."""

from __future__ import annotations

import math
import os
import random
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from contracts import (
    BlobStoreContract,
    CatalogStoreContract,
    FakeClock,
    HistoryStoreContract,
    make_kb,
    make_knowledge,
    make_turn,
)
from ragstep.adapters.blobs.s3 import S3BlobStore
from ragstep.adapters.catalog.dynamodb import DynamoCatalogStore
from ragstep.adapters.history.dynamodb import MAX_ITEM_BYTES, DynamoHistoryStore, sortable_float
from ragstep.adapters.history.sqlite import SqliteHistoryStore
from ragstep.context import Clients
from ragstep.errors import ConflictError, InputError, NotFoundError, StorageError
from ragstep.models import SearchResult
from ragstep.ports import BlobStore, CatalogStore, HistoryStore
from ragstep.settings import Settings

boto3 = pytest.importorskip("boto3")
moto = pytest.importorskip("moto")
from botocore.stub import Stubber  # noqa: E402
from moto import mock_aws  # noqa: E402

pytestmark = pytest.mark.aws

REGION = "eu-west-1"
BUCKET = "ragstep-test-blobs"
HISTORY_TABLE = "ragstep-test-history"
CATALOG_TABLE = "ragstep-test-catalog"

# The key schemas template.yaml declares (test_template_* below holds the two together).
HISTORY_SCHEMA: dict[str, Any] = {
    "KeySchema": [{"AttributeName": "session_id", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    "AttributeDefinitions": [
        {"AttributeName": "session_id", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
    ],
}
CATALOG_SCHEMA: dict[str, Any] = {
    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    "AttributeDefinitions": [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
    ],
}
HISTORY_TTL_ATTRIBUTE = "expires_at"


def _assert_clear(exc: StorageError, *parts: str) -> None:
    assert "\n" not in exc.message
    for part in parts:
        assert part in exc.message, exc.message


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials and a region (nothing may reach real AWS), and moto in place of every AWS service."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    with mock_aws():
        yield


# One Session for the test ctx: a new one per test would load botocore's endpoint and model data each time.
SESSION = boto3.session.Session()


@pytest.fixture
def s3(aws: None) -> Any:
    client = SESSION.client("s3", region_name=REGION)
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    return client


@pytest.fixture
def dynamodb(aws: None) -> Any:
    return SESSION.client("dynamodb", region_name=REGION)


@pytest.fixture
def history_table(dynamodb: Any) -> str:
    dynamodb.create_table(TableName=HISTORY_TABLE, BillingMode="PAY_PER_REQUEST", **HISTORY_SCHEMA)
    dynamodb.update_time_to_live(
        TableName=HISTORY_TABLE, TimeToLiveSpecification={"Enabled": True, "AttributeName": HISTORY_TTL_ATTRIBUTE}
    )
    return HISTORY_TABLE


@pytest.fixture
def catalog_table(dynamodb: Any) -> str:
    dynamodb.create_table(TableName=CATALOG_TABLE, BillingMode="PAY_PER_REQUEST", **CATALOG_SCHEMA)
    return CATALOG_TABLE


def _scan(dynamodb: Any, table: str) -> list[dict[str, Any]]:
    return dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]


def _denied_client(service: str, operation: str, code: str, status: int = 403) -> Any:
    """A real boto3 client whose next ``operation`` answers ``code`` (what IAM answers; moto does not enforce IAM)."""
    client = SESSION.client(service, region_name=REGION)
    stubber = Stubber(client)
    stubber.add_client_error(
        operation, service_error_code=code, service_message="not authorized", http_status_code=status
    )
    stubber.activate()
    return client


# -- blobs ---------------------------------------------------------------------------------------------------


class TestS3BlobStore(BlobStoreContract):
    @pytest.fixture
    def blob_store(self, s3: Any) -> S3BlobStore:
        return S3BlobStore(BUCKET)

    def test_is_a_blob_store(self, blob_store: S3BlobStore) -> None:
        assert isinstance(blob_store, BlobStore)

    def test_uri_names_the_object_and_it_is_encrypted(self, blob_store: S3BlobStore, s3: Any) -> None:
        uri = blob_store.put("docs/a b.json", b"{}", content_type="application/json")
        assert uri == f"s3://{BUCKET}/docs/a b.json"
        head = s3.head_object(Bucket=BUCKET, Key="docs/a b.json")
        assert head["ServerSideEncryption"] == "AES256"
        assert head["ContentType"] == "application/json"

    def test_kms_key_when_configured(self, s3: Any) -> None:
        key_id = SESSION.client("kms", region_name=REGION).create_key()["KeyMetadata"]["KeyId"]
        store = S3BlobStore(BUCKET, kms_key_id=key_id)
        store.put("secret.bin", b"s")
        head = s3.head_object(Bucket=BUCKET, Key="secret.bin")
        assert head["ServerSideEncryption"] == "aws:kms"
        assert key_id in head["SSEKMSKeyId"]
        assert store.get("secret.bin") == b"s"

    def test_list_pages_past_1000_keys(self, blob_store: S3BlobStore) -> None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        keys = [f"many/{i:05d}" for i in range(1010)]
        # Written straight into moto's bucket: a thousand PutObject round trips would be most of the test's time, and
        # what is tested is the listing's paging (the store's put is tested above).
        backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
        for key in reversed(keys):
            backend.put_object(BUCKET, key, b"")
        blob_store.put("other", b"x")
        assert blob_store.list("many/") == keys
        assert len(blob_store.list()) == 1011
        assert blob_store.list("many/0100") == [f"many/0100{i}" for i in range(10)]

    def test_folder_placeholders_are_not_blobs(self, blob_store: S3BlobStore, s3: Any) -> None:
        s3.put_object(Bucket=BUCKET, Key="docs/", Body=b"")  # what the S3 console's "Create folder" makes
        blob_store.put("docs/a.txt", b"a")
        assert blob_store.list() == ["docs/a.txt"]
        assert blob_store.list("docs/") == ["docs/a.txt"]

    def test_missing_bucket_is_a_storage_error(self, s3: Any) -> None:
        store = S3BlobStore("no-such-bucket")
        for call in (
            lambda: store.put("k", b"v"),
            lambda: store.get("k"),
            lambda: store.exists("k"),
            lambda: store.list(),
            lambda: store.delete("k"),
        ):
            with pytest.raises(StorageError) as info:
                call()
            _assert_clear(info.value, "no-such-bucket", "RAGSTEP_BLOB_BUCKET")

    def test_access_denied_is_a_storage_error(self, aws: None) -> None:
        store = S3BlobStore(BUCKET, client=_denied_client("s3", "get_object", "AccessDenied"))
        with pytest.raises(StorageError) as info:
            store.get("docs/a.txt")
        assert not isinstance(info.value, NotFoundError)
        _assert_clear(info.value, BUCKET, "access denied", "IAM policy")

    def test_no_bucket_configured(self) -> None:
        with pytest.raises(StorageError, match="RAGSTEP_BLOB_BUCKET"):
            S3BlobStore("")

    def test_client_is_created_once(self, blob_store: S3BlobStore) -> None:
        blob_store.put("a", b"1")
        client = blob_store.client
        blob_store.get("a")
        assert blob_store.client is client


class TestS3BlobStoreWithPrefix(BlobStoreContract):
    """The same contract with every key under ``tenant-a/``."""

    @pytest.fixture
    def blob_store(self, s3: Any) -> S3BlobStore:
        return S3BlobStore(BUCKET, "tenant-a/")

    def test_key_at_the_length_limit_is_fine(self, blob_store: BlobStore) -> None:
        # S3's 1024 bytes hold the prefix too, so the longest blob key is 9 bytes shorter here.
        key = "k" * (1024 - len("tenant-a/"))
        blob_store.put(key, b"edge")
        assert blob_store.get(key) == b"edge"
        with pytest.raises(InputError, match="tenant-a/"):
            blob_store.put(key + "k", b"too long")

    def test_keys_live_under_the_prefix_and_stores_are_isolated(self, blob_store: S3BlobStore, s3: Any) -> None:
        other = S3BlobStore(BUCKET, "tenant-b")
        assert blob_store.put("x/1.txt", b"a") == f"s3://{BUCKET}/tenant-a/x/1.txt"
        other.put("x/2.txt", b"b")
        s3.put_object(Bucket=BUCKET, Key="tenant-ab/3.txt", Body=b"c")  # shares the characters, not the folder
        assert blob_store.list() == ["x/1.txt"]
        assert other.list("x/") == ["x/2.txt"]
        assert not blob_store.exists("x/2.txt")
        listed = s3.list_objects_v2(Bucket=BUCKET)["Contents"]
        assert sorted(o["Key"] for o in listed) == ["tenant-a/x/1.txt", "tenant-ab/3.txt", "tenant-b/x/2.txt"]

    def test_a_bad_prefix_is_rejected(self) -> None:
        with pytest.raises(InputError, match=r"\.\."):
            S3BlobStore(BUCKET, "a/../b")


# -- history -------------------------------------------------------------------------------------------------


class TestDynamoHistoryStore(HistoryStoreContract):
    @pytest.fixture
    def make_history_store(self, history_table: str) -> Callable[..., DynamoHistoryStore]:
        def make(ttl_seconds: float | None = None, clock: Callable[[], float] | None = None) -> DynamoHistoryStore:
            if clock is None:
                return DynamoHistoryStore(history_table, ttl_seconds=ttl_seconds)
            return DynamoHistoryStore(history_table, ttl_seconds=ttl_seconds, clock=clock)

        return make

    def test_is_a_history_store(self, history_store: HistoryStore) -> None:
        assert isinstance(history_store, HistoryStore)

    def test_item_layout(self, history_table: str, dynamodb: Any) -> None:
        store = DynamoHistoryStore(history_table, ttl_seconds=60)
        turn = make_turn("s", 1000.25, "q", answer="a")
        store.append(turn)
        store.append(turn)  # a retried stage: one item
        (item,) = _scan(dynamodb, history_table)
        assert item["session_id"] == {"S": "s"}
        assert item["sk"] == {"S": f"{sortable_float(1000.25)}#{turn.turn_id}"}
        assert item["expires_at"] == {"N": "1061"}  # ceil(1000.25 + 60): whole seconds, never early
        assert item["references"] == {"S": "[]"}
        assert "references_truncated" not in item

    def test_expired_turns_are_filtered_before_dynamodb_deletes_them(self, history_table: str, dynamodb: Any) -> None:
        clock = FakeClock()
        store = DynamoHistoryStore(history_table, ttl_seconds=10, clock=clock)
        store.append(make_turn("s", clock.now, "old"))
        clock.advance(11)
        store.append(make_turn("s", clock.now, "new"))
        assert len(_scan(dynamodb, history_table)) == 2  # TTL deletion has not happened (it may lag 48 h)
        assert [t.query for t in store.recent("s")] == ["new"]

    def test_limit_counts_live_turns_past_expired_ones(self, history_table: str) -> None:
        # DynamoDB applies Limit before the filter: the newest 5 turns are expired, the older 3 live.
        clock = FakeClock(200.0)
        DynamoHistoryStore(history_table).append(make_turn("s", 1.0, "live1"))
        for t in range(5):
            DynamoHistoryStore(history_table, ttl_seconds=10).append(make_turn("s", 100.0 + t, f"expired{t}"))
        for t in (2.0, 3.0):
            DynamoHistoryStore(history_table).append(make_turn("s", t, f"live{int(t)}"))
        store = DynamoHistoryStore(history_table, clock=clock)
        assert [t.query for t in store.recent("s", limit=2)] == ["live2", "live3"]
        assert [t.query for t in store.recent("s", limit=1)] == ["live3"]
        assert [t.query for t in store.recent("s")] == ["live1", "live2", "live3"]

    def test_same_timestamp_order_matches_sqlite(self, history_table: str, tmp_path: Any) -> None:
        turns = [make_turn("s", 5.0, tid, turn_id=tid) for tid in ("b", "a", "c", "a2")]
        turns.append(make_turn("s", 4.0, "z", turn_id="z"))
        dynamo, local = DynamoHistoryStore(history_table), SqliteHistoryStore(tmp_path / "h.db")
        for turn in turns:
            dynamo.append(turn)
            local.append(turn)
        for limit in (2, 10):
            assert dynamo.recent("s", limit) == local.recent("s", limit)
        assert [t.turn_id for t in dynamo.recent("s")] == ["z", "a", "a2", "b", "c"]

    def test_timestamps_round_trip_exactly(self, history_store: HistoryStore) -> None:
        stamps = [1700000000.123456789, 1e-05, 0.1 + 0.2, -3.5, 0.0, 1e20]
        for i, t in enumerate(stamps):
            history_store.append(make_turn("s", t, f"q{i}"))
        assert [t.created_at for t in history_store.recent("s")] == sorted(stamps)

    def test_references_beyond_the_item_limit_are_dropped_and_counted(
        self, history_store: DynamoHistoryStore, dynamodb: Any
    ) -> None:
        refs = [
            SearchResult(id=f"c{i}", content="检索" * 700 + str(i), knowledge_id="k", knowledge_base_id="kb")
            for i in range(200)
        ]  # each ~4.3 KB, ~860 KB in all
        turn = make_turn("big", 1.0, "q", answer="a", references=refs)
        history_store.append(turn)
        (stored,) = history_store.recent("big")
        kept = len(stored.references)
        assert 50 < kept < 200
        assert stored.references == refs[:kept]  # the best references, in order
        (item,) = _scan(dynamodb, HISTORY_TABLE)
        assert item["references_truncated"] == {"N": str(200 - kept)}
        assert sum(len(k.encode()) + len(v.get("S", "0" * 21).encode()) for k, v in item.items()) <= MAX_ITEM_BYTES

    def test_a_turn_just_under_the_limit_keeps_every_reference(self, history_store: HistoryStore) -> None:
        refs = [
            SearchResult(id=f"c{i}", content="x" * 4000, knowledge_id="k", knowledge_base_id="kb") for i in range(90)
        ]  # ~380 KB
        turn = make_turn("s", 1.0, "q", references=refs)
        history_store.append(turn)
        assert history_store.recent("s") == [turn]

    def test_a_turn_too_large_without_references_is_an_input_error(self, history_store: HistoryStore) -> None:
        with pytest.raises(InputError, match="shorten the query or answer"):
            history_store.append(make_turn("s", 1.0, "q", answer="答" * 150_000))  # 450 KB of UTF-8
        assert history_store.recent("s") == []

    def test_delete_session_batches_past_25(self, history_store: HistoryStore, dynamodb: Any) -> None:
        for t in range(60):
            history_store.append(make_turn("long", float(t)))
        history_store.append(make_turn("kept", 1.0))
        assert history_store.delete_session("long") == 60
        assert [i["session_id"]["S"] for i in _scan(dynamodb, HISTORY_TABLE)] == ["kept"]

    @pytest.mark.parametrize(
        ("field", "value"), [("session_id", ""), ("turn_id", ""), ("session_id", "s" * 2049), ("turn_id", "t" * 1008)]
    )
    def test_keys_dynamodb_refuses_are_input_errors(self, history_store: HistoryStore, field: str, value: str) -> None:
        turn = make_turn("s", 1.0).model_copy(update={field: value})
        with pytest.raises(InputError, match=field):
            history_store.append(turn)
        assert history_store.recent(turn.session_id) == []
        assert history_store.delete_session(turn.session_id) == 0

    def test_negative_limit_is_an_input_error(self, history_store: HistoryStore) -> None:
        with pytest.raises(InputError, match="limit"):
            history_store.recent("s", limit=-1)

    @pytest.mark.parametrize("ttl", [0, -5, float("nan")])
    def test_ttl_must_be_positive(self, ttl: float) -> None:
        with pytest.raises(InputError, match="ttl_seconds"):
            DynamoHistoryStore(HISTORY_TABLE, ttl_seconds=ttl)

    def test_missing_table_is_a_storage_error(self, aws: None) -> None:
        store = DynamoHistoryStore("no-such-table")
        for call in (
            lambda: store.append(make_turn("s", 1.0)),
            lambda: store.recent("s"),
            lambda: store.delete_session("s"),
        ):
            with pytest.raises(StorageError) as info:
                call()
            _assert_clear(info.value, "no-such-table", "RAGSTEP_HISTORY_TABLE")

    def test_access_denied_is_a_storage_error(self, aws: None) -> None:
        client = _denied_client("dynamodb", "query", "AccessDeniedException", 400)
        with pytest.raises(StorageError) as info:
            DynamoHistoryStore(HISTORY_TABLE, client=client).recent("s")
        _assert_clear(info.value, HISTORY_TABLE, "access denied", "IAM policy")


def test_sortable_float_sorts_like_the_numbers() -> None:
    rng = random.Random(7)
    values = [-1e300, -1e10, -1.5, -5e-324, -0.0, 0.0, 5e-324, 1e-05, 1.0, 1.0000000000000002, 1e10, 1.7e9, 1e300]
    values += [struct.unpack(">d", rng.randbytes(8))[0] for _ in range(500)]
    values = [v for v in values if math.isfinite(v)]
    encoded = [sortable_float(v) for v in values]
    assert all(len(e) == 16 for e in encoded)
    assert [v for _, v in sorted(zip(encoded, values, strict=True))] == sorted(values)
    assert sortable_float(-0.0) == sortable_float(0.0)


# -- catalog -------------------------------------------------------------------------------------------------


class TestDynamoCatalogStore(CatalogStoreContract):
    @pytest.fixture
    def catalog_store(self, catalog_table: str) -> DynamoCatalogStore:
        return DynamoCatalogStore(catalog_table)

    def test_is_a_catalog_store(self, catalog_store: CatalogStore) -> None:
        assert isinstance(catalog_store, CatalogStore)

    def test_item_layout(self, catalog_store: CatalogStore, dynamodb: Any) -> None:
        catalog_store.create_kb(make_kb("kb1", "Docs", 2.0))
        catalog_store.put_knowledge(make_knowledge("k1", "kb1"))
        keys = sorted((i["pk"]["S"], i["sk"]["S"]) for i in _scan(dynamodb, CATALOG_TABLE))
        assert keys == [
            ("K#k1", "K"),
            ("KB#kb1", "K#k1"),
            ("KB#kb1", "KB"),
            ("KBLIST", f"{sortable_float(2.0)}#kb1"),
            ("KBNAME#Docs", "KBNAME"),
        ]

    def test_a_conflict_writes_nothing(self, catalog_store: CatalogStore, dynamodb: Any) -> None:
        catalog_store.create_kb(make_kb("kb1", "Docs", 1.0))
        before = _scan(dynamodb, CATALOG_TABLE)
        with pytest.raises(ConflictError, match="id 'kb1'"):
            catalog_store.create_kb(make_kb("kb1", "Other", 2.0))
        with pytest.raises(ConflictError, match="name 'Docs'"):
            catalog_store.create_kb(make_kb("kb2", "Docs", 3.0))
        assert _scan(dynamodb, CATALOG_TABLE) == before
        assert catalog_store.get_kb("Other") is None
        assert catalog_store.get_kb("kb2") is None

    def test_put_knowledge_into_a_missing_kb_writes_nothing(self, catalog_store: CatalogStore, dynamodb: Any) -> None:
        catalog_store.create_kb(make_kb("kb1", "Docs"))
        catalog_store.delete_kb("kb1")
        with pytest.raises(NotFoundError, match="kb1"):
            catalog_store.put_knowledge(make_knowledge("k1", "kb1"))
        assert _scan(dynamodb, CATALOG_TABLE) == []

    def test_put_knowledge_under_another_kb_moves_it(self, catalog_store: CatalogStore) -> None:
        catalog_store.create_kb(make_kb("a", "A"))
        catalog_store.create_kb(make_kb("b", "B"))
        catalog_store.put_knowledge(make_knowledge("k1", "a", title="first"))
        moved = make_knowledge("k1", "b", title="moved")
        catalog_store.put_knowledge(moved)
        assert catalog_store.list_knowledge("a") == []
        assert catalog_store.list_knowledge("b") == [moved]
        assert catalog_store.get_knowledge("k1") == moved
        catalog_store.delete_kb("a")  # must not take the moved item's lookup with it
        assert catalog_store.get_knowledge("k1") == moved

    def test_delete_kb_beyond_one_transaction(self, catalog_store: CatalogStore, dynamodb: Any) -> None:
        catalog_store.create_kb(make_kb("big", "Big"))
        catalog_store.create_kb(make_kb("keep", "Keep"))
        for i in range(60):  # 3 + 2 x 60 actions: more than TransactWriteItems' 100
            catalog_store.put_knowledge(make_knowledge(f"k{i:03d}", "big", float(i)))
        catalog_store.put_knowledge(make_knowledge("s0", "keep"))
        assert [k.id for k in catalog_store.list_knowledge("big")] == [f"k{i:03d}" for i in range(60)]
        catalog_store.delete_kb("big")
        assert catalog_store.list_knowledge("big") == []
        assert catalog_store.get_knowledge("k042") is None
        remaining = {i["pk"]["S"] for i in _scan(dynamodb, CATALOG_TABLE)}
        assert remaining == {"KB#keep", "KBNAME#Keep", "KBLIST", "K#s0"}

    def test_delete_kb_again_finishes_a_deletion_that_failed_part_way(
        self, catalog_store: CatalogStore, dynamodb: Any
    ) -> None:
        catalog_store.create_kb(make_kb("kb1", "Docs", 1.0))
        for i in range(3):
            catalog_store.put_knowledge(make_knowledge(f"k{i}", "kb1"))
        # The state after the knowledge base items went but the batch deletes did not run.
        for key in (("KB#kb1", "KB"), ("KBNAME#Docs", "KBNAME"), ("KBLIST", f"{sortable_float(1.0)}#kb1")):
            dynamodb.delete_item(TableName=CATALOG_TABLE, Key={"pk": {"S": key[0]}, "sk": {"S": key[1]}})
        assert catalog_store.get_kb("kb1") is None
        catalog_store.delete_kb("kb1")
        assert _scan(dynamodb, CATALOG_TABLE) == []

    def test_missing_table_is_a_storage_error(self, aws: None) -> None:
        store = DynamoCatalogStore("no-such-table")
        for call in (
            lambda: store.create_kb(make_kb("kb", "KB")),
            lambda: store.get_kb("kb"),
            lambda: store.list_kbs(),
            lambda: store.put_knowledge(make_knowledge("k", "kb")),
            lambda: store.delete_kb("kb"),
        ):
            with pytest.raises(StorageError) as info:
                call()
            _assert_clear(info.value, "no-such-table", "RAGSTEP_CATALOG_TABLE")

    def test_access_denied_is_a_storage_error(self, aws: None) -> None:
        client = _denied_client("dynamodb", "transact_write_items", "AccessDeniedException", 400)
        with pytest.raises(StorageError) as info:
            DynamoCatalogStore(CATALOG_TABLE, client=client).create_kb(make_kb("kb", "KB"))
        _assert_clear(info.value, CATALOG_TABLE, "access denied", "IAM policy")

    def test_ids_dynamodb_refuses_are_input_errors(self, catalog_store: CatalogStore) -> None:
        with pytest.raises(InputError, match="knowledge base id"):
            catalog_store.create_kb(make_kb("k" * 2100, "Long"))
        catalog_store.create_kb(make_kb("kb", "KB"))
        with pytest.raises(InputError, match="knowledge id"):
            catalog_store.put_knowledge(make_knowledge("k" * 1100, "kb"))
        assert catalog_store.get_kb("k" * 2100) is None
        assert catalog_store.list_knowledge("kb") == []


class TestDynamoHistoryStoreOfATenant(HistoryStoreContract):
    """The whole contract again for a tenant other than the default one (prefixed keys, tenant attribute)."""

    @pytest.fixture
    def make_history_store(self, history_table: str) -> Callable[..., DynamoHistoryStore]:
        def make(ttl_seconds: float | None = None, clock: Callable[[], float] | None = None) -> DynamoHistoryStore:
            if clock is None:
                return DynamoHistoryStore(history_table, ttl_seconds=ttl_seconds, tenant_id="acme")
            return DynamoHistoryStore(history_table, ttl_seconds=ttl_seconds, clock=clock, tenant_id="acme")

        return make


class TestDynamoCatalogStoreOfATenant(CatalogStoreContract):
    @pytest.fixture
    def catalog_store(self, catalog_table: str) -> DynamoCatalogStore:
        return DynamoCatalogStore(catalog_table, tenant_id="acme")


def test_tenants_sharing_the_tables_see_nothing_of_each_other(
    history_table: str, catalog_table: str, dynamodb: Any
) -> None:
    stores = {
        tenant: (
            DynamoCatalogStore(catalog_table, tenant_id=tenant),
            DynamoHistoryStore(history_table, ttl_seconds=None, tenant_id=tenant),
        )
        for tenant in ("default", "acme", "globex")
    }
    # The same ids and names in every tenant: no conflict, each tenant gets its own.
    for tenant, (catalog, history) in stores.items():
        catalog.create_kb(make_kb("kb1", "Docs", 1.0, embedding_model=f"openai:{tenant}"))
        catalog.put_knowledge(make_knowledge("k1", "kb1", 2.0, title=tenant))
        history.append(make_turn("s1", 3.0, f"asked in {tenant}"))
    for tenant, (catalog, history) in stores.items():
        assert [kb.embedding_model for kb in catalog.list_kbs()] == [f"openai:{tenant}"]
        assert catalog.get_kb("Docs").embedding_model == f"openai:{tenant}"  # type: ignore[union-attr]
        assert [k.title for k in catalog.list_knowledge("kb1")] == [tenant]
        assert catalog.get_knowledge("k1").title == tenant  # type: ignore[union-attr]
        assert [t.query for t in history.recent("s1")] == [f"asked in {tenant}"]
        assert history.recent("s1")[0].session_id == "s1"

    # Deleting in one tenant leaves the others whole.
    acme_catalog, acme_history = stores["acme"]
    acme_catalog.delete_kb("kb1")
    assert acme_history.delete_session("s1") == 1
    assert (
        acme_catalog.list_kbs() == [] and acme_catalog.get_knowledge("k1") is None and acme_history.recent("s1") == []
    )
    for tenant in ("default", "globex"):
        catalog, history = stores[tenant]
        assert [kb.id for kb in catalog.list_kbs()] == ["kb1"] and catalog.get_knowledge("k1") is not None
        assert len(history.recent("s1")) == 1

    # The default tenant keeps the layout tables had before tenants; another tenant's keys carry its prefix.
    turns = {item["session_id"]["S"]: item for item in _scan(dynamodb, history_table)}
    assert set(turns) == {"s1", "globex#s1"}
    assert "tenant_id" not in turns["s1"] and turns["globex#s1"]["tenant_id"] == {"S": "globex"}
    keys = {item["pk"]["S"] for item in _scan(dynamodb, catalog_table)}
    assert {"KB#kb1", "KBNAME#Docs", "KBLIST", "K#k1", "globex#KB#kb1", "globex#KBLIST"} <= keys
    assert not any(key.startswith("acme#") for key in keys)

    # A default-tenant session id spelled like another tenant's key reaches nothing of that tenant.
    default_history = stores["default"][1]
    assert default_history.recent("globex#s1") == []
    assert default_history.delete_session("globex#s1") == 0
    assert len(stores["globex"][1].recent("s1")) == 1


def test_a_tenant_id_that_could_not_be_a_key_prefix_is_refused(history_table: str, catalog_table: str) -> None:
    with pytest.raises(InputError, match="tenant id"):
        DynamoHistoryStore(history_table, tenant_id="a#b")
    with pytest.raises(InputError, match="tenant id"):
        DynamoCatalogStore(catalog_table, tenant_id="")


# -- ctx and the template ---------------------------------------------------------------------------------


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, s3: Any, history_table: str, catalog_table: str) -> None:
    for name in [k for k in os.environ if k.startswith("RAGSTEP_")]:
        monkeypatch.delenv(name)
    for name, value in {
        "RAGSTEP_HISTORY_BACKEND": "dynamodb",
        "RAGSTEP_CATALOG_BACKEND": "dynamodb",
        "RAGSTEP_BLOB_BACKEND": "s3",
        "RAGSTEP_HISTORY_TABLE": history_table,
        "RAGSTEP_CATALOG_TABLE": catalog_table,
        "RAGSTEP_BLOB_BUCKET": BUCKET,
        "RAGSTEP_BLOB_PREFIX": "ragstep",
    }.items():
        monkeypatch.setenv(name, value)


def test_services_build_the_aws_adapters_from_the_environment(aws_env: None, s3: Any, dynamodb: Any) -> None:
    ctx = Clients().context()
    history, catalog, blobs = ctx.history, ctx.catalog, ctx.blobs
    assert isinstance(history, DynamoHistoryStore) and history.table_name == HISTORY_TABLE
    assert isinstance(catalog, DynamoCatalogStore) and catalog.table_name == CATALOG_TABLE
    assert isinstance(blobs, S3BlobStore) and (blobs.bucket, blobs.prefix) == (BUCKET, "ragstep/")
    assert ctx.history is history  # built once
    acme = Clients().context("acme")
    assert (acme.history.tenant_id, acme.catalog.tenant_id) == ("acme", "acme")  # type: ignore[attr-defined]

    kb = catalog.create_kb(make_kb("kb1", "Docs"))
    assert ctx.require_kb("Docs") == kb
    now = float(int(time.time()))
    turn = make_turn("s", now)
    history.append(turn)
    assert history.recent("s") == [turn]
    (item,) = _scan(dynamodb, HISTORY_TABLE)
    assert item["expires_at"] == {"N": str(int(now) + 30 * 86400)}  # the default TTL: 30 days
    blobs.put("state/r1/x.json", b"{}")
    assert s3.get_object(Bucket=BUCKET, Key="ragstep/state/r1/x.json")["Body"].read() == b"{}"


def test_services_history_ttl_and_kms_settings(aws_env: None, monkeypatch: pytest.MonkeyPatch, dynamodb: Any) -> None:
    monkeypatch.setenv("RAGSTEP_HISTORY_TTL_SECONDS", "0")
    monkeypatch.setenv("RAGSTEP_S3_KMS_KEY_ID", "alias/ragstep")
    ctx = Clients().context()
    ctx.history.append(make_turn("s", 1.0))
    (item,) = _scan(dynamodb, HISTORY_TABLE)
    assert "expires_at" not in item
    assert ctx.blobs.kms_key_id == "alias/ragstep"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("attribute", "setting"),
    [("history", "RAGSTEP_HISTORY_TABLE"), ("catalog", "RAGSTEP_CATALOG_TABLE"), ("blobs", "RAGSTEP_BLOB_BUCKET")],
)
def test_services_say_which_setting_is_missing(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, attribute: str, setting: str
) -> None:
    monkeypatch.delenv(setting)
    with pytest.raises(StorageError, match=setting):
        getattr(Clients().context(), attribute)


def test_the_embedded_defaults_are_unchanged(tmp_path: Any) -> None:
    settings = Settings(data_dir=tmp_path, _env_file=None)  # type: ignore[call-arg]
    assert (settings.history_backend, settings.catalog_backend, settings.blob_backend) == ("sqlite", "sqlite", "local")
    assert settings.history_ttl_seconds == 30 * 86400


def _template_resources() -> dict[str, Any]:
    from test_asl import load_template

    return load_template()["Resources"]


def _resource(resources: dict[str, Any], logical_id: str, kind: str) -> dict[str, Any]:
    assert resources[logical_id]["Type"] == kind
    return resources[logical_id]["Properties"]


def test_template_tables_match_the_adapters() -> None:
    resources = _template_resources()
    history = _resource(resources, "HistoryTable", "AWS::DynamoDB::Table")
    catalog = _resource(resources, "CatalogTable", "AWS::DynamoDB::Table")
    idempotency = _resource(resources, "IdempotencyTable", "AWS::DynamoDB::Table")
    for table, schema in ((history, HISTORY_SCHEMA), (catalog, CATALOG_SCHEMA)):
        assert table["BillingMode"] == "PAY_PER_REQUEST"
        assert table["KeySchema"] == schema["KeySchema"]
        assert sorted(table["AttributeDefinitions"], key=str) == sorted(schema["AttributeDefinitions"], key=str)
        assert "GlobalSecondaryIndexes" not in table  # every catalog lookup is an item, read consistently
    assert history["TimeToLiveSpecification"] == {"AttributeName": HISTORY_TTL_ATTRIBUTE, "Enabled": True}
    assert idempotency["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert idempotency["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}


def test_template_bucket_is_private_encrypted_versioned_and_expires_states() -> None:
    from ragstep.pipeline.transport import OFFLOAD_PREFIX

    bucket = _resource(_template_resources(), "BlobBucket", "AWS::S3::Bucket")
    assert set(bucket["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4
    (rule,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    rules = {r["Id"]: r for r in bucket["LifecycleConfiguration"]["Rules"]}
    states = next(r for r in rules.values() if r.get("Prefix") == OFFLOAD_PREFIX)
    assert states["Status"] == "Enabled" and states["ExpirationInDays"] == 1
    assert any(r.get("NoncurrentVersionExpiration", {}).get("NoncurrentDays") == 30 for r in rules.values())


# Functions that never offload a pipeline state: the API key check and the Slack request check run no pipeline; the
# Slack worker runs its (streaming) pipeline in-process.
RUNS_NO_PIPELINE = frozenset({"AuthorizerFunction", "SlackWebhookFunction", "SlackWorkerFunction"})


def test_template_functions_use_the_aws_backends_with_scoped_policies() -> None:
    from test_asl import load_template

    template = load_template()
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    assert env["RAGSTEP_HISTORY_BACKEND"] == env["RAGSTEP_CATALOG_BACKEND"] == "dynamodb"
    assert env["RAGSTEP_BLOB_BACKEND"] == "s3"
    assert env["RAGSTEP_HISTORY_TABLE"] == {"Ref": "HistoryTable"}
    assert env["RAGSTEP_CATALOG_TABLE"] == {"Ref": "CatalogTable"}
    assert env["RAGSTEP_BLOB_BUCKET"] == {"Ref": "BlobBucket"}
    ours = {"BlobBucket", "CatalogTable", "GraphTable", "HistoryTable", "IdempotencyTable", "KeysTable", "UsageTable"}
    for name, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        policies = [p for p in resource["Properties"].get("Policies", []) if isinstance(p, dict)]
        granted: dict[str, set[str]] = {}
        for policy in policies:
            for kind, args in policy.items():
                if kind.startswith(("DynamoDB", "S3")):
                    (target,) = args.values()
                    assert isinstance(target, dict) and target.get("Ref") in ours, f"{name}: {kind} is not scoped"
                    granted.setdefault(target["Ref"], set()).add(kind)
        # Every function may offload pipeline states to the bucket: the API through S3CrudPolicy, the stages
        # through policies scoped to the prefixes they use (tests/test_template_hardening.py). Only those that read
        # the catalog may: the API (it resolves a request's knowledge bases once, into the state), chunk_search (a
        # state written by hand arrives unresolved) and the ingest stages; later query stages read the knowledge
        # bases from the state.
        blob_policies = {"Ref": "StateBlobsPolicy"}, {"Ref": "IngestBlobsPolicy"}
        if name in RUNS_NO_PIPELINE:
            assert "BlobBucket" not in granted, f"{name} offloads no state: it needs no bucket"
            continue
        assert granted.get("BlobBucket") == {"S3CrudPolicy"} or any(
            p in resource["Properties"]["Policies"] for p in blob_policies
        ), name
        # The entry points that resolve a request's knowledge bases (the API, the chat stream, the Slack worker, the
        # retrieval-events consumer) read the catalog too.
        entry_points = {"ApiFunction", "ChatStreamFunction", "SlackWorkerFunction", "RetrievalEventsFunction"}
        # OpenViking's walk and its layering read each knowledge base's folder tree and layers through the catalog.
        viking_readers = {"VikingQueryFunction", "VikingLayeredFunction"}
        reads_catalog = name in entry_points | {"ChunkSearchFunction"} | viking_readers or name.startswith("Ingest")
        catalog = granted.get("CatalogTable", set()) & {"DynamoDBReadPolicy", "DynamoDBCrudPolicy"}
        assert bool(catalog) == reads_catalog, name


def test_the_deployed_api_requires_keys_kept_in_the_stacks_own_tables() -> None:
    # A Lambda deployment is reachable from anywhere: unlike a local `ragstep serve`, it never runs open.
    from test_asl import load_template

    resources = load_template()["Resources"]
    env = resources["ApiFunction"]["Properties"]["Environment"]["Variables"]
    assert env["RAGSTEP_AUTH"] == "required"
    assert env["RAGSTEP_KEYS_BACKEND"] == env["RAGSTEP_USAGE_BACKEND"] == "dynamodb"
    assert env["RAGSTEP_KEYS_TABLE"] == {"Ref": "KeysTable"}
    assert env["RAGSTEP_USAGE_TABLE"] == {"Ref": "UsageTable"}
    keys_schema = resources["KeysTable"]["Properties"]["KeySchema"]
    usage_schema = resources["UsageTable"]["Properties"]["KeySchema"]
    assert [k["AttributeName"] for k in keys_schema] == ["pk"]  # adapters/keys/dynamodb.py's layout
    assert [k["AttributeName"] for k in usage_schema] == ["tenant_id", "sk"]  # adapters/usage/dynamodb.py's
    # Only the API, the streaming chat function (the same app) and the authorizer (keys only, read-only: see
    # tests/test_authorizer.py) read keys or write usage: no stage function is granted either table.
    granted = {
        name
        for name, r in resources.items()
        if r["Type"] == "AWS::Serverless::Function"
        for policy in r["Properties"].get("Policies", [])
        if isinstance(policy, dict)
        for args in policy.values()
        if isinstance(args, dict) and args.get("TableName", {}).get("Ref") in ("KeysTable", "UsageTable")
    }
    assert granted == {"ApiFunction", "ChatStreamFunction", "AuthorizerFunction"}
