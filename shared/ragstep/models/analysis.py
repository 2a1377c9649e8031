"""What the data-analysis sandbox (:class:`~ragstep.ports.DataAnalysis`) loads and returns, and how it refuses."""

from __future__ import annotations

from dataclasses import dataclass

from ragstep.errors import RagstepError


class AnalysisError(RagstepError):
    """A data file that cannot be analysed, or a query refused or stopped; ``reason`` is the short code traces show
    (``refused``, ``timeout``, ``failed``, ``too_large``, ``unreadable``, ``no_excel``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DataTable:
    """A table (a CSV file, or one sheet of a workbook) loaded into an analysis session."""

    name: str  # k_<knowledge id>, or k_<knowledge id>_<sheet>
    knowledge_id: str
    sheet: str | None
    columns: tuple[tuple[str, str], ...]  # (name, DuckDB type)
    row_count: int
    sample_rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class QueryResult:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]  # values as text ("" for NULL), at most the session's row cap
    truncated: bool  # the query returned more rows than the cap
    elapsed_ms: float
