"""Fetching web pages to ingest (``ragstep ingest https://...``, ``POST /v1/knowledge-bases/{kb}/urls``).

A URL a user hands over is fetched by the server, so the fetch is held to rules a hostile URL cannot get around:

* **Only http and https**, to hosts whose every address is public: loopback, private (10/8, 172.16/12,
  192.168/16, fc00::/7), link-local (169.254/16 -- the cloud metadata endpoint -- and fe80::/10), multicast,
  reserved and unspecified addresses are refused unless ``RAGSTEP_URL_ALLOWED_HOSTS`` names the host (tests name
  127.0.0.1). Every redirect hop is checked again, and redirects are followed at most :data:`MAX_REDIRECTS` times.
* **Resolved once** (DNS rebinding): each hop's host name is resolved once, by the fetcher's ``resolver``; those
  addresses are checked, and the request connects to the first of them -- the URL given to httpx holds the address,
  with the original ``Host`` header, and for https the original name as SNI and for the certificate check (httpcore's
  ``sni_hostname``). A name that answers a public address to the check and a private one a moment later never gets
  the second lookup. Each hop has its own connection, so a TLS session opened for one name never serves another.
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

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
#: Pictures a page may take along (:mod:`ragstep.app.urls` inlines a page's same-site pictures).
IMAGE_TYPES = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}
#: ``(host, port) -> addresses``, in the order to try them.
Resolver = Callable[[str, int], list[str]]


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses of ``host`` from the system's resolver (``getaddrinfo``), in its order of preference."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


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


@dataclass(frozen=True, slots=True)
class _Pinned:
    """One request's target after the check: the URL with the checked address, the Host header, httpcore's
    extensions (the SNI name for https)."""

    url: str
    host: str
    extensions: dict[str, Any]


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
    #: How host names are resolved (once per request: the request connects to the address checked).
    resolver: Resolver = field(default=system_resolver)

    def __post_init__(self) -> None:
        self._robots: dict[str, urllib.robotparser.RobotFileParser | None] = {}

    def check_url(self, url: str) -> str:
        """``url`` when it may be fetched: http(s), a host, every address of it public (or allowed)."""
        self._pin(url)
        return url

    def _pin(self, url: str) -> _Pinned:
        """Resolve ``url``'s host once, check every address, and aim the request at the first one."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchRefused(f"{url}: only http:// and https:// URLs with a host can be ingested")
        host = parts.hostname
        try:
            addresses = self.resolver(host, parts.port or (443 if parts.scheme == "https" else 80))
        except (OSError, UnicodeError, ValueError):
            addresses = []
        if not addresses:
            raise FetchRefused(f"{url}: the host {host!r} does not resolve")
        if host not in self.allowed_hosts:
            for address in addresses:
                why = _refusal(address)
                if why:
                    raise FetchRefused(
                        f"{url}: {host} resolves to {why} ({address}); pages on internal networks are refused "
                        "(RAGSTEP_URL_ALLOWED_HOSTS names hosts to allow)"
                    )
        address = addresses[0].split("%")[0]
        netloc = f"[{address}]" if ":" in address else address
        if parts.port:
            netloc += f":{parts.port}"
        pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        extensions: dict[str, Any] = {"sni_hostname": host} if parts.scheme == "https" else {}
        return _Pinned(pinned, parts.netloc.rsplit("@", 1)[-1], extensions)

    def fetch(
        self,
        url: str,
        *,
        etag: str = "",
        last_modified: str = "",
        robots: bool = True,
        accepted: Mapping[str, str] = ACCEPTED,
        max_bytes: int | None = None,
    ) -> Page:
        """The page at ``url`` (redirects followed and checked), or :class:`FetchRefused` saying why not.
        ``accepted``: the content types taken (a page's by default; :data:`IMAGE_TYPES` for a picture);
        ``max_bytes``: a smaller cap than the fetcher's."""
        deadline = time.monotonic() + self.timeout_s * 2
        cap = min(self.max_bytes, max_bytes or self.max_bytes)
        if robots and not self.allowed_by_robots(url):
            raise FetchRefused(f"{url}: the site's robots.txt disallows it for ragstep")
        headers = {"User-Agent": USER_AGENT}
        if etag:
            headers["If-None-Match"] = etag
        if last_modified:
            headers["If-Modified-Since"] = last_modified
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            target = self._pin(current)
            with (
                self._client() as client,
                client.stream(
                    "GET", target.url, headers={**headers, "Host": target.host}, extensions=target.extensions
                ) as response,
            ):
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
                if kind not in accepted:
                    names = ", ".join(sorted(accepted))
                    raise FetchRefused(f"{current}: content type {kind or 'none'!r} is not ingested ({names})")
                body = self._read(response, current, deadline, cap)
                return Page(
                    url,
                    current,
                    kind,
                    body,
                    etag=response.headers.get("etag", ""),
                    last_modified=response.headers.get("last-modified", ""),
                )
        raise FetchRefused(f"{url}: more than {MAX_REDIRECTS} redirects")

    def _read(self, response: httpx.Response, url: str, deadline: float, cap: int) -> bytes:
        declared = response.headers.get("content-length", "")
        setting = "RAGSTEP_URL_MAX_BYTES" if cap == self.max_bytes else "RAGSTEP_IMAGE_MAX_BYTES"
        if declared.isdigit() and int(declared) > cap:
            raise FetchRefused(f"{url}: {declared} bytes is over the limit of {cap} ({setting})")
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > cap:
                raise FetchRefused(f"{url}: the page is over the limit of {cap} bytes ({setting})")
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
            target = self._pin(url)
            with self._client() as client:
                headers = {"User-Agent": USER_AGENT, "Host": target.host}
                response = client.get(target.url, headers=headers, extensions=target.extensions)
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
