"""Tavily: a search API for LLM applications; its answers carry page text beside the snippet."""

from __future__ import annotations

from typing import Any

from ragstep.adapters.web._client import WebClient, is_web_url, text_of
from ragstep.errors import InputError, ProviderError
from ragstep.models.web import WebPage


class TavilySearch:
    name = "tavily"

    def __init__(self, url: str, api_key: str, *, timeout_s: float) -> None:
        if not api_key:
            raise InputError("Tavily web search needs RAGSTEP_WEB_SEARCH_TAVILY_API_KEY")
        self.url = url
        headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self._client = WebClient("Tavily", timeout_s=timeout_s, headers=headers)

    def search(self, query: str, max_results: int) -> list[WebPage]:
        response = self._client.request("POST", self.url, json={"query": query, "max_results": max_results})
        return parse_results(self._client.decode(response))[:max_results]


def parse_results(body: Any) -> list[WebPage]:
    if not isinstance(body, dict):
        raise ProviderError("Tavily answered JSON that is not an object")
    results = body.get("results") or []
    pages: list[WebPage] = []
    for item in results if isinstance(results, list) else []:
        if not isinstance(item, dict):
            continue
        url = text_of(item.get("url"))
        if is_web_url(url):
            raw = item.get("raw_content")
            pages.append(
                WebPage(
                    url=url,
                    title=text_of(item.get("title")),
                    snippet=text_of(item.get("content")),
                    content=raw.strip() if isinstance(raw, str) else "",
                )
            )
    return pages
