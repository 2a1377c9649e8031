"""Tenants and API keys: the use cases, both stores (SQLite, DynamoDB on moto), the CLI and the admin routes."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from conftest import run_cli
from ragstep.adapters.keys.sqlite import SqliteKeyStore
from ragstep.app.keys import create_key, hash_key, parse_expiry, revoke_key, split_key, verify_key
from ragstep.app.tenants import create_tenant, list_tenants
from ragstep.context import Clients
from ragstep.entry.http.app import create_app
from ragstep.errors import ConflictError, InputError, NotFoundError, UnauthorizedError
from ragstep.ports import KeyStore
from ragstep.settings import Settings

KEYS_TABLE = "ragstep-test-keys"
KEYS_SCHEMA: dict[str, Any] = {
    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
    "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
}


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    """No RAGSTEP_* from the developer's shell."""


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pytest.importorskip("moto")
    from moto import mock_aws

    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "eu-west-1",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_CONFIG_FILE": "/dev/null",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        yield


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> KeyStore:
    if request.param == "sqlite":
        return SqliteKeyStore(tmp_path / "keys.sqlite")
    request.getfixturevalue("aws")
    import boto3

    from ragstep.adapters.keys.dynamodb import DynamoKeyStore

    boto3.client("dynamodb").create_table(TableName=KEYS_TABLE, BillingMode="PAY_PER_REQUEST", **KEYS_SCHEMA)
    return DynamoKeyStore(KEYS_TABLE)


# -- the store contract -------------------------------------------------------------------------------------------


def test_tenants_are_stored_once(store: KeyStore) -> None:
    acme = create_tenant(store, "acme", name="Acme", daily_requests=10, now=100.0)
    create_tenant(store, "globex", now=200.0)
    assert store.get_tenant("acme") == acme
    assert store.get_tenant("nobody") is None
    with pytest.raises(ConflictError, match="already exists"):
        create_tenant(store, "acme")
    with pytest.raises(ConflictError, match="always exists"):
        create_tenant(store, "default")
    with pytest.raises(InputError, match="tenant id"):
        create_tenant(store, "../etc")
    assert [t.id for t in list_tenants(store)] == ["default", "acme", "globex"]


def test_keys_are_stored_as_a_hash_and_found_by_prefix(store: KeyStore) -> None:
    assert not store.has_keys()
    create_tenant(store, "acme")
    made = create_key(store, "acme", ["search", "chat"], name="web", knowledge_bases=["docs", "docs"])
    prefix, _ = split_key(made.secret)
    assert made.secret.startswith(f"rsk_{prefix}_") and len(made.secret) == 4 + 8 + 1 + 43
    stored = store.get_key(prefix)
    assert stored == made.key
    assert stored.key_hash == hash_key(made.secret) and made.secret not in stored.model_dump_json()
    assert stored.knowledge_bases == ["docs"] and stored.scopes == ["search", "chat"]
    assert store.has_keys()
    other = create_key(store, "default", ["usage"])
    assert [k.prefix for k in store.list_keys("acme")] == [prefix]
    assert {k.prefix for k in store.list_keys()} == {prefix, other.key.prefix}
    assert create_key(store, "acme", ["search"]).secret != made.secret


def test_revoking_keeps_the_key_and_its_first_time(store: KeyStore) -> None:
    made = create_key(store, "default", ["search"])
    first = revoke_key(store, made.key.prefix, now=1000.0)
    assert first.revoked_at == 1000.0 and first.status(2000.0) == "revoked"
    again = revoke_key(store, made.key.prefix, now=5000.0)
    assert again.revoked_at == 1000.0
    stored = store.get_key(made.key.prefix)
    assert stored is not None and stored.revoked_at == 1000.0
    with pytest.raises(NotFoundError, match="unknown key"):
        revoke_key(store, "deadbeef")
    with pytest.raises(NotFoundError, match="unknown key"):  # another tenant's key is unknown to a tenant
        revoke_key(store, made.key.prefix, tenant_id="acme")


def test_verify_accepts_only_an_active_key(store: KeyStore) -> None:
    now = time.time()
    made = create_key(store, "default", ["search"], expires_at=now + 60, now=now)
    assert verify_key(store, made.secret, now) == made.key
    with pytest.raises(UnauthorizedError, match="expired"):
        verify_key(store, made.secret, now + 61)
    prefix = made.key.prefix
    for wrong in (f"rsk_{prefix}_{'x' * 43}", f"rsk_00000000_{'x' * 43}"):
        with pytest.raises(UnauthorizedError, match="invalid API key"):
            verify_key(store, wrong, now)
    for malformed in ("", "rsk_", made.secret + "x", made.secret.replace("rsk_", "sk_"), f"rsk_{prefix.upper()}_x"):
        with pytest.raises(UnauthorizedError, match="malformed"):
            verify_key(store, malformed, now)
    revoke_key(store, prefix)
    with pytest.raises(UnauthorizedError, match="revoked"):
        verify_key(store, made.secret, now)


