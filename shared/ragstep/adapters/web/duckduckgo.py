"""DuckDuckGo: the HTML results page first, the Instant Answer API as the fallback. No key is needed.

The HTML page is the real web search; it is markup meant for browsers, so it is read defensively: a result is a
``result__a`` link (its title; its ``href`` is DuckDuckGo's redirect, whose ``uddg`` parameter holds the target URL)
followed by an optional ``result__snippet``; ads (links through ``y.js``) and anything that is not an http(s) URL
are skipped. When the page fails or holds no result (a layout change, a bot check), the Instant Answer API's
abstract and related topics stand in: fewer and shorter results, but a stable JSON format.
"""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

from ragstep.adapters.web._client import WebClient, is_web_url, text_of
from ragstep.errors import ProviderError
from ragstep.models.web import WebPage


class DuckDuckGoSearch:
    name = "duckduckgo"

    def __init__(self, html_url: str, api_url: str, *, timeout_s: float) -> None:
        self.html_url = html_url
        self.api_url = api_url
        self._client = WebClient("DuckDuckGo", timeout_s=timeout_s)

    def search(self, query: str, max_results: int) -> list[WebPage]:
        html_error: ProviderError | None = None
        try:
            response = self._client.request("GET", self.html_url, params={"q": query})
            pages = parse_html(response.text, base=str(response.url))
            if pages:
                return pages[:max_results]
        except ProviderError as exc:
            html_error = exc
        try:
            body = self._client.get_json(self.api_url, {"q": query, "format": "json", "no_html": 1, "skip_disambig": 1})
            return parse_instant_answer(body)[:max_results]
        except ProviderError as exc:
            if html_error is not None:
                raise ProviderError(f"{html_error.message}; the Instant Answer API too: {exc.message}") from None
            raise


# -- the HTML results page --------------------------------------------------------------------------------------


class _ResultsParser(HTMLParser):
    def __init__(self, base: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = base
        self.results: list[dict[str, Any]] = []
        self._field: str | None = None  # "title" or "snippet" while inside such an element
        self._depth = 0  # nesting inside that element (its tag may contain <b>, <span> ...)
        self._parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._field is not None:
            self._depth += 1
            return
        attr = {k: v or "" for k, v in attrs}
        classes = attr.get("class", "").split()
        if tag == "a" and "result__a" in classes:
            self.results.append({"href": attr.get("href", ""), "title": "", "snippet": ""})
            self._field, self._depth, self._parts = "title", 0, []
        elif "result__snippet" in classes and self.results:
            self._field, self._depth, self._parts = "snippet", 0, []

    def handle_endtag(self, tag: str) -> None:
        if self._field is None:
            return
        if self._depth > 0:
            self._depth -= 1
            return
        self.results[-1][self._field] = text_of("".join(self._parts))
        self._field = None

    def handle_data(self, data: str) -> None:
        if self._field is not None:
            self._parts.append(data)


def target_url(href: str, base: str) -> str:
    """The page a result link leads to: DuckDuckGo's redirect (``/l/?uddg=<url>``) unwrapped; '' for an ad."""
    absolute = urljoin(base, href) if href else ""
    parts = urlsplit(absolute)
    if parts.hostname and parts.hostname.endswith("duckduckgo.com"):
        if parts.path.startswith("/l/"):
            return parse_qs(parts.query).get("uddg", [""])[0]
        return ""  # y.js (ads) and other internal links
    return absolute


def parse_html(html: str, base: str = "https://html.duckduckgo.com/html/") -> list[WebPage]:
    parser = _ResultsParser(base)
    try:
        parser.feed(html)
        parser.close()
    except (AssertionError, ValueError):  # html.parser on pathological markup: keep what was read so far
        pass
    pages: list[WebPage] = []
    seen: set[str] = set()
    for r in parser.results:
        url = target_url(r["href"], base)
        if is_web_url(url) and url not in seen:
            seen.add(url)
            pages.append(WebPage(url=url, title=r["title"] or url, snippet=r["snippet"]))
    return pages


# -- the Instant Answer API ----------------------------------------------------------------------------------------


def parse_instant_answer(body: Any) -> list[WebPage]:
    if not isinstance(body, dict):
        raise ProviderError("DuckDuckGo's Instant Answer API answered JSON that is not an object")
    pages: list[WebPage] = []
    abstract_url = text_of(body.get("AbstractURL"))
    if is_web_url(abstract_url) and text_of(body.get("AbstractText")):
        title = text_of(body.get("Heading")) or abstract_url
        pages.append(WebPage(url=abstract_url, title=title, snippet=text_of(body.get("AbstractText"))))
    for topic in _topics(body.get("Results")) + _topics(body.get("RelatedTopics")):
        url, text = text_of(topic.get("FirstURL")), text_of(topic.get("Text"))
        if is_web_url(url) and text:
            # "Title - what it is": the part before the dash names the topic.
            title = text.split(" - ", 1)[0]
            pages.append(WebPage(url=url, title=title, snippet=text))
    unique: dict[str, WebPage] = {}
    for page in pages:
        unique.setdefault(page.url, page)
    return list(unique.values())


def _topics(value: Any) -> list[dict[str, Any]]:
    # Related topics come flat or grouped ({"Name": ..., "Topics": [...]}).
    out: list[dict[str, Any]] = []
    for item in value if isinstance(value, list) else []:
        if isinstance(item, dict):
            out.extend(_topics(item["Topics"]) if isinstance(item.get("Topics"), list) else [item])
    return out
