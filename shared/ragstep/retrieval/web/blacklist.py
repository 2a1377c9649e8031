"""Blacklist rules for web results: ``/regex/`` (searched anywhere in the URL) or a glob over the whole URL
(``*://*.example.com/*``, case-insensitive). A rule that does not compile is returned as invalid and ignored, so a
typo in one rule never turns web search off."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Blacklist:
    patterns: tuple[re.Pattern[str], ...]
    #: (rule, why it was ignored), for the caller to report.
    invalid: tuple[tuple[str, str], ...] = ()

    def blocks(self, url: str) -> bool:
        return any(p.search(url) for p in self.patterns)


def compile_blacklist(rules: tuple[str, ...]) -> Blacklist:
    patterns: list[re.Pattern[str]] = []
    invalid: list[tuple[str, str]] = []
    for raw in rules:
        rule = raw.strip()
        if not rule:
            continue
        if len(rule) >= 2 and rule.startswith("/") and rule.endswith("/"):
            try:
                patterns.append(re.compile(rule[1:-1], re.IGNORECASE))
            except re.error as exc:
                invalid.append((raw, f"not a regular expression: {exc}"))
            continue
        if rule.startswith("/"):
            invalid.append((raw, "a regular expression must end with '/'"))
            continue
        # fnmatch's translation anchors the glob at both ends: the whole URL must match.
        patterns.append(re.compile(fnmatch.translate(rule), re.IGNORECASE))
    return Blacklist(tuple(patterns), tuple(invalid))
