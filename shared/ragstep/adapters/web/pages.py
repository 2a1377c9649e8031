"""Fetching web pages to ingest (``ragstep ingest https://...``, ``POST /v1/knowledge-bases/{kb}/urls``).

A URL a user hands over is fetched by the server, so the fetch is held to rules a hostile URL cannot get around:

* **Only http and https**, to hosts whose every address is public: loopback, private (10/8, 172.16/12,
  192.168/16, fc00::/7), link-local (169.254/16 -- the cloud metadata endpoint -- and fe80::/10), multicast,
  reserved and unspecified addresses are refused unless ``RAGSTEP_URL_ALLOWED_HOSTS`` names the host (tests name
  127.0.0.1). Every redirect hop is checked again, and redirects are followed at most :data:`MAX_REDIRECTS` times.
  (What is checked is the name's resolution just before the request; a name that resolves differently a moment later
  -- DNS rebinding -- is not pinned. Serve ragstep where its outbound traffic is filtered when that matters.)
* **Bounded**: a connect and read timeout, a total deadline, and a body cap (``RAGSTEP_URL_MAX_BYTES``) read as a
  stream, so a huge or endless page is cut off, not loaded.
* **Polite**: robots.txt is honoured for the ``ragstep`` user agent (a robots.txt that cannot be fetched allows, as
  crawlers treat a missing one; one that answers 401/403 forbids); the request says who it is.
* **Typed**: only HTML, plain text, Markdown, PDF and sitemaps (XML) are accepted; anything else is refused by its
  Content-Type before its body is read.
* **Conditional**: a page fetched before is asked for with its ETag / Last-Modified; 304 means unchanged.
"""

from __future__ import annotations

import ipaddress
import socket
import time
import urllib.robotparser
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from ragstep.errors import InputError

MAX_REDIRECTS = 5
USER_AGENT = "ragstep (+https://github.com/ragstep; retrieval ingestion)"
#: Content types a page may have, and the extension its parser is chosen by.
ACCEPTED = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/x-markdown": ".md",
    "application/pdf": ".pdf",
    "application/xml": ".xml",
    "text/xml": ".xml",
}


class FetchRefused(InputError):
    """The URL may not, or could not, be fetched: the message says which rule and what to do."""


@dataclass(frozen=True, slots=True)
class Page:
    url: str  # the URL asked for
    final_url: str  # after redirects
    content_type: str  # without parameters
    body: bytes
    etag: str = ""
    last_modified: str = ""
    not_modified: bool = False

    @property
    def extension(self) -> str:
        return ACCEPTED.get(self.content_type, ".html")


def _refusal(address: str) -> str | None:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for flag, what in (
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_private, "a private address"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_reserved, "a reserved address"),
        (ip.is_unspecified, "an unspecified address"),
    ):
        if flag:
            return what
    return None


