"""Reading the OpenSearch query bodies a scripted server received (tests of the OpenSearch adapters)."""

from __future__ import annotations

from typing import Any


def find_terms(obj: Any, name: str) -> list[Any] | None:
    """The values of the first ``{"terms": {name: [...]}}`` anywhere in a query."""
    if isinstance(obj, dict):
        terms = obj.get("terms")
        if isinstance(terms, dict) and name in terms:
            return terms[name]
        obj = list(obj.values())
    if isinstance(obj, list):
        for value in obj:
            found = find_terms(value, name)
            if found is not None:
                return found
    return None
