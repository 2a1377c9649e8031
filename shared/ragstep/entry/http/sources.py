"""An answer's sources as Markdown after its text, for OpenAI clients that show only the text.

LangChain's ChatOpenAI keeps nothing of a response but the message's content, litellm's stream drops the fields it
does not know, and Open WebUI renders the text: for them the references travel in the text. With
``append_sources`` (per request) or ``RAGSTEP_OPENAI_APPEND_SOURCES`` (the server's default), the answer ends with::

    **Sources**

    - [1] lambda.md: "Cold starts happen when a new execution environment starts. ..."

one line per source the answer cites, under the number its ``[n]`` markers use (every passage it was given when
citations are off). An answer that cites nothing -- declined, or supported by no passage -- lists none. The answer's
notes (a stage the question needed that did not run, a follow-up searched with the previous question's words: what
the command line prints after an answer) come first, one ``*(note: ...)*`` line each, declined answers included:
for these clients the text is the only place a user can read them. Only the response carries the block: a session
stores the answer without it, and it is taken off again when a client sends the answer back as history, so neither
the model nor the rewrite ever reads it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragstep.models import PipelineState, SearchResult
from ragstep.models.chat import Reference

HEADINGS = {"en": "Sources", "zh": "参考来源"}
#: The characters of a passage quoted after its name.
QUOTE_CHARS = 120
# The block as notes_markdown and sources_markdown write it (notes, then a heading and "- [n] " lines), at the very
# end of a message.
_NOTES = r"(?:\n\n\*\(note: [^\n]*\)\*)*"
_SOURCES = (
    r"(?:\n\n\*\*(?:" + "|".join(map(re.escape, HEADINGS.values())) + r")\*\*\n\n(?:- \[\d+\] [^\n]*(?:\n|\Z))+)?"
)
_BLOCK = re.compile(_NOTES + _SOURCES + r"\Z")


def _name(result: SearchResult) -> str:
    """The document's file name (what its owner uploaded), or for a web page its title linked to its address."""
    url = result.metadata.get("url")
    linked = isinstance(url, str) and url.startswith(("http://", "https://"))
    first, second = (result.knowledge_title, result.knowledge_filename)[:: 1 if linked else -1]
    name = " ".join((first or second or result.knowledge_id).split()).replace("[", "(").replace("]", ")")
    return f"[{name}]({url})" if linked else name


# The markers parsers leave in a passage's text (``<!-- page 3 -->``, ``<!-- ocr page 3 -->``): hidden where Markdown is
# rendered, clutter where the text is read as it is (LangChain, litellm, a terminal).
_COMMENT = re.compile(r"<!--.*?-->", re.S)


def _quote(content: str) -> str:
    text = " ".join(_COMMENT.sub(" ", content).split()).replace('"', "'")
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1].rstrip() + "…"


def listed(state: PipelineState, results: Sequence[SearchResult]) -> list[tuple[int, SearchResult]]:
    """The sources to list, with their numbers: the references the answer cites -- none when it cites none (a
    declined answer, or one nothing given supports) -- or, with citations turned off, every passage it was given."""
    if state.chat.fallback is not None:
        return []
    references: Sequence[Reference] = state.chat.references
    if not state.chat.settings.citations:
        return list(enumerate(references or results, start=1))
    return [(n, r) for n, r in enumerate(references, start=1) if r.cited]


def sources_markdown(state: PipelineState, results: Sequence[SearchResult]) -> str:
    """The block to append to the answer (empty when there is nothing to list)."""
    lines = [f'- [{n}] {_name(r)}: "{_quote(r.content)}"' for n, r in listed(state, results)]
    if not lines:
        return ""
    heading = HEADINGS.get(state.chat.language, HEADINGS["en"])
    return f"\n\n**{heading}**\n\n" + "\n".join(lines)


def notes_markdown(notes: Sequence[str]) -> str:
    """The answer's notes as the block's first lines (empty when there are none)."""
    return "".join(f"\n\n*(note: {' '.join(note.split())})*" for note in notes)


def without_sources(text: str) -> str:
    """``text`` without the notes and sources :func:`notes_markdown` and :func:`sources_markdown` appended to it."""
    return _BLOCK.sub("", text, count=1)
