"""Web pages by URL: a real site on 127.0.0.1 (pages, a sitemap, a redirect loop, a huge page, a non-HTML type, a
page that changes between two ingests, robots.txt), fetched by the real fetcher, ingested and searched."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ragstep.adapters.web.pages import FetchRefused, PageFetcher, sitemap_urls
from ragstep.app.search import knowledge_search
from ragstep.app.urls import ingest_urls, page_filename
from ragstep.context import Clients, Context
from ragstep.models import KnowledgeBase, SearchRequest
from ragstep.settings import Settings

PAGE = (
    "<html><head><title>Espresso care</title></head><body><h1>Espresso care</h1>"
    "<p>Descale the espresso machine every two months with citric acid.</p></body></html>"
)


@dataclass
class Site:
    pages: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)
    base: str = ""

    def put(self, path: str, body: str | bytes, kind: str = "text/html", status: int = 200, **headers: str) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.pages[path] = (status, {"Content-Type": kind, **headers}, data)


@pytest.fixture
def site() -> Iterator[Site]:
    state = Site()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            state.hits.append(self.path)
            status, headers, body = state.pages.get(self.path, (404, {"Content-Type": "text/plain"}, b"missing"))
            etag = headers.get("ETag")
            if etag and self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.end_headers()
                return
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def local(tmp_path: Path) -> tuple[Context, KnowledgeBase]:
    clients = Clients(Settings(data_dir=tmp_path / "data", url_allowed_hosts=["127.0.0.1"], url_max_bytes=64 * 1024))
    ctx = clients.context()
    from ragstep.app.knowledge_bases import create_knowledge_base

    return ctx, create_knowledge_base(ctx, "web", "document", "none")


def fetcher(**kw: Any) -> PageFetcher:
    return PageFetcher(timeout_s=10, max_bytes=64 * 1024, allowed_hosts=frozenset({"127.0.0.1"}), **kw)


def test_private_and_loopback_addresses_are_refused_by_default(site: Site) -> None:
    site.put("/page.html", PAGE)
    strict = PageFetcher(timeout_s=5)
    for url in (f"{site.base}/page.html", "http://localhost/", "http://169.254.169.254/latest/meta-data/"):
        with pytest.raises(FetchRefused, match="refused"):
            strict.fetch(url)
    with pytest.raises(FetchRefused, match="only http"):
        strict.fetch("file:///etc/passwd")
    assert site.hits == []  # nothing was even asked


def test_a_redirect_to_a_private_address_is_refused(site: Site) -> None:
    site.put("/hop", b"", status=302, Location="http://10.0.0.1/admin")
    with pytest.raises(FetchRefused, match="private address"):
        fetcher().fetch(f"{site.base}/hop", robots=False)


def test_redirect_loops_huge_pages_and_other_types_are_refused(site: Site) -> None:
    site.put("/loop", b"", status=302, Location="/loop")
    site.put("/huge.html", b"<p>" + b"x" * (200 * 1024) + b"</p>")
    site.put("/photo.png", b"\x89PNG....", kind="image/png")
    site.put("/gone", b"", status=410, kind="text/plain")
    f = fetcher()
    with pytest.raises(FetchRefused, match="more than 5 redirects"):
        f.fetch(f"{site.base}/loop")
    with pytest.raises(FetchRefused, match="over the limit"):
        f.fetch(f"{site.base}/huge.html")
    with pytest.raises(FetchRefused, match="content type 'image/png'"):
        f.fetch(f"{site.base}/photo.png")
    with pytest.raises(FetchRefused, match="answered 410"):
        f.fetch(f"{site.base}/gone")


def test_robots_txt_is_honoured(site: Site) -> None:
    site.put("/robots.txt", "User-agent: *\nDisallow: /private/\n", kind="text/plain")
    site.put("/private/a.html", PAGE)
    site.put("/public.html", PAGE)
    f = fetcher()
    with pytest.raises(FetchRefused, match=r"robots\.txt disallows"):
        f.fetch(f"{site.base}/private/a.html")
    assert f.fetch(f"{site.base}/public.html").body.startswith(b"<html>")
    assert "/private/a.html" not in site.hits


def test_a_page_is_ingested_searchable_with_its_url_and_replaced_when_it_changes(
    site: Site, local: tuple[Context, KnowledgeBase]
) -> None:
    ctx, kb = local
    url = f"{site.base}/guides/espresso.html"
    site.put("/guides/espresso.html", PAGE, ETag='"v1"')
    (first,) = ingest_urls([url], kb, ctx)
    assert first.status == "indexed", first
    item = ctx.catalog.get_knowledge(first.knowledge_id)
    assert item is not None and item.source_uri == url
    found = knowledge_search(SearchRequest(query="how often to descale", knowledge_base_ids=[kb.id]), ctx)
    assert found.final_results and found.final_results[0].knowledge_filename == "espresso.html"

    (again,) = ingest_urls([url], kb, ctx)  # the server says 304: nothing downloaded
    assert again.status == "unchanged", again

    site.put("/guides/espresso.html", PAGE.replace("two months", "three weeks"), ETag='"v2"')
    (changed,) = ingest_urls([url], kb, ctx)
    assert changed.status == "updated" and changed.knowledge_id == first.knowledge_id
    found = knowledge_search(SearchRequest(query="descale espresso", knowledge_base_ids=[kb.id]), ctx)
    assert "three weeks" in found.final_results[0].content
    assert len(ctx.catalog.list_knowledge(kb.id)) == 1  # replaced, not added


def test_a_sitemap_ingests_its_pages_up_to_the_limit(site: Site, local: tuple[Context, KnowledgeBase]) -> None:
    ctx, kb = local
    for n in range(4):
        site.put(f"/p{n}.html", f"<html><body><p>Page number {n} talks about topic{n}.</p></body></html>")
    locs = "".join(f"<url><loc>{site.base}/p{n}.html</loc></url>" for n in range(4))
    site.put("/sitemap.xml", f'<?xml version="1.0"?><urlset xmlns="x">{locs}</urlset>', kind="application/xml")
    results = list(ingest_urls([f"{site.base}/sitemap.xml"], kb, ctx, max_pages=3))
    assert [r.status for r in results] == ["indexed"] * 3
    assert {r.path for r in results} == {f"{site.base}/p{n}.html" for n in range(3)}


def test_sitemaps_with_entities_are_refused() -> None:
    bomb = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><urlset><url><loc>&a;</loc></url></urlset>'
    with pytest.raises(FetchRefused, match="DTD"):
        sitemap_urls(bomb, 10)


def test_page_names_come_from_the_url() -> None:
    assert page_filename("https://example.com/docs/Install%20Guide.html?x=1", ".html") == "Install-Guide.html"
    assert page_filename("https://example.com/", ".html") == "example.com.html"


def test_the_http_route_ingests_urls_and_refuses_bad_ones(site: Site, tmp_path: Path) -> None:
    import httpx
    from tests.support.api_server import api_server

    site.put("/espresso.html", PAGE)
    clients = Clients(Settings(data_dir=tmp_path / "data", url_allowed_hosts=["127.0.0.1"]))
    from ragstep.app.knowledge_bases import create_knowledge_base

    create_knowledge_base(clients.context(), "web", "document", "none")
    with api_server(clients) as base:
        url = f"{base}/v1/knowledge-bases/web/urls"
        done = httpx.post(url, json={"urls": [f"{site.base}/espresso.html", f"{site.base}/nothing"]}, timeout=60)
        assert done.status_code == 200, done.text
        first, second = done.json()
        assert first["status"] == "indexed" and first["chunks"] >= 1
        assert second["status"] == "failed" and "answered 404" in second["error"]
        refused = httpx.post(url, json={"urls": ["ftp://example.com/x"]}, timeout=60)
        assert refused.status_code in (400, 422) and "not an http(s) URL" in refused.text
        found = httpx.post(
            f"{base}/v1/knowledge-search", json={"query": "descale espresso", "knowledge_base_ids": ["web"]}, timeout=60
        )
        assert found.json()["results"][0]["knowledge_filename"] == "espresso.html"


def test_ragstep_ingest_takes_files_and_urls_on_one_command_line(site: Site, tmp_path: Path) -> None:
    site.put("/espresso.html", PAGE)
    note = tmp_path / "note.md"
    note.write_text("The harbour master keeps the tide tables.", encoding="utf-8")
    env = {**os.environ, "RAGSTEP_URL_ALLOWED_HOSTS": '["127.0.0.1"]'}
    data = str(tmp_path / "data")

    def ragstep(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ragstep", "--data-dir", data, *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)

    assert ragstep("kb", "create", "k", "--embedding-model", "none").returncode == 0
    done = ragstep("ingest", str(note), f"{site.base}/espresso.html", "--kb", "k")
    assert done.returncode == 0, done.stderr
    assert "2 of 2 files ingested into k" in done.stdout
    found = ragstep("search", "descale espresso", "--kb", "k", "--json")
    assert '"knowledge_filename": "espresso.html"' in found.stdout
    shown = ragstep("kb", "show", "k")
    assert f"{site.base}/espresso.html" in shown.stdout and "note.md" in shown.stdout  # a page is listed by its URL