def test_a_new_key_is_checked(store: KeyStore) -> None:
    with pytest.raises(NotFoundError, match="tenants create nope"):
        create_key(store, "nope", ["search"])
    with pytest.raises(InputError, match="unknown scope 'admin'; scopes are search, chat, ingest, manage, usage"):
        create_key(store, "default", ["admin"])
    with pytest.raises(InputError, match="at least one scope"):
        create_key(store, "default", [])
    with pytest.raises(InputError, match="in the past"):
        create_key(store, "default", ["search"], expires_at=time.time() - 1)
    assert not store.has_keys()


def test_a_wrong_key_costs_what_an_unknown_key_costs(tmp_path: Path) -> None:
    """Timing: a wrong secret under a real prefix and a key whose prefix does not exist take the same path (a
    store read, one hash, one constant-time comparison). A loose bound: a leak would be a shortcut, not 3x."""
    store = SqliteKeyStore(tmp_path / "keys.sqlite")
    made = create_key(store, "default", ["search"])
    wrong = f"rsk_{made.key.prefix}_{'A' * 43}"
    unknown = f"rsk_0badf00d_{'A' * 43}"

    def median(key: str) -> float:
        runs = []
        for _ in range(300):
            start = time.perf_counter()
            with pytest.raises(UnauthorizedError):
                verify_key(store, key)
            runs.append(time.perf_counter() - start)
        return statistics.median(runs)

    median(wrong), median(unknown)  # warm-up
    a, b = median(wrong), median(unknown)
    assert 1 / 3 < a / b < 3, (a, b)


def test_expiry_forms() -> None:
    now = 1_800_000_000.0
    assert parse_expiry("90d", now) == now + 90 * 86400
    assert parse_expiry("12h", now) == now + 12 * 3600
    assert parse_expiry("2w", now) == now + 14 * 86400
    assert parse_expiry("2027-01-31", now) == 1801353600.0
    assert parse_expiry("2027-01-31T12:00:00+01:00", now) == 1801353600.0 + 11 * 3600
    with pytest.raises(InputError, match="not a duration"):
        parse_expiry("soon", now)


# -- the command line ----------------------------------------------------------------------------------------------


def test_cli_tenants_and_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    assert run_cli(capsys, *data, "tenants", "create", "acme", "--daily-requests", "100")[0] == 0
    status, out, err = run_cli(capsys, *data, "tenants", "create", "acme")
    assert status == 2 and "already exists" in err
    status, out, _ = run_cli(capsys, *data, "tenants", "list", "--json")
    assert [t["id"] for t in json.loads(out)] == ["default", "acme"]

    status, out, err = run_cli(
        capsys,
        *data,
        "keys",
        "create",
        "--tenant",
        "acme",
        "--scope",
        "search,chat",
        "--kb",
        "docs",
        "--expires",
        "30d",
    )
    assert status == 0
    key = out.strip()
    prefix, _ = split_key(key)  # stdout is the key alone: `KEY=$(ragstep keys create ...)` works
    assert "not shown again" in err and prefix in err and key not in err

    status, out, _ = run_cli(capsys, *data, "keys", "list", "--tenant", "acme")
    assert status == 0 and prefix in out and "search,chat" in out and "active" in out and key not in out
    status, out, _ = run_cli(capsys, *data, "keys", "list", "--json")
    (listed,) = json.loads(out)
    assert listed["prefix"] == prefix and "key_hash" not in listed and listed["knowledge_bases"] == ["docs"]

    assert run_cli(capsys, *data, "keys", "revoke", prefix)[0] == 0
    status, out, _ = run_cli(capsys, *data, "keys", "list")
    assert "revoked" in out
    status, _, err = run_cli(capsys, *data, "keys", "create", "--scope", "everything")
    assert status == 2 and "unknown scope 'everything'" in err
    status, _, err = run_cli(capsys, *data, "keys", "create", "--tenant", "nope", "--scope", "search")
    assert status == 2 and "unknown tenant 'nope'" in err
    status, out, _ = run_cli(capsys, *data, "keys", "create", "--scope", "usage", "--json")
    made = json.loads(out)
    assert made["key"].startswith(f"rsk_{made['prefix']}_") and made["tenant_id"] == "default"


