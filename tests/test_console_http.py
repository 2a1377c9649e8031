"""The web console as HTTP sees it (no browser): the page and its assets are served by the API itself, locally and by
the API function on Lambda, hold nothing from another host, ship in the package, and ``GET /v1/me`` tells a key what
it may do. The page's behaviour in a browser is tests/test_console.py."""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ragstep.app.keys import create_key
from ragstep.context import Clients
from ragstep.entry.aws import runtime
from ragstep.entry.cli.demo import console_hint
from ragstep.entry.http.app import create_app
from ragstep.entry.http.console import ASSETS, PAGE_HEADERS
from ragstep.errors import InputError
from ragstep.settings import Settings
from test_asl import load_template
from test_handlers import invoke, load_event

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(p.name for p in ASSETS.iterdir() if p.is_file())


@pytest.fixture
def clients(tmp_path: Path) -> Clients:
    return Clients(Settings(data_dir=tmp_path / "data", embedder="none"))


@pytest.fixture
def client(clients: Clients) -> Iterator[TestClient]:
    with TestClient(create_app(clients)) as test_client:
        yield test_client


def test_the_page_and_its_assets_are_served_with_a_strict_policy(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == PAGE_HEADERS["Content-Security-Policy"]
    assert "connect-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert '<script type="module" src="console/app.js">' in page.text
    types = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}
    for name in FILES:
        asset = client.get(f"/console/{name}")
        assert asset.status_code == 200, name
        assert asset.headers["content-type"].startswith(types[Path(name).suffix]), name
        assert asset.headers["cache-control"] == "no-cache"
        # Revalidated, not downloaded again: an unchanged file is a 304.
        again = client.get(f"/console/{name}", headers={"If-None-Match": asset.headers["etag"]})
        assert again.status_code == 304, name


