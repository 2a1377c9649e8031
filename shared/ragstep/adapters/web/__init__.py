"""Web search engines (the :class:`~ragstep.ports.WebSearchProvider` port), chosen by RAGSTEP_WEB_SEARCH_PROVIDER."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ragstep.errors import InputError

if TYPE_CHECKING:
    from ragstep.ports import WebSearchProvider
    from ragstep.settings import Settings


def _secret(value: object) -> str:
    return value.get_secret_value() if hasattr(value, "get_secret_value") else ""


def make_web_search(settings: Settings) -> WebSearchProvider:
    provider = settings.web_search_provider
    timeout = settings.web_search_timeout_s
    if provider == "duckduckgo":
        from ragstep.adapters.web.duckduckgo import DuckDuckGoSearch

        return DuckDuckGoSearch(
            settings.web_search_duckduckgo_url, settings.web_search_duckduckgo_api_url, timeout_s=timeout
        )
    if provider == "google":
        from ragstep.adapters.web.google import GoogleSearch

        return GoogleSearch(
            settings.web_search_google_url,
            _secret(settings.web_search_google_api_key),
            settings.web_search_google_engine_id,
            timeout_s=timeout,
        )
    if provider == "searxng":
        from ragstep.adapters.web.searxng import SearxngSearch

        return SearxngSearch(settings.web_search_searxng_url, timeout_s=timeout)
    if provider == "tavily":
        from ragstep.adapters.web.tavily import TavilySearch

        return TavilySearch(
            settings.web_search_tavily_url, _secret(settings.web_search_tavily_api_key), timeout_s=timeout
        )
    raise InputError(f"unknown web search provider {provider!r}; one of duckduckgo, google, searxng, tavily")
