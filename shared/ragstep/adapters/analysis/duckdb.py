"""The data-analysis sandbox: an in-memory DuckDB per request, loaded with the request's data files, then locked.

Loading reads the files the way ingestion summarised them (:mod:`ragstep.parsers.data`: CSV decoded like text and
read by ``read_csv_auto`` over the whole file; XLSX through ``read_xlsx`` of the ``excel`` extension, loaded offline
from the ``duckdb-extension-excel`` wheel, every worksheet), so the columns and types the model is shown are the
ones ingestion indexed. There is no second XLSX reader: without the extension a workbook is not analysed
(``no_excel``, a trace row), exactly as ingestion would not have indexed it.

After loading, :meth:`DuckDBSession.lock` turns the connection into a sandbox, in this order: ``memory_limit``,
``threads = 1``, no spilling to disk (``temp_directory = ''``), no community extensions or persistent secrets,
``enable_external_access = false`` (no file, URL, ATTACH, INSTALL or LOAD from here on) and finally
``lock_configuration = true`` (no ``SET``/``RESET``/``PRAGMA`` can undo any of it). Extensions autoload and
autoinstall are off from the start (:func:`ragstep.parsers.data.connect`).

Every query is checked first (:mod:`ragstep.adapters.analysis.guard`), then run under a wall-clock timeout: a timer
interrupts the connection (``DuckDBPyConnection.interrupt``), so a cross join or an endless recursive CTE stops at
the limit. At most ``max_rows`` rows are fetched.

:class:`DuckDBSession` is that engine, in the process that holds it. What requests get from
:meth:`DuckDBAnalysis.session` is a :class:`~ragstep.adapters.analysis.sandbox.SandboxSession`: the same engine in a
session process of its own, each query in a process forked from it under hard address-space, CPU and wall-clock
limits (DuckDB's ``memory_limit`` and ``interrupt`` do not bound its scalar list and string functions; the kernel
does). See :mod:`ragstep.adapters.analysis.sandbox` for the mechanism and its cost per query.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstep.adapters.analysis.guard import check_sql
from ragstep.errors import RagstepError
from ragstep.models.analysis import AnalysisError, DataTable, QueryResult

if TYPE_CHECKING:
    from ragstep.adapters.analysis.sandbox import ForkServer, SandboxSession
    from ragstep.settings import Settings

#: Rows of each table shown to the model (WeKnora shows the schema; the issue asks for five sample rows).
SAMPLE_ROWS = 5
#: Cells longer than this are cut (a result is context for an answer, not an export).
MAX_CELL_CHARS = 200
#: Result columns kept (``SELECT *`` over a wide sheet would otherwise flood the context).
MAX_COLUMNS = 50


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def cell_text(value: Any) -> str:
    """A value as the context shows it: NULL empty, dates ISO, floats without binary noise, long text cut."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = f"{value:.10g}" if value == value else "NaN"
    elif isinstance(value, Decimal):
        text = format(value.normalize(), "f") if value == value.to_integral_value() else str(value)
    elif isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ")
    elif isinstance(value, dt.date | dt.time):
        text = value.isoformat()
    elif isinstance(value, bytes):
        text = value.hex()
    else:
        text = str(value)
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def table_name(knowledge_id: str, sheet: str | None = None) -> str:
    """``k_<knowledge id>`` (``_<sheet>`` for a sheet): lower case, anything but letters, digits and ``_`` as ``_``
    (letters include CJK: DuckDB takes them unquoted)."""
    name = "k_" + re.sub(r"[^0-9a-z_]", "_", knowledge_id.lower())
    if sheet is not None:
        name += "_" + (re.sub(r"\W", "_", sheet.lower()).strip("_") or "sheet")
    return name


