"""What the data-analysis sandbox (:class:`~ragstep.ports.DataAnalysis`) loads and returns, and how it refuses."""

from __future__ import annotations

from dataclasses import dataclass

from ragstep.errors import RagstepError


@dataclass(frozen=True, slots=True)
class QueryCost:
    """What one query cost, measured by the kernel on the process that ran it (the sandbox's query process)."""

    elapsed_ms: float  # from the check to the answer, the process's start and end included
    peak_rss_mb: float  # peak resident memory of the query process (``wait4``'s ``ru_maxrss``)
    base_rss_mb: float  # resident memory of the session process it was forked from, at the fork


class AnalysisError(RagstepError):
    """A data file that cannot be analysed, or a query refused or stopped; ``reason`` is the short code traces show
    (``refused``, ``timeout``, ``failed``, ``too_large``, ``unreadable``, ``no_excel``). ``cost`` is set when the
    query ran (and was stopped or failed)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.cost: QueryCost | None = None


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
    cost: QueryCost | None = None  # set by the process-isolated sandbox
