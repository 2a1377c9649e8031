"""API keys on the HTTP API: who may call, for which tenant, with which scopes and knowledge bases, how often.

Two tenants (acme, globex) each hold a knowledge base named ``docs``; acme has a second, ``secret``. Keys are made
with the real use cases and presented to the real app (in-process ASGI, and ``ragstep serve`` for the start-up
rule). The cross-tenant matrix at the end tries every route against the other tenant's objects and counts leaks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ragstep.app.ingest import ingest_file
from ragstep.app.keys import create_key, revoke_key
from ragstep.app.tenants import create_tenant
from ragstep.context import Clients, Context
from ragstep.entry.cli.main import main
from ragstep.entry.cli.serve import access_rule, is_loopback
from ragstep.entry.http.app import create_app
from ragstep.entry.http.auth import Gate
from ragstep.entry.http.deps import route_scope
from ragstep.errors import InputError
from ragstep.models import KnowledgeBase, Turn
from ragstep.settings import Settings

SHARED = Path(__file__).resolve().parents[1] / "shared"
SEARCH = "/v1/knowledge-search"
TEXT = {
    "acme": "Acme rockets burn liquid oxygen. The roadrunner test range lies in the desert.",
    "globex": "Globex hammocks hang in volcano lairs. Hank Scorpio approves every hammock.",
}
SECRET = "Acme payroll: the coyote is paid in anvils every second Tuesday."


def served_app(client: TestClient) -> FastAPI:
    app = client.app
    assert isinstance(app, FastAPI)
    return app


def gate(client: TestClient) -> Gate:
    """The app's gate (its usage writer, its auth state)."""
    found: Gate = served_app(client).state.gate
    return found


@pytest.fixture(autouse=True)
def _plain_environment(plain_environment: None) -> None:
    """No RAGSTEP_* from the developer's shell."""


def _kb(ctx: Context, name: str, text: str, folder: Path) -> KnowledgeBase:
    kb = ctx.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name=name, created_at=time.time()))
    path = folder / ctx.tenant_id / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {name}\n\n{text}\n", encoding="utf-8")
    assert ingest_file(path, kb, ctx).status == "indexed"
    return kb


@dataclass
class World:
    clients: Clients
    client: TestClient
    kbs: dict[str, KnowledgeBase]
    keys: dict[str, str]

    def get(self, path: str, key: str | None, **kw: Any) -> Any:
        return self.client.get(path, headers=auth(key), **kw)

    def post(self, path: str, key: str | None, body: Any) -> Any:
        return self.client.post(path, headers=auth(key), json=body)

    def delete(self, path: str, key: str | None) -> Any:
        return self.client.delete(path, headers=auth(key))


def auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def make_world(tmp_path: Path, **settings: Any) -> Iterator[World]:
    clients = Clients(Settings(data_dir=tmp_path / "data", key_cache_seconds=0, **settings))
    store = clients.keys
    create_tenant(store, "acme")
    create_tenant(store, "globex")
    acme, globex = clients.context("acme"), clients.context("globex")
    kbs = {
        "acme": _kb(acme, "docs", TEXT["acme"], tmp_path / "in"),
        "acme-secret": _kb(acme, "secret", SECRET, tmp_path / "in"),
        "globex": _kb(globex, "docs", TEXT["globex"], tmp_path / "in"),
    }
    every = ["search", "chat", "ingest", "manage", "usage"]
    keys = {
        "acme": create_key(store, "acme", every, name="acme admin").secret,
        "acme-search": create_key(store, "acme", ["search"]).secret,
        "acme-docs": create_key(store, "acme", ["search", "chat", "manage"], knowledge_bases=["docs"]).secret,
        "globex": create_key(store, "globex", every).secret,
        "root": create_key(store, "default", every, name="operator").secret,
    }
    with TestClient(create_app(clients)) as client:
        yield World(clients, client, kbs, keys)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from make_world(tmp_path)


def search(world: World, key: str | None, query: str, kbs: list[str] | None = None) -> Any:
    body: dict[str, Any] = {"query": query}
    if kbs is not None:
        body["knowledge_base_ids"] = kbs
    return world.post(SEARCH, key, body)


def contents(response: Any) -> str:
    assert response.status_code == 200, response.text
    return " ".join(r["content"] for r in response.json()["results"])


# -- open local mode and the start-up rule -----------------------------------------------------------------------