class DuckDBSession:
    """One request's sandbox (see the module docstring). Not thread-safe: one request, one thread."""

    def __init__(self, *, memory_limit_mb: int, timeout_s: float, max_rows: int) -> None:
        from ragstep.parsers.data import connect

        self.memory_limit_mb = memory_limit_mb
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self._con = connect()
        # One thread from the start, loading included: predictable on a small Lambda (1024 MB is ~0.6 vCPU) and
        # faster on a busy host (a 100k-row CSV loaded in about half the time of two contending threads here).
        self._con.execute("SET threads = 1")
        self._tables: dict[str, DataTable] = {}
        self._excel = False
        self._locked = False

    @property
    def tables(self) -> list[DataTable]:
        return list(self._tables.values())

    # -- loading ---------------------------------------------------------------------------------------------------

    def load(self, knowledge_id: str, path: str, fmt: str) -> list[DataTable]:
        import duckdb

        if self._locked:
            raise AnalysisError("failed", "the sandbox is locked: data files are loaded before the first query")
        source = Path(path)
        try:
            if fmt == "csv":
                return [self._load_csv(knowledge_id, source)]
            if fmt == "xlsx":
                return self._load_xlsx(knowledge_id, source)
        except duckdb.Error as exc:
            raise AnalysisError("unreadable", f"{source.name}: {_first_line(exc)}") from None
        except AnalysisError:
            raise
        except RagstepError as exc:  # InputError of the shared readers: not UTF-8/GB18030, not a workbook ...
            raise AnalysisError("unreadable", exc.message) from None
        raise AnalysisError("unreadable", f"{source.name}: {fmt!r} files are not analysed (csv and xlsx are)")

    def _unique(self, name: str) -> str:
        candidate, n = name, 2
        while candidate in self._tables:
            candidate, n = f"{name}_{n}", n + 1
        return candidate

    def _load_csv(self, knowledge_id: str, source: Path) -> DataTable:
        from ragstep.parsers.text import decode_text

        # Decoded like ingestion decoded it (UTF-8, BOM, GB18030); DuckDB reads the UTF-8 copy.
        text = decode_text(source.read_bytes(), source.name)
        copy = source.with_name(source.name + ".utf8.csv")
        copy.write_text(text, encoding="utf-8")
        name = self._unique(table_name(knowledge_id))
        self._con.execute(
            f"CREATE TABLE {name} AS SELECT * FROM read_csv_auto($path, sample_size = -1)", {"path": str(copy)}
        )
        copy.unlink()
        return self._describe(name, knowledge_id, None)

    def _load_xlsx(self, knowledge_id: str, source: Path) -> list[DataTable]:
        from ragstep.parsers.data import load_excel, read_sheet, xlsx_sheets

        if not self._excel:
            try:
                load_excel(self._con)
            except RagstepError as exc:
                raise AnalysisError("no_excel", exc.message) from None
            self._excel = True
        loaded = []
        for sheet in xlsx_sheets(source.read_bytes(), source.name):
            name = self._unique(table_name(knowledge_id, sheet))
            if read_sheet(self._con, name, str(source), sheet):
                loaded.append(self._describe(name, knowledge_id, sheet))
        if not loaded:
            raise AnalysisError("unreadable", f"{source.name}: no worksheet has rows")
        return loaded

    def _describe(self, name: str, knowledge_id: str, sheet: str | None) -> DataTable:
        columns = tuple((str(r[0]), str(r[1])) for r in self._con.execute(f"DESCRIBE {name}").fetchall())
        count = self._con.execute(f"SELECT count(*) FROM {name}").fetchone()
        rows = self._con.execute(f"SELECT * FROM {name} ORDER BY rowid LIMIT {SAMPLE_ROWS}").fetchall()
        table = DataTable(
            name=name,
            knowledge_id=knowledge_id,
            sheet=sheet,
            columns=columns,
            row_count=int(count[0]) if count else 0,
            sample_rows=tuple(tuple(cell_text(v) for v in row) for row in rows),
        )
        self._tables[name] = table
        return table

    # -- the sandbox -----------------------------------------------------------------------------------------------

    def lock(self) -> None:
        if self._locked:
            return
        for statement in (
            f"SET memory_limit = '{int(self.memory_limit_mb)}MB'",
            "SET threads = 1",
            "SET temp_directory = ''",
            "SET allow_community_extensions = false",
            "SET allow_persistent_secrets = false",
            "SET enable_external_access = false",
            "SET lock_configuration = true",
        ):
            self._con.execute(statement)
        self._locked = True

    def check(self, sql: str) -> str:
        return check_sql(self._con, sql, self._tables)

    def query(self, sql: str) -> QueryResult:
        """Check and run ``sql`` here, in this process (the sandbox's query process calls :meth:`run`)."""
        return self.run(self.check(sql))

    def run(self, checked: str) -> QueryResult:
        """Run an already checked query under the interrupt timer and the row cap."""
        import duckdb

        if not self._locked:
            raise AnalysisError("failed", "the sandbox is not locked yet: call lock() after loading the files")
        started = time.perf_counter()
        # The interrupt comes from another thread at the deadline; DuckDB checks for it while executing and fetching.
        timer = threading.Timer(self.timeout_s, self._con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            cursor = self._con.execute(checked)
            names = tuple(str(d[0]) for d in cursor.description or ())
            fetched = cursor.fetchmany(self.max_rows + 1)
        except duckdb.InterruptException:
            raise AnalysisError("timeout", f"the query ran longer than {self.timeout_s:g}s and was stopped") from None
        except duckdb.OutOfMemoryException:
            raise AnalysisError("failed", f"the query needs more than {self.memory_limit_mb} MB") from None
        except duckdb.Error as exc:
            raise AnalysisError("failed", _first_line(exc)) from None
        finally:
            timer.cancel()
        elapsed_ms = (time.perf_counter() - started) * 1000
        truncated = len(fetched) > self.max_rows
        rows = tuple(tuple(cell_text(v) for v in row[:MAX_COLUMNS]) for row in fetched[: self.max_rows])
        return QueryResult(names[:MAX_COLUMNS], rows, truncated, round(elapsed_ms, 3))

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> DuckDBSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DuckDBAnalysis:
    """The :class:`~ragstep.ports.DataAnalysis` of this project: the limits, and a fresh sandbox per request (a
    session process from the process's fork server, started on the first request and reused)."""

    def __init__(self, *, memory_limit_mb: int = 256, timeout_s: float = 5.0, max_rows: int = 200) -> None:
        self.memory_limit_mb = memory_limit_mb
        self.timeout_s = timeout_s
        self.max_rows = max_rows

    @classmethod
    def from_settings(cls, settings: Settings) -> DuckDBAnalysis:
        return cls(
            memory_limit_mb=settings.data_analysis_memory_limit_mb,
            timeout_s=settings.data_analysis_timeout_s,
            max_rows=settings.data_analysis_max_rows,
        )

    def session(self) -> SandboxSession:
        from ragstep.adapters.analysis.sandbox import SandboxSession

        return SandboxSession(
            _fork_server(), memory_limit_mb=self.memory_limit_mb, timeout_s=self.timeout_s, max_rows=self.max_rows
        )


@functools.cache
def _fork_server() -> ForkServer:
    """One fork server per process, whatever the number of adapters (tests build many): it holds no state of a
    request (each session's limits travel with it), and each costs a Python process."""
    from ragstep.adapters.analysis.sandbox import ForkServer

    return ForkServer(f"{__name__}:serve_forks")


def _engine(limits: dict[str, Any]) -> DuckDBSession:
    return DuckDBSession(
        memory_limit_mb=int(limits["memory_limit_mb"]),
        timeout_s=float(limits["timeout_s"]),
        max_rows=int(limits["max_rows"]),
    )


def serve_forks(fd: int) -> None:
    """The fork server's entry point (:class:`~ragstep.adapters.analysis.sandbox.ForkServer` starts it): DuckDB, the
    guard and the loaders imported once here, shared by every session process forked from it."""
    import duckdb  # noqa: F401

    import ragstep.parsers.data  # noqa: F401
    from ragstep.adapters.analysis import sandbox

    sandbox.serve_forks(fd, _engine)