# -- the admin routes ----------------------------------------------------------------------------------------------


def test_admin_routes(tmp_path: Path) -> None:
    clients = Clients(Settings(data_dir=tmp_path / "data", key_cache_seconds=0))
    root = create_key(clients.keys, "default", ["manage"]).secret
    headers = {"Authorization": f"Bearer {root}"}
    with TestClient(create_app(clients)) as client:
        made = client.post("/v1/admin/tenants", headers=headers, json={"id": "acme", "daily_requests": 50})
        assert made.status_code == 201 and made.json()["daily_requests"] == 50
        assert client.post("/v1/admin/tenants", headers=headers, json={"id": "acme"}).status_code == 409
        tenants = client.get("/v1/admin/tenants", headers=headers).json()
        assert [t["id"] for t in tenants] == ["default", "acme"]

        body = {"tenant_id": "acme", "scopes": ["manage", "usage"], "name": "acme owner", "expires": "1d"}
        created = client.post("/v1/admin/keys", headers=headers, json=body)
        assert created.status_code == 201, created.text
        acme_key, prefix = created.json()["key"], created.json()["prefix"]
        assert "key_hash" not in created.json() and created.json()["expires_at"] > time.time()
        listed = client.get("/v1/admin/keys?tenant=acme", headers=headers).json()
        assert [k["prefix"] for k in listed] == [prefix] and "key" not in listed[0]

        # The tenant's own manage key: its keys only, no wider than itself.
        own = {"X-API-Key": acme_key}
        assert [k["prefix"] for k in client.get("/v1/admin/keys", headers=own).json()] == [prefix]
        assert client.post("/v1/admin/keys", headers=own, json={"scopes": ["chat"]}).status_code == 403
        child = client.post("/v1/admin/keys", headers=own, json={"scopes": ["usage"]})
        assert child.status_code == 201 and child.json()["tenant_id"] == "acme"
        assert client.get("/v1/admin/tenants", headers=own).status_code == 403
        bad = client.post("/v1/admin/keys", headers=own, json={"scopes": ["usage"], "expires": "someday"})
        assert bad.status_code == 400 and "not a duration" in bad.json()["message"]

        revoked = client.delete(f"/v1/admin/keys/{child.json()['prefix']}", headers=own)
        assert revoked.status_code == 200 and revoked.json()["revoked_at"]
        assert client.get("/v1/usage", headers={"X-API-Key": child.json()["key"]}).status_code == 401
        assert client.delete(f"/v1/admin/keys/{prefix}", headers=headers).status_code == 200  # admin: any tenant's
        assert client.get("/v1/admin/keys", headers=own).status_code == 401


def test_the_first_key_acts_for_its_tenant_at_once_beside_a_running_server(tmp_path: Path) -> None:
    # The server re-checks for a first key every key_cache_seconds; a request presenting one is not served as the
    # open mode's default tenant meanwhile (its knowledge base would land in the default tenant's stores).
    clients = Clients(Settings(data_dir=tmp_path / "data", key_cache_seconds=3600))
    with TestClient(create_app(clients)) as client:
        assert client.get("/v1/knowledge-bases").status_code == 200  # open mode, checked just now
        create_tenant(clients.keys, "acme")
        setup = create_key(clients.keys, "acme", ["ingest"]).secret
        made = client.post("/v1/knowledge-bases", headers={"X-API-Key": setup}, json={"name": "manuals"})
        assert made.status_code == 201, made.text
        assert [kb.name for kb in clients.context("acme").catalog.list_kbs()] == ["manuals"]
        assert clients.context().catalog.list_kbs() == []
        # From the first key on, every request needs one.
        assert client.get("/v1/knowledge-bases").status_code == 401


def test_clients_use_the_dynamodb_key_store(aws: None, tmp_path: Path) -> None:
    import boto3

    boto3.client("dynamodb").create_table(TableName=KEYS_TABLE, BillingMode="PAY_PER_REQUEST", **KEYS_SCHEMA)
    clients = Clients(Settings(data_dir=tmp_path / "data", keys_backend="dynamodb", keys_table=KEYS_TABLE))
    made = create_key(clients.keys, "default", ["search"])
    assert verify_key(clients.keys, made.secret) == made.key
    assert not (tmp_path / "data" / "keys.sqlite").exists()


def test_the_cli_spells_the_default_tenant_as_the_models_do() -> None:
    # The tenants command keeps pydantic out of `ragstep` start-up by spelling the default tenant out.
    from ragstep.entry.cli import tenants
    from ragstep.models import DEFAULT_TENANT

    assert tenants.DEFAULT_TENANT == DEFAULT_TENANT