def test_without_keys_the_default_tenant_is_served_without_auth(ctx: Context, make_kb: Any, tmp_path: Path) -> None:
    kb = make_kb("docs")
    path = tmp_path / "a.md"
    path.write_text("Espresso is brewed under pressure.", encoding="utf-8")
    ingest_file(path, kb, ctx)
    with TestClient(create_app(ctx.clients)) as client:
        response = client.post(SEARCH, json={"query": "espresso", "knowledge_base_ids": ["docs"]})
        assert response.status_code == 200, response.text
        assert "Espresso" in contents(response)
        # The first key turns auth on for the running server (checked again every key-cache period, 10 s here).
        made = create_key(ctx.clients.keys, "default", ["search"])
        gate(client)._checked_at = float("-inf")  # the period has passed
        refused = client.post(SEARCH, json={"query": "espresso", "knowledge_base_ids": ["docs"]})
        assert refused.status_code == 401
        allowed = client.post(
            SEARCH, json={"query": "espresso", "knowledge_base_ids": ["docs"]}, headers=auth(made.secret)
        )
        assert allowed.status_code == 200


def test_the_start_up_rule() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.0.2.1")
    assert "without authentication on 127.0.0.1 only" in access_rule("127.0.0.1", has_keys=False, auth="auto")
    assert "API keys required" in access_rule("0.0.0.0", has_keys=True, auth="auto")
    with pytest.raises(InputError, match=r"refusing to serve 0\.0\.0\.0 without API keys") as err:
        access_rule("0.0.0.0", has_keys=False, auth="auto")
    assert "ragstep keys create" in err.value.message
    with pytest.raises(InputError, match="RAGSTEP_AUTH=required"):
        access_rule("127.0.0.1", has_keys=False, auth="required")


def test_serve_refuses_a_public_address_without_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("uvicorn")
    status = main(["--data-dir", str(tmp_path / "data"), "serve", "--host", "0.0.0.0", "--port", str(_free_port())])
    assert status == 2
    err = capsys.readouterr().err
    assert "refusing to serve 0.0.0.0 without API keys" in err and "Traceback" not in err


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_real_server_says_what_it_requires(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    import httpx

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTEP_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SHARED), env.get("PYTHONPATH", "")) if p)
    cli = [sys.executable, "-m", "ragstep", "--data-dir", str(tmp_path / "data")]

    def serve(expect: str) -> tuple[subprocess.Popen[bytes], str, Path]:
        port = _free_port()
        log = tmp_path / f"server-{port}.log"
        with log.open("wb") as out:
            server = subprocess.Popen([*cli, "serve", "--port", str(port)], env=env, stdout=out, stderr=out)
        deadline = time.monotonic() + 20
        while expect not in log.read_text() or "Uvicorn running" not in log.read_text():
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        return server, f"http://127.0.0.1:{port}", log

    def stop(server: subprocess.Popen[bytes]) -> None:
        server.terminate()
        server.wait(timeout=10)

    server, base, log = serve("serving the default tenant without authentication on 127.0.0.1 only")
    try:
        assert httpx.get(f"{base}/v1/usage").status_code == 200  # open: the default tenant, every scope
    finally:
        stop(server)
    made = subprocess.run([*cli, "keys", "create", "--scope", "usage"], env=env, capture_output=True, check=True)
    key = made.stdout.decode().strip()
    server, base, log = serve("API keys required")
    try:
        assert httpx.get(f"{base}/v1/usage").status_code == 401
        assert httpx.get(f"{base}/v1/usage", headers={"X-API-Key": key}).status_code == 200
    finally:
        stop(server)
    assert "Traceback" not in log.read_text() and key not in log.read_text()


# -- keys ----------------------------------------------------------------------------------------------------------


