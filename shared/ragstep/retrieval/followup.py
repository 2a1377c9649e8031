"""Follow-up questions without a language model: is a question elliptical, and what should retrieval search for it.

A follow-up in a conversation leaves its subject out ("它的面积有多大？", "and how much memory does it need to
decompress?", "时间呢？"); searched alone it finds whatever matches its few remaining words. Without a model to
rewrite it, the question is searched together with the subject it leaves out: the content words of the previous
question(s) of the conversation.

When is a question a follow-up? Signals from grammar, not from any topic, in English and Chinese:

* it refers back -- a third-person or demonstrative pronoun / determiner (it, its, they, this, 它, 其, 这, 该 ...);
* it continues -- it opens with a conjunction or "what about" (and, also, 那, 还有 ...) or ends with the Chinese
  elliptical particle 呢 ("时间呢？");
* it has no content word of its own ("What about them?", "为什么？").

A question that already names the previous question's subject (shares a content word with it) is self-contained, and
a question with history but none of these signals is a new topic: both are searched as asked.

The word classes are closed grammatical classes (pronouns, conjunctions, particles), the same for every topic; the
content words come from the tokenizer retrieval uses (:func:`ragstep.retrieval.text.tokenize`, stopwords removed).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ragstep.retrieval.text import tokenize

# Third-person and demonstrative pronouns / determiners: words that point back to something said before.
# Not "that" (a relative pronoun in many a standalone question: "files that changed") nor "one" (a numeral).
_ANAPHORS_EN = frozenset(
    {"it", "its", "itself", "they", "them", "their", "theirs", "themselves", "this", "these", "those"}
    | {"he", "him", "his", "she", "her", "hers"}
)
_ANAPHORS_ZH = frozenset(
    ("它们", "它", "他们", "她们", "他", "她", "其", "这个", "那个", "这些", "那些", "这", "该", "此")
)
# Openers that continue the previous question rather than ask a new one.
_OPENERS_EN = ("and", "also", "but", "so", "then", "what about", "how about", "what else", "anything else")
# Whole first words (jieba's): 那曲 (a place) or 再生纸 start with these characters without continuing anything.
_OPENERS_ZH = frozenset(("那么", "那", "还有", "另外", "而且", "并且", "以及", "那它"))
_ZH_ELLIPSIS = re.compile(r"呢\s*[?？!！。.]*\s*$")
_EN_WORD = re.compile(r"[a-z']+")  # an opener is read from the raw words: "and", "so" are stopwords
#: At most this many words of the previous questions are added (the subject, not a second question).
MAX_ADDED_TERMS = 8


@dataclass(frozen=True)
class FollowUp:
    """Why the question is a follow-up (``reason``) and the query retrieval searches (``query``)."""

    reason: str
    query: str
    added: tuple[str, ...]


def _refers_back(question: str) -> bool:
    # Whole words only: jieba keeps 这里 ("here") or 其他 ("other") whole, so only a pronoun standing alone counts.
    return any(word in _ANAPHORS_EN or word in _ANAPHORS_ZH for word in tokenize(question, keep_stopwords=True))


def _continues(question: str) -> bool:
    lowered = question.strip().lower()
    words = _EN_WORD.findall(lowered)
    opener = " ".join(words[:2])
    if words and (words[0] in _OPENERS_EN or opener in _OPENERS_EN):
        return True
    stripped = question.strip()
    first = tokenize(stripped, keep_stopwords=True)[:1]
    return (bool(first) and first[0] in _OPENERS_ZH) or bool(_ZH_ELLIPSIS.search(stripped))


def follow_up_reason(question: str, previous: str) -> str | None:
    """Why ``question`` needs ``previous`` to be understood (``refers_back``, ``continues``, ``too_short``), or None
    when it stands alone (it names the previous question's subject, or shows no sign of leaning on it)."""
    terms = set(tokenize(question))
    before = set(tokenize(previous))
    if not before or terms & before:
        return None
    if _refers_back(question):
        return "refers_back"
    if _continues(question):
        return "continues"
    if not terms:
        return "too_short"
    return None


def resolve(question: str, earlier: Sequence[str]) -> FollowUp | None:
    """The query for ``question`` searched with the subject of the conversation (``earlier``: the previous questions,
    oldest first), or None when it stands alone.

    The subject is the content words of the latest earlier question that stood alone (an earlier follow-up leaned
    on the one before it: "它的面积有多大？" then "那它的深度呢？" both lean on "青海湖在哪里？"), those the question
    does not already have, at most :data:`MAX_ADDED_TERMS`."""
    if not earlier:
        return None
    reason = follow_up_reason(question, earlier[-1])
    if reason is None:
        return None
    subject = earlier[-1]
    for i in range(len(earlier) - 1, 0, -1):
        if follow_up_reason(earlier[i], earlier[i - 1]) is None:
            break
        subject = earlier[i - 1]
    have = set(tokenize(question))
    added = _longest_first_unique([t for t in dict.fromkeys(tokenize(subject)) if t not in have])[:MAX_ADDED_TERMS]
    if not added:
        return None
    return FollowUp(reason=reason, query=f"{question.strip()} {' '.join(added)}", added=tuple(added))


def _longest_first_unique(terms: list[str]) -> list[str]:
    """``terms`` in order without those inside a longer one (jieba's search mode gives 青海 and 青海湖)."""
    return [t for t in terms if not any(t != u and t in u for u in terms)]