def test_a_limited_manage_key_makes_and_revokes_no_key_wider_than_itself(tmp_path: Path) -> None:
    """Every dimension of a limited manage key bounds the keys it makes and revokes: scopes, knowledge bases,
    expiry, rate and burst; leaving a limit out is wider, not inherited silently."""
    clients = Clients(Settings(data_dir=tmp_path / "data", key_cache_seconds=0))
    create_tenant(clients.keys, "acme")
    unrestricted = create_key(clients.keys, "default", ["search", "chat"])
    limited = create_key(
        clients.keys,
        "default",
        ["search", "chat", "manage"],
        knowledge_bases=["docs-beta"],
        expires_at=parse_expiry("1h"),
        rate_per_second=1,
        burst=50,
    )
    headers = {"Authorization": f"Bearer {limited.secret}"}
    narrow: dict[str, Any] = {
        "scopes": ["search"],
        "knowledge_bases": ["docs-beta"],
        "expires": "30m",
        "rate_per_second": 0.5,
        "burst": 5,
    }
    wider = {
        "later expiry": {**narrow, "expires": "2h"},
        "faster": {**narrow, "rate_per_second": 1000, "burst": 100000},
        "unlimited rate": {**narrow, "rate_per_second": 0},
        "bigger burst": {**narrow, "burst": 100000},
        "every knowledge base": {**narrow, "knowledge_bases": []},
        "another knowledge base": {**narrow, "knowledge_bases": ["docs-beta", "docs-alpha"]},
        "another scope": {**narrow, "scopes": ["search", "ingest"]},
        "another tenant": {**narrow, "tenant_id": "acme"},
    }
    with TestClient(create_app(clients)) as client:
        answers = {name: client.post("/v1/admin/keys", headers=headers, json=body) for name, body in wider.items()}
        made = client.post("/v1/admin/keys", headers=headers, json=narrow)
        # Limits left out are the maker's, never none.
        inherited = client.post(
            "/v1/admin/keys", headers=headers, json={"scopes": ["chat"], "knowledge_bases": ["docs-beta"]}
        )
        revoke_wider = client.delete(f"/v1/admin/keys/{unrestricted.key.prefix}", headers=headers)
        revoke_narrow = client.delete(f"/v1/admin/keys/{made.json()['prefix']}", headers=headers)
    for name, answer in answers.items():
        assert answer.status_code == 403, (name, answer.text)
        assert answer.json()["error"] == "forbidden", name
    assert made.status_code == 201, made.text
    assert made.json()["rate_per_second"] == 0.5 and made.json()["burst"] == 5
    assert made.json()["expires_at"] <= (limited.key.expires_at or 0)
    assert inherited.status_code == 201, inherited.text
    assert inherited.json()["expires_at"] == limited.key.expires_at
    assert (inherited.json()["rate_per_second"], inherited.json()["burst"]) == (1, 50)
    assert revoke_wider.status_code == 403 and "no wider" in revoke_wider.json()["message"]
    assert clients.keys.get_key(unrestricted.key.prefix).revoked_at is None  # type: ignore[union-attr]
    assert revoke_narrow.status_code == 200 and revoke_narrow.json()["revoked_at"]
    assert len(clients.keys.list_keys("default")) == 4 and clients.keys.list_keys("acme") == []


def test_a_key_in_the_url_is_refused_and_never_reaches_the_access_log(tmp_path: Path) -> None:
    """uvicorn's access line is written from the request's URL: a key sent as ``?api_key=`` once landed there."""
    import logging
    import socket
    import threading

    import httpx
    import uvicorn

    clients = Clients(Settings(data_dir=tmp_path / "data"))
    made = create_key(clients.keys, "default", ["search"])
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(clients), log_level="info", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    handler = Collect()
    logging.getLogger("uvicorn.access").addHandler(handler)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        answers = [
            httpx.get(f"{base}/v1/knowledge-bases", params={"api_key": made.secret}),
            httpx.get(f"{base}/healthz?key={made.secret}&x=1"),
            httpx.get(f"{base}/v1/knowledge-bases", headers={"Authorization": f"Bearer {made.secret}"}),
        ]
    finally:
        logging.getLogger("uvicorn.access").removeHandler(handler)
        server.should_exit = True
        thread.join(10)
        sock.close()
    assert [a.status_code for a in answers] == [400, 400, 200]
    assert "Authorization: Bearer" in answers[0].json()["message"] and made.secret not in answers[0].text
    assert len(lines) == 3 and all(made.secret not in line for line in lines), lines
    assert "<redacted>" in lines[0]
