"""Google Programmable Search (the Custom Search JSON API): an API key and a search engine id (``cx``)."""

from __future__ import annotations

from typing import Any

from ragstep.adapters.web._client import WebClient, is_web_url, text_of
from ragstep.errors import InputError, ProviderError
from ragstep.models.web import WebPage

# The API returns at most 10 items per call.
MAX_PER_CALL = 10


class GoogleSearch:
    name = "google"

    def __init__(self, url: str, api_key: str, engine_id: str, *, timeout_s: float) -> None:
        if not api_key or not engine_id:
            raise InputError(
                "Google Programmable Search needs RAGSTEP_WEB_SEARCH_GOOGLE_API_KEY and "
                "RAGSTEP_WEB_SEARCH_GOOGLE_ENGINE_ID"
            )
        self.url = url
        self._api_key = api_key
        self._engine_id = engine_id
        self._client = WebClient("Google Programmable Search", timeout_s=timeout_s)

    def search(self, query: str, max_results: int) -> list[WebPage]:
        params = {"key": self._api_key, "cx": self._engine_id, "q": query, "num": min(max_results, MAX_PER_CALL)}
        return parse_items(self._client.get_json(self.url, params))[:max_results]


def parse_items(body: Any) -> list[WebPage]:
    if not isinstance(body, dict):
        raise ProviderError("Google Programmable Search answered JSON that is not an object")
    if isinstance(body.get("error"), dict):
        raise ProviderError(f"Google Programmable Search: {text_of(body['error'].get('message')) or 'error'}")
    items = body.get("items") or []  # no "items" at all when nothing matched
    pages: list[WebPage] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        url = text_of(item.get("link"))
        if is_web_url(url):
            pages.append(WebPage(url=url, title=text_of(item.get("title")), snippet=text_of(item.get("snippet"))))
    return pages