def test_missing_malformed_unknown_and_wrong_keys_are_401(world: World) -> None:
    body = {"query": "rockets", "knowledge_base_ids": ["docs"]}
    real = world.keys["acme"]
    prefix = real.split("_")[1]
    wrong_secret = f"rsk_{prefix}_{'A' * 43}"
    unknown = f"rsk_0000beef_{'A' * 43}"
    cases = {
        "missing": {},
        "basic": {"Authorization": "Basic dXNlcjpwYXNz"},
        "empty bearer": {"Authorization": "Bearer "},
        "garbage": {"Authorization": "Bearer hello"},
        "wrong secret": {"Authorization": f"Bearer {wrong_secret}"},
        "unknown": {"X-API-Key": unknown},
        "two keys": {"Authorization": f"Bearer {real}", "X-API-Key": world.keys["globex"]},
    }
    messages = {}
    for name, headers in cases.items():
        response = world.client.post(SEARCH, json=body, headers=headers)
        assert response.status_code == 401, (name, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        data = response.json()
        assert data["error"] == "unauthorized" and data["message"], name
        assert real.split("_", 2)[2] not in response.text
        messages[name] = data["message"]
    assert messages["wrong secret"] == messages["unknown"]  # a real prefix is not told apart from an unknown one
    assert "Authorization: Bearer" in messages["missing"]
    assert world.client.post(SEARCH, json=body, headers={"X-API-Key": real}).status_code == 200


def test_revoked_and_expired_keys_are_401(world: World) -> None:
    store = world.clients.keys
    key = world.keys["acme-search"]
    assert search(world, key, "rockets", ["docs"]).status_code == 200
    revoke_key(store, key.split("_")[1])
    response = search(world, key, "rockets", ["docs"])
    assert response.status_code == 401 and "revoked" in response.json()["message"]

    now = time.time()
    expired = create_key(store, "acme", ["search"], expires_at=now - 1, now=now - 60)
    response = search(world, expired.secret, "rockets", ["docs"])
    assert response.status_code == 401 and "expired" in response.json()["message"]


def test_a_key_acts_for_its_tenant(world: World) -> None:
    assert "oxygen" in contents(search(world, world.keys["acme"], "liquid oxygen rockets", ["docs"]))
    assert "hammock" in contents(search(world, world.keys["globex"], "volcano hammocks", ["docs"]))
    assert "oxygen" not in contents(search(world, world.keys["globex"], "liquid oxygen rockets", ["docs"]))


def test_a_route_needs_its_scope(world: World) -> None:
    key = world.keys["acme-search"]
    assert search(world, key, "rockets", ["docs"]).status_code == 200
    for response in (
        world.get("/v1/usage", key),
        world.get("/v1/sessions", key),
        world.get("/v1/admin/keys", key),
        world.post("/v1/admin/keys", key, {"scopes": ["search"]}),
    ):
        assert response.status_code == 403, response.text
        data = response.json()
        assert data["error"] == "forbidden" and "scope" in data["message"]


def test_every_route_but_healthz_needs_a_key(world: World) -> None:
    """No route is open by accident: each /v1 route answers 401 to a request without a key."""
    paths = {p: ops for p, ops in served_app(world.client).openapi()["paths"].items() if p.startswith("/v1/")}
    assert len(paths) >= 6
    for path, operations in paths.items():
        for method in operations:
            response = world.client.request(method.upper(), path.replace("{", "").replace("}", ""), json={})
            assert response.status_code == 401, (method, path, response.text)
    assert world.client.get("/healthz").status_code == 200


def test_the_route_table_denies_what_it_does_not_know() -> None:
    assert route_scope("POST", "/v1/knowledge-search") == "search"
    assert route_scope("GET", "/v1/knowledge-bases/{kb}") == "search"
    assert route_scope("DELETE", "/v1/knowledge-bases/{kb}") == "ingest"
    assert route_scope("GET", "/v1/sessions/{session_id}/messages") == "chat"
    assert route_scope("GET", "/v1/usage") == "usage"
    assert route_scope("POST", "/v1/chatter") == "manage"  # whole segments only
    assert route_scope("GET", "/v1/something-new") == "manage"


def test_a_key_limited_to_a_knowledge_base_sees_no_other(world: World) -> None:
    key = world.keys["acme-docs"]
    assert "oxygen" in contents(search(world, key, "rockets oxygen", ["docs"]))
    secret_kb = world.kbs["acme-secret"]
    for ref in ("secret", secret_kb.id):
        response = search(world, key, "payroll anvils", [ref])
        assert response.status_code == 404
        unknown = search(world, key, "payroll anvils", ["no-such-kb"])
        assert response.json()["message"].replace(ref, "X") == unknown.json()["message"].replace("no-such-kb", "X")
    assert "anvils" in contents(search(world, world.keys["acme"], "payroll anvils coyote", ["secret"]))
    listed = world.get("/v1/knowledge-bases", key)
    assert listed.status_code == 200 and secret_kb.id not in listed.text and world.kbs["acme"].id in listed.text
    assert world.get(f"/v1/knowledge-bases/{secret_kb.id}/documents", key).status_code == 404
    # A document of the hidden knowledge base is unknown too.
    (doc,) = world.clients.context("acme").catalog.list_knowledge(secret_kb.id)
    response = world.post(SEARCH, key, {"query": "payroll", "knowledge_ids": [doc.id]})
    assert response.status_code == 404
    assert world.get(f"/v1/documents/{doc.id}", key).status_code == 404
    # It may not make a key wider than itself.
    wider = world.post("/v1/admin/keys", key, {"scopes": ["search"]})
    assert wider.status_code == 403 and "limited" in wider.json()["message"]
    narrower = world.post("/v1/admin/keys", key, {"scopes": ["search"], "knowledge_bases": ["docs"]})
    assert narrower.status_code == 201, narrower.text
    assert world.post("/v1/admin/keys", key, {"scopes": ["ingest"], "knowledge_bases": ["docs"]}).status_code == 403


# -- limits --------------------------------------------------------------------------------------------------------


def test_a_key_over_its_rate_limit_gets_429_with_retry_after(world: World) -> None:
    made = create_key(world.clients.keys, "acme", ["search"], rate_per_second=0.5, burst=2)
    statuses = [search(world, made.secret, "rockets", ["docs"]) for _ in range(3)]
    assert [r.status_code for r in statuses] == [200, 200, 429]
    limited = statuses[-1]
    assert limited.json()["error"] == "rate_limited"
    assert 1 <= int(limited.headers["retry-after"]) <= 2
    # Another key of the same tenant has its own bucket.
    assert search(world, world.keys["acme"], "rockets", ["docs"]).status_code == 200


def test_a_tenant_over_its_daily_quota_gets_429_until_midnight(world: World) -> None:
    store = world.clients.keys
    create_tenant(store, "initech", daily_requests=2)
    key = create_key(store, "initech", ["search", "usage"]).secret
    assert [world.get("/v1/usage", key).status_code for _ in range(3)] == [200, 200, 429]
    response = world.get("/v1/usage", key)
    assert response.status_code == 429 and "daily request quota (2)" in response.json()["message"]
    retry = int(response.headers["retry-after"])
    assert 0 < retry <= 86401
    assert search(world, world.keys["acme"], "rockets", ["docs"]).status_code == 200  # other tenants unaffected


def test_the_token_quota_counts_what_was_recorded(tmp_path: Path) -> None:
    for world in make_world(tmp_path, daily_token_quota=100):
        from ragstep.models.tenancy import UsageRecord

        now = time.time()
        spent = UsageRecord(
            id="u1", tenant_id="globex", method="POST", route="/v1/chat/completions", status=200,
            started_at=now - 1, duration_ms=5, model="m", prompt_tokens=80, completion_tokens=30,
        )  # fmt: skip
        world.clients.usage.add([spent])
        response = world.get("/v1/usage", world.keys["globex"])
        assert response.status_code == 429 and "daily token quota (100)" in response.json()["message"]
        assert world.get("/v1/usage", world.keys["acme"]).status_code == 200


# -- the cross-tenant matrix ---------------------------------------------------------------------------------------


def test_cross_tenant_matrix_has_zero_leaks(world: World) -> None:
    """globex's key tries every route on acme's objects; acme's key does the same on globex's. Each attempt must be
    refused (401/403/404) or come back without the other tenant's data."""
    acme_ctx, globex_ctx = world.clients.context("acme"), world.clients.context("globex")
    sessions = {"acme": uuid.uuid4().hex, "globex": uuid.uuid4().hex}
    for ctx, sid in ((acme_ctx, sessions["acme"]), (globex_ctx, sessions["globex"])):
        ctx.history.append(Turn(session_id=sid, created_at=time.time(), query="q", answer=f"{ctx.tenant_id} answer"))
    docs = {t: world.clients.context(t).catalog.list_knowledge(world.kbs[t].id)[0].id for t in ("acme", "globex")}
    models = world.get("/v1/models", world.keys["acme"]).json()["data"]
    profile = models[0]["id"]
    # Make a usage record of each tenant to look for.
    search(world, world.keys["acme"], "rockets", ["docs"])
    search(world, world.keys["globex"], "hammocks", ["docs"])
    gate(world.client).recorder.flush()

    upload = {"files": ("planted.md", b"# planted\n\nwritten by the other tenant\n", "text/markdown")}
    attempts = 0
    leaks: list[str] = []

    def attempt(name: str, response: Any, other: str, marker: str) -> None:
        nonlocal attempts
        attempts += 1
        if response.status_code in (401, 403, 404):
            return
        if response.status_code >= 400:
            leaks.append(f"{name}: unexpected {response.status_code} {response.text[:200]}")
        elif marker in response.text:
            leaks.append(f"{name}: {other}'s {marker!r} in {response.text[:200]}")

    for me, other in (("globex", "acme"), ("acme", "globex")):
        key = world.keys[me]
        their_kb = world.kbs[other]
        their_key = world.keys[other].split("_")[1]
        marker = {"acme": "roadrunner", "globex": "Scorpio"}[other]  # in their documents, not in the queries
        sid = sessions[other]
        query = {"acme": "liquid oxygen rockets", "globex": "volcano hammocks"}[other]
        attempt("search by kb id", search(world, key, query, [their_kb.id]), other, marker)
        attempt("search by name", search(world, key, query, ["docs"]), other, marker)
        attempt(
            "search by doc", world.post(SEARCH, key, {"query": query, "knowledge_ids": [docs[other]]}), other, marker
        )
        chat = {"model": profile, "messages": [{"role": "user", "content": query}]}
        attempt(
            "chat by kb id",
            world.post("/v1/chat/completions", key, {**chat, "knowledge_base_ids": [their_kb.id]}),
            other,
            marker,
        )
        attempt("chat in session", world.post("/v1/chat/completions", key, {**chat, "session_id": sid}), other, marker)
        attempt("read session", world.get(f"/v1/sessions/{sid}", key), other, f"{other} answer")
        attempt("session messages", world.get(f"/v1/sessions/{sid}/messages", key), other, f"{other} answer")
        attempt("list sessions", world.get("/v1/sessions", key), other, sid)
        attempt("delete session", world.delete(f"/v1/sessions/{sid}", key), other, sid)
        kb_path, doc_path = f"/v1/knowledge-bases/{their_kb.id}", f"/v1/documents/{docs[other]}"
        attempt("list knowledge bases", world.get("/v1/knowledge-bases", key), other, their_kb.id)
        attempt("show knowledge base", world.get(kb_path, key), other, their_kb.id)
        attempt("rename knowledge base", world.client.patch(kb_path, headers=auth(key), json={"name": "x"}), other, "x")
        attempt("list documents", world.get(f"{kb_path}/documents", key), other, docs[other])
        attempt(
            "upload a document",
            world.client.post(f"{kb_path}/documents", headers=auth(key), files=upload),
            other,
            "job",
        )
        attempt("show document", world.get(doc_path, key), other, docs[other])
        attempt(
            "disable document", world.client.patch(doc_path, headers=auth(key), json={"enabled": False}), other, "x"
        )
        attempt("delete document", world.delete(doc_path, key), other, docs[other])
        attempt("delete knowledge base", world.delete(kb_path, key), other, their_kb.id)
        attempt("usage", world.get("/v1/usage?group_by=key", key), other, their_key)
        attempt("usage of the other", world.get(f"/v1/usage?tenant={other}&group_by=key", key), other, their_key)
        attempt("list keys", world.get("/v1/admin/keys", key), other, their_key)
        attempt("list keys of the other", world.get(f"/v1/admin/keys?tenant={other}", key), other, their_key)
        attempt("revoke the other's key", world.delete(f"/v1/admin/keys/{their_key}", key), other, their_key)
        attempt(
            "key for the other",
            world.post("/v1/admin/keys", key, {"tenant_id": other, "scopes": ["search"]}),
            other,
            "rsk_",
        )
        attempt("list tenants", world.get("/v1/admin/tenants", key), other, f'"{other}"')
        attempt("create tenant", world.post("/v1/admin/tenants", key, {"id": f"{other}-2"}), other, f"{other}-2")

    # Nothing was changed behind the other's back either.
    assert acme_ctx.history.recent(sessions["acme"]) and globex_ctx.history.recent(sessions["globex"])
    assert all(k.revoked_at is None for k in world.clients.keys.list_keys() if k.name == "acme admin")
    assert world.clients.keys.get_tenant("acme-2") is None
    for tenant in ("acme", "globex"):
        catalog = world.clients.context(tenant).catalog
        assert catalog.get_kb("docs") is not None and catalog.get_knowledge(docs[tenant]) is not None
        assert catalog.get_knowledge(docs[tenant]).enabled  # type: ignore[union-attr]
        assert len(catalog.list_knowledge(world.kbs[tenant].id)) == 1  # nothing planted
    assert attempts == 52
    assert leaks == [], "\n".join(leaks)
