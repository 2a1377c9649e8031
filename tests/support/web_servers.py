"""Answers shaped like real web search engines, served by :class:`~tests.support.scripted_http.ScriptedHTTPServer`.

Each builder returns a :class:`ScriptedResponse` carrying what the engine sends for a list of ``(url, title,
snippet)`` pages: DuckDuckGo's HTML results page (redirect links, an ad, markup inside titles and snippets) and
its Instant Answer JSON, Google Programmable Search's ``items`` and SearXNG's ``results``.
"""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from support.scripted_http import ScriptedResponse

Page = tuple[str, str, str]

HTML_HEADERS = {"Content-Type": "text/html; charset=utf-8"}


def ddg_html(pages: list[Page], *, with_ad: bool = True) -> ScriptedResponse:
    """DuckDuckGo's HTML page: each result links through ``//duckduckgo.com/l/?uddg=<url>``; an ad goes first."""
    parts = ['<!DOCTYPE html><html><head><title>results</title></head><body><div id="links" class="results">']
    if with_ad:
        parts.append(
            '<div class="result result--ad"><h2 class="result__title"><a class="result__a" '
            'href="https://duckduckgo.com/y.js?ad_provider=x&amp;u3=https%3A%2F%2Fads.example">Buy now</a></h2>'
            '<a class="result__snippet" href="#">An advert</a></div>'
        )
    for url, title, snippet in pages:
        href = f"//duckduckgo.com/l/?uddg={quote(url, safe='')}&amp;rut=abc"
        words = escape(title).split(" ", 1)
        # Titles and snippets hold <b> highlights, as the real page does.
        title_html = f"<b>{words[0]}</b> {words[1]}" if len(words) == 2 else escape(title)
        parts.append(
            '<div class="result results_links results_links_deep web-result"><div class="links_main result__body">'
            f'<h2 class="result__title"><a rel="nofollow" class="result__a" href="{href}">{title_html}</a></h2>'
            f'<div class="result__extras"><a class="result__url" href="{href}">{escape(url)}</a></div>'
            f'<a class="result__snippet" href="{href}">{escape(snippet)}</a>'
            "</div></div>"
        )
    parts.append("</div></body></html>")
    return ScriptedResponse(200, "".join(parts), headers=HTML_HEADERS)


def ddg_no_results_html() -> ScriptedResponse:
    return ScriptedResponse(200, '<html><body><div class="no-results">No results.</div></body></html>',
                            headers=HTML_HEADERS)  # fmt: skip


def ddg_instant_answer(pages: list[Page]) -> ScriptedResponse:
    """The Instant Answer API: the first page as the abstract, the others as related topics (one group nested)."""
    if not pages:
        return ScriptedResponse(200, {"AbstractText": "", "AbstractURL": "", "RelatedTopics": [], "Results": []})
    (url, title, snippet), rest = pages[0], pages[1:]
    topics: list[object] = [{"FirstURL": u, "Text": f"{t} - {s}"} for u, t, s in rest[:1]]
    if rest[1:]:
        topics.append({"Name": "More", "Topics": [{"FirstURL": u, "Text": f"{t} - {s}"} for u, t, s in rest[1:]]})
    body = {"Heading": title, "AbstractText": snippet, "AbstractURL": url, "Results": [], "RelatedTopics": topics}
    return ScriptedResponse(200, body)


def google_items(pages: list[Page]) -> ScriptedResponse:
    """Google's answer; with no page, no ``items`` key at all (as the API does)."""
    body: dict[str, object] = {"kind": "customsearch#search", "searchInformation": {"totalResults": str(len(pages))}}
    if pages:
        body["items"] = [{"kind": "customsearch#result", "title": t, "link": u, "snippet": s} for u, t, s in pages]
    return ScriptedResponse(200, body)


def searxng_results(pages: list[Page]) -> ScriptedResponse:
    results = [{"url": u, "title": t, "content": s, "engine": "duckduckgo", "score": 1.0} for u, t, s in pages]
    return ScriptedResponse(200, {"query": "q", "number_of_results": len(results), "results": results})


def malformed_json() -> ScriptedResponse:
    return ScriptedResponse(200, "{not json", headers={"Content-Type": "application/json"})
