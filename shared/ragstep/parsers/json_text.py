"""``.json`` files in a document knowledge base: read as text, so a folder's configuration files, API samples and
data dumps are found like its other documents.

A FAQ knowledge base reads ``.json`` as FAQ entries (:mod:`ragstep.parsers.faq`); a document knowledge base does
not take a file's JSON for a FAQ because of its extension, only by its shape:

* **Any JSON value** is indented two spaces a level, non-ASCII characters written as themselves (``"\\u00e9"``
  becomes ``é``, so the words are found as typed), keys and values in file order. No flattening into ``a.b.c: v``
  paths: the indented text is what a reader of the citation recognises, and its keys and values are the words
  keyword search and the embedding read either way.
* **A FAQ list** (a non-empty list of objects, each with a ``standard_question`` and ``answers``: the shape a FAQ
  knowledge base takes) is read as one Markdown section per question: the question as the heading, then its other
  phrasings and its answers, which is what a passage of it should read like. The row's note says so, and that a FAQ
  knowledge base would index each question instead.
* **Not valid JSON** (a ``tsconfig.json`` or an editor's settings with comments, a truncated dump): its text as it
  is, the note saying why.

The note goes on the document's ingest row (``ragstep ingest``'s note column, the job's ``note``), after how the
text was decoded when that was a guess (windows-1252, as for a ``.txt`` file: :mod:`ragstep.parsers.text`).
"""

from __future__ import annotations

import json
from typing import Any

from ragstep.errors import InputError
from ragstep.parsers.base import ParsedDocument
from ragstep.parsers.text import read_text

#: The keys that make a JSON object a FAQ entry (:mod:`ragstep.parsers.faq`).
FAQ_KEYS = ("standard_question", "answers")
AS_TEXT = "JSON read as text"
AS_FAQ = "a FAQ list read as text, a section per question (a FAQ knowledge base indexes each question)"


def parse_json_document(data: bytes, filename: str) -> ParsedDocument:
    """The text a document knowledge base indexes for a ``.json`` file (module docstring); ``metadata["note"]``
    says how it was read (first how its text was decoded, when that was a guess: :mod:`ragstep.parsers.text`)."""
    text, read_as = read_text(data, filename)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        note = f"not valid JSON ({exc.msg} at line {exc.lineno}); read as plain text"
        return _document(filename, "text", text, read_as, note)
    except RecursionError:  # nested deeper than the parser recurses: still text
        return _document(filename, "text", text, read_as, "JSON nested too deep to read; plain text")
    if value in (None, "", [], {}):
        raise InputError(f"{filename}: the document is empty (the JSON holds no value)")
    if is_faq_list(value):
        return _document(filename, "json", faq_markdown(value), read_as, AS_FAQ)
    try:
        shown = json.dumps(value, ensure_ascii=False, indent=2)
    except RecursionError:
        return _document(filename, "text", text, read_as, "JSON nested too deep to read; plain text")
    return _document(filename, "json", shown, read_as, AS_TEXT)


def _document(filename: str, fmt: str, text: str, *notes: str) -> ParsedDocument:
    """The document, its note the ``notes`` that say something, in order."""
    note = "; ".join(n for n in notes if n)
    return ParsedDocument(filename, fmt, text, metadata={"note": note} if note else {})


def is_faq_list(value: Any) -> bool:
    """A non-empty list whose every item is an object with a non-empty ``standard_question`` and ``answers``."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(e, dict) and all(e.get(k) for k in FAQ_KEYS) for e in value)
    )


def _values(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    return [str(v).strip() for v in items if v is not None and str(v).strip()]


def faq_markdown(entries: list[dict[str, Any]]) -> str:
    """``## question``, the other phrasings, then the answers: one section per entry."""
    sections = []
    for entry in entries:
        lines = [f"## {' '.join(str(entry['standard_question']).split())}"]
        similar = _values(entry.get("similar_questions"))
        if similar:
            lines.append("Also asked: " + " / ".join(similar))
        lines.extend(_values(entry.get("answers")))
        sections.append("\n\n".join(lines))
    return "\n\n".join(sections)


def parse_jsonl_document(data: bytes, filename: str) -> ParsedDocument:
    """``.jsonl`` / ``.ndjson`` (JSON Lines: one JSON value a line, how logs, exports and datasets are written): one
    record a paragraph, each on one line as it was written but with non-ASCII characters as themselves (``"\\u00e9"``
    -> ``é``), so the chunker keeps a record whole and cuts between records. Blank lines are dropped; a line that is
    not valid JSON is kept as it is, and the note counts such lines (all of them: the file is read as plain text),
    after how the text was decoded when that was a guess."""
    text, read_as = read_text(data, filename)
    records: list[str] = []
    invalid = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            value = json.loads(line)
            records.append(json.dumps(value, ensure_ascii=False))
        except (json.JSONDecodeError, RecursionError):
            invalid += 1
            records.append(line.rstrip())
    valid = len(records) - invalid
    if records and not valid:
        note = "not JSON Lines (no line is a JSON value); read as plain text"
        return _document(filename, "text", text, read_as, note)
    note = f"JSON Lines: {valid} {'record' if valid == 1 else 'records'}, one a paragraph"
    if invalid:
        note += f"; {invalid} {'line' if invalid == 1 else 'lines'} not valid JSON kept as text"
    return _document(filename, "jsonl", "\n\n".join(records), read_as, note)
