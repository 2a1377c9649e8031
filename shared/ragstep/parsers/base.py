"""What every parser returns: the parsed document, and the summaries data files become (no parser imports here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragstep.parsers import markdown as md
from ragstep.parsers.figures import Figure
from ragstep.parsers.ocr import OcrOptions

MAX_TABLE_COLUMNS = 30


@dataclass(frozen=True, slots=True)
class ParseLimits:
    """What parsing one file may cost (``Settings.parse_max_inflated_bytes`` / ``parse_timeout_s``): the bytes a
    compressed format (DOCX, XLSX) may inflate to in total, and the wall clock of the parse."""

    max_inflated_bytes: int = 32 * 1024 * 1024
    timeout_s: float = 30.0
    #: How images and scanned PDF pages are read (``Settings.ocr_*``).
    ocr: OcrOptions = field(default_factory=OcrOptions)
    #: The most pictures of one document handed over as figures (``Settings.image_max_per_file``; 0: none).
    max_figures: int = 50


@dataclass(frozen=True, slots=True)
class ColumnSummary:
    name: str
    type: str  # DuckDB type name: BIGINT, DOUBLE, VARCHAR, DATE, TIMESTAMP, BOOLEAN, ...
    distinct_count: int  # distinct non-null values
    null_count: int
    samples: tuple[str, ...]  # first distinct non-null values in file order, as text


@dataclass(frozen=True, slots=True)
class DataFileSummary:
    filename: str
    format: str  # "csv" | "xlsx"
    sheet: str | None  # None for CSV
    row_count: int
    columns: tuple[ColumnSummary, ...]
    sample_rows: tuple[tuple[str, ...], ...]  # the first rows, values as text

    @property
    def source(self) -> str:
        """``sales.xlsx (sheet Q1)`` or ``sales.csv``."""
        return f"{self.filename} (sheet {self.sheet})" if self.sheet is not None else self.filename

    def sample_table(self) -> str:
        """The sample rows as a Markdown table (header = column names)."""
        width = min(len(self.columns), MAX_TABLE_COLUMNS)
        header = [c.name for c in self.columns[:width]]
        return md.table([header, *(row[:width] for row in self.sample_rows)])

    def summary_text(self) -> str:
        lines = [f"Data file: {self.filename}"]
        if self.sheet is not None:
            lines.append(f"Sheet: {self.sheet}")
        lines.append(f"Rows: {self.row_count}")
        lines.append(f"Columns ({len(self.columns)}): " + ", ".join(f"{c.name} ({c.type})" for c in self.columns))
        if self.sample_rows:
            shown = min(len(self.columns), MAX_TABLE_COLUMNS)
            note = f", first {shown} of {len(self.columns)} columns" if shown < len(self.columns) else ""
            lines.append(f"Sample rows (first {len(self.sample_rows)}{note}):")
            lines.append("")
            lines.append(self.sample_table())
        return "\n".join(lines)

    def column_text(self, column: ColumnSummary) -> str:
        lines = [
            f"Column: {column.name}",
            f"Data file: {self.source}",
            f"Type: {column.type}",
            f"Distinct values: {column.distinct_count}",
        ]
        if column.null_count:
            lines.append(f"Empty values: {column.null_count}")
        if column.samples:
            lines.append("Sample values: " + ", ".join(column.samples))
        return "\n".join(lines)

    def blocks(self) -> list[str]:
        """The summary text, then each column's text: the units that become chunks."""
        return [self.summary_text(), *(self.column_text(c) for c in self.columns)]


def render(summaries: tuple[DataFileSummary, ...]) -> str:
    """The text stream of a data file: every block of every summary, separated by a blank line."""
    return "\n\n".join(block for summary in summaries for block in summary.blocks())


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """The result of :func:`parse`.

    ``text`` is the ordered stream the chunker reads. For data files it is the rendering of ``tables`` (each
    summary block then each column block, separated by blank lines), so chunk offsets point into it as well.
    """

    filename: str
    format: str  # "text" | "markdown" | "html" | "pdf" | "docx" | "csv" | "xlsx"
    text: str
    tables: tuple[DataFileSummary, ...] = ()
    pages: int = 0  # PDF only
    metadata: dict[str, Any] = field(default_factory=dict)
    #: The pictures whose placeholders ``![alt](ref)`` are in ``text`` (:mod:`ragstep.parsers.figures`).
    figures: tuple[Figure, ...] = ()
