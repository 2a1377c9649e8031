"""FAQ files: a JSON list of entries, or a CSV with one entry per row.

JSON: ``[{"standard_question": ..., "similar_questions": [...], "negative_questions": [...], "answers": [...],
"tag_id": ..., "id": ...}, ...]`` (a list field may also be a single string).

CSV: a header row naming the columns (any order, case-insensitive), then one entry per row:

* ``standard_question`` (required), ``answers`` (required), ``similar_questions``, ``negative_questions``,
  ``tag_id`` (optional). Any other column is refused, so a misspelt header is not silently ignored.
* The multi-valued cells (``similar_questions``, ``negative_questions``, ``answers``) hold several values separated
  by ``|`` or by line breaks (Alt+Enter in a spreadsheet); write ``\\|`` for a literal pipe. Empty values are
  dropped, values are stripped.
* Comma-separated, or tab-separated when the header line has tabs and no comma. Quoted cells may span lines.
  Encoding as for text files (UTF-8, UTF-8 with BOM as Excel writes it, GB18030, Big5, else windows-1252 with the
  same note on the ingest row: :mod:`ragstep.parsers.text`). Blank rows are skipped.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from typing import Any

from ragstep.errors import InputError
from ragstep.parsers.text import read_text

CSV_COLUMNS = ("standard_question", "similar_questions", "negative_questions", "answers", "tag_id")
_SPLIT_RE = re.compile(r"(?<!\\)\||\r\n|\n|\r")


@dataclass(frozen=True, slots=True)
class FaqEntry:
    standard_question: str
    answers: tuple[str, ...]
    similar_questions: tuple[str, ...] = ()
    negative_questions: tuple[str, ...] = ()
    tag_id: str = ""
    id: str | None = None  # from JSON "id"; chunk ids use the entry's position otherwise


def split_values(cell: str) -> tuple[str, ...]:
    """``"a | b\\nc"`` -> ``("a", "b", "c")``; ``\\|`` is a literal pipe."""
    return tuple(v for v in (part.replace("\\|", "|").strip() for part in _SPLIT_RE.split(cell)) if v)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else [value]


def _entries_from_json(text: str, filename: str) -> list[FaqEntry]:
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{filename}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(entries, list) or not entries:
        raise InputError(
            f"{filename}: expected a non-empty JSON list of FAQ entries (standard_question, answers); a JSON document"
            " that is not a FAQ goes into a document knowledge base, which reads it as text"
        )
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not str(entry.get("standard_question", "")).strip():
            raise InputError(f"{filename}: entry {i} needs a non-empty 'standard_question'")
        answers = tuple(str(a) for a in _as_list(entry.get("answers")) if str(a).strip())
        if not answers:
            raise InputError(f"{filename}: entry {i} needs at least one answer in 'answers'")
        out.append(
            FaqEntry(
                standard_question=str(entry["standard_question"]).strip(),
                answers=answers,
                similar_questions=tuple(
                    str(q).strip() for q in _as_list(entry.get("similar_questions")) if str(q).strip()
                ),
                negative_questions=tuple(
                    str(q).strip() for q in _as_list(entry.get("negative_questions")) if str(q).strip()
                ),
                tag_id=str(entry.get("tag_id", "") or ""),
                id=str(entry["id"]) if entry.get("id") is not None else None,
            )
        )
    return out


def _entries_from_csv(text: str, filename: str) -> list[FaqEntry]:
    first_line = text.split("\n", 1)[0]
    delimiter = "\t" if "\t" in first_line and "," not in first_line else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader, None)
        while header is not None and not any(cell.strip() for cell in header):
            header = next(reader, None)
        if header is None:
            raise InputError(f"{filename}: expected a header row ({', '.join(CSV_COLUMNS)}) and FAQ entries")
        names = [cell.strip().lower() for cell in header]
        for name in names:
            if name not in CSV_COLUMNS:
                shown = repr(name) if name else "(empty)"
                raise InputError(
                    f"{filename}: unknown column {shown} in the header; FAQ CSV columns are {', '.join(CSV_COLUMNS)}"
                )
        for required in ("standard_question", "answers"):
            if required not in names:
                raise InputError(f"{filename}: the header has no {required!r} column (found: {', '.join(names)})")
        if len(set(names)) != len(names):
            raise InputError(f"{filename}: a column appears twice in the header ({', '.join(names)})")
        entries = []
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            line = reader.line_num
            if len(row) > len(names):
                raise InputError(f"{filename}: line {line} has {len(row)} cells but the header has {len(names)}")
            values = dict(zip(names, [*row, *[""] * (len(names) - len(row))], strict=True))
            question = values["standard_question"].strip()
            if not question:
                raise InputError(f"{filename}: line {line} needs a non-empty 'standard_question'")
            answers = split_values(values["answers"])
            if not answers:
                raise InputError(f"{filename}: line {line} needs at least one answer in 'answers'")
            entries.append(
                FaqEntry(
                    standard_question=question,
                    answers=answers,
                    similar_questions=split_values(values.get("similar_questions", "")),
                    negative_questions=split_values(values.get("negative_questions", "")),
                    tag_id=values.get("tag_id", "").strip(),
                )
            )
    except csv.Error as exc:
        raise InputError(f"{filename}: not a readable CSV (line {reader.line_num}: {exc})") from exc
    if not entries:
        raise InputError(f"{filename}: expected at least one FAQ entry after the header")
    return entries


def parse_faq(data: bytes, filename: str) -> list[FaqEntry]:
    """FAQ entries of a ``.json`` or ``.csv`` file (by extension)."""
    return read_faq(data, filename)[0]


def read_faq(data: bytes, filename: str) -> tuple[list[FaqEntry], str]:
    """``(entries, note)``: the FAQ entries of a ``.json`` or ``.csv`` file (by extension), and the note a text
    file gets on how it was decoded (:func:`ragstep.parsers.text.read_text`: "read as windows-1252 ...", "" for
    UTF-8), for the ingest row."""
    text, note = read_text(data, filename)
    if filename.lower().endswith(".csv"):
        return _entries_from_csv(text, filename), note
    return _entries_from_json(text, filename), note
