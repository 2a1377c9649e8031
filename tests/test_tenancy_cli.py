"""The cross-tenant matrix, extended to the command line and the response caches.

The CLI acts for the default tenant on its data dir (``tenants``, ``keys`` and ``usage`` administer the server's own
stores and name a tenant explicitly). Another tenant's knowledge base, document, session and usage in the same data
dir must be invisible to every command that reads, writes, deletes, searches or answers: each attempt below either
fails with the very message an unknown object gets, or shows nothing of the other tenant; and nothing of that tenant
changes. The response caches (SQLite per tenant, DynamoDB on moto with tenant-prefixed keys) never answer one
tenant's key from another tenant's entry. Every attempt is counted, and the leaks must be 0.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run_cli
from ragstep.app.ingest import ingest_file
from ragstep.app.sessions import open_session
from ragstep.app.tenants import create_tenant
from ragstep.context import Clients, Context
from ragstep.models import DEFAULT_TENANT, KnowledgeBase, Turn
from ragstep.models.tenancy import UsageRecord
from ragstep.settings import Settings
from test_usage import aws

__all__ = ["aws"]  # the moto fixture of the usage tests
pytestmark = pytest.mark.usefixtures("plain_environment")
SECRET_WORD = "zanzibarite"


def acme_data(data_dir: Path, folder: Path) -> tuple[Context, KnowledgeBase, str, str]:
    """Tenant acme's knowledge base "handbook" with one document, a session with a turn, and a usage record."""
    clients = Clients(Settings(data_dir=data_dir))
    create_tenant(clients.keys, "acme")
    acme = clients.context("acme")
    kb = acme.catalog.create_kb(KnowledgeBase(id=uuid.uuid4().hex, name="handbook", created_at=time.time()))
    folder.mkdir()
    (folder / "secret.md").write_text(f"# Acme secrets\n\nThe {SECRET_WORD} formula is kept in vault 7.\n")
    result = ingest_file(folder / "secret.md", kb, acme)
    assert result.status == "indexed"
    session = open_session(acme).session_id
    acme.history.append(Turn(session_id=session, created_at=time.time(), query="vault?", answer=f"{SECRET_WORD} 7"))
    usage = UsageRecord(
        id=uuid.uuid4().hex, tenant_id="acme", method="POST", route="/v1/chat/completions", status=200,
        started_at=time.time(), duration_ms=1.0, prompt_tokens=123,
    )  # fmt: skip
    clients.usage.add([usage])
    return acme, kb, session, str(result.knowledge_id)


def acme_state(acme: Context, kb: KnowledgeBase, session: str) -> tuple[object, ...]:
    """Everything of acme's that a command could change."""
    return (
        [k.id for k in acme.catalog.list_kbs()],
        sorted(k.id for k in acme.catalog.list_knowledge(kb.id)),
        [t.turn_id for t in acme.history.recent(session, limit=10)],
    )


