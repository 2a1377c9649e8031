"""SearXNG: a self-hosted metasearch instance, asked for its JSON output (``format=json`` must be enabled in the
instance's settings; otherwise it answers 403)."""

from __future__ import annotations

from typing import Any

from ragstep.adapters.web._client import WebClient, is_web_url, text_of
from ragstep.errors import InputError, ProviderError
from ragstep.models.web import WebPage


class SearxngSearch:
    name = "searxng"

    def __init__(self, url: str, *, timeout_s: float) -> None:
        if not url:
            raise InputError("SearXNG web search needs RAGSTEP_WEB_SEARCH_SEARXNG_URL (the instance's base URL)")
        self.url = url.rstrip("/") + "/search"
        self._client = WebClient("SearXNG", timeout_s=timeout_s, headers={"Accept": "application/json"})

    def search(self, query: str, max_results: int) -> list[WebPage]:
        return parse_results(self._client.get_json(self.url, {"q": query, "format": "json"}))[:max_results]


def parse_results(body: Any) -> list[WebPage]:
    if not isinstance(body, dict):
        raise ProviderError("SearXNG answered JSON that is not an object")
    results = body.get("results") or []
    pages: list[WebPage] = []
    seen: set[str] = set()
    for item in results if isinstance(results, list) else []:
        if not isinstance(item, dict):
            continue
        url = text_of(item.get("url"))
        if is_web_url(url) and url not in seen:  # several engines may return one page
            seen.add(url)
            pages.append(WebPage(url=url, title=text_of(item.get("title")), snippet=text_of(item.get("content"))))
    return pages
