"""Answers a document's layout states rather than its prose: a table row, a heading that carries a fact, and the
list under a heading. The model-free answerer (:mod:`ragstep.retrieval.answer_span`) chooses among sentences
(:mod:`ragstep.retrieval.sentences`), where none of these is one; this module makes each a candidate of its own
(:func:`~ragstep.retrieval.answer_candidates.candidates`), embedded and quoted so that it reads alone. Three rules,
read from Markdown's layout, not from any document:

* **A table row** (a pipe table: a header line, a ``|---|`` line, then its rows) is a candidate, read with its
  column headers: ``| batch_size | 500 | number of log lines per batch |`` under ``| Key | Default | Description |``
  is quoted as "batch_size — Default: 500; Description: number of log lines per batch" (the first cell names what
  the row is about; each other cell is said with its column's name; an empty cell, or one that is only a picture,
  is left out). Alone, "500" says nothing; with its header it answers "What is the default batch size?". The
  chunker repeats a table's header in every chunk the table continues into (:mod:`ragstep.retrieval.chunking`), so
  a passage's rows have theirs.
* **A heading that carries a fact** is a candidate, quoted as the heading: one with a parenthesised statement of
  two words or more ("Orbit 3.2 (released 14 May 2024)", a changelog's usual form), a date ("2024-05-14 - Orbit
  3.2", "Orbit 3.2, May 2024") or a value after a separator with a number in it ("Rate limit: 300 requests per
  minute"). A heading that only names a section ("Installation", "Orbit 3.2", "Step 2") is context, as before; a
  configuration file's "#" comment and an indented code block's are no headings, and "$(cmd -x)" is no statement.
  It is embedded under the heading it sits in ("Orbit Release Notes: Orbit 3.2 (released 14 May 2024)"). Asked
  about one version ("When was Orbit 3.1 released?"), a heading naming another one is not a candidate: the two
  read alike to the embedding model and share most words, but the heading titles another section.
* **The list under a heading** answers a question that asks which items a section lists (:func:`asks_for_list`:
  "What changed in Orbit 3.1?", "What's new in ...", "What ingredients do I need ...?", "Which ports are
  open?", "What are the steps ...", "有哪些 ...", "Quels ingrédients ...", "¿Cuáles son ...?"). The list is the
  items (``-``, ``*``, ``+`` or numbered) right under the heading, or after one lead-in line ending with a colon;
  at least two. It is a candidate only for such a question (for any other, its items are candidates one by one,
  as before), and it is quoted as the list, its heading first ("Ingredients:" then one "- item" a line, up to
  :data:`MAX_LIST_CHARS`: the answer cuts it at a line, :func:`~ragstep.adapters.chat.extractive.render_quotes`).
  Of the lists retrieved, those under the heading naming the question's numbered names as written ("3.1", "v2")
  and then most of its terms (:func:`listed`: "Orbit 3.1 (released 2 February 2024)" names "Orbit 3.1", "Orbit
  3.2 ..." only "Orbit") are the ones selected from, as a definition is for "what is X?"; the decision still asks
  the same support of them as of any sentence.

A heading or a list the chunker cut from its passage is not seen there: a passage that opens inside a list has
no heading above its items, and a list cut in two is quoted as far as its passage holds it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ragstep.retrieval.answer_terms import Coverage
from ragstep.retrieval.sentences import comment_lines
from ragstep.retrieval.text import token_set

#: A list is quoted up to this many characters (whole items; the answer's ``max_chars`` may cut it further).
MAX_LIST_CHARS = 1000

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_FENCE = ("```", "~~~")
#: A line indented this much is code (Markdown's indented code block), no heading.
_CODE_INDENT = 4
_SEPARATOR = re.compile(r"^\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?$")
_PIPE = re.compile(r"(?<!\\)\|")
_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s+")
_IMAGE = re.compile(r"(?:!\[[^\]]*\]\([^)]*\)\s*)+")
# A name with a digit as written ("3.1", "v2", "ext4"): the words split it ("3.1" and "2 February" share "2").
_NUMBERED = re.compile(r"\w*\d\w*(?:[.-]\w+)*")
# A version or a dotted date as written ("3.1", "1.5.1", "14.05.2024").
_VERSION = re.compile(r"(?<![\w.])\d+(?:\.\d+)+(?![\w.]*\d)")

# A heading's fact: a parenthesised statement of two words or more, a date, or a value with a number after a
# separator (":", " - ", " – ", " — ").
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DATE = re.compile(
    rf"\b\d{{4}}-\d{{1,2}}-\d{{1,2}}\b|\b\d{{1,2}}\.?\s+{_MONTH}\s+\d{{4}}\b|\b{_MONTH}\s+\d{{1,2}},?\s+\d{{4}}\b"
    rf"|\b{_MONTH}\s+\d{{4}}\b|\d{{4}}\s*年\s*\d{{1,2}}\s*月",
    re.IGNORECASE,
)
_STATEMENT = re.compile(r"(?:(?<=\s)\(|（)\s*\S+\s+[^()（）]*\S\s*[)）]")
_VALUE = re.compile(r"(?::|\s[-–—])\s+\S*\d")

# A question asking which items a section lists (:func:`asks_for_list`): "what changed / is new / has changed", "what
# are the <nouns>"; Chinese 哪些 ("which ones"); French "quels / quelles <noun>s"; Spanish "cuáles".
_ASKS_LIST = re.compile(
    r"\bwhat(?:'s|\s+is|\s+are|\s+has|\s+have)?\s+(?:new|changed|changes|been\s+changed)\b"
    r"|\bwhat\s+are\s+the\s+(?:\w+\s+){0,2}?\w{3,}(?<![su])s\b(?!')"
    r"|哪些|\bquel(?:le)?s\s+\w+[sx]\b|\bcuáles\b",
    re.IGNORECASE,
)
# ...or "what / which <noun>s" and then a verb, a preposition or the question's end ("What ingredients do I need",
# "Which ports are open?"; not "What causes the error", "What happens when", "What does this do").
_ASKED_NOUNS = re.compile(r"\b(?:what|which)\s+((?:[A-Za-z][\w-]*\s+){0,2}?[A-Za-z][\w-]{2,}s)\b(?!')\s*(\w*)", re.I)
_VERBS = frozenset(
    "do does did are were is was can could should must will would need needs have has exist come go belong "  # noqa: SIM905
    "of in for on from to".split()
)


def asks_for_list(question: str) -> bool:
    """``question`` asks which items a section lists (module docstring)."""
    if _ASKS_LIST.search(question):
        return True
    match = _ASKED_NOUNS.search(question)
    if match is None:
        return False
    words = match.group(1).casefold().split()
    plural = words[-1]
    after = match.group(2).casefold()
    return (
        not any(w in _VERBS for w in words)
        and not plural.endswith(("ss", "us", "is"))
        and (after in _VERBS or not after)
    )


def _cells(line: str) -> list[str]:
    row = line.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    cells = [cell.strip().replace("\\|", "|") for cell in _PIPE.split(row)]
    return ["" if _IMAGE.fullmatch(cell) else cell for cell in cells]  # a picture says nothing quoted


def _row_quote(header: list[str], cells: list[str]) -> str:
    """A row said with its header: its first cell, then each other cell after its column's name."""
    subject = cells[0] if cells else ""
    rest = [f"{name}: {cell}" if name else cell for name, cell in zip(header[1:], cells[1:], strict=False) if cell]
    if not rest:
        return f"{header[0]}: {subject}" if subject and header[0] else subject
    return f"{subject} — {'; '.join(rest)}" if subject else "; ".join(rest)