def test_no_cli_command_reaches_another_tenants_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "data"
    acme, kb, session, knowledge = acme_data(data_dir, tmp_path / "docs")
    before = acme_state(acme, kb, session)
    dd = ("--data-dir", str(data_dir))
    secrets = (SECRET_WORD, kb.id, session, knowledge, "handbook")

    def unknown_like(args: tuple[str, ...], unknown_args: tuple[str, ...], ref: str, other: str) -> bool:
        """The command fails exactly as it does for an unknown object (its name in the message aside)."""
        code, out, err = run_cli(capsys, *args, *dd)
        code_u, out_u, err_u = run_cli(capsys, *unknown_args, *dd)
        return code != 0 and code == code_u and (out + err).replace(ref, other) == (out_u + err_u)

    def shows_nothing(*args: str) -> bool:
        code, out, err = run_cli(capsys, *args, *dd)
        return code == 0 and not any(s in out + err for s in secrets)

    missing_kb, missing_id = "no-such-kb", uuid.uuid4().hex
    checks = {
        "kb list": shows_nothing("kb", "list", "--json"),
        "kb show by name": unknown_like(("kb", "show", "handbook"), ("kb", "show", missing_kb), "handbook", missing_kb),
        "kb show by id": unknown_like(("kb", "show", kb.id), ("kb", "show", missing_id), kb.id, missing_id),
        "kb delete": unknown_like(("kb", "delete", kb.id), ("kb", "delete", missing_id), kb.id, missing_id),
        "delete document": unknown_like(("delete", knowledge), ("delete", missing_id), knowledge, missing_id),
        "search in its kb": unknown_like(
            ("search", SECRET_WORD, "--kb", kb.id), ("search", SECRET_WORD, "--kb", missing_id), kb.id, missing_id
        ),
        "chat over its kb": unknown_like(
            ("chat", SECRET_WORD, "--kb", "handbook"), ("chat", SECRET_WORD, "--kb", missing_kb), "handbook", missing_kb
        ),
        "sessions list": shows_nothing("sessions", "list", "--json"),
        "sessions show": unknown_like(
            ("sessions", "show", session), ("sessions", "show", missing_id), session, missing_id
        ),
        "sessions delete": unknown_like(
            ("sessions", "delete", session), ("sessions", "delete", missing_id), session, missing_id
        ),
        "usage of the default tenant": shows_nothing("usage", "--json"),
        "usage by month of the default tenant": shows_nothing("usage", "--month", "--json"),
    }
    # The default tenant's own knowledge base of the same name is its own: creating it is allowed and separate.
    code, _, _ = run_cli(capsys, "kb", "create", "handbook", *dd)
    checks["same name, own tenant"] = code == 0 and acme.catalog.get_kb("handbook").id == kb.id
    code, out, _ = run_cli(capsys, "search", SECRET_WORD, "--kb", "handbook", "--json", *dd)
    checks["search the default tenant's kbs"] = code == 0 and json.loads(out)["results"] == [] and kb.id not in out
    leaks = sorted(name for name, refused in checks.items() if not refused)
    assert acme_state(acme, kb, session) == before, "a command changed another tenant's data"
    assert len(checks) == 14 and leaks == []
    # acme's own usage stays reachable to whoever administers the server, by name.
    code, out, _ = run_cli(capsys, "usage", "--tenant", "acme", "--month", "--json", *dd)
    assert code == 0 and json.loads(out)["total"]["prompt_tokens"] == 123


@pytest.fixture(params=["sqlite", "dynamodb"])
def clients(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Clients]:
    if request.param == "sqlite":
        yield Clients(Settings(data_dir=tmp_path / "data", cache_backend="sqlite"))
        return
    request.getfixturevalue("aws")
    import boto3

    boto3.client("dynamodb").create_table(
        TableName="ragstep-test-cache",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "key", "KeyType": "HASH"}],  # adapters/cache/dynamodb.py's layout
        AttributeDefinitions=[{"AttributeName": "key", "AttributeType": "S"}],
    )
    yield Clients(Settings(data_dir=tmp_path / "data", cache_backend="dynamodb", cache_table="ragstep-test-cache"))


def test_a_cache_entry_never_answers_another_tenant(clients: Clients) -> None:
    caches = {tenant: clients.cache(tenant) for tenant in (DEFAULT_TENANT, "acme", "globex")}
    attempts = leaks = 0
    for owner, cache in caches.items():
        assert cache is not None
        cache.put("answer:same-question", f"{owner}'s answer", ttl_s=3600)
    for reader, cache in caches.items():
        assert cache is not None
        attempts += 1
        leaks += cache.get("answer:same-question") != f"{reader}'s answer"
    only_acme = "embedding:only-acme"
    acme_cache = caches["acme"]
    assert acme_cache is not None
    acme_cache.put(only_acme, "[0.1, 0.2]", ttl_s=3600)
    for reader in (DEFAULT_TENANT, "globex"):
        other = caches[reader]
        assert other is not None
        attempts += 1
        leaks += other.get(only_acme) is not None
    assert (attempts, leaks) == (5, 0)
