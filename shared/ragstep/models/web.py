"""What a web search engine returns (:class:`~ragstep.ports.WebSearchProvider`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WebPage:
    """One result as the engine sent it: the page's URL, title and snippet, and any longer text the engine sent
    along (``content``; empty from engines that send snippets only)."""

    url: str
    title: str
    snippet: str = ""
    content: str = ""