@pytest.mark.parametrize("path", ["/console/__init__.py", "/console/missing.js", "/console/../__init__.py"])
def test_nothing_but_the_assets_is_served(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_every_asset_is_referenced_locally_and_none_comes_from_another_host() -> None:
    """No CDN, no font service: the page works offline. Every module a module imports is shipped."""
    for name in FILES:
        text = (ASSETS / name).read_text(encoding="utf-8")
        assert not re.search(r"(?:src|href|from|import|url)\s*\(?\s*[\"']?(?:https?:)?//", text), name
        for imported in re.findall(r"from \"\./([\w.]+)\"", text):
            assert imported in FILES, (name, imported)
    page = (ASSETS / "index.html").read_text(encoding="utf-8")
    for ref in re.findall(r"(?:src|href)=\"console/([\w.]+)\"", page):
        assert ref in FILES, ref
    # Small: plain modules, no framework, no build step.
    assert sum((ASSETS / name).stat().st_size for name in FILES) < 120_000


def test_the_assets_are_package_data() -> None:
    """A wheel (and the Lambda layer, a copy of shared/ragstep) carries every asset."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["ragstep"]
    for name in FILES:
        relative = f"entry/http/console/static/{name}"
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), relative


def test_me_in_open_local_mode(client: TestClient) -> None:
    me = client.get("/v1/me").json()
    assert me == {
        "tenant_id": "default",
        "key_prefix": "",
        "key_name": "",
        "scopes": ["search", "chat", "ingest", "manage", "usage"],
        "knowledge_bases": [],
        "expires_at": None,
        "keyless": True,
    }


def test_me_tells_a_key_its_scopes_and_refuses_no_key(clients: Clients, client: TestClient) -> None:
    created = create_key(clients.keys, "default", ["chat", "search"], name="web", knowledge_bases=["docs"])
    key = created.secret
    missing = client.get("/v1/me")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
    wrong = client.get("/v1/me", headers={"Authorization": "Bearer rsk_00000000_" + "x" * 43})
    assert wrong.status_code == 401 and wrong.json()["error"] == "unauthorized"
    me = client.get("/v1/me", headers={"Authorization": f"Bearer {key}"}).json()
    assert me["key_prefix"] == key.split("_")[1] and me["key_name"] == "web"
    assert me["scopes"] == ["chat", "search"] and me["knowledge_bases"] == ["docs"] and me["keyless"] is False
    assert key not in json.dumps(me)
    # The page itself needs no key: a browser loads it before it can send one. It holds no data.
    assert client.get("/").status_code == 200
    assert client.get("/console/app.js").status_code == 200


def test_the_stack_serves_the_page_without_the_authorizer_and_the_api_with_it() -> None:
    events = load_template()["Resources"]["ApiFunction"]["Properties"]["Events"]
    assert events["ConsolePage"]["Properties"] == {"Path": "/", "Method": "GET"}
    assert events["ConsoleAssets"]["Properties"] == {"Path": "/console/{proxy+}", "Method": "GET"}
    assert events["HttpApi"]["Properties"]["Auth"] == {"Authorizer": "ApiKeyAuthorizer"}


def test_the_api_function_serves_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Lambda, through Mangum, as API Gateway's payload 2.0 events for the two console routes arrive."""
    for name in [k for k in os.environ if k.startswith(("RAGSTEP_", "AWS_LAMBDA_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RAGSTEP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    runtime.reset()
    try:
        for path, route, kind in (
            ("/", "GET /", "text/html"),
            ("/console/app.js", "GET /console/{proxy+}", "text/javascript"),
        ):
            event = load_event("api_healthz")
            event["rawPath"] = event["requestContext"]["http"]["path"] = path
            event["routeKey"] = event["requestContext"]["routeKey"] = route
            event["pathParameters"] = {"proxy": path.removeprefix("/console/")} if path != "/" else None
            response = invoke("api", event)
            assert response["statusCode"] == 200, response
            assert response["headers"]["content-type"].startswith(kind)
            assert response["headers"]["content-security-policy"] == PAGE_HEADERS["Content-Security-Policy"]
            body = response["body"]
            assert ("<!doctype html>" in body) if path == "/" else ("boot()" in body)
    finally:
        runtime.reset()


def test_the_demo_ends_with_the_consoles_address() -> None:
    assert console_hint(argparse.Namespace()) == (
        "\nOpen the web console: run `ragstep serve` and visit http://127.0.0.1:8000/"
    )
    assert "ragstep --data-dir '/tmp/my data' serve" in console_hint(argparse.Namespace(data_dir="/tmp/my data"))


def test_the_page_names_its_chat_url_and_may_connect_there_only(tmp_path: Path) -> None:
    chat_url = "https://abc123.lambda-url.us-east-1.on.aws/"
    clients = Clients(Settings(data_dir=tmp_path / "data", console_chat_url=chat_url))
    with TestClient(create_app(clients)) as test_client:
        page = test_client.get("/")
    assert f'<meta name="ragstep-chat-url" content="{chat_url}">' in page.text
    policy = page.headers["content-security-policy"]
    assert "connect-src 'self' https://abc123.lambda-url.us-east-1.on.aws;" in policy
    assert policy.count("https://") == 1


@pytest.mark.parametrize(
    "bad", ["abc123.lambda-url.us-east-1.on.aws/", "https://host/path", "ftp://host/", "https:///"]
)
def test_a_chat_url_that_is_not_a_base_url_is_refused_at_start(tmp_path: Path, bad: str) -> None:
    clients = Clients(Settings(data_dir=tmp_path / "data", console_chat_url=bad))
    with pytest.raises(InputError, match=r"RAGSTEP_CONSOLE_CHAT_URL=.* is not a base URL"):
        create_app(clients)


def test_the_stack_streams_the_consoles_answers_from_the_chat_function() -> None:
    resources = load_template()["Resources"]
    env = resources["ApiFunction"]["Properties"]["Environment"]["Variables"]
    assert env["RAGSTEP_CONSOLE_CHAT_URL"] == {"Fn::GetAtt": ["ChatStreamFunctionUrl", "FunctionUrl"]}
    cors = resources["ChatStreamFunction"]["Properties"]["FunctionUrlConfig"]["Cors"]
    # A bearer key in a header, never a cookie: no credentials are allowed cross-origin.
    assert "AllowCredentials" not in cors
    assert cors["AllowMethods"] == ["POST"] and cors["AllowHeaders"] == ["authorization", "content-type"]