def _lines(text: str) -> list[tuple[str, str, str, bool]]:
    """The lines of ``text`` outside code fences, each with the heading it is under, that heading's parent (""
    when none) and whether it is a heading; a heading line is given stripped, with its own parent and itself, any
    other line as written. A configuration file's "#" comments are no headings
    (:func:`~ragstep.retrieval.sentences.comment_lines`)."""
    out: list[tuple[str, str, str, bool]] = []
    stack: list[tuple[int, str]] = []
    in_code = False
    raws = text.splitlines()
    comments = comment_lines([raw.strip() for raw in raws])
    for k, raw in enumerate(raws):
        line = raw.strip()
        if line.startswith(_FENCE):
            in_code = not in_code
            continue
        if in_code:
            continue
        indented = len(raw) - len(raw.lstrip()) >= _CODE_INDENT  # an indented code block's comment
        match = None if k in comments or indented else _HEADING.match(line)
        if match:
            level, title = len(match.group(1)), match.group(2).strip()
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
        parent = stack[-2][1] if len(stack) > 1 else ""
        out.append((parent, stack[-1][1] if stack else "", line if match else raw.rstrip(), match is not None))
    return out


def table_rows(text: str) -> list[tuple[str, str]]:
    """The rows of ``text``'s pipe tables, each as (the heading it is under, the row said with its header)."""
    lines = _lines(text)
    out: list[tuple[str, str]] = []
    header: list[str] | None = None
    for k, (_, heading, raw, _) in enumerate(lines):
        line = raw.strip()
        nxt = lines[k + 1][2].strip() if k + 1 < len(lines) else ""
        if "|" in line and "|" in nxt and _SEPARATOR.match(nxt) and not _SEPARATOR.match(line):
            header = _cells(line)
        elif header is not None and _SEPARATOR.match(line):
            continue
        elif header is not None and "|" in line:
            quote = _row_quote(header, _cells(line))
            if any(ch.isalnum() for ch in quote):
                out.append((heading, quote))
        else:
            header = None
    return out


