"""Entity names as the knowledge graph compares them: normalised for an exact match, then fuzzily.

``normalise_name`` folds case and width, drops quotes, brackets and punctuation at the edges and collapses
whitespace, so "《Romeo and Juliet》", "romeo  and juliet" and "Romeo and Juliet." are one node. ``fuzzy_matches``
is the second chance for a name the question spells differently ("Shakespear"): the similarity ratio of the
normalised names (difflib's), with a containment rule for a name that is a whole word run of the other
("Juliet" and "Juliet Capulet").
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable

_EDGE = re.compile(r"^[\W_]+|[\W_]+$", re.UNICODE)
_SPACES = re.compile(r"\s+")
#: Ratio from which two normalised names are taken as the same entity.
FUZZY_CUTOFF = 0.85
#: A contained name must be at least this long (a two-letter name inside every other one is noise).
MIN_CONTAINED_CHARS = 4


def normalise_name(name: str) -> str:
    folded = unicodedata.normalize("NFKC", name).casefold()
    return _SPACES.sub(" ", _EDGE.sub("", folded.strip())).strip()


def _contains_words(longer: str, shorter: str) -> bool:
    if len(shorter) < MIN_CONTAINED_CHARS or shorter not in longer:
        return False
    if not shorter.isascii():  # CJK names have no spaces to respect
        return True
    return re.search(rf"(?<!\w){re.escape(shorter)}(?!\w)", longer) is not None


def fuzzy_matches(name: str, candidates: Iterable[str], cutoff: float = FUZZY_CUTOFF) -> list[str]:
    """Normalised candidates close to ``name`` (itself normalised), best first."""
    target = normalise_name(name)
    if not target:
        return []
    scored: list[tuple[float, str]] = []
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(target)
    for candidate in candidates:
        if not candidate or candidate == target:
            continue
        matcher.set_seq1(candidate)
        if matcher.real_quick_ratio() < cutoff and not (target in candidate or candidate in target):
            continue
        ratio = matcher.ratio()
        if ratio >= cutoff:
            scored.append((ratio, candidate))
        elif _contains_words(candidate, target) or _contains_words(target, candidate):
            scored.append((cutoff - 0.01, candidate))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [c for _, c in scored]