@dataclass
class PageFetcher:
    """Fetches pages under the rules above; one per ingestion run (it keeps each host's robots.txt)."""

    timeout_s: float = 15.0
    max_bytes: int = 10 * 1024 * 1024
    allowed_hosts: frozenset[str] = frozenset()
    transport: httpx.BaseTransport | None = None

    def __post_init__(self) -> None:
        self._robots: dict[str, urllib.robotparser.RobotFileParser | None] = {}

    def check_url(self, url: str) -> str:
        """``url`` when it may be fetched: http(s), a host, every address of it public (or allowed)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchRefused(f"{url}: only http:// and https:// URLs with a host can be ingested")
        host = parts.hostname
        if host in self.allowed_hosts:
            return url
        try:
            infos = socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80))
        except (socket.gaierror, UnicodeError):
            raise FetchRefused(f"{url}: the host {host!r} does not resolve") from None
        for info in infos:
            why = _refusal(str(info[4][0]))
            if why:
                raise FetchRefused(
                    f"{url}: {host} resolves to {why} ({info[4][0]}); pages on internal networks are refused "
                    "(RAGSTEP_URL_ALLOWED_HOSTS names hosts to allow)"
                )
        return url

    def fetch(self, url: str, *, etag: str = "", last_modified: str = "", robots: bool = True) -> Page:
        """The page at ``url`` (redirects followed and checked), or :class:`FetchRefused` saying why not."""
        deadline = time.monotonic() + self.timeout_s * 2
        if robots and not self.allowed_by_robots(url):
            raise FetchRefused(f"{url}: the site's robots.txt disallows it for ragstep")
        headers = {"User-Agent": USER_AGENT}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        current = url
        with self._client() as client:
            for _ in range(MAX_REDIRECTS + 1):
                self.check_url(current)
                with client.stream("GET", current, headers=headers) as response:
                    if response.status_code in (301, 302, 303, 307, 308):
                        location = response.headers.get("location", "")
                        if not location:
                            raise FetchRefused(f"{current}: a redirect without a Location")
                        current = urljoin(current, location)
                        continue
                    if response.status_code == 304:
                        return Page(url, current, "", b"", etag, last_modified, not_modified=True)
                    if response.status_code >= 400:
                        raise FetchRefused(f"{current}: the server answered {response.status_code}")
                    kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                    if kind not in ACCEPTED:
                        accepted = ", ".join(sorted(ACCEPTED))
                        raise FetchRefused(f"{current}: content type {kind or 'none'!r} is not ingested ({accepted})")
                    body = self._read(response, current, deadline)
                    return Page(
                        url,
                        current,
                        kind,
                        body,
                        etag=response.headers.get("etag", ""),
                        last_modified=response.headers.get("last-modified", ""),
                    )
        raise FetchRefused(f"{url}: more than {MAX_REDIRECTS} redirects")

    def _read(self, response: httpx.Response, url: str, deadline: float) -> bytes:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise FetchRefused(f"{url}: {declared} bytes is over the limit of {self.max_bytes} (RAGSTEP_URL_MAX_BYTES)")
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise FetchRefused(
                    f"{url}: the page is over the limit of {self.max_bytes} bytes (RAGSTEP_URL_MAX_BYTES)"
                )
            if time.monotonic() > deadline:
                raise FetchRefused(f"{url}: the page took longer than {self.timeout_s * 2:g} s to arrive")
            chunks.append(chunk)
        return b"".join(chunks)

    def _client(self) -> httpx.Client:
        kwargs: dict[str, Any] = {"timeout": httpx.Timeout(self.timeout_s), "follow_redirects": False}
        if self.transport is not None:
            kwargs["transport"] = self.transport
        return httpx.Client(**kwargs)

    def allowed_by_robots(self, url: str) -> bool:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in self._robots:
            self._robots[origin] = self._read_robots(origin + "/robots.txt")
        parser = self._robots[origin]
        return parser is None or parser.can_fetch("ragstep", url)

    def _read_robots(self, url: str) -> urllib.robotparser.RobotFileParser | None:
        parser = urllib.robotparser.RobotFileParser(url)
        try:
            self.check_url(url)
            with self._client() as client:
                response = client.get(url, headers={"User-Agent": USER_AGENT})
        except (httpx.HTTPError, FetchRefused):
            return None  # unreachable: as if there were none
        if response.status_code in (401, 403):  # as urllib.robotparser.read() treats them: nothing may be fetched
            parser.parse(["User-agent: *", "Disallow: /"])
            return parser
        if response.status_code >= 400:
            return None
        parser.parse(response.text[: 512 * 1024].splitlines())
        return parser


def sitemap_urls(body: bytes, limit: int) -> list[str]:
    """The page URLs (``<loc>``) of a sitemap, at most ``limit``; nested sitemap indexes are not followed."""
    import xml.etree.ElementTree as ET

    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:  # sitemaps have no DTD; entities could amplify
        raise FetchRefused("the sitemap declares a DTD or entities; sitemaps have neither")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise FetchRefused(f"the sitemap is not valid XML ({exc})") from None
    if not root.tag.endswith("urlset"):
        raise FetchRefused("not a sitemap of pages (<urlset>); a sitemap index must be given page by page")
    found = [el.text.strip() for el in root.iter() if el.tag.endswith("loc") and el.text and el.text.strip()]
    return list(dict.fromkeys(found))[:limit]
