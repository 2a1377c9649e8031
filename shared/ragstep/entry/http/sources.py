"""An answer's sources as Markdown after its text, for OpenAI clients that show only the text.

LangChain's ChatOpenAI keeps nothing of a response but the message's content, litellm's stream drops the fields it
does not know, and Open WebUI renders the text: for them the references travel in the text. With
``append_sources`` (per request) or ``RAGSTEP_OPENAI_APPEND_SOURCES`` (the server's default), the answer ends with::

    **Sources**

    - [1] lambda.md: "Cold starts happen when a new execution environment starts."

one line per source the answer cites, under the number its ``[n]`` markers use (every passage it was given when
citations are off). A source's quote is what the answer took from it: for each of its markers, the words before it (back
to the previous marker) when the passage holds them and they hold two search terms at least -- the extractive answerer's
quotes, a model's verbatim quote -- else the passage's sentence most like the answer's sentence the marker ends, when it
shares at least :data:`~ragstep.retrieval.citations.MIN_THRESHOLD` of that sentence's terms (the floor inserted
citations use); a source none of that finds (citations off, a marker on a paraphrase the passage barely shares) is
quoted by its start. An answer that cites nothing -- declined, or supported by no passage -- lists none. The answer's
notes (a stage the question needed that did not run, a follow-up searched with the previous question's words: what the
command line prints after an answer) come first, one ``*(note: ...)*`` line each, declined answers included: for these
clients the text is the only place a user can read them. Only the response carries the block: a session stores the
answer without it, and it is taken off again when a client sends the answer back as history, so neither the model nor
the rewrite ever reads it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ragstep.models import PipelineState, SearchResult
from ragstep.models.chat import Reference
from ragstep.retrieval.citations import CANONICAL, MIN_THRESHOLD, split_pieces, token_similarity
from ragstep.retrieval.sentences import split_sentences
from ragstep.retrieval.text import token_set

HEADINGS = {"en": "Sources", "zh": "参考来源"}
#: The characters of a passage quoted after its name when the answer's quote from it is not known.
QUOTE_CHARS = 120
#: The characters of one sentence the answer cites (a longer one is cut), and the sentences quoted per source.
SENTENCE_CHARS = 300
MAX_QUOTES = 3
#: The search terms (stopwords aside) the answer's words before a marker must hold to be taken as a quote.
MIN_QUOTED_TERMS = 2
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


def _flat(text: str) -> str:
    return " ".join(_COMMENT.sub(" ", text).split()).replace('"', "'")


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"


# Markers (and the spaces between them) right before a position: "[1][2]" cites the same words twice.
_TRAILING_MARKERS = re.compile(r"(?:\s*\[\d+\])*\s*\Z")
_SENTENCE_END = "。！？!?；;."


def _cited_words(answer: str, position: int) -> str:
    """The answer's words a marker at ``position`` cites: back to the marker before them, or the answer's start."""
    before = answer[:position]
    before = _TRAILING_MARKERS.sub("", before, count=1)
    start = max((m.end() for m in CANONICAL.finditer(before)), default=0)
    return before[start:].strip()


def _quote_of(words: str, content: str, sentences: list[str]) -> str:
    """What of the passage ``words`` (the answer's, ending at a marker) took: the words themselves when the passage
    holds them (spaces aside: hard-wrapped CJK lines join without one), with the passage's full stop after them; else
    its sentence most like the answer's last sentence there, if similar enough; else ""."""
    said = _flat(words)
    squeezed, held = "".join(said.split()), "".join(_flat(content).split())
    # Two content words at least: "Yes [1]" is found in any passage that says "yesterday", and quotes nothing.
    at = held.find(squeezed) if len(token_set(said)) >= MIN_QUOTED_TERMS else -1
    if at >= 0:
        after = held[at + len(squeezed) : at + len(squeezed) + 1]
        return said + after if after and after in _SENTENCE_END and not said.endswith(after) else said
    pieces = [p for p in split_pieces(said) if p.strip()]
    if not pieces or not sentences:
        return ""
    score, best = max((token_similarity(pieces[-1], s), -i) for i, s in enumerate(sentences))
    return sentences[-best] if score >= MIN_THRESHOLD else ""


def _quote(answer: str, source: SearchResult) -> str:
    """The source's line after its name: the sentences the answer cites from it, or its start."""
    quotes: list[str] = []
    if isinstance(source, Reference) and source.positions:
        sentences = [_flat(s) for s in split_sentences(_COMMENT.sub(" ", source.content))]
        for position in source.positions:
            quote = _cut(_quote_of(_cited_words(answer, position), source.content, sentences), SENTENCE_CHARS)
            if quote and quote not in quotes:
                quotes.append(quote)
    if quotes:
        return " … ".join(f'"{q}"' for q in quotes[:MAX_QUOTES])
    return f'"{_cut(_flat(source.content), QUOTE_CHARS)}"'


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
    lines = [f"- [{n}] {_name(r)}: {_quote(state.chat.answer, r)}" for n, r in listed(state, results)]
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