def carries_fact(title: str) -> bool:
    """A heading that states something (module docstring), not one that only names its section."""
    return bool(_STATEMENT.search(title) or _DATE.search(title) or _VALUE.search(title))


def heading_facts(text: str) -> list[tuple[str, str]]:
    """The headings of ``text`` that carry a fact, each as (the heading it sits in, the heading)."""
    return [
        (parent, heading) for parent, heading, _, is_heading in _lines(text) if is_heading and carries_fact(heading)
    ]


def section_lists(text: str) -> list[tuple[str, str, str]]:
    """The lists right under ``text``'s headings (module docstring), each as (the heading's parent, the heading,
    the list quoted: the heading and a colon, then one "- item" a line, up to :data:`MAX_LIST_CHARS`)."""
    out: list[tuple[str, str, str]] = []
    lines = _lines(text)
    k = 0
    while k < len(lines):
        parent, heading, _, is_heading = lines[k]
        k += 1
        if not is_heading:
            continue
        items: list[str] = []
        lead = False
        while k < len(lines) and not lines[k][3]:
            raw = lines[k][2]
            stripped = raw.strip()
            if not stripped:
                k += 1
                continue
            if _ITEM.match(stripped) and len(raw) - len(raw.lstrip()) < 2:
                items.append(_ITEM.sub("", stripped))
            elif items and raw[:1].isspace():  # an item's wrapped line or its nested item
                items[-1] = f"{items[-1]} {_ITEM.sub('', stripped)}"
            elif not items and not lead and stripped.endswith((":", "：")):
                lead = True
            else:
                break
            k += 1
        if len(items) >= 2:
            quote = f"{heading}:"
            for item in items:
                if len(quote) + len(item) + 3 > MAX_LIST_CHARS:
                    break
                quote += f"\n- {item}"
            out.append((parent, heading, quote))
    return out


def layout_candidates(passage: str, question: str = "") -> list[tuple[str, str]]:
    """``passage``'s table rows and fact-bearing headings, and (when ``question`` asks for one) the lists under its
    headings, each as (the quote, the text it is embedded as: under its heading). A heading is left out when the
    question writes a version ("3.1") and the heading names another one and not it: it titles another section
    ("Orbit 3.2 (released 14 May 2024)" does not say when 3.1 was released, however alike the two read)."""
    asked = set(_VERSION.findall(question))
    out = [(row, f"{heading}: {row}" if heading else row) for heading, row in table_rows(passage)]
    out += [
        (title, f"{parent}: {title}" if parent else title)
        for parent, title in heading_facts(passage)
        if not asked or asked & set(_VERSION.findall(title)) or not _VERSION.search(title)
    ]
    if asks_for_list(question):
        for parent, _, quote in section_lists(passage):
            flat = quote.replace(":\n- ", ": ", 1).replace("\n- ", "; ")
            out.append((quote, f"{parent}: {flat}" if parent else flat))
    return out


def listed(
    question: str,
    passages: Sequence[str],
    candidates: Sequence[tuple[int, int, str, str]],
    coverage: Coverage,
) -> np.ndarray | None:
    """Asked which items a section lists: which ``candidates`` are the lists under the headings naming most of the
    question's terms (a heading read with its parent), or None when the question asks no such thing or no list
    under a heading naming any of them was retrieved."""
    if not asks_for_list(question):
        return None
    written = {m.group(0) for m in _NUMBERED.finditer(question)}
    named: dict[tuple[int, str], tuple[int, float]] = {}
    for n, passage in enumerate(passages, start=1):
        for parent, heading, quote in section_lists(passage):
            title = f"{parent} {heading}"
            held = {m.group(0) for m in _NUMBERED.finditer(title)}
            named[(n, quote)] = (len(written & held), coverage.of(token_set(title)))
    best = max(named.values(), default=(0, 0.0))
    if best[1] <= 0.0:
        return None
    mask = np.array([named.get((n, text), (0, 0.0)) >= best for n, _, text, _ in candidates], dtype=bool)
    return mask if mask.any() else None
