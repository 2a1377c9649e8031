"""Profiles: named presets of how much work a request does, and the order in which work is given up under a
latency budget.

A request names a profile (``quick``, ``standard``, ``deep``, or one the deployment defines in ``RAGSTEP_PROFILES``)
and optionally ``budget_ms``. The profile's retrieval and chat settings apply under the request's own overrides (an
override the request names wins), its ``skip`` stages do not run (each a ``skip`` trace row), and with a budget the
executor gives up the :data:`DEGRADE_ORDER` stages, first to last, once what is left of the budget is less than
the stage has taken in this process so far (each a ``degrade`` trace row saying so). ``standard`` is today's
behaviour: no request that names no profile runs differently.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ragstep.models.base import _Model, empty_list

#: The stages a profile or a budget may leave out: the state passes through them unchanged, and the answer is still
#: grounded (the question as asked, no entity hits, no data analysis, no web results).
OPTIONAL_STAGES = ("data_analysis", "entity_search", "extract_entities", "rewrite_query", "viking_intent")
#: Under a budget, the order in which they are given up: the slowest and least often useful first.
DEGRADE_ORDER = OPTIONAL_STAGES
DEFAULT_PROFILE = "standard"


class Profile(_Model):
    name: str
    description: str = ""
    #: Retrieval settings (RetrievalOverrides fields) and chat settings (ChatSettings fields) it sets.
    retrieval: dict[str, Any] = Field(default_factory=dict)
    chat: dict[str, Any] = Field(default_factory=dict)
    skip: list[str] = Field(default_factory=empty_list)


BUILTIN_PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="quick",
            description="keyword + vector search and the answer only: no rewrite, entities, web or data analysis; "
            "fewer candidates",
            retrieval={"embedding_top_k": 15, "rerank_top_k": 5, "enable_query_expansion": False, "web_search": False},
            chat={"enable_rewrite": False},
            skip=["rewrite_query", "extract_entities", "entity_search", "data_analysis"],
        ),
        Profile(name="standard", description="the configured settings, every stage (the default)"),
        Profile(
            name="deep",
            description="more candidates reranked, query expansion on, a longer answer context",
            retrieval={"embedding_top_k": 60, "rerank_top_k": 15, "enable_query_expansion": True},
        ),
    )
}
